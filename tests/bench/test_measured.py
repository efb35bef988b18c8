"""The bench says only what it measured: natural prompts for one client, a verdict only on every
sample, no "met" against a rebuilt llama-server, and a server with none of the shell's settings."""

from __future__ import annotations

import asyncio
import json
import math

import httpx

from bench.prompts import CHAT, CHAT_QUESTIONS, chat_requests, requests_for


def test_one_client_loads_send_chat_questions_behind_the_chat_template(smollm_tokenizer):
    from bench.peer import LOADS
    from bench.peer_large import LOADS as LARGE_LOADS
    from bench.speculative import workloads

    assert LOADS[0][0] == "1 client" and LOADS[0][3] == CHAT and LARGE_LOADS[0][3] == CHAT
    requests = chat_requests(smollm_tokenizer, num_prompts=len(CHAT_QUESTIONS), output_len=64, seed=3)
    assert requests == chat_requests(smollm_tokenizer, num_prompts=len(CHAT_QUESTIONS), output_len=64, seed=3)
    assert len({r.prompt for r in requests}) == len(CHAT_QUESTIONS)  # each question once before any repeats
    assert all("<|im_start|>user" in r.prompt and r.prompt.endswith("<|im_start|>assistant\n") for r in requests)
    assert all(r.prompt_len == len(smollm_tokenizer.encode(r.prompt, add_special_tokens=False)) for r in requests)
    assert requests_for(smollm_tokenizer, num_prompts=2, input_len=CHAT, output_len=64, seed=3) == requests[:2]
    assert requests_for(smollm_tokenizer, num_prompts=2, input_len="8", output_len=8, seed=3)[0].prompt_len == 8
    one_client = [load for load in workloads(smollm_tokenizer, seed=0) if load[1] == 1 and "grounded" not in load[0]]
    assert [name for name, _, _ in one_client] == ["chat questions, 1 client"]
    assert all(r.prompt.endswith("<|im_start|>assistant\n") for r in one_client[0][2])


def test_a_one_token_reply_without_text_is_a_reply_not_a_failure():
    """A prefill probe's one token may be part of a UTF-8 character: its event carries no text."""
    from bench.client import stream_completion

    def handler(request: httpx.Request) -> httpx.Response:
        events = [
            {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]},
            {"choices": [], "usage": {"prompt_tokens": 2000, "completion_tokens": 1}},
        ]
        body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
        return httpx.Response(200, content=body.encode())

    async def go():
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return await stream_completion(client, "http://x/v1/completions", {"max_tokens": 1})

    record = asyncio.run(go())
    assert record.ok and record.num_output_tokens == 1 and record.ttft > 0


def test_a_failed_load_is_measured_again_and_else_not_measured(monkeypatch):
    import bench.peer as peer

    outcomes = iter([{"tok/s": 5.0, "ITL p50": 1.0, "TTFT p50": 9.0, "failed": 1, "errors": ["the stream carried no text"]}])
    ok = {"tok/s": 10.0, "ITL p50": 1.0, "TTFT p50": 9.0, "failed": 0, "errors": []}
    monkeypatch.setattr(peer, "_measure_once", lambda *a, **k: next(outcomes, ok))
    assert peer._measure("http://x", None, peer.LOADS[0], seed=0) == {**ok, "attempts": 2}
    failing = {"tok/s": 5.0, "ITL p50": 1.0, "TTFT p50": 9.0, "prefill tok/s": 100.0, "failed": 1, "errors": ["x"]}
    monkeypatch.setattr(peer, "_measure_once", lambda *a, **k: dict(failing))
    assert peer._measure("http://x", None, peer.PREFILL, seed=0) == {
        "tok/s": None,
        "ITL p50": None,
        "TTFT p50": None,
        "prefill tok/s": None,
        "failed": 1,
        "attempts": peer.ATTEMPTS,
    }


def test_a_verdict_needs_every_rounds_figure():
    from bench.peer import _verdict

    assert _verdict([2.9, 2.5], 2.0, True) == "met"
    assert _verdict([2.9, math.nan], 2.0, True) == "not measured"
    assert _verdict([math.nan, math.nan], 2.0, True) == "not measured"
    assert _verdict([1.5, 2.5], 2.0, True) == "met in 1 of 2 rounds"


