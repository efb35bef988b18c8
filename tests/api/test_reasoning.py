"""A thinking model on all three APIs: a tiny Qwen3 whose chat template (Qwen3's thinking style)
opens `<think>` in the prompt, so every reply starts in reasoning. A random model never closes the
block by itself: the thinking budget does, forcing `</think>`, which makes the split exact.
Covered: reasoning apart from the answer (whole and streamed) on chat completions, Messages and
Responses; `enable_thinking: false`; a JSON schema that constrains only the answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference.models import GenerationRequest
from tests.conftest import _save_tiny, tiny_qwen3_hf
from tests.support.asgi import post
from tests.support.engine_fixtures import installed, start_engine_thread, tiny_engine_config
from tests.support.sse import read_named_stream, read_stream

pytestmark = pytest.mark.django_db(transaction=True)
# Qwen3's thinking-model layout: the assistant turn opens <think> unless enable_thinking is false,
# which closes an empty block instead (written here, in the shape of Qwen3's own template)
QWEN3_THINKING_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n"
    "{% else %}<think>\n{% endif %}{% endif %}"
)
ASK = [{"role": "user", "content": "Why is the sea salty?"}]
BUDGET = 5


@pytest.fixture(scope="module")
def qwen3_dir(tmp_path_factory, smollm_tokenizer):
    """The tiny Qwen3 saved with SmolLM2's tokenizer and the thinking template in its place."""
    folder = Path(_save_tiny(tmp_path_factory, smollm_tokenizer, "tiny-qwen3-thinking", tiny_qwen3_hf()))
    (folder / "chat_template.jinja").write_text(QWEN3_THINKING_TEMPLATE)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)  # the .jinja file is the template
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return str(folder)


@pytest.fixture(scope="module")
def qwen3_engine(qwen3_dir):
    engine = start_engine_thread(tiny_engine_config(qwen3_dir))
    yield engine
    engine.shutdown()


@pytest.fixture
def thinking(qwen3_engine):
    """The thinking engine, installed as the process engine for one test."""
    with installed(qwen3_engine):
        yield qwen3_engine


def end_marker_tokens(engine) -> int:
    return len(engine.engine.tokenizer.encode("</think>", add_special_tokens=False))


def split_raw(text: str) -> tuple[str, str]:
    reasoning, answer = text.split("</think>", 1)
    return reasoning.lstrip("\n"), answer.lstrip()


async def test_chat_splits_reasoning_from_the_answer(async_client, thinking):
    body = {"messages": ASK, "max_tokens": 12, "thinking_token_budget": BUDGET, "temperature": 0, "ignore_eos": True}
    reply = (await post(async_client, "/v1/chat/completions", body)).json()
    message = reply["choices"][0]["message"]
    row = await GenerationRequest.objects.aget(id=reply["id"])
    assert row.prompt.endswith("<think>\n")
    reasoning, answer = split_raw(row.output_text)
    assert message["reasoning_content"] == message["reasoning"] == reasoning and reasoning
    assert message["content"] == answer and "</think>" not in answer
    assert reply["usage"]["completion_tokens_details"]["reasoning_tokens"] == BUDGET + end_marker_tokens(thinking)
    stream = await post(async_client, "/v1/chat/completions", {**body, "stream": True})
    chunks = [c for c in await read_stream(stream) if c != "[DONE]"]
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert "".join(d.get("reasoning_content", "") for d in deltas) == reasoning
    assert "".join(d.get("content") or "" for d in deltas) == answer


async def test_enable_thinking_false_leaves_no_reasoning(async_client, thinking):
    body = {"messages": ASK, "max_tokens": 6, "chat_template_kwargs": {"enable_thinking": False}, "ignore_eos": True}
    reply = (await post(async_client, "/v1/chat/completions", body)).json()
    row = await GenerationRequest.objects.aget(id=reply["id"])
    assert row.prompt.endswith("</think>\n\n") and reply["choices"][0]["message"]["content"] == row.output_text
    assert "reasoning_content" not in reply["choices"][0]["message"]


async def test_a_json_schema_constrains_only_the_answer(async_client, thinking):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}
    body = {
        "messages": ASK,
        "max_tokens": 40,
        "thinking_token_budget": BUDGET,
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}},
    }
    message = (await post(async_client, "/v1/chat/completions", body)).json()["choices"][0]["message"]
    assert message["reasoning_content"] and isinstance(json.loads(message["content"])["ok"], bool)


async def test_messages_give_a_thinking_block_then_the_text(async_client, thinking):
    model = thinking.engine.model_name
    body = {"model": model, "messages": ASK, "max_tokens": 12, "thinking": {"type": "enabled", "budget_tokens": BUDGET}}
    body |= {"temperature": 0, "ignore_eos": True}
    reply = (await post(async_client, "/v1/messages", body)).json()
    row = await GenerationRequest.objects.aget(id=reply["id"])
    reasoning, answer = split_raw(row.output_text)
    assert reply["content"][0] == {"type": "thinking", "thinking": reasoning, "signature": ""}
    assert reply["content"][1] == {"type": "text", "text": answer}
    events = await read_named_stream(await post(async_client, "/v1/messages", {**body, "stream": True}))
    deltas = [p["delta"] for name, p in events if name == "content_block_delta"]
    assert "".join(d.get("thinking", "") for d in deltas) == reasoning
    assert "".join(d.get("text", "") for d in deltas) == answer
    starts = [p["content_block"]["type"] for name, p in events if name == "content_block_start"]
    assert starts == ["thinking", "text"]


async def test_messages_without_thinking_turn_the_templates_thinking_off(async_client, thinking):
    body = {"model": thinking.engine.model_name, "messages": ASK, "max_tokens": 4, "ignore_eos": True}
    reply = (await post(async_client, "/v1/messages", body)).json()
    row = await GenerationRequest.objects.aget(id=reply["id"])
    assert row.prompt.endswith("</think>\n\n") and [b["type"] for b in reply["content"]] == ["text"]


async def test_responses_give_a_reasoning_item_then_the_message(async_client, thinking):
    body = {"input": "Why is the sea salty?", "max_output_tokens": 12, "thinking_token_budget": BUDGET}
    body |= {"temperature": 0, "ignore_eos": True}
    reply = (await post(async_client, "/v1/responses", body)).json()
    row = await GenerationRequest.objects.aget(id=reply["id"])
    reasoning, answer = split_raw(row.output_text)
    kinds = [item["type"] for item in reply["output"]]
    assert kinds == ["reasoning", "message"]
    assert reply["output"][0]["content"] == [{"type": "reasoning_text", "text": reasoning}]
    assert reply["output"][1]["content"][0]["text"] == answer
    assert reply["usage"]["output_tokens_details"]["reasoning_tokens"] == BUDGET + end_marker_tokens(thinking)
    events = await read_named_stream(await post(async_client, "/v1/responses", {**body, "stream": True}))
    assert "".join(p["delta"] for name, p in events if name == "response.reasoning_text.delta") == reasoning
    assert "".join(p["delta"] for name, p in events if name == "response.output_text.delta") == answer
    assert [p["output_index"] for name, p in events if name == "response.output_item.added"] == [0, 1]
