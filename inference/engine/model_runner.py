"""Turns a scheduled batch into one forward pass: flat token tensors, cache slots, logits."""
from __future__ import annotations

import torch

from .attention import AttentionMetadata, PrefillChunk
from .kv_cache import allocate_kv_pool
from .scheduler import ScheduledBatch
from .sequence import Sequence


class ModelRunner:
    def __init__(self, model: torch.nn.Module, num_blocks: int, block_size: int, dtype, device):
        self.model = model
        self.block_size = block_size
        self.device = device
        self.decode_rows = getattr(model, "decode_rows", None)  # int8 layers split decode from prefill rows
        self.kv_caches = allocate_kv_pool(model.kv_shape, num_blocks, block_size, dtype, device)

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> tuple[torch.Tensor, list[Sequence]]:
        """Computes the batch's tokens into the cache; returns logits for the sequences that now sample.

        A sequence samples when this step computes its last known token (every decode, and the
        final chunk of a prefill); an earlier prefill chunk only fills the cache.
        """
        input_ids, positions, slots = [], [], []
        sampling_rows, sampling_seqs = [], []
        work = [(seq, 1) for seq in batch.decodes] + batch.prefills
        for seq, n in work:
            start = seq.num_computed_tokens
            input_ids.extend(seq.token_ids[start : start + n])
            positions.extend(range(start, start + n))
            slots.extend(self._slot(seq, p) for p in range(start, start + n))
            if start + n == len(seq):
                sampling_rows.append(len(input_ids) - 1)
                sampling_seqs.append(seq)

        meta = AttentionMetadata(
            slot_mapping=self._tensor(slots),
            num_decodes=len(batch.decodes),
            decode_slot_ids=None,
            decode_padding=None,
            prefills=[],
        )
        if batch.decodes:
            meta.decode_slot_ids, meta.decode_padding = self._decode_context(batch.decodes)
        offset = len(batch.decodes)
        for seq, n in batch.prefills:
            meta.prefills.append(self._prefill_chunk(seq, offset, n))
            offset += n

        if self.decode_rows is not None:
            self.decode_rows.count = len(batch.decodes)
        hidden = self.model(self._tensor(input_ids), self._tensor(positions), self.kv_caches, meta)
        logits = self.model.compute_logits(hidden[self._tensor(sampling_rows)]) if sampling_rows else None
        return logits, sampling_seqs

    def _slot(self, seq: Sequence, position: int) -> int:
        return seq.block_table[position // self.block_size] * self.block_size + position % self.block_size

    def _context_slots(self, block_tables: list[list[int]], length: int) -> torch.Tensor:
        """[rows, length] cache slots of positions 0..length-1, through each row's block table."""
        width = max(len(table) for table in block_tables)
        tables = self._tensor([table + [0] * (width - len(table)) for table in block_tables])
        positions = torch.arange(length, device=self.device)
        return tables[:, positions // self.block_size] * self.block_size + positions % self.block_size

    def _decode_context(self, seqs: list[Sequence]):
        lengths = self._tensor([seq.num_computed_tokens + 1 for seq in seqs])
        longest = int(lengths.max())
        slot_ids = self._context_slots([seq.block_table for seq in seqs], longest)
        padding = torch.arange(longest, device=self.device)[None, :] >= lengths[:, None]
        return slot_ids, padding[:, None, None, :]

    def _prefill_chunk(self, seq: Sequence, start: int, n: int) -> PrefillChunk:
        cached = seq.num_computed_tokens
        if cached == 0:
            return PrefillChunk(start=start, end=start + n, context_len=n, slot_ids=None, causal_mask=None)
        total = cached + n
        query_pos = torch.arange(cached, total, device=self.device)[:, None]
        key_pos = torch.arange(total, device=self.device)[None, :]
        return PrefillChunk(
            start=start,
            end=start + n,
            context_len=total,
            slot_ids=self._context_slots([seq.block_table], total)[0],
            causal_mask=key_pos <= query_pos,
        )

    def _tensor(self, values) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.long, device=self.device)
