"""A folder of real models behind one live Daphne (MINIVLLM_MODELS_DIR, MINIVLLM_MODELS_MAX=2): the
embedded SmolLM2, the Qwen2.5-Coder-0.5B and Gemma 3 270M GGUFs `make test` fetches, and a corrupt
file. Each answers by name, never more than two are loaded, the least recently used goes, two
models answer at once as each does alone, llama-server's router routes, `keep_alive: 0` gives the
memory back, the corrupt one fails while the others serve, and the official ollama client sees
the folder."""

from __future__ import annotations

import concurrent.futures
import os

import httpx
import ollama
import pytest

from inference.engine.loader import embedded_model_source
from tests.support import real_gguf
from tests.support.engine_fixtures import wait_until

pytestmark = pytest.mark.live
PROMPT = "The three primary colours are"
GREEDY = {"max_tokens": 12, "temperature": 0}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("models")
    embedded = embedded_model_source()
    os.symlink(os.path.join(embedded.path, embedded.gguf_file), folder / "smollm2.gguf")
    os.symlink(real_gguf.QWEN25_CODER.file_or_skip(), folder / "qwen-coder.gguf")
    os.symlink(real_gguf.GEMMA3.file_or_skip(), folder / "gemma3.gguf")
    (folder / "broken.gguf").write_bytes(real_gguf.GEMMA3.file_or_skip().read_bytes()[:100_000])  # cut inside its header
    return folder


@pytest.fixture(scope="module")
def server(daphne_server, folder):
    server = daphne_server.fresh(
        MINIVLLM_MODELS_DIR=str(folder), MINIVLLM_MODELS_MAX="2", MINIVLLM_KV_CACHE_MB="128", MINIVLLM_MAX_NUM_SEQS="4"
    )
    yield server
    server.stop()


def statuses(server) -> dict[str, str]:
    listed = httpx.get(f"{server.url}/models", timeout=30).json()["data"]
    return {model["id"]: model["status"]["value"] for model in listed}


def loaded(server) -> list[str]:
    return sorted(name for name, status in statuses(server).items() if status == "loaded")


def complete(server, model: str, prompt: str = PROMPT) -> dict:
    resp = httpx.post(f"{server.url}/v1/completions", json={"model": model, "prompt": prompt, **GREEDY}, timeout=240)
    assert resp.status_code == 200, resp.text
    return resp.json()


def unload_all(server) -> None:
    for name in loaded(server):
        assert httpx.post(f"{server.url}/models/unload", json={"model": name}, timeout=60).json() == {"success": True}


def test_each_model_answers_by_name_and_the_least_recently_used_goes(server):
    assert statuses(server) == {"broken": "unloaded", "gemma3": "unloaded", "qwen-coder": "unloaded", "smollm2": "unloaded"}
    assert httpx.get(f"{server.url}/health", timeout=10).json()["status"] == "ok"
    for name in ("smollm2", "qwen-coder", "gemma3"):
        reply = complete(server, name)
        assert reply["model"] == name and reply["choices"][0]["text"]
        assert len(loaded(server)) <= 2
    assert loaded(server) == ["gemma3", "qwen-coder"]  # smollm2 was the least recently used
    complete(server, "qwen-coder")
    complete(server, "smollm2")
    assert loaded(server) == ["qwen-coder", "smollm2"]
    listed = httpx.get(f"{server.url}/v1/models", timeout=30).json()["data"]
    assert {m["id"]: m["status"]["value"] for m in listed} == statuses(server)
    assert next(m for m in listed if m["id"] == "smollm2")["max_model_len"] > 0
    missing = httpx.post(f"{server.url}/v1/completions", json={"model": "nope", "prompt": "x"}, timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


def test_two_models_answering_at_once_each_reply_as_alone(server):
    prompts = {"qwen-coder": "def fibonacci(n):", "gemma3": "Once upon a time"}
    alone = {name: complete(server, name, prompt)["choices"][0]["text"] for name, prompt in prompts.items()}
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = {name: [pool.submit(complete, server, name, prompt) for _ in range(2)] for name, prompt in prompts.items()}
        together = {name: [f.result()["choices"][0]["text"] for f in fs] for name, fs in futures.items()}
    assert together == {name: [text, text] for name, text in alone.items()}
    assert loaded(server) == ["gemma3", "qwen-coder"]


def test_the_router_routes_load_and_unload(server):
    url = server.url
    assert httpx.post(f"{url}/models/unload", json={"model": "gemma3"}, timeout=60).json() == {"success": True}
    assert statuses(server)["gemma3"] == "unloaded"
    assert httpx.post(f"{url}/models/load", json={"model": "smollm2"}, timeout=240).json() == {"success": True}
    assert loaded(server) == ["qwen-coder", "smollm2"]
    assert httpx.post(f"{url}/models/load", json={"model": "nope"}, timeout=30).status_code == 404
    assert httpx.post(f"{url}/models/unload", json={}, timeout=30).status_code == 400


def test_keep_alive_zero_unloads_after_the_reply_and_the_memory_comes_back(server):
    unload_all(server)
    before = settled_rss(server)
    client = ollama.Client(host=server.url, timeout=240)
    reply = client.chat(
        model="qwen-coder", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 4}, keep_alive=0
    )
    assert reply.done and reply.message.content
    assert wait_until(lambda: statuses(server)["qwen-coder"] == "unloaded", timeout=30)
    limit = before + 100 * 2**20
    assert wait_until(lambda: server.rss_bytes() <= limit, timeout=30), (server.rss_bytes() - before) / 2**20


