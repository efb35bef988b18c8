"""The raw results beside the generated page: docs/bench/report.json (the sweep) and
docs/bench/raw/<name>.json (Gemma 3 and the MoE against llama-server, speculative decoding, structured
outputs, JSON endings, switching between models), each written by
the bench that measured it, in the same run as the tables made from it (bench/report.py renders
the page from these files only). Each raw result carries its own machine block (date, CPU, flags,
commit) and command, which its section on the page states.
"""

from __future__ import annotations

import json
import os

RAW_SECTIONS = (
    "gemma3",
    "moe",
    "speculative",
    "structured",
    "json_endings",
    "models",
    "resume",
    "numerics",
)  # in the page's order


def raw_path(docs_dir: str, name: str) -> str:
    return os.path.join(docs_dir, "raw", f"{name}.json")


def save_raw(docs_dir: str, name: str, result: dict) -> str:
    """Writes one bench's raw result where the page is rendered from; returns the path."""
    if name not in RAW_SECTIONS:
        raise ValueError(f"no page section reads raw result {name!r} (known: {', '.join(RAW_SECTIONS)})")
    return write_raw(docs_dir, name, result)


def write_raw(docs_dir: str, name: str, result: dict) -> str:
    """Writes a raw result beside the page, whether or not a section of the page reads it (the
    performance pages cite some directly); returns the path."""
    path = raw_path(docs_dir, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    return path


def publish(docs_dir: str, name: str, result: dict) -> str:
    """A bench's `--docs-dir`: its raw result written, then the page re-rendered from every raw result."""
    from .report import write_page

    path = save_raw(docs_dir, name, result)
    write_page(docs_dir)
    return path


def load_raw(docs_dir: str) -> dict[str, dict]:
    """{name: result} for each raw result present in docs_dir/raw/."""
    found = {}
    for name in RAW_SECTIONS:
        try:
            with open(raw_path(docs_dir, name)) as f:
                found[name] = json.load(f)
        except FileNotFoundError:
            continue
    return found


def measured_line(machine: dict, command: str | None) -> str:
    """Where and when a raw result was measured, as its section on the page says it."""
    flags = ", ".join(machine.get("isa_flags") or []) or "not recorded"
    line = (
        f"Measured {machine.get('date', '?')} on {machine.get('cpu_model', '?')}, {machine.get('cpus', '?')} logical CPUs "
        f"(flags the kernels read: {flags}), commit {machine.get('git_commit') or 'unknown'}"
    )
    busy, load = machine.get("cpu_busy_percent_at_start"), machine.get("load_average_at_start")
    if busy is not None:
        line += f", the CPU {busy:.0f}% busy with other work as it started"
        line += f" (load average {load[0]:.2f})" if load else ""
    return line + (f", by `{command}`." if command else ".")
