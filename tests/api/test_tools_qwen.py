"""Tool calls that always parse, on a real chat model with its own tool-call template:
Qwen2.5-Coder-0.5B-Instruct (GGUF), whose `<tool_call>` tags are added tokens, through the official
`openai` and `anthropic` clients against a live Daphne.

- `tool_choice: "required"` writes the call with the tag as its token (the grammar names it:
  spelled as text the tag would be written character by character, or not at all), the call's
  object on its own line as Qwen's template writes it.
- `auto`: a reply pushed (logit_bias) to open with `{{`, the extra-brace near miss small models
  write behind agent frameworks, comes back as the call: its first token is drawn again under the
  call's grammar (engine/sample/tool_trigger.py). Without that (MINIVLLM_TOOL_CALL_GRAMMAR=0) the
  same request writes `{{name: "get_weather", arguments:{{city: "Paris"}}}}`, which nothing reads.
- A reply that opens with prose is byte for byte what the model writes without the trigger: the
  same prompt sent to /v1/completions (no tools there, so no trigger) gives the same text.
- JSON asked for, with the tool offered under auto, stays content: a `{` or a fence opens a call
  only while what follows still fits one (the grammar also takes any other JSON), so the reply
  is the one the model writes with tool_choice none.
"""

from __future__ import annotations

import json
import uuid

import httpx
import jsonschema
import openai
import pytest

from inference.api.common.chat_template import render
from inference.api.common.tool_parsers import HermesToolParser
from tests.support import real_gguf

pytestmark = [pytest.mark.live, pytest.mark.real_model]
PARAMETERS = {
    "type": "object",
    "properties": {"city": {"type": "string", "maxLength": 40}},
    "required": ["city"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {"name": "get_weather", "description": "The current weather in a city.", "parameters": PARAMETERS},
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
GREEDY = {"temperature": 0, "max_tokens": 60}


@pytest.fixture(scope="module")
def client(qwen_server):
    return openai.OpenAI(base_url=f"{qwen_server.url}/v1", api_key="x", max_retries=0, timeout=120)


def token_id(server, text: str) -> int:
    [single] = httpx.post(f"{server.url}/tokenize", json={"content": text}, timeout=30).json()["tokens"]
    return single


def the_call(choice) -> dict:
    assert choice.finish_reason == "tool_calls" and not choice.message.content
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, PARAMETERS)
    return arguments


def test_required_writes_the_tag_as_its_token_and_a_valid_call(client, qwen_server, qwen_model):
    reply = client.chat.completions.create(model=qwen_model, messages=ASK, tools=[WEATHER], tool_choice="required", **GREEDY)
    assert the_call(reply.choices[0]) == {"city": "Paris"}
    [written] = json.loads(qwen_server.wait_row(reply.id)["choices"])
    assert written["text"].startswith("<tool_call>\n{") and written["text"].endswith("}\n</tool_call>")


@pytest.mark.parametrize("stream", [False, True])
def test_auto_a_reply_pushed_to_open_with_double_braces_comes_back_as_the_call(client, qwen_server, qwen_model, stream):
    bias = {str(token_id(qwen_server, "{{")): 10}
    ask = dict(model=qwen_model, messages=ASK, tools=[WEATHER], tool_choice="auto", logit_bias=bias, **GREEDY)
    if stream:
        with client.chat.completions.stream(**ask) as events:
            for _ in events:
                pass
            reply = events.get_final_completion()
    else:
        reply = client.chat.completions.create(**ask)
    assert the_call(reply.choices[0]) == {"city": "Paris"}


def test_a_prose_reply_is_what_the_model_writes_without_the_trigger(client, qwen_server, qwen_model):
    """Chat with the tools under auto (the trigger watching) against /v1/completions on the very
    prompt the chat template renders for it (no tools in that request: nothing watches)."""
    messages = [{"role": "user", "content": "Hi! Who are you?"}]
    chat = client.chat.completions.create(model=qwen_model, messages=messages, tools=[WEATHER], tool_choice="auto", **GREEDY)
    answer = chat.choices[0]
    assert answer.finish_reason == "stop" and not answer.message.tool_calls and answer.message.content
    from inference.engine.gguf.checkpoint import GGUFCheckpoint

    tokenizer = GGUFCheckpoint.open(str(real_gguf.QWEN25_CODER.file_or_skip())).tokenizer
    prompt = render(tokenizer, messages, tools=[WEATHER], tool_parser=HermesToolParser().bind(tokenizer))
    plain = client.completions.create(model=qwen_model, prompt=prompt, **GREEDY)
    assert plain.choices[0].text == answer.message.content and plain.choices[0].finish_reason == "stop"


def test_anthropic_messages_under_auto_come_back_as_a_tool_use_block(qwen_server, qwen_model):
    import anthropic

    client = anthropic.Anthropic(base_url=qwen_server.url, api_key="unused", max_retries=0, timeout=120)
    tool = {"name": "get_weather", "description": "The current weather in a city.", "input_schema": PARAMETERS}
    message = client.messages.create(
        model=qwen_model, max_tokens=60, messages=ASK, tools=[tool], tool_choice={"type": "auto"}, extra_body={"temperature": 0}
    )
    assert message.stop_reason == "tool_use"
    [use] = [block for block in message.content if block.type == "tool_use"]
    assert use.name == "get_weather" and use.input == {"city": "Paris"}


def test_tools_the_grammar_engine_cannot_compile_leave_an_auto_reply_free(client, qwen_model):
    """A pattern with a look-ahead (jsonschema takes it, llguidance does not): `required` could not
    be forced and is a 400, but under auto the trigger is dropped and the reply is the model's own,
    read by the near-miss readers (its call validates: jsonschema checks the pattern)."""
    odd = {"type": "object", "properties": {"city": {"type": "string", "pattern": "(?=P)P.*"}}, "required": ["city"]}
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": odd}}
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model=qwen_model, messages=ASK, tools=[tool], tool_choice="required", **GREEDY)
    reply = client.chat.completions.create(model=qwen_model, messages=ASK, tools=[tool], tool_choice="auto", **GREEDY)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls" and json.loads(choice.message.tool_calls[0].function.arguments) == {
        "city": "Paris"
    }


