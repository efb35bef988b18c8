"""Seconds-long checks of bench/: the metric arithmetic, the shared prompts, the SSE client,
the static-batch token accounting of the HF baseline, and the report's rendering. No server,
no network (the client test uses httpx.MockTransport), and only a tiny random Llama."""

from __future__ import annotations

import asyncio
import json
import math

import httpx
import pytest

from bench.client import completion_payload, read_event, stream_completion
from bench.metrics import RequestRecord, percentile, summarize
from bench.prompts import BenchRequest, make_requests, parse_length
from bench.serve import run_benchmark

# ---- metrics -------------------------------------------------------------------------------


def test_percentile_interpolates_linearly():
    assert percentile([4.0, 1.0, 3.0, 2.0], 50) == 2.5
    assert percentile(list(range(101)), 99) == 99
    assert percentile([1.0, 2.0], 99) == pytest.approx(1.99)
    assert percentile([7.0], 99) == 7.0
    assert percentile([3.0, 1.0], 0) == 1.0 and percentile([3.0, 1.0], 100) == 3.0
    assert math.isnan(percentile([], 50))


def test_ttft_itl_tpot_from_known_timestamps():
    record = RequestRecord(start=10.0, chunk_times=[10.5, 10.7, 11.0, 11.6], end=11.7, output_tokens=4)
    assert record.ttft == pytest.approx(0.5)
    assert record.itls == pytest.approx([0.2, 0.3, 0.6])
    assert record.e2e == pytest.approx(1.7)
    assert record.tpot == pytest.approx((1.7 - 0.5) / 3)
    # Without a usage chunk the chunks are the tokens.
    assert RequestRecord(start=0.0, chunk_times=[1.0, 2.0], end=2.0).num_output_tokens == 2
    assert RequestRecord(start=0.0, chunk_times=[1.0], end=1.0, output_tokens=1).tpot is None


def test_tokens_are_timed_by_the_servers_counts_not_by_their_text():
    """llama-server sends a chunk per token, empty for a token that prints as nothing, with its
    count under timings_per_token; ours counts in usage, several tokens in one chunk when guesses
    were accepted. Each token is timed when its chunk came."""
    llama, ours = RequestRecord(start=0.0), RequestRecord(start=0.0)
    padding = [("", 1, 0.5), ("", 2, 0.6), ("a", 3, 0.7), ("b", 4, 0.8)]
    for text, count, now in padding:
        chunk = {"choices": [{"index": 0, "text": text, "finish_reason": None}], "timings": {"predicted_n": count}}
        read_event(llama, json.dumps(chunk), now)
    assert llama.chunk_times == [0.5, 0.6, 0.7, 0.8] and llama.ttft == pytest.approx(0.5)  # not 0.7: the first visible text
    assert llama.itls == pytest.approx([0.1, 0.1, 0.1])
    for text, count, now in [("a", 1, 0.5), ("bcd", 4, 0.8), ("e", 5, 0.9)]:
        chunk = {"choices": [{"index": 0, "text": text, "finish_reason": None}], "usage": {"completion_tokens": count}}
        read_event(ours, json.dumps(chunk), now)
    assert ours.chunk_tokens == [1, 3, 1] and ours.itls == pytest.approx([0.1, 0.1, 0.1, 0.1])  # 0.3 over three tokens
    plain = RequestRecord(start=0.0)  # a server that counts nothing: its text chunks are the tokens
    for text, now in [("", 0.2), ("a", 0.5), ("b", 0.9)]:
        read_event(plain, json.dumps({"choices": [{"index": 0, "text": text, "finish_reason": None}]}), now)
    assert plain.ttft == pytest.approx(0.5) and plain.itls == pytest.approx([0.4])


