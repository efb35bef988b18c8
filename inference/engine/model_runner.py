"""Turns a scheduled batch into one forward pass: flat token tensors, cache slots, logits."""

from __future__ import annotations

import itertools
import logging
from dataclasses import dataclass, field

import torch

from .kv_cache.block_pool import FULL, STATE, WINDOW, BlockCopy
from .kv_cache.layout import kind_head_shape, kv_sources, model_window
from .kv_cache.tensors import KVGroup, allocate_layer_caches
from .layers.attention import AttentionMetadata, PrefillChunk, choose_decode_attention
from .layers.gated_deltanet import StateMetadata
from .layers.rotary import RotaryEmbedding
from .runner.decode_graphs import StaticDecode
from .runner.host_memory import keep_step_buffers
from .runner.transfers import to_device
from .scheduler import ScheduledBatch, pools_after, samples_after
from .sequence import Sequence

log = logging.getLogger(__name__)


@dataclass
class StepLogits:
    """One step's logits: a row per sequence that samples now, and for sequences that asked for
    their prompt's logprobs, the rows of this step's prompt positions (each predicting the next
    prompt token): (sequence, first position, logits [rows, V])."""

    sampling: torch.Tensor | None
    sampling_seqs: list[Sequence]
    prompt: list[tuple[Sequence, int, torch.Tensor]] = field(default_factory=list)
    pooled: list[tuple[Sequence, torch.Tensor]] = field(default_factory=list)  # embedding requests whose prompt completed
    verify: torch.Tensor | None = None  # the verifications' rows, 1 + k per sequence, in the batch's order
    rows: torch.Tensor | None = None  # sampling's rows then verify's: the one tensor both are views of

    def joined(self, plain: torch.Tensor | None) -> torch.Tensor:
        """The plain rows (`sampling`, or its rows once forks joined) then the verifications' rows,
        as one tensor for one sampler call: the runner's own where forks made no new rows."""
        if plain is None or self.verify is None:
            return self.verify if plain is None else plain
        return self.rows if plain is self.sampling else torch.cat([plain, self.verify])


@dataclass
class StepInputs:
    """One step's rows, flat: decodes (a verification's k+1 rows among them) first, then the
    prefill chunks; and which rows' hidden states are read, and for what."""

    prefills: list[tuple[Sequence, int]]  # the batch's (sequence, tokens this step)
    input_ids: list[int] = field(default_factory=list)
    positions: list[int] = field(default_factory=list)
    slots: dict[str, list[int]] = field(default_factory=dict)  # each row's cache slot, in each kind's pool
    decode_rows: list[tuple[Sequence, int]] = field(default_factory=list)  # (seq, position) of every row attending as a decode
    sampling_rows: list[int] = field(default_factory=list)
    sampling_seqs: list[Sequence] = field(default_factory=list)
    verify_rows: list[int] = field(default_factory=list)
    prompt_rows: list[tuple[Sequence, int, int, int]] = field(default_factory=list)  # (seq, first position, first row, rows)
    pooling_rows: list[tuple[Sequence, int, int]] = field(default_factory=list)  # (embedding request, first row, rows)