# JSON asked for with a weather tool offered; the 0.5B's answers (greedy): a call-shaped object
# naming a function nobody offered, a fenced object with a key the tool does not take, a fenced
# list, a fenced cat, and a joke written as a broken call. (Asked for "a JSON object with the keys
# city and temperature_c" it calls get_weather even with tool_choice none: that is its own call.)
JSON_ASKS = {
    "book": "Write a JSON object describing a book, with the keys title and pages. Reply with the JSON only.",
    "convert": "Convert to JSON: the city is Paris and the temperature is 18 C. Use the keys city and temperature_c.",
    "list": "Give me a JSON list of three fruit names.",
    "fence": "Give me a JSON object with the keys name and age for a cat called Tom, in a ```json code block.",
    "joke": "Tell me a joke about cats.",
}


@pytest.mark.parametrize("ask", JSON_ASKS.values(), ids=JSON_ASKS.keys())
def test_auto_json_asked_for_stays_content_with_a_tool_offered(client, qwen_model, ask):
    """A `{` or a ```json fence opens a call only when what follows is one: the grammar also takes
    any other JSON, the model's tokens decide, and JSON that is not a call is the reply's content,
    byte for byte what the model writes with the tool not offered as a call (tool_choice none
    keeps the same prompt: the tools are shown either way)."""
    messages = [{"role": "user", "content": ask}]

    def answer(tool_choice: str):
        # a salt of its own: the prompt computed from scratch, as the other one is (K/V cached by the
        # module's earlier requests, computed in other chunks, can tip a near-tie: "pages": 180 or 281)
        salt = {"cache_salt": f"{ask}-{tool_choice}-{uuid.uuid4()}"}
        return client.chat.completions.create(
            model=qwen_model, messages=messages, tools=[WEATHER], tool_choice=tool_choice, extra_body=salt, **GREEDY
        )

    reply, free = answer("auto"), answer("none")
    assert not reply.choices[0].message.tool_calls and reply.choices[0].finish_reason != "tool_calls"
    assert reply.choices[0].message.content == free.choices[0].message.content