def test_summary_counts_only_successes():
    good = RequestRecord(start=0.0, chunk_times=[0.1, 0.2, 0.3], end=0.3, output_tokens=3)
    also = RequestRecord(start=0.0, chunk_times=[0.3, 0.5], end=0.5, output_tokens=2)
    bad = RequestRecord(start=0.0, error="HTTP 503: busy")
    s = summarize([good, also, bad], duration=2.0)
    assert (s["completed"], s["failed"], s["total_output_tokens"]) == (2, 1, 5)
    assert s["output_throughput"] == pytest.approx(2.5) and s["request_throughput"] == pytest.approx(1.0)
    assert s["ttft_ms"]["mean"] == pytest.approx(200.0) and s["ttft_ms"]["p50"] == pytest.approx(200.0)
    assert s["itl_ms"]["p50"] == pytest.approx(100.0)  # gaps 0.1, 0.1, 0.2
    assert s["e2e_ms"]["p99"] == pytest.approx(1000 * (0.3 + 0.99 * 0.2))
    assert s["errors"] == ["HTTP 503: busy"]
    nothing = summarize([bad], duration=1.0)
    assert nothing["ttft_ms"] == {"mean": None, "p50": None, "p99": None}
    json.dumps(nothing, allow_nan=False)  # result files stay strict JSON


# ---- prompts -------------------------------------------------------------------------------


def test_parse_length():
    assert parse_length("64") == (64, 64) and parse_length("16-256") == (16, 256) and parse_length(8) == (8, 8)
    for bad in ("0", "9-3", "a", "1-2-3", ""):
        with pytest.raises(ValueError):
            parse_length(bad)


def test_prompts_are_seeded_exact_length_and_prefix_stable(smollm_tokenizer):
    a = make_requests(smollm_tokenizer, num_prompts=5, input_len=24, output_len="16-256", seed=7)
    assert a == make_requests(smollm_tokenizer, num_prompts=5, input_len=24, output_len="16-256", seed=7)
    assert a[:3] == make_requests(smollm_tokenizer, num_prompts=3, input_len=24, output_len="16-256", seed=7)
    assert a != make_requests(smollm_tokenizer, num_prompts=5, input_len=24, output_len="16-256", seed=8)
    assert len({r.prompt for r in a}) == 5
    for r in a:
        assert len(smollm_tokenizer.encode(r.prompt, add_special_tokens=False)) == r.prompt_len == 24
        assert 16 <= r.output_len <= 256
    ranged = make_requests(smollm_tokenizer, num_prompts=20, input_len="4-9", output_len=3, seed=1)
    assert {r.output_len for r in ranged} == {3} and all(4 <= r.prompt_len <= 9 for r in ranged)


# ---- the client, over a mock transport -----------------------------------------------------


def _sse(*events) -> bytes:
    return b"".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events)