def test_keep_alive_on_the_openai_api(server):
    complete(server, "gemma3")
    bad = httpx.post(
        f"{server.url}/v1/completions", json={"model": "gemma3", "prompt": "x", "keep_alive": 0, "n": "two"}, timeout=60
    )
    assert bad.status_code == 400 and statuses(server)["gemma3"] == "loaded"  # refused: its keep-alive is as it was
    resp = httpx.post(
        f"{server.url}/v1/completions", json={"model": "gemma3", "prompt": "x", "keep_alive": "0s", **GREEDY}, timeout=60
    )
    assert resp.status_code == 200
    assert wait_until(lambda: statuses(server)["gemma3"] == "unloaded", timeout=30)


def settled_rss(server) -> int:
    """The server's resident size once it stops moving (a KV pool's pages are backed in the background)."""
    readings = [server.rss_bytes()]

    def steady() -> bool:
        readings.append(server.rss_bytes())
        return abs(readings[-1] - readings[-2]) < 4 * 2**20

    assert wait_until(steady, timeout=30, interval=0.5)
    return readings[-1]


def test_a_corrupt_file_fails_while_the_others_serve(server):
    resp = httpx.post(f"{server.url}/v1/completions", json={"model": "broken", "prompt": "x", **GREEDY}, timeout=60)
    assert resp.status_code == 503 and "header" in resp.json()["error"]["message"]
    [broken] = [m for m in httpx.get(f"{server.url}/models", timeout=30).json()["data"] if m["id"] == "broken"]
    assert broken["status"]["value"] == "failed" and "header" in broken["status"]["reason"]
    assert complete(server, "qwen-coder")["choices"][0]["text"]


def test_the_ollama_client_sees_the_folder(server):
    client = ollama.Client(host=server.url, timeout=240)
    assert sorted(m.model for m in client.list().models) == ["broken", "gemma3", "qwen-coder", "smollm2"]
    client.chat(model="smollm2", messages=[{"role": "user", "content": "Hi"}], options={"num_predict": 4})
    running = {m.model: m for m in client.ps().models}
    assert "smollm2" in running and running["smollm2"].size > 0 and running["smollm2"].context_length > 0
    assert set(running) <= {"smollm2", "qwen-coder", "gemma3"} and len(running) <= 2
    shown = client.show("qwen-coder")
    assert "tools" in shown.capabilities and "<|im_start|>" in shown.template
    ask = [{"role": "user", "content": "Name a colour."}]
    whole = client.chat(model="qwen-coder", messages=ask, options={"temperature": 0, "num_predict": 8})
    streamed = list(client.chat(model="qwen-coder", messages=ask, options={"temperature": 0, "num_predict": 8}, stream=True))
    assert "".join(c.message.content for c in streamed) == whole.message.content and streamed[-1].done
    generated = client.generate(model="gemma3", prompt="Once upon a time", options={"temperature": 0, "num_predict": 8})
    assert generated.response and generated.done
    vectors = client.embed(model="smollm2", input=["a cat", "a dog"]).embeddings
    assert len(vectors) == 2 and len(vectors[0]) == 576
    assert len(loaded(server)) <= 2
