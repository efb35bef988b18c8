"""The block tables kept on the device (engine/runner/block_tables.py): a step uploads only what changed,
and each slot's row reads back as its sequence's table through growth, guesses given back,
preemption and a slot changing hands."""

from __future__ import annotations

import torch

from inference.engine.runner.block_tables import BlockTables
from inference.engine.sample.sampling_params import SamplingParams
from inference.engine.sequence import Sequence
from tests.support.host_syncs import HostSyncCounter


def running(name: str, slot: int, table: list[int]) -> Sequence:
    seq = Sequence(name, [1, 2, 3], SamplingParams(max_tokens=4))
    seq.slot, seq.block_table = slot, table
    return seq


def device_rows(tables: BlockTables, seqs: list[Sequence]) -> list[list[int]]:
    width = max(len(seq.block_table) for seq in seqs)
    rows = tables.rows(torch.tensor([seq.slot for seq in seqs]), width).tolist()
    return [row[: len(seq.block_table)] for row, seq in zip(rows, seqs)]


def uploads(tables: BlockTables, seqs: list[Sequence]) -> int:
    """How many entries an update sent (counted on the device table's writes)."""
    before = tables.table.clone()
    tables.update(seqs)
    after = tables.table
    if after.shape != before.shape:
        grown = torch.zeros_like(after)
        grown[: before.shape[0], : before.shape[1]] = before
        before = grown
    return int((after != before).sum())


def test_rows_follow_their_tables_through_every_change():
    tables = BlockTables(torch.device("cpu"), rows=2, blocks=2)
    a, b = running("a", 0, [5, 9]), running("b", 3, [7])  # slot 3 and 3 blocks: both dimensions grow
    tables.update([a, b])
    assert device_rows(tables, [a, b]) == [[5, 9], [7]]

    a.block_table.append(11)  # a block more: one entry goes up
    assert uploads(tables, [a, b]) == 1
    assert uploads(tables, [a, b]) == 0  # nothing changed: nothing goes up
    a.block_table[1:] = [4]  # guesses' blocks given back, then a new one where they were
    tables.update([a, b])
    assert device_rows(tables, [a, b]) == [[5, 4], [7]]

    c = running("c", 3, [7, 8])  # b ended, c took its slot (same first block: only the second is sent)
    assert uploads(tables, [a, c]) == 1
    assert device_rows(tables, [a, c]) == [[5, 4], [7, 8]]
    c.block_table = [2]  # preempted and readmitted with other blocks
    tables.update([c])
    assert device_rows(tables, [c]) == [[2]]


def test_an_update_waits_for_nothing():
    tables = BlockTables(torch.device("cpu"))
    seqs = [running(str(i), i, list(range(i, i + 5))) for i in range(4)]
    with HostSyncCounter() as syncs:
        tables.update(seqs)
        tables.rows(torch.tensor([0, 1]), 128)  # wider than the table was: it grows
    assert syncs.events == []