def _completion_stream(payload: dict) -> bytes:
    chunks = [{"choices": [{"index": 0, "text": f" t{i}", "finish_reason": None}]} for i in range(payload["max_tokens"])]
    empty = {"choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
    usage = {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": payload["max_tokens"]}}
    return _sse(*chunks, empty, usage, "[DONE]")


async def test_stream_completion_reads_chunks_usage_and_errors():
    def handler(request: httpx.Request) -> httpx.Response:
        payload = json.loads(request.content)
        if payload["max_tokens"] == 99:
            return httpx.Response(503, json={"error": {"message": "queue full"}})
        if payload["max_tokens"] == 98:
            return httpx.Response(200, content=_sse({"error": {"message": "boom"}}))
        return httpx.Response(200, content=_completion_stream(payload), headers={"content-type": "text/event-stream"})

    request = BenchRequest(prompt=" a b", prompt_len=2, output_len=4)
    payload = completion_payload(request, model="m", temperature=0.0, ignore_eos=True)
    assert payload["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert payload["timings_per_token"] is True and payload["ignore_eos"] is True
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        ok = await stream_completion(client, "http://x/v1/completions", payload)
        full = await stream_completion(client, "http://x/v1/completions", {**payload, "max_tokens": 99})
        broken = await stream_completion(client, "http://x/v1/completions", {**payload, "max_tokens": 98})
    assert ok.ok and len(ok.chunk_times) == 4 and ok.num_output_tokens == 4 and ok.prompt_tokens == 5
    assert not full.ok and full.error.startswith("HTTP 503")
    assert not broken.ok and broken.error == "boom"


async def test_run_benchmark_keeps_to_the_concurrency_limit():
    in_flight, peak = 0, 0

    async def handler(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": [{"id": "tiny"}]})
        payload = json.loads(request.content)
        assert payload["model"] == "tiny"
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.01)
        in_flight -= 1
        return httpx.Response(200, content=_completion_stream(payload))

    requests = [BenchRequest(prompt=" w", prompt_len=1, output_len=n) for n in (2, 3, 4, 5, 6, 7)]
    result = await run_benchmark(
        requests, base_url="http://x/", concurrency=2, show_progress=False, transport=httpx.MockTransport(handler)
    )
    assert peak == 2
    assert result["summary"]["completed"] == 6 and result["summary"]["total_output_tokens"] == 27
    assert [r["output_tokens"] for r in result["requests"]] == [2, 3, 4, 5, 6, 7]
    # Poisson arrivals, no cap: everything still completes.
    paced = await run_benchmark(
        requests, base_url="http://x", request_rate=500.0, show_progress=False, transport=httpx.MockTransport(handler)
    )
    assert paced["summary"]["completed"] == 6 and paced["config"]["request_rate"] == 500.0


# ---- the HF baseline's static-batch accounting, on a tiny random Llama ---------------------


def test_static_batches_count_only_wanted_tokens(tiny_llama_dir):
    from bench.baselines import load_model, run_static
    from bench.model_files import load_tokenizer

    tokenizer = load_tokenizer(tiny_llama_dir)
    model = load_model("float32", tokenizer, tiny_llama_dir)
    requests = [
        BenchRequest(prompt=" hello" * n_in, prompt_len=n_in, output_len=n_out)
        for n_in, n_out in ((3, 2), (7, 5), (4, 3), (5, 4))
    ]
    result = run_static(model, tokenizer, requests, batch_size=3)
    s = result["summary"]
    # Batch 1 runs 5 steps for 3 rows (15 tokens, 10 wanted); batch 2 is one row of 4.
    assert s["computed_tokens"] == 15 + 4 and s["total_output_tokens"] == 14
    assert s["padding_waste"] == pytest.approx(1 - 14 / 19)
    rows = result["requests"]
    assert [r["output_tokens"] for r in rows] == [2, 5, 3, 4] and [len(r["itl_s"]) for r in rows] == [1, 4, 2, 3]
    assert rows[0]["e2e_s"] == rows[1]["e2e_s"] == rows[2]["e2e_s"]  # a batch ends with its longest member
    assert rows[0]["ttft_s"] == rows[1]["ttft_s"] <= rows[0]["e2e_s"]
    one = run_static(model, tokenizer, requests[:2], batch_size=1)["summary"]
    assert one["padding_waste"] == 0 and one["computed_tokens"] == one["total_output_tokens"] == 7


# ---- the report's rendering ----------------------------------------------------------------


def _entry(backend, mode, workload, c, dtype, tok_s):
    ms = {"mean": 10.0, "p50": 10.0, "p99": 20.0}
    summary = {
        "completed": 4,
        "failed": 0,
        "output_throughput": tok_s,
        "padding_waste": 0.25,
        "ttft_ms": ms,
        "itl_ms": ms,
        "tpot_ms": ms,
        "e2e_ms": ms,
    }
    return {
        "backend": backend,
        "mode": mode,
        "workload": workload,
        "concurrency": c,
        "dtype": dtype,
        "summary": summary,
        "command": "cmd",
    }


def _small_report():
    entries = [_entry("engine", "serve", "uniform", 1, None, 50.0), _entry("engine", "serve", "uniform", 8, None, 400.0)]
    for dtype, base in (("bfloat16", 50.0), ("float32", 25.0)):
        entries += [
            _entry("hf", "one-at-a-time", "uniform", 1, dtype, base),
            _entry("hf", "static", "uniform", 8, dtype, 4 * base),
        ]
    machine = {
        "date": "d",
        "cpu_model": "cpu",
        "cpus": 2,
        "cores_per_socket": "2",
        "threads_per_core": "1",
        "memory_gib": 8.0,
        "bf16_instructions": [],
        "load_average_at_start": (0.1, 0.1, 0.1),
        "os": "linux",
        "python": "3",
        "torch": "t",
        "torch_threads": 2,
        "transformers": "x",
    }
    return {
        "entries": entries,
        "machine": machine,
        "server": {"device": "cpu"},
        "command": "python -m bench.report",
        "plan": {"concurrencies": [1, 8], "workloads": [{"name": "uniform", "input_len": "128", "output_len": "64"}]},
    }


def test_report_renders_ratios_and_plots(tmp_path):
    from bench.plots import latency_plot, throughput_plot
    from bench.tables import render

    report = _small_report()
    machine = report["machine"]
    text = render(report)
    assert "| 8 | 400.0 | **2.00×** | **4.00×** | **8.00×** | **16.00×** |" in text
    assert "busy machine" not in text
    machine["load_average_at_start"] = (3.5, 3.0, 2.0)  # an old report: judged by its load average
    assert "busy machine" in render(report)
    machine["cpu_busy_percent_at_start"] = 5.0  # the CPU sample wins: the load was an earlier minute's
    assert "busy machine" not in render(report)
    machine["cpu_busy_percent_at_start"] = 90.0
    assert "90% of the CPU in use" in render(report)
    throughput_plot(report, str(tmp_path / "t.png"))
    latency_plot(report, str(tmp_path / "l.png"))
    assert (tmp_path / "t.png").stat().st_size > 1000 and (tmp_path / "l.png").stat().st_size > 1000


def test_targets_are_judged_from_the_report():
    from bench.targets import evaluate, machine_factor

    report = _small_report()
    assert machine_factor(report["entries"], "uniform") == pytest.approx(24.0 / 25.0)
    rows = evaluate(report)
    assert [r["target"][:2] for r in rows] == ["1.", "3.", "4.", "5."]  # no mixed workload in this report
    assert "2.00x HF bf16 static" in rows[0]["measured"] and rows[0]["verdict"] == "**met**"
    # ITL p50 10 ms: over 7 ms as written, and over 7 * 0.96 scaled; TTFT 10 ms is under 2 s either way
    assert rows[1]["verdict"] == "as written **not met**; scaled **not met**"
    assert rows[2]["verdict"] == "as written **met**; scaled **met**"
    assert rows[3]["verdict"] == "–"  # no GPU in this run
    report["entries"][1]["summary"]["output_throughput"] = 200.0  # 1.0x the bf16 static batch
    assert evaluate(report)[0]["verdict"] == "**not met**"


def test_report_rerenders_docs_from_saved_json(tmp_path):
    from bench.report import main

    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(_small_report()))
    main(["--render-only", str(saved), "--docs-dir", str(tmp_path / "docs")])
    text = (tmp_path / "docs" / "benchmarks.md").read_text()
    assert "## Targets (performance issue)" in text and "| 8 | 400.0 |" in text
    assert (tmp_path / "docs" / "throughput.png").exists()


def test_one_client_target_is_judged_on_the_latency_server_when_there_is_one():
    from bench.tables import render
    from bench.targets import evaluate

    report = _small_report()
    latency = _entry("engine", "latency", "uniform", 1, None, 160.0)
    latency["summary"]["itl_ms"] = {"mean": 6.0, "p50": 6.0, "p99": 9.0}
    report["entries"].append(latency)
    report["latency_server"] = {"env": "MINIVLLM_QUANT=int8", "dtype": "float32", "command": "python -m daphne ..."}
    row = evaluate(report)[1]
    assert "latency server" in row["target"] and row["verdict"] == "as written **met**; scaled **met**"
    text = render(report)
    assert "## Latency mode: one client" in text and "| latency server (`MINIVLLM_QUANT=int8`, float32) | 160.0 |" in text
    assert "| 8 | 400.0 | **2.00×**" in text  # the main server's rows are still the main server's


def test_latency_server_needs_a_one_client_uniform_run_and_a_server_of_ours():
    from bench.report import latency_entries, main, make_plan, parse_args

    args = parse_args(["--concurrency", "8", "--latency-server-env", "MINIVLLM_QUANT=int8"])
    assert latency_entries(args, make_plan(args), tokenizer=None, results_dir=None) == ([], None)  # no server started
    with pytest.raises(SystemExit, match="cannot go with --base-url"):
        main(["--base-url", "http://127.0.0.1:1", "--latency-server-env", "MINIVLLM_QUANT=int8"])


def test_the_page_renders_the_raw_results_beside_it_and_nothing_else(tmp_path):
    from bench.raw import save_raw
    from bench.report import write_docs, write_page

    docs = tmp_path / "docs"
    write_docs(_small_report(), str(docs))
    page = (docs / "benchmarks.md").read_text()
    assert "## Structured outputs" not in page and "## Speculative decoding" not in page
    machine = {"date": "2026-12-05 10:00 UTC", "cpu_model": "Some CPU", "cpus": 2, "isa_flags": ["avx2"], "git_commit": "abc"}
    save_raw(
        str(docs),
        "structured",
        {
            "machine": machine,
            "command": "python -m bench.structured",
            "server_command": "daphne ...",
            "settings": {"clients": 8, "requests": 32, "max_tokens": 64, "temperature": 0.8},
            "rounds": [
                {"unconstrained": 300.0, "json_schema": 270.0},
                {"unconstrained": 310.0, "json_schema": 248.0},
                {"unconstrained": 200.0, "json_schema": 190.0},
            ],
            "masks": {"grammar_mask_rows": 100.0, "grammar_mask_seconds": 0.02, "grammar_mask_wait_seconds": 0.0002},
        },
    )
    write_page(str(docs))
    page = (docs / "benchmarks.md").read_text()
    assert "Measured 2026-12-05 10:00 UTC on Some CPU, 2 logical CPUs (flags the kernels read: avx2), commit abc" in page
    assert "| 1 | 300.0 | 270.0 | 0.90 |" in page and "| 2 | 310.0 | 248.0 | 0.80 |" in page
    assert "Median ratio over 3 round(s): **0.90** (target 0.85: met)." in page
    with pytest.raises(ValueError, match="no page section"):
        save_raw(str(docs), "hand-pasted", {})


def test_the_committed_page_is_what_its_committed_raw_results_render_to():
    """docs/bench/benchmarks.md holds no table that its raw results beside it do not give."""
    from pathlib import Path

    from bench.raw import load_raw
    from bench.tables import render

    docs = Path(__file__).resolve().parents[2] / "docs" / "bench"
    report = json.loads((docs / "report.json").read_text())
    assert (docs / "benchmarks.md").read_text() == render(report, load_raw(str(docs)))


@pytest.mark.live
async def test_a_chat_request_with_tools_is_benched_on_chat_completions(default_server):
    """The speculation bench's agent rows: a request carrying chat fields (messages, tools) goes
    to /v1/chat/completions against the real server, and its streamed deltas are counted."""
    from bench.speculative import AGENT_TOOLS

    chat = {"messages": [{"role": "user", "content": "Repeat: one two three four."}], "tools": AGENT_TOOLS}
    requests = [BenchRequest(prompt="", prompt_len=10, output_len=12, chat=chat)]
    result = await run_benchmark(requests, base_url=default_server.url, ignore_eos=True, show_progress=False)
    assert result["summary"]["completed"] == 1 and result["requests"][0]["output_tokens"] == 12
    assert result["summary"]["total_prompt_tokens"] > 100  # the usage counted the tools' description


def test_numerics_compares_a_servers_choices_with_float32s_margins():
    import torch

    from bench.numerics import compare, level_with

    logits = torch.tensor([[2.0, 1.0, 0.0], [0.0, 3.0, 2.9], [1.0, 0.0, 4.0]])  # float32 picks 0, 1, 2
    figures = compare([(0, 1.0), (2, 0.1), (0, 2.0)], logits)
    assert (figures["agree"], figures["positions"]) == (1, 3)
    assert [p["position"] for p in figures["parted"]] == [2, 3]  # row i predicts token i + 1
    assert [p["float32_margin"] for p in figures["parted"]] == pytest.approx([0.1, 3.0])
    assert figures["above_near_tie"] == 1 and figures["max_margin"] == pytest.approx(3.0)
    assert level_with({"percent": 95.0}, {"percent": 95.9}) and not level_with({"percent": 94.0}, {"percent": 95.1})
