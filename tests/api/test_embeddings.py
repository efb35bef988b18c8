"""/v1/embeddings through the real engine: equal to transformers' pooled hidden states (a
Qwen3-embedding-style tiny model pooling the last token, a Llama one pooling the mean, each as
its sentence-transformers config says), batched beside generation without changing either,
Matryoshka `dimensions`, base64, history rows and errors."""

from __future__ import annotations

import asyncio
import base64
import json
import struct
from pathlib import Path

import pytest
import torch

from inference.models import GenerationRequest
from tests.conftest import _save_tiny, tiny_llama_hf, tiny_qwen3_hf
from tests.support.asgi import post
from tests.support.engine_fixtures import installed, start_engine_thread, tiny_engine_config

pytestmark = pytest.mark.django_db(transaction=True)
TEXTS = ["The sea is salty.", "Embeddings pool hidden states of the whole prompt, every token of it."]


def sentence_transformers_folder(folder: str, pooling: str, matryoshka: list[int] | None = None) -> str:
    """Writes the files a sentence-transformers checkpoint names its pooling in."""
    path = Path(folder)
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"},
    ]
    (path / "modules.json").write_text(json.dumps(modules))
    (path / "1_Pooling").mkdir()
    mode = {"pooling_mode_lasttoken": pooling == "last", "pooling_mode_mean_tokens": pooling == "mean"}
    (path / "1_Pooling" / "config.json").write_text(json.dumps(mode))
    if matryoshka:
        config = json.loads((path / "config.json").read_text())
        config["matryoshka_dimensions"] = matryoshka
        (path / "config.json").write_text(json.dumps(config))
    return folder


MODELS = {"qwen3-last": (tiny_qwen3_hf, "last", [16, 32]), "llama-mean": (tiny_llama_hf, "mean", None)}


@pytest.fixture(scope="module", params=list(MODELS))
def embedder(request, tmp_path_factory, smollm_tokenizer):
    """(engine, HF reference, pooling) for each tiny embedding model, installed for the module's tests."""

    make, pooling, matryoshka = MODELS[request.param]
    hf = make()
    folder = sentence_transformers_folder(_save_tiny(tmp_path_factory, smollm_tokenizer, request.param, hf), pooling, matryoshka)
    engine = start_engine_thread(tiny_engine_config(folder))
    yield engine, hf, pooling
    engine.shutdown()


@pytest.fixture
def served(embedder):
    with installed(embedder[0]):
        yield embedder


def reference(hf, tokenizer, text: str, pooling: str) -> torch.Tensor:
    ids = torch.tensor([tokenizer(text).input_ids])
    with torch.no_grad():
        hidden = hf.model(ids).last_hidden_state[0].float()
    vector = hidden[-1] if pooling == "last" else hidden.mean(0)
    return torch.nn.functional.normalize(vector, dim=0)


async def test_embeddings_equal_transformers_pooled_hidden_states(async_client, served, smollm_tokenizer):
    engine, hf, pooling = served
    assert engine.model_info.pooling == pooling
    resp = await post(async_client, "/v1/embeddings", {"input": TEXTS})
    assert resp.status_code == 200, resp.content
    body = resp.json()
    assert body["object"] == "list" and [d["index"] for d in body["data"]] == [0, 1]
    for text, item in zip(TEXTS, body["data"]):
        expected = reference(hf, smollm_tokenizer, text, pooling)
        torch.testing.assert_close(torch.tensor(item["embedding"]), expected, rtol=1e-4, atol=1e-5)
    tokens = sum(len(smollm_tokenizer(t).input_ids) for t in TEXTS)
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    rows = [row async for row in GenerationRequest.objects.filter(endpoint="embeddings")]
    assert len(rows) == 2 and all(r.status == "completed" and r.completion_tokens == 0 for r in rows)


async def test_an_embedding_beside_generation_changes_neither(async_client, served):
    alone = (await post(async_client, "/v1/embeddings", {"input": TEXTS[1]})).json()["data"][0]["embedding"]
    chat = {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 12, "temperature": 0, "ignore_eos": True}
    chat_alone = (await post(async_client, "/v1/chat/completions", chat)).json()["choices"][0]["message"]["content"]
    both = await asyncio.gather(
        post(async_client, "/v1/chat/completions", chat), post(async_client, "/v1/embeddings", {"input": TEXTS[1]})
    )
    assert both[0].json()["choices"][0]["message"]["content"] == chat_alone
    torch.testing.assert_close(torch.tensor(both[1].json()["data"][0]["embedding"]), torch.tensor(alone), rtol=1e-5, atol=1e-6)


async def test_base64_and_token_ids_give_the_same_vector(async_client, served, smollm_tokenizer):
    floats = (await post(async_client, "/v1/embeddings", {"input": TEXTS[0]})).json()["data"][0]["embedding"]
    packed = (await post(async_client, "/v1/embeddings", {"input": TEXTS[0], "encoding_format": "base64"})).json()["data"][0][
        "embedding"
    ]
    raw = base64.b64decode(packed)
    assert list(struct.unpack(f"<{len(raw) // 4}f", raw)) == pytest.approx(floats, abs=1e-7)
    ids = smollm_tokenizer(TEXTS[0]).input_ids
    by_ids = (await post(async_client, "/v1/embeddings", {"input": ids})).json()["data"][0]["embedding"]
    assert by_ids == pytest.approx(floats, abs=1e-6)


async def test_dimensions_cut_a_matryoshka_model_and_are_refused_elsewhere(async_client, served):
    engine = served[0]
    resp = await post(async_client, "/v1/embeddings", {"input": TEXTS[0], "dimensions": 16})
    if engine.model_info.matryoshka_dimensions is None:
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "dimensions"
        return
    vector = torch.tensor(resp.json()["data"][0]["embedding"])
    assert vector.shape == (16,) and vector.norm().item() == pytest.approx(1.0, abs=1e-5)
    full = torch.tensor((await post(async_client, "/v1/embeddings", {"input": TEXTS[0]})).json()["data"][0]["embedding"])
    torch.testing.assert_close(vector, torch.nn.functional.normalize(full[:16], dim=0), rtol=1e-4, atol=1e-6)
    assert (await post(async_client, "/v1/embeddings", {"input": TEXTS[0], "dimensions": 20})).status_code == 400


@pytest.mark.parametrize(
    "body, param",
    [
        ({}, "input"),
        ({"input": ""}, "input[0]"),
        ({"input": []}, "input"),
        ({"input": [["a"]]}, "input[0]"),
        ({"input": "x", "encoding_format": "hex"}, "encoding_format"),
        ({"input": "x", "dimension": 4}, "dimension"),
        ({"input": [-1, 2]}, "input[0]"),
    ],
)
async def test_bad_inputs_are_400s_naming_the_field(async_client, served, body, param):
    resp = await post(async_client, "/v1/embeddings", body)
    assert resp.status_code == 400, resp.content
    assert resp.json()["error"]["param"] == param
