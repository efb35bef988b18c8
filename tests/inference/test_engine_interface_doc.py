"""docs/engine-interface.md's field tables match the dataclasses they describe, so they cannot drift:
every field listed once, none missing, none extra, and EngineStats' summed column as declared."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from inference.engine.engine_state import ModelInfo
from inference.engine.engine_stats import EngineStats

DOC = Path(__file__).resolve().parents[2] / "docs" / "engine-interface.md"
ROW = re.compile(r"^\|\s*`(\w+)`\s*\|(.*)\|\s*$")


def table_rows(heading: str) -> list[tuple[str, list[str]]]:
    """(field, the other cells) for each row naming a field in the table under the `## heading` section."""
    text = DOC.read_text()
    starts = [m.start() for m in re.finditer(rf"^## {re.escape(heading)}\b", text, re.M)]
    assert len(starts) == 1, f"docs/engine-interface.md needs one section '## {heading}'"
    section = text[starts[0] :].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            rows.append((match.group(1), [cell.strip() for cell in match.group(2).split("|")]))
    return rows


def names(rows) -> list[str]:
    return [name for name, _ in rows]


def test_model_info_table_lists_every_field_once():
    listed = names(table_rows("Model info"))
    declared = [f.name for f in dataclasses.fields(ModelInfo)]
    assert len(listed) == len(set(listed)), "a ModelInfo field is listed twice"
    assert set(listed) == set(declared), (
        f"missing from the doc: {sorted(set(declared) - set(listed))}; not fields: {sorted(set(listed) - set(declared))}"
    )


def test_engine_stats_table_lists_every_field_once_with_its_summed_mark():
    rows = table_rows("Stats")
    declared = {f.name: bool(f.metadata.get("summed")) for f in dataclasses.fields(EngineStats)}
    listed = names(rows)
    assert len(listed) == len(set(listed)), "an EngineStats field is listed twice"
    assert set(listed) == set(declared), (
        f"missing from the doc: {sorted(set(declared) - set(listed))}; not fields: {sorted(set(listed) - set(declared))}"
    )
    marked = {name: cells[0] == "yes" for name, cells in rows}
    assert all(cells[0] in ("yes", "") for _, cells in rows), "the summed column holds 'yes' or nothing"
    assert marked == declared, f"summed marks differ: {sorted(n for n in declared if marked[n] != declared[n])}"


def test_the_tables_are_what_the_parser_reads():
    """The parser itself: a stray heading or a table it cannot read would make the checks above vacuous."""
    assert len(table_rows("Model info")) >= 10 and len(table_rows("Stats")) >= 30
    assert "client.model_info  # ModelInfo (its fields below)" in DOC.read_text()  # no second list to drift
