"""An agent's history (calls, their results, a plain answer between two tool turns) reaches each
template as the model was trained on it, through every API: chat, Responses, Anthropic Messages and
/tokenize render exactly what transformers' apply_chat_template renders for the same messages and
tools (tests/support/agent_history.py). The templates are the official ones (text fixtures:
tests/support/chat_templates/), the real Qwen2.5-Coder-0.5B file's and the embedded SmolLM2's.

Templates without a tools section (SmolLM2's, SmolLM3's, Phi-4-mini's, Gemma 3's) get our generic
form: the tools described in the system message, the calls written into the assistant's content in
the served format, the results as `tool` turns or, where the template has no such role (Gemma 3),
one user turn of <tool_response> blocks.
"""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from inference.api.common.errors import ApiError
from inference.api.common.template_traits import TemplateTraits, template_traits
from inference.api.common.tool_calls import render_tools_prompt, results_text
from inference.api.common.tool_parsers import tool_parser_for
from inference.api.llama.tokenizer_views import _tokenized
from inference.engine.prompt import prompt_token_ids
from tests.support import official_templates as official
from tests.support import real_gguf
from tests.support.agent_history import (
    API_PROMPTS,
    API_TEMPLATE_KWARGS,
    HISTORY,
    PARALLEL,
    chat_prompt,
    openai_ids,
    reference_messages,
    tokenized,
)
from tests.support.tool_conversation import TOOLS

NATIVE = [
    official.LLAMA31,
    official.LLAMA32,
    official.MISTRAL_NEMO,
    official.MINISTRAL3,
    official.QWEN3,
    official.QWEN35,
    official.GEMMA4,
]
GENERIC = [official.SMOLLM3, official.PHI4_MINI, official.GEMMA3]
ONE_CALL_A_TURN = {official.LLAMA31, official.LLAMA32}  # Llama 3's templates refuse parallel calls


@pytest.fixture(scope="module")
def qwen_coder_tokenizer():
    from inference.engine.gguf.checkpoint import GGUFCheckpoint

    return GGUFCheckpoint.open(str(real_gguf.QWEN25_CODER.file_or_skip())).tokenizer


@pytest.fixture(scope="module")
def tokenizers(smollm_tokenizer, qwen_coder_tokenizer):
    """Template name -> a tokenizer rendering it ("embedded": SmolLM2's own, "qwen2.5-coder": the real file's)."""
    named = {name: official.tokenizer_with(smollm_tokenizer, name) for name in NATIVE + GENERIC}
    return {**named, "embedded": smollm_tokenizer, "qwen2.5-coder": qwen_coder_tokenizer}


def transformers_prompt(tokenizer, history: list[dict], api: str = "chat") -> str:
    return tokenizer.apply_chat_template(
        reference_messages(history), tools=TOOLS, tokenize=False, add_generation_prompt=True, **API_TEMPLATE_KWARGS[api]
    )


@pytest.mark.parametrize("api", API_PROMPTS)
@pytest.mark.parametrize("name", [*NATIVE, "qwen2.5-coder"])
def test_a_history_renders_as_the_template_renders_it(tokenizers, name, api):
    tokenizer = tokenizers[name]
    ours = API_PROMPTS[api](tokenizer, HISTORY)
    assert ours == transformers_prompt(tokenizer, HISTORY, api)
    assert "Paris news" in ours and "Nothing new." in ours and "It is sunny in Paris" in ours


@pytest.mark.parametrize("name", [*NATIVE, *GENERIC, "qwen2.5-coder", "embedded"])
def test_tokenize_counts_the_prompt_a_chat_request_is_given(tokenizers, name):
    tokenizer = tokenizers[name]
    assert tokenized(tokenizer, HISTORY) == prompt_token_ids(tokenizer, chat_prompt(tokenizer, HISTORY))


