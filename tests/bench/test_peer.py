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
