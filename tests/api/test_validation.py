"""Request validation maps each API's body onto SamplingParams, naming fields as the client did."""

import pytest

from inference.api.common.errors import ApiError
from inference.api.openai.request import parse_chat, parse_completion, parse_generate


def test_generate_maps_max_new_tokens_and_engine_fields():
    inp = parse_generate({"prompt": "x", "max_new_tokens": 7, "top_k": 5, "stop": "\n", "seed": 3}, default_max_tokens=128)
    assert (inp.params.max_tokens, inp.params.top_k, inp.params.stop, inp.params.seed) == (7, 5, ["\n"], 3)
    assert parse_generate({"prompt": "x"}, default_max_tokens=128).params.max_tokens == 128


def test_sampling_errors_name_the_clients_field():
    with pytest.raises(ApiError) as info:
        parse_generate({"prompt": "x", "max_new_tokens": 0}, default_max_tokens=128)
    assert info.value.param == "max_new_tokens" and "max_new_tokens" in info.value.message


def test_nulls_mean_defaults():
    inp = parse_completion({"prompt": "x", "temperature": None, "stop": None, "max_tokens": None})
    assert inp.params.temperature == 1.0 and inp.params.max_tokens == 16 and not inp.stream


def test_completion_prompt_forms():
    assert parse_completion({"prompt": ["one"]}).prompts == ["one"]
    assert parse_completion({"prompt": [1, 2, 3]}).prompts == [[1, 2, 3]]
    assert parse_completion({"prompt": [[4, 5]]}).prompts == [[4, 5]]


def test_chat_messages_normalised_and_context_filled_by_default():
    inp = parse_chat(
        {
            "messages": [
                {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "user", "content": "hi", "name": "bob"},
            ]
        }
    )
    assert inp.messages == [{"role": "system", "content": "ab"}, {"role": "user", "content": "hi"}]
    assert inp.params.max_tokens is None  # the rest of the context, computed when submitted
    assert parse_chat({"messages": [{"role": "user", "content": "x"}], "max_tokens": 3}).params.max_tokens == 3


def test_chat_logprobs_map_to_engine_top_n():
    assert parse_chat({"messages": [{"role": "user", "content": "x"}], "logprobs": True, "top_logprobs": 4}).params.logprobs == 4
    assert parse_chat({"messages": [{"role": "user", "content": "x"}], "logprobs": True}).params.logprobs == 0
    assert parse_chat({"messages": [{"role": "user", "content": "x"}]}).params.logprobs is None


def test_stream_options_include_usage():
    inp = parse_chat({"messages": [{"role": "user", "content": "x"}], "stream": True, "stream_options": {"include_usage": True}})
    assert inp.stream and inp.include_usage


def test_cache_salt_reaches_the_engine_and_must_be_a_non_empty_string():
    chat = {"messages": [{"role": "user", "content": "x"}]}
    assert parse_chat({**chat, "cache_salt": "tenant-a"}).params.cache_salt == "tenant-a"
    for bad in (3, ""):
        with pytest.raises(ApiError) as info:
            parse_chat({**chat, "cache_salt": bad})
        assert info.value.status == 400 and info.value.param == "cache_salt"


def test_continuous_usage_needs_include_usage_and_a_boolean():
    chat = {"messages": [{"role": "user", "content": "x"}], "stream": True}
    both = parse_chat({**chat, "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    assert both.include_usage and both.continuous_usage
    alone = parse_chat({**chat, "stream_options": {"continuous_usage_stats": True}})  # vLLM: nothing without include_usage
    assert not alone.include_usage and not alone.continuous_usage
    with pytest.raises(ApiError) as info:
        parse_chat({**chat, "stream_options": {"include_usage": True, "continuous_usage_stats": "yes"}})
    assert info.value.status == 400 and info.value.param == "stream_options.continuous_usage_stats"


@pytest.mark.parametrize("role", [[], {}, 3, None])
def test_a_role_that_is_not_a_string_is_a_400_naming_it(role):
    """Found by the fuzz: a list as the role was looked up in a set (unhashable) and answered 500."""
    with pytest.raises(ApiError) as info:
        parse_chat({"messages": [{"role": role, "content": ""}]})
    assert info.value.status == 400 and info.value.param == "messages[0].role"