@pytest.mark.parametrize("api", API_PROMPTS)
@pytest.mark.parametrize("name", [n for n in NATIVE if n not in ONE_CALL_A_TURN] + ["qwen2.5-coder"])
def test_parallel_calls_and_their_results_render_as_the_template_renders_them(tokenizers, name, api):
    tokenizer = tokenizers[name]
    assert API_PROMPTS[api](tokenizer, PARALLEL) == transformers_prompt(tokenizer, PARALLEL, api)


@pytest.mark.parametrize("name", [official.MISTRAL_NEMO, official.MINISTRAL3, official.LLAMA31])
def test_openai_call_ids_become_the_nine_characters_mistral_takes(tokenizers, name):
    """Clients send `call_` + 24 characters; Mistral Nemo's template refuses any id but 9
    alphanumerics, so each id is mapped to one, the same for a call and its result. Templates that
    take any id get the client's."""
    tokenizer = tokenizers[name]
    ours = chat_prompt(tokenizer, openai_ids(HISTORY))
    if not template_traits(tokenizer, tokenizer.chat_template).short_ids:
        assert ours == transformers_prompt(tokenizer, openai_ids(HISTORY))
        return
    ids = re.findall(r'"(?:id|call_id)": "([^"]+)"', ours) or re.findall(r"\[CALL_ID\]([^\[]+)\[", ours)
    assert len(set(ids)) == 2 and all(len(i) == 9 and i.isalnum() for i in ids)
    renamed = ours
    for ours_id, theirs in zip(sorted(set(ids), key=ours.index), ("call00001", "call00002")):
        renamed = renamed.replace(ours_id, theirs)
    assert renamed == transformers_prompt(tokenizer, HISTORY)


EXPECTED_TRAITS = {
    official.SMOLLM3: TemplateTraits(None, False, False, False, True),
    official.PHI4_MINI: TemplateTraits(None, False, False, False, True),  # "tools" in its text is a message key
    official.GEMMA3: TemplateTraits(None, False, False, False, False),  # roles must alternate: no tool role
    "embedded": TemplateTraits(None, False, False, False, True),
    official.MISTRAL_NEMO: TemplateTraits("tools", True, False, True, True),
    official.QWEN35: TemplateTraits("tools", True, False, False, True),
    official.GEMMA4: TemplateTraits("tools", True, False, False, True),
    official.LLAMA31: TemplateTraits("tools", True, False, False, True),
    official.QWEN3: TemplateTraits("tools", True, False, False, True),
    official.MINISTRAL3: TemplateTraits("tools", True, False, False, True),
}
# two shapes no fixture has: a template that concatenates the arguments (it wants the JSON string,
# as DeepSeek's do), and one that reads its tools from `xml_tools` (SmolLM3's as published)
STRING_ARGUMENTS = (
    "{% for m in messages %}{% for c in m.tool_calls or [] %}"
    "<call>{{ c.function.name + ' ' + c.function.arguments }}</call>{% endfor %}"
    "{{ m.role }}: {{ m.content }}\n{% endfor %}"
)
XML_TOOLS = "{% if xml_tools %}<tools>{{ xml_tools | tojson }}</tools>{% endif %}{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"


@pytest.mark.parametrize("name", EXPECTED_TRAITS)
def test_what_each_template_takes_is_read_off_it(tokenizers, name):
    tokenizer = tokenizers[name]
    assert template_traits(tokenizer, tokenizer.chat_template) == EXPECTED_TRAITS[name]


def test_a_template_that_concatenates_arguments_is_given_the_json_string(smollm_tokenizer):
    tokenizer = official.tokenizer_with_text(smollm_tokenizer, STRING_ARGUMENTS)
    assert template_traits(tokenizer, STRING_ARGUMENTS) == TemplateTraits(None, True, True, False, True)
    prompt = chat_prompt(tokenizer, HISTORY)
    assert '<call>get_weather {"city": "Paris", "days": 2}</call>' in prompt and "tool: 18 C, sunny" in prompt


