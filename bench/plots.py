"""docs/bench/throughput.png and docs/bench/latency.png, one panel per workload, concurrency on a log2 axis."""

from __future__ import annotations

from .entries import baseline, metric, pick, throughput


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _axes(plt, rows: int, cols: int, width: float, height: float):
    fig, axes = plt.subplots(rows, cols, figsize=(width * cols, height * rows), squeeze=False)
    return fig, axes


def _concurrency_axis(ax, concurrencies):
    ax.set_xscale("log", base=2)
    ax.set_xticks(concurrencies, [str(c) for c in concurrencies])
    ax.set_xlabel("concurrency (HF: static batch size)")
    ax.grid(True, alpha=0.3)


def throughput_plot(report: dict, path: str) -> None:
    plt = _pyplot()
    entries, plan = report["entries"], report["plan"]
    cs = plan["concurrencies"]
    fig, axes = _axes(plt, 1, len(plan["workloads"]), 6.0, 4.2)
    for ax, w in zip(axes[0], plan["workloads"]):
        name = w["name"]
        ax.plot(
            cs,
            [throughput(pick(entries, backend="engine", mode="serve", workload=name, concurrency=c)) for c in cs],
            "o-",
            lw=2,
            color="C0",
            label="mini-vLLM engine",
        )
        for dtype, style, color in (("bfloat16", "s--", "C1"), ("float32", "^--", "C2")):
            ax.plot(
                cs,
                [throughput(baseline(entries, name, c, dtype)) for c in cs],
                style,
                color=color,
                label=f"HF static batch {dtype}",
            )
            one = throughput(baseline(entries, name, 1, dtype))
            ax.axhline(one, ls=":", color=color, lw=1, label=f"HF one-at-a-time {dtype}")
        _concurrency_axis(ax, cs)
        ax.set_ylabel("output tokens/s")
        ax.set_title(f"{name}: input {w['input_len']}, output {w['output_len']}")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def latency_plot(report: dict, path: str) -> None:
    plt = _pyplot()
    entries, plan = report["entries"], report["plan"]
    cs = plan["concurrencies"]
    panels = (("ttft_ms", "TTFT"), ("itl_ms", "inter-token latency"), ("e2e_ms", "end-to-end latency"))
    fig, axes = _axes(plt, len(plan["workloads"]), len(panels), 4.6, 3.6)
    for row, w in zip(axes, plan["workloads"]):
        name = w["name"]
        ours = [pick(entries, backend="engine", mode="serve", workload=name, concurrency=c) for c in cs]
        hf = [baseline(entries, name, c, "bfloat16") for c in cs]
        for ax, (key, label) in zip(row, panels):
            ax.plot(cs, [metric(e, key, "p50") for e in ours], "o-", lw=2, color="C0", label="engine p50")
            ax.plot(cs, [metric(e, key, "p99") for e in ours], "o:", color="C0", alpha=0.6, label="engine p99")
            ax.plot(
                cs, [metric(e, key, "p50") for e in hf], "s--", color="C1", label="HF bf16 p50 (static batch; c=1 one-at-a-time)"
            )
            _concurrency_axis(ax, cs)
            ax.set_yscale("log")
            ax.set_ylabel("ms")
            ax.set_title(f"{name}: {label}", fontsize=10)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