def test_the_large_models_prefill_is_not_measured_when_a_sample_failed():
    """The 1.73x "met" that rested on one llama-server sample of four."""
    from bench.peer_large import render

    from .test_peer import large_round

    rounds = [large_round("native"), large_round("native")]
    rounds[1]["llama-server"]["2,000-token prompt"]["prefill tok/s"] = None
    text = "\n".join(render({"gguf": "/m/q.gguf", "isa": "avx2", "rounds": rounds}))
    assert "| 2,000-token prompt | prefill tok/s | 100.00, – | 200.00, 200.00 | 2.00, –x | >= 1.5x | not measured |" in text
    assert "| 1 client | tok/s | 10.00, 10.00 | 20.00, 20.00 | 2.00, 2.00x | >= 1.3x | met |" in text
    assert "random words" in text  # a result from before the chat questions says what it sent


def _spec_round(build: str | None, off: float = 100.0) -> dict:
    def figures(tok_s):
        return {"tok/s": tok_s, "failed": 0, "ITL p50": 5.0, "acceptance": 0.7, "tokens per verification": 3.0}

    names = ("grounded, 1 client", "chat questions, 1 client")
    row = {
        "ours": {**{n: figures(250.0) for n in names}, "command": "daphne"},
        "ours, speculation off": {**{n: figures(off) for n in names}, "command": "daphne off"},
    }
    for mode in ("ngram-simple", "ngram-mod"):
        peer = {**{n: figures(100.0) for n in names}, "command": f"llama-server --spec-type {mode}"}
        if build:
            peer["build"] = build
        row[f"llama-server {mode}"] = peer
    return row


def test_speculative_targets_against_a_rebuilt_llama_server_are_not_judged():
    from bench.speculative import render

    native = "\n".join(render({"models": {"m": [_spec_round("native")]}}))
    assert "- grounded, 1 client, against llama-server n-gram: 2.50x (target >= 1.5x): met" in native
    assert "no target against it counts as met" not in native
    rebuilt = "\n".join(render({"models": {"m": [_spec_round("native-no-amx")]}}))
    assert "no target against it counts as met" in rebuilt
    assert "- grounded, 1 client, against llama-server n-gram: 2.50x (target >= 1.5x): not judged: peer rebuilt" in rebuilt
    assert "- grounded, 1 client, against speculation off: 2.50x (target >= 2.0x): met" in rebuilt  # ours against ours
    assert "- chat questions, 1 client, against speculation off: 2.50x (target >= 0.97x): met" in rebuilt
    old = _spec_round(None)  # a result from before the build was recorded: its command says so
    for mode in ("ngram-simple", "ngram-mod"):
        old[f"llama-server {mode}"]["command"] += " (built native-no-amx: the native build's AMX path crashed here)"
    assert "not judged: peer rebuilt" in "\n".join(render({"models": {"m": [old]}}))


def test_speculative_verdicts_need_every_rounds_figure():
    from bench.speculative import render

    second = _spec_round("native")
    second["ours, speculation off"]["grounded, 1 client"]["tok/s"] = None
    text = "\n".join(render({"models": {"m": [_spec_round("native"), second]}}))
    assert "- grounded, 1 client, against speculation off: 2.50, –x (target >= 2.0x): not measured" in text


def test_the_bench_server_gets_none_of_the_shells_services():
    from bench.server import EngineServer

    shell = {"PATH": "/usr/bin", "DATABASE_URL": "postgres://dev/db", "REDIS_URL": "redis://dev:6379", "MINIVLLM_QUANT": "int8"}
    env = EngineServer().environment(shell, "/tmp/db.sqlite3")
    assert "DATABASE_URL" not in env and "REDIS_URL" not in env and "MINIVLLM_QUANT" not in env
    assert env["MINIVLLM_SQLITE_PATH"] == "/tmp/db.sqlite3" and env["PATH"] == "/usr/bin"


def test_json_endings_table_comes_from_its_raw_result():
    from bench.json_endings import render

    result = {
        "machine": {"date": "2026-12-05 10:00 UTC", "cpu_model": "CPU", "cpus": 2, "isa_flags": [], "git_commit": None},
        "command": "python -m bench.json_endings",
        "server_command": "daphne",
        "settings": {"requests": 50, "max_tokens": 160, "clients": 8},
        "tallies": [
            {"mode": "json_object", "temperature": None, "requests": 50, "failed": 22, "cut": 22},
            {"mode": "json_schema", "temperature": 0.0, "requests": 50, "failed": 0, "cut": 0},
        ],
    }
    text = "\n".join(render(result))
    assert "| `json_object` | default | 22 / 50 | 22 |" in text and "| `json_schema` | 0 | 0 / 50 | 0 |" in text
    assert "Measured 2026-12-05 10:00 UTC on CPU" in text and "commit unknown" in text