def test_a_template_reading_xml_tools_is_given_the_tools_there(smollm_tokenizer):
    tokenizer = official.tokenizer_with_text(smollm_tokenizer, XML_TOOLS)
    assert template_traits(tokenizer, XML_TOOLS).tools_variable == "xml_tools"
    prompt = chat_prompt(tokenizer, HISTORY[:2])
    assert prompt.startswith("<tools>[") and '"name": "get_weather"' in prompt and "You can call functions" not in prompt


def generic_form(tokenizer, history: list[dict]) -> list[dict]:
    """The history in our generic form (module docstring), for a template without a tools section."""
    parser = tool_parser_for(tokenizer)
    tool_role = template_traits(tokenizer, tokenizer.chat_template).tool_role
    written = []
    for message in reference_messages(history):
        if message["role"] == "system":
            message = {"role": "system", "content": message["content"] + "\n\n" + render_tools_prompt(TOOLS, parser)}
        elif message.get("tool_calls"):
            calls = parser.calls_text([(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]])
            message = {"role": "assistant", "content": (message["content"] + "\n" if message["content"] else "") + calls}
        elif message["role"] == "tool" and not tool_role:
            message = {"role": "user", "content": results_text([{"name": message["name"], "content": message["content"]}])}
        written.append(message)
    return written


@pytest.mark.parametrize("api", API_PROMPTS)
@pytest.mark.parametrize("name", [*GENERIC, "embedded"])
def test_a_template_without_a_tools_section_gets_the_generic_form(tokenizers, name, api):
    tokenizer = tokenizers[name]
    ours = API_PROMPTS[api](tokenizer, HISTORY)
    theirs = tokenizer.apply_chat_template(
        generic_form(tokenizer, HISTORY), tokenize=False, add_generation_prompt=True, **API_TEMPLATE_KWARGS[api]
    )
    assert ours == theirs
    assert '"city": "Paris"' in ours and "18 C, sunny" in ours  # the calls and results are there, once each
    assert ours.count("Nothing new.") == 1


def test_gemma3s_results_after_parallel_calls_are_one_user_turn(tokenizers):
    ours = chat_prompt(tokenizers[official.GEMMA3], PARALLEL)
    turn = ours.split("<start_of_turn>user\n")[-1].split("<end_of_turn>")[0]
    assert turn == results_text(
        [{"name": "get_weather", "content": "18 C, sunny"}, {"name": "search", "content": "Nothing new."}]
    )


def test_gemma3s_results_and_the_users_next_words_are_one_turn(tokenizers):
    """Gemma 3's roles must alternate: what the user says right after the results joins their turn."""
    history = [*PARALLEL, {"role": "user", "content": "And in Rome?"}]
    ours = chat_prompt(tokenizers[official.GEMMA3], history)
    turn = ours.split("<start_of_turn>user\n")[-1].split("<end_of_turn>")[0]
    assert turn.startswith("<tool_response") and turn.endswith("</tool_response>\n\nAnd in Rome?")


def test_tokenize_takes_chats_template_options_and_refuses_them_without_messages(tokenizers):
    tokenizer = tokenizers[official.QWEN35]
    info = SimpleNamespace(tokenizer=tokenizer, max_model_len=32768)
    off = {"chat_template_kwargs": {"enable_thinking": False}}
    ids = _tokenized(info, {"messages": HISTORY, "tools": TOOLS, **off})["tokens"]
    assert ids == prompt_token_ids(tokenizer, chat_prompt(tokenizer, HISTORY, **off)) != tokenized(tokenizer, HISTORY)
    prefill = [*HISTORY[:2], {"role": "assistant", "content": "Let me"}]
    continued = _tokenized(info, {"messages": prefill, "continue_final_message": True})["tokens"]
    assert tokenizer.decode(continued).endswith("Let me")
    with pytest.raises(ApiError) as refused:
        _tokenized(info, {"prompt": "hi", "tools": TOOLS})
    assert refused.value.param == "tools"
