"""Fill-in-the-middle: the prompt laid out in the model's FIM tokens as llama-server lays it out
(a Qwen2.5-Coder-style tokenizer), `suffix` on /v1/completions and llama-server's /infill on a
tiny model that has those tokens, and a clear 400 for a model that has none."""

from __future__ import annotations

import copy

import pytest

from inference.api.llama.fim import FIM_BATCH, infill_prompt
from inference.models import GenerationRequest
from tests.conftest import _save_tiny, tiny_llama_hf
from tests.support.asgi import post
from tests.support.engine_fixtures import installed, start_engine_thread, tiny_engine_config
from tests.support.sse import read_stream

QWEN_FIM = ["<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>", "<|file_sep|>"]


@pytest.fixture(scope="module")
def coder_tokenizer(smollm_tokenizer):
    """SmolLM2's tokenizer with Qwen2.5-Coder's five FIM tokens added."""
    tokenizer = copy.deepcopy(smollm_tokenizer)
    tokenizer.add_special_tokens({"additional_special_tokens": QWEN_FIM})
    return tokenizer


def ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False, split_special_tokens=True).input_ids


def test_the_prompt_follows_llama_servers_repo_level_layout(coder_tokenizer):
    pre, suf, mid, repo, sep = coder_tokenizer.convert_tokens_to_ids(QWEN_FIM)
    extra = [{"filename": "utils.py", "text": "def helper():\n    return 1\n"}]
    got = infill_prompt(coder_tokenizer, "def main():\n    x = ", "\n    return x\n", extra, context=8192, max_tokens=16)
    t = lambda text: ids(coder_tokenizer, text)  # noqa: E731
    expected = [repo, *t("myproject\n"), sep, *t("utils.py\n"), *t("def helper():\n    return 1\n"), sep, *t("filename\n")] + [
        pre,
        *t("def main():\n    x = "),
        suf,
        *t("\n    return x\n"),
        mid,
    ]
    assert got == expected


def test_long_code_is_cut_as_llama_server_cuts_it_and_fim_names_in_code_stay_text(coder_tokenizer):
    pre, suf, mid = coder_tokenizer.convert_tokens_to_ids(QWEN_FIM[:3])
    prefix, suffix = "a = 1\n" * 2000, "b = 2\n" * 2000
    got = infill_prompt(coder_tokenizer, prefix, suffix, context=0)
    head, tail = got[got.index(pre) + 1 : got.index(suf)], got[got.index(suf) + 1 : -1]
    assert head == ids(coder_tokenizer, prefix)[-3 * (FIM_BATCH // 4) :] and len(tail) == FIM_BATCH // 4 - 2
    sneaky = infill_prompt(coder_tokenizer, "x = '<|fim_middle|>'", "", context=0)
    assert sneaky.count(mid) == 1 and sneaky[-1] == mid


@pytest.fixture(scope="module")
def coder_engine(tmp_path_factory, coder_tokenizer):
    folder = _save_tiny(tmp_path_factory, coder_tokenizer, "tiny-coder", tiny_llama_hf(vocab_size=len(coder_tokenizer)))
    engine = start_engine_thread(tiny_engine_config(folder))
    yield engine
    engine.shutdown()


@pytest.fixture
def coder(coder_engine):
    with installed(coder_engine):
        yield coder_engine


@pytest.mark.django_db(transaction=True)
async def test_infill_answers_in_llama_servers_shape_whole_and_streamed(async_client, coder):
    body = {"input_prefix": "def add(a, b):\n    ", "input_suffix": "\n", "n_predict": 5, "temperature": 0, "ignore_eos": True}
    whole = (await post(async_client, "/infill", body)).json()
    assert whole["stop"] is True and whole["stop_type"] == "limit" and whole["tokens_predicted"] == 5
    assert whole["prompt"].endswith("<|fim_middle|>") and "<|fim_prefix|>def add(a, b):" in whole["prompt"]
    row = await GenerationRequest.objects.aget(id=whole["id"])
    assert row.endpoint == "infill" and row.output_text == whole["content"]
    events = await read_stream(await post(async_client, "/infill", {**body, "stream": True}))
    assert all(e["stop"] is False for e in events[:-1]) and events[-1]["stop"] is True
    assert "".join(e["content"] for e in events) == whole["content"]


@pytest.mark.django_db(transaction=True)
async def test_completions_take_a_suffix(async_client, coder):
    body = {"prompt": "def add(a, b):\n    ", "suffix": "\n", "max_tokens": 4, "temperature": 0, "ignore_eos": True}
    reply = (await post(async_client, "/v1/completions", body)).json()
    row = await GenerationRequest.objects.aget(id=reply["id"])
    # a 512-token context leaves no room for repository context beside a 2,048-token batch (llama-server's rule)
    assert row.prompt == "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n<|fim_middle|>"
    assert reply["choices"][0]["text"] == row.output_text


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "path, body, param",
    [("/infill", {"input_prefix": "x = "}, "input_prefix"), ("/v1/completions", {"prompt": "x", "suffix": "y"}, "suffix")],
)
async def test_a_model_without_fim_tokens_gets_a_400_saying_so(async_client, engine_client, path, body, param):
    resp = await post(async_client, path, body)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == param
    assert "fill-in-the-middle" in resp.json()["error"]["message"]
