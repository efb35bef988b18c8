"""The llama-server comparison's report: every figure as a ratio to llama-server's in the same round, judged."""

from __future__ import annotations

from bench.peer import LOADS, PREFILL, render


def figures(tok_s: float, itl: float, ttft: float) -> dict:
    return {"tok/s": tok_s, "ITL p50": itl, "TTFT p50": ttft, "failed": 0}


def one_round(ours_scale: float) -> dict:
    theirs = {load[0]: figures(100.0, 10.0, 1000.0) for load in LOADS}
    theirs[PREFILL[0]] = {**figures(0.1, None, 10000.0), "prefill tok/s": 250.0}
    ours = {load[0]: figures(100.0 * ours_scale, 10.0 / ours_scale, 1000.0 / ours_scale) for load in LOADS}
    ours[PREFILL[0]] = {**figures(0.1, None, 4000.0), "prefill tok/s": 250.0 * ours_scale}
    theirs["server"] = {"ready_s": 0.7, "rss_mb": 860.0, "rss_after_loads_mb": 900.0}
    ours["server"] = {"ready_s": 4.0 * ours_scale, "rss_mb": 1500.0, "rss_after_loads_mb": 1600.0, "weights_and_kv_mb": 1120.0}
    return {"ours": ours, "llama-server": theirs}


def test_each_figure_is_a_ratio_to_llama_server_in_its_round_and_judged_against_the_target():
    text = "\n".join(
        render(
            {
                "commands": {"ours": "daphne ...", "llama-server": "llama-server -np 32"},
                "rounds": [one_round(2.0), one_round(1.5)],
            }
        )
    )
    assert "| 1 client | tok/s | 100.0, 100.0 | 200.0, 150.0 | 2.00, 1.50x | >= 1.8x | met in 1 of 2 rounds |" in text
    assert "| 1 client | ITL p50 | 10.0, 10.0 | 5.0, 6.7 | 0.50, 0.67x | <= 0.6x | met in 1 of 2 rounds |" in text
    assert "| 32 clients | TTFT p50 | 1,000.0, 1,000.0 | 500.0, 666.7 | 0.50, 0.67x | <= 1.0x | met |" in text
    assert (
        "| 2,530-token prompt | prefill tok/s | 250.0, 250.0 | 500.0, 375.0 | 2.00, 1.50x | >= 2.0x | met in 1 of 2 rounds |"
        in text
    )
    assert "| 8 clients | tok/s | 100.0, 100.0 | 200.0, 150.0 | 2.00, 1.50x |  |  |" in text  # no target: shown, not judged
    assert "| start | to /health 200, s | 0.70, 0.70 | 8.00, 6.00 | | <= 5 s | not met |" in text
    assert (
        "| start | resident MB after load | 860, 860 | 1,500, 1,500 | | <= weights + KV + 350 (1,470, 1,470) | not met |" in text
    )
    assert "| end | resident MB after the loads | 900, 900 | 1,600, 1,600 | | | |" in text  # shown, not judged
    assert "`llama-server -np 32`" in text


def test_against_a_rebuilt_peer_every_ratio_says_so_and_no_target_is_met():
    text = "\n".join(
        render(
            {
                "commands": {
                    "ours": "daphne ...",
                    "llama-server": "llama-server -np 32 (built native-no-amx: the native build's AMX path crashed here)",
                },
                "rounds": [one_round(2.0)],
            }
        )
    )
    assert "no target below counts as met" in text
    assert "| 1 client | tok/s | 100.0 | 200.0 | 2.00x (peer rebuilt) | >= 1.8x | not judged: peer rebuilt |" in text
    assert "| met" not in text


def large_round(build: str) -> dict:
    from bench.peer_large import LOADS as LARGE
    from bench.peer_large import PREFILL as LARGE_PREFILL

    theirs = {load[0]: figures(10.0, 100.0, 1000.0) for load in LARGE}
    theirs[LARGE_PREFILL[0]] = {**figures(0.1, None, 20000.0), "prefill tok/s": 100.0}
    ours = {load[0]: figures(20.0, 50.0, 500.0) for load in LARGE}
    ours[LARGE_PREFILL[0]] = {**figures(0.1, None, 10000.0), "prefill tok/s": 200.0}
    theirs["start"] = {"ready s": 2.0, "resident MB less the KV pool": 1000.0, "command": "llama-server -m x", "build": build}
    ours["start"] = {"ready s": 4.0, "resident MB less the KV pool": 1200.0}
    return {"ours": ours, "llama-server": theirs}


def test_the_large_model_section_judges_issue_28s_targets_and_marks_a_rebuilt_peer():
    from bench.peer_large import render as render_large

    native = "\n".join(render_large({"gguf": "/m/q.gguf", "isa": "avx2", "rounds": [large_round("native")]}))
    assert "| 1 client | tok/s | 10.00 | 20.00 | 2.00x | >= 1.3x | met |" in native
    assert "| start | ready s | 2.00 | 4.00 | 2.00x | <= 1.5x | not met |" in native
    assert "| start | resident MB less the KV pool | 1,000.00 | 1,200.00 | 1.20x | <= 1.25x | met |" in native
    rebuilt = "\n".join(render_large({"gguf": "/m/q.gguf", "isa": "avx2", "rounds": [large_round("native-no-amx")]}))
    assert (
        "| 1 client | tok/s | 10.00 | 20.00 | 2.00x (peer rebuilt native-no-amx: not its native build) | >= 1.3x | not judged: peer rebuilt |"
        in rebuilt
    )
    assert "| met |" not in rebuilt


def test_the_no_settings_server_gets_none_of_the_shells_minivllm_variables():
    from bench.server import EngineServer

    shell = {"PATH": "/usr/bin", "MINIVLLM_QUANT": "int8", "MINIVLLM_MAX_NUM_SEQS": "4"}
    env = EngineServer({"MINIVLLM_MODEL": "/m.gguf"}).environment(shell, "/tmp/db.sqlite3")
    assert env["PATH"] == "/usr/bin" and env["MINIVLLM_MODEL"] == "/m.gguf" and env["MINIVLLM_AUTOSTART"] == "1"
    assert "MINIVLLM_QUANT" not in env and "MINIVLLM_MAX_NUM_SEQS" not in env