class ModelRunner:
    def __init__(
        self,
        model: torch.nn.Module,
        num_blocks: int,
        block_size: int,
        dtype,
        device,
        kv_dtype=None,
        cpu_step=None,
        num_window_blocks: int = 0,
        num_state_slots: int = 0,
    ):
        """`num_window_blocks`: the sliding-window layers' own pool (kv_cache/sliding_window.py),
        where the model has such layers; 0 keeps every layer's K/V in the one pool. `num_state_slots`:
        a hybrid model's recurrent states (kv_cache/recurrent_state.py)."""
        self.model = model
        # The loader's fused C++ step (models/cpu_step.py) where it installed one; it computes the model's maths.
        self.forward = cpu_step or model
        self.block_size = block_size
        self.device = torch.device(device)
        if self.device.type == "cpu":
            keep_step_buffers()  # a step's logits reused from the heap, not mapped afresh (runner/host_memory.py)
        kv_dtype = kv_dtype or dtype
        # One block past the coordinator's: where a static decode's padding rows write (runner/decode_graphs.py).
        self.padding_slot = num_blocks * block_size
        self.full = KVGroup.create(num_blocks, block_size, kind_head_shape(model, FULL)[0], self.device)
        window, window_heads = model_window(model), kind_head_shape(model, WINDOW)[0]
        self.window = (
            KVGroup.create(num_window_blocks, block_size, window_heads, self.device, window) if num_window_blocks else None
        )
        self.groups = {FULL: self.full, **({WINDOW: self.window} if self.window is not None else {})}  # by kind
        self.kv_caches, self.layer_kinds = allocate_layer_caches(
            model, self.full, self.window, kv_dtype, self.device, num_state_slots
        )  # each layer's cache, and which kind of cache it is
        self.recurrent = STATE in self.layer_kinds
        self.rotaries = [module for module in model.modules() if isinstance(module, RotaryEmbedding)]
        self.replay_inputs: dict = {}  # verifications' recurrent inputs, until replayed (layers/gated_deltanet.py)
        self.mixers = model.recurrent_mixers() if self.recurrent else {}  # layer index -> its recurrent mixer
        self.kv_sources = kv_sources(model)  # a KV-shared layer's cache is its source layer's (the same tensors)
        self.kv_pool_bytes = sum(k.nbytes + v.nbytes for i, (k, v) in enumerate(self.kv_caches) if self.kv_sources[i] == i)
        # of which a hybrid's recurrent-state rows (backed only as first written: kv_cache/tensors.py)
        self.state_pool_bytes = sum(
            k.nbytes + v.nbytes for (k, v), kind in zip(self.kv_caches, self.layer_kinds) if kind == STATE
        )
        # Each kv head's part of the head-major cache starts this many slots / blocks further on.
        self.head_slot_offsets, self.head_block_offsets = self.full.head_slot_offsets, self.full.head_block_offsets
        self.block_tables = self.full.tables
        self.static_decode: StaticDecode | None = None
        self.decode_attention, self.decode_kernels = choose_decode_attention(
            self.device, dtype, tuple({kind_head_shape(model, kind)[1] for kind in self.groups}), kv_dtype, block_size
        )

    def enable_static_decode(self, max_rows: int, max_blocks: int, graphs: bool) -> StaticDecode:
        """Decode-only steps at static shapes from now on; with `graphs` (CUDA), captured now,
        after the KV pool exists. Needs a torch decode back end (not the CPU's fused C++ step)."""
        if self.forward is not self.model:
            raise ValueError("static decode runs the model's torch forward, not the fused CPU step")
        if self.window is not None:
            raise ValueError("static decode keeps one table per row: not yet the sliding-window pool's")
        if self.recurrent:
            raise ValueError("static decode addresses no recurrent state slots: not yet a hybrid model's")
        self.static_decode = StaticDecode(self, max_rows, max_blocks)
        if graphs:
            try:
                self.static_decode.capture()
            except Exception:  # a capture that fails costs the graphs, not the engine
                log.exception("CUDA graph capture failed; decode steps run eagerly")
                self.static_decode.graphs.clear()
        return self.static_decode

    def release_kv_pool(self) -> None:
        """Drops the pool (this runner computes nothing after); on CUDA the allocator's cached
        blocks go back to the device, where the next plan can count them."""
        self.kv_caches, self.kv_pool_bytes, self.state_pool_bytes, self.static_decode = [], 0, 0, None
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    @torch.inference_mode()
    def run(self, batch: ScheduledBatch) -> StepLogits:
        """Computes the batch's tokens into the cache; returns logits for the sequences that now sample.

        A sequence samples when this step computes its last known token (every decode, and the
        final chunk of a prefill); an earlier prefill chunk only fills the cache. A verification
        (a decode with k guesses) is k+1 decode rows at consecutive positions, each attending to
        the cache up to itself, so each row computes exactly what a plain decode at that position
        would; all k+1 rows' logits come back in `verify`.
        """
        return self.compute(self.prepare(batch))

    @torch.inference_mode()
    def prepare(self, batch: ScheduledBatch) -> StepInputs:
        """`run`'s first half, the loop's own work: replays and block copies made, the rows laid out."""
        self.replay(batch.replays)
        self.copy_blocks(batch.copies)
        return self.prepare_inputs(batch)

    @torch.inference_mode()
    def compute(self, inputs: StepInputs) -> StepLogits:
        """`run`'s second half, the model's: the forward and the logits the step reads."""
        return self._logits(inputs, self.forward_pass(inputs))

    def prepare_inputs(self, batch: ScheduledBatch) -> StepInputs:
        """The batch as flat rows (decodes and verifications first, then prefill chunks), with the
        rows whose logits are read, after bringing the device's block tables up to date."""
        seqs = batch.decodes + batch.verifies + [seq for seq, _ in batch.prefills]
        for group in self.groups.values():
            group.tables.update(seqs)
        inp = StepInputs(prefills=batch.prefills, slots={kind: [] for kind in self.groups})
        for seq, verifying in [(s, False) for s in batch.decodes] + [(s, True) for s in batch.verifies]:
            start = seq.num_computed_tokens
            tokens = [seq.token_ids[start], *seq.draft] if verifying else [seq.token_ids[start]]
            for offset, token_id in enumerate(tokens):
                (inp.verify_rows if verifying else inp.sampling_rows).append(len(inp.input_ids))
                inp.decode_rows.append((seq, start + offset))
                inp.input_ids.append(token_id)
                inp.positions.append(start + offset)
                self._add_slots(inp, seq, [start + offset])
            if verifying:
                continue
            if seq.params.pooling is not None:  # an embedding whose last chunk is one token: pooled, never sampled
                inp.sampling_rows.pop()
                inp.pooling_rows.append((seq, len(inp.input_ids) - 1, 1))
            else:
                inp.sampling_seqs.append(seq)
        for seq, n in batch.prefills:
            start = seq.num_computed_tokens
            if seq.params.pooling is not None:
                inp.pooling_rows.append((seq, len(inp.input_ids), n))
            if seq.prompt_logprobs is not None and start + 1 < seq.num_prompt_tokens:
                # positions start.. predict prompt tokens start+1..; the prompt's last position predicts the output
                inp.prompt_rows.append((seq, start, len(inp.input_ids), min(n, seq.num_prompt_tokens - 1 - start)))
            inp.input_ids.extend(seq.token_ids[start : start + n])
            inp.positions.extend(range(start, start + n))
            self._add_slots(inp, seq, range(start, start + n))
            if samples_after(seq, n):
                inp.sampling_rows.append(len(inp.input_ids) - 1)
                inp.sampling_seqs.append(seq)
        return inp

    def forward_pass(self, inp: StepInputs) -> torch.Tensor:
        """Every row's hidden state: the decodes at a static shape where one fits (a CUDA graph's
        replay), else eagerly; prefill chunks always eagerly."""
        input_ids, positions, slots, decode_rows = inp.input_ids, inp.positions, inp.slots[FULL], inp.decode_rows
        if positions:  # the rotary tables' rows this step reaches (layers/rotary.py), from the host's list
            furthest = max(positions) + 1
            for rotary in self.rotaries:
                rotary.ensure(furthest)
        lengths = [position + 1 for _, position in decode_rows]
        static, decodes = self.static_decode, len(decode_rows)
        if static is not None and decodes and static.fits(decodes, max(lengths)):
            # the decodes at a bucket's static shape (a CUDA graph's replay), any prefill chunks eagerly after
            parts = [
                static.forward(
                    input_ids[:decodes], positions[:decodes], slots[:decodes], [s.slot for s, _ in decode_rows], lengths
                )
            ]
            if inp.prefills:
                rest = {kind: kind_slots[decodes:] for kind, kind_slots in inp.slots.items()}
                parts.append(self._eager(input_ids[decodes:], positions[decodes:], rest, [], [], inp.prefills))
            return torch.cat(parts) if len(parts) > 1 else parts[0]
        return self._eager(input_ids, positions, inp.slots, decode_rows, lengths, inp.prefills)

    def _logits(self, inp: StepInputs, hidden: torch.Tensor) -> StepLogits:
        """The rows' logits the step reads: sampling and verifying rows in one pass over the output
        layer, prompt rows asked for logprobs, and embedding requests' pooled vectors."""
        rows = inp.sampling_rows + inp.verify_rows  # one pass over the output layer for every row that samples
        logits = self.model.compute_logits(hidden[self._tensor(rows)]) if rows else None
        plain = logits[: len(inp.sampling_rows)] if inp.sampling_rows else None
        verify = logits[len(inp.sampling_rows) :] if inp.verify_rows else None
        prompt = [(seq, first, self.model.compute_logits(hidden[row : row + n])) for seq, first, row, n in inp.prompt_rows]
        pooled = [done for seq, row, n in inp.pooling_rows if (done := self._pool(seq, hidden, row, n)) is not None]
        return StepLogits(plain, inp.sampling_seqs, prompt, pooled, verify, logits)

    def _eager(self, input_ids, positions, slots: dict, decode_rows, lengths, prefills) -> torch.Tensor:
        """Hidden states of these rows (decodes first, then prefill chunks) by one eager forward;
        `slots`: the rows' cache slots in each kind's pool."""
        meta = self._metadata(self.full, slots[FULL], decode_rows, lengths, prefills)
        if self.window is not None:  # what the sliding-window layers read: their own pool's rows
            meta.window = self._metadata(self.window, slots[WINDOW], decode_rows, lengths, prefills)
        if self.recurrent:  # which state slot each sequence's recurrent layers read and write
            runs = [(seq, len(list(rows))) for seq, rows in itertools.groupby(decode_rows, key=lambda row: row[0])]
            plain = [seq.state_table[0] for seq, count in runs if count == 1]  # (plain decodes come first)
            meta.state = StateMetadata(
                self._tensor(plain) if plain else None,
                [seq.state_table[0] for seq, _ in prefills],
                [seq.num_computed_tokens == 0 for seq, _ in prefills],
                [_checkpoints(seq, n) for seq, n in prefills],
                [(seq.state_table[0], count) for seq, count in runs if count > 1],
                self.replay_inputs,
            )
        return self.forward(self._tensor(input_ids), self._tensor(positions), self.kv_caches, meta)

    def _metadata(self, group: KVGroup, slots, decode_rows, lengths, prefills) -> AttentionMetadata:
        meta = AttentionMetadata(
            write_rows=(group.head_slot_offsets + self._tensor(slots)).reshape(-1),
            num_decodes=len(decode_rows),
            decode=self._decode_context(group, decode_rows, lengths) if decode_rows else None,
            prefills=[],
        )
        offset = len(decode_rows)
        for seq, n in prefills:
            meta.prefills.append(self._prefill_chunk(group, seq, offset, n))
            offset += n
        return meta

    def _pool(self, seq: Sequence, hidden: torch.Tensor, row: int, rows: int):
        """An embedding request's chunk: summed (mean pooling) and, once the prompt is complete,
        its pooled vector (float32, not normalized) with the sequence."""
        if seq.params.pooling == "mean":
            part = hidden[row : row + rows].float().sum(0)
            seq.pool_sum = part if seq.pool_sum is None else seq.pool_sum + part
        elif seq.params.pooling == "cls" and seq.pool_sum is None:  # the first chunk's first row: position 0
            seq.pool_sum = hidden[row].float()  # (no prefix cache for these: position 0 is always computed)
        if not pools_after(seq, rows):
            return None
        if seq.params.pooling == "mean":
            vector = seq.pool_sum / seq.num_prompt_tokens
        else:
            vector = seq.pool_sum if seq.params.pooling == "cls" else hidden[row + rows - 1].float()
        return seq, vector

    @torch.inference_mode()
    def rows_for_forks(self, logits: torch.Tensor, rows: list[int], copies: list[BlockCopy]) -> torch.Tensor:
        """A step's logits with a row per sampling sequence once forks joined it (`rows`: which
        computed row each samples from), after the forks' block copies are made."""
        self.copy_blocks(copies)
        return logits[self._tensor(rows)]

    def replay(self, replays) -> None:
        """Each verification's accepted rows onto its recurrent states (kv_cache/recurrent_state.py)."""
        for slot, rows in replays:
            for index, mixer in self.mixers.items():
                mixer.replay(self.kv_caches[index], slot, rows, self.replay_inputs.pop((mixer, slot)))

    def copy_blocks(self, copies: list[BlockCopy]) -> None:
        """Copies whole KV blocks (source -> destination) in every layer of their pool: a forked
        completion's own copy of the prompt's partial last block; and recurrent states, slot to slot."""
        for kind in (*self.groups, STATE):
            pairs = [copy for copy in copies if copy.kind == kind]
            if not pairs:
                continue
            sources = self._tensor([copy.source for copy in pairs])
            destinations = self._tensor([copy.destination for copy in pairs])
            dim = 0 if kind == STATE else 1  # states are slot-major, K/V head-major
            for layer, (k_cache, v_cache) in enumerate(self.kv_caches):
                if self.layer_kinds[layer] == kind and self.kv_sources[layer] == layer:
                    k_cache.index_copy_(dim, destinations, k_cache.index_select(dim, sources))
                    v_cache.index_copy_(dim, destinations, v_cache.index_select(dim, sources))

    def _add_slots(self, inp: StepInputs, seq: Sequence, positions) -> None:
        """Each row's cache slot in each kind's pool."""
        for kind, group in self.groups.items():
            inp.slots[kind].extend(group.slot(seq, p) for p in positions)

    def _block_tables(self, group: KVGroup, seqs: list[Sequence], length: int) -> torch.Tensor:
        """[rows, blocks] tables covering positions 0..length-1 (entries past a table's end are
        stale: masked by the caller)."""
        blocks = -(-length // self.block_size)
        return group.tables.rows(self._tensor([seq.slot for seq in seqs]), blocks)

    def _block_rows(self, group: KVGroup, tables: torch.Tensor) -> torch.Tensor:
        """[kv_heads * rows * blocks] rows of the cache's block view holding each table's blocks, head-major."""
        return (group.head_block_offsets + tables[None]).reshape(-1)

    def _decode_context(self, group: KVGroup, rows: list[tuple[Sequence, int]], lengths: list[int]):
        """The decode rows' block tables and lengths (each row attends up to its own position), in
        the shape the chosen back end reads. In the sliding-window pool each row's table starts at
        its window's first block, its length counted from there: the blocks before were given back."""
        tables = self._block_tables(group, [seq for seq, _ in rows], max(lengths))
        firsts = [group.first_block(length - 1) for length in lengths] if group.window is not None else []
        if any(firsts):
            lengths = [length - first * self.block_size for length, first in zip(lengths, firsts)]
            width = -(-max(lengths) // self.block_size)
            columns = self._tensor(firsts)[:, None] + torch.arange(width, device=self.device)[None, :]
            tables = tables.gather(1, columns.clamp_(max=tables.shape[1] - 1))
        return self.decode_attention.build(
            self.decode_kernels,
            tables,
            self._tensor(lengths),
            block_size=self.block_size,
            head_block_offsets=group.head_block_offsets,
        )

    def _prefill_chunk(self, group: KVGroup, seq: Sequence, start: int, n: int) -> PrefillChunk:
        """A chunk's context in the group's pool: from position 0, or in the sliding-window pool
        from the first block its first query's window reaches (positions counted from there)."""
        cached = seq.num_computed_tokens
        if cached == 0:
            return PrefillChunk(start=start, end=start + n, context_len=n, block_rows=None, causal_mask=None)
        first = group.first_block(cached)
        base, total = first * self.block_size, cached + n
        query_pos = torch.arange(cached - base, total - base, device=self.device)[:, None]
        key_pos = torch.arange(total - base, device=self.device)[None, :]
        return PrefillChunk(
            start=start,
            end=start + n,
            context_len=total - base,
            block_rows=self._block_rows(group, self._block_tables(group, [seq], total)[:, first:]),
            causal_mask=key_pos <= query_pos,
        )

    def _tensor(self, values) -> torch.Tensor:
        return to_device(values, torch.long, self.device)


def _checkpoints(seq: Sequence, n: int) -> list[tuple[int, int]]:
    """(rows of the chunk after which to keep the state, its checkpoint row) for each checkpoint
    position this chunk of `n` tokens passes (kv_cache/recurrent_state.py)."""
    start = seq.num_computed_tokens
    return [(position - start, row) for position, row in seq.state_checkpoints if start < position <= start + n]
