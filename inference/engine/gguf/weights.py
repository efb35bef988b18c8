"""Our model built straight from a GGUF's own tensors (gguf/checkpoint.py), each linear in its own
tensor's type: Q4_0 / Q4_1 / Q8_0 as GroupLinear (the file's levels, scales and minimums), the
k-quant, 5-bit and IQ4 types as BlockLinear (the file's blocks re-packed for the block kernel),
F16 / BF16 / F32 matrices as FloatLinear, a fused Q/K/V or gate/up of mixed types as PartsLinear; the embedding read from the file's rows;
norms and biases copied as float32. No float32 copy of a weight exists at any point, and
transformers de-quantizes nothing.

Used when the chosen format keeps the checkpoint's blocks (`auto` on a quantized GGUF, or
MINIVLLM_QUANT=int4 / q8_0 on a file of those groups) and the model family says where its tensors
are (`gguf_layout`); otherwise the loader takes transformers' de-quantized weights instead.
"""

from __future__ import annotations

import logging
from collections import Counter

import torch
from torch import nn

from ..errors import UnsupportedModelError
from ..layers.experts import ExpertLinear, ExpertParts
from ..layers.linear import GGUF_BLOCK_TYPES
from ..layers.linear.base import RowKernelLinear
from ..layers.linear.blocks import BlockLinear, FileEmbedding, FloatLinear, PartsLinear, pack_file_weights
from ..layers.linear.groups import GroupLinear
from ..layers.linear.prefetch import prefetch_for
from ..models.no_init import WithoutWeightInit
from . import packed_cache
from .checkpoint import GROUPED_TYPES, GGUFCheckpoint
from .dequantize import dequantize

FLOAT_TYPES = ("f16", "bf16", "f32")
KERNELS = {**{t: "group" for t in GROUPED_TYPES}, **{t: "block" for t in GGUF_BLOCK_TYPES}, **{t: "float" for t in FLOAT_TYPES}}
log = logging.getLogger("minivllm.engine")
KEPT_FORMATS = ("int4", "q8_0", "gguf")  # the formats that keep a GGUF's own blocks (layers/linear/__init__.py)


def can_build(model_class, hf_config, checkpoint: GGUFCheckpoint, fmt: str) -> bool:
    """Whether `build` applies: a layout for this family, every matrix of a type our kernels read,
    and a format that keeps them (int4 and q8_0 only for files of those groups, as before)."""
    if fmt not in KEPT_FORMATS or hf_config.model_type not in getattr(model_class, "GGUF_ARCHITECTURES", ()):
        return False
    matrices = [e for e in checkpoint.tensors.values() if len(e.shape) in (2, 3)]  # 3-D: a layer's experts
    if not matrices or not all(e.type in KERNELS for e in matrices):
        return False
    if fmt == "gguf":
        return True
    wanted = ("q4_0", "q4_1", "q8_0") if fmt == "int4" else ("q8_0",)
    return all(e.type in GROUPED_TYPES for e in matrices) and checkpoint.weight_type in wanted


def build(
    model_class, hf_config, checkpoint: GGUFCheckpoint, max_model_len: int, keep_packed: bool = True
) -> tuple[nn.Module, Counter]:
    """The model and, per tensor type, how many of its matrices each kernel runs ({"q4_k block": 112, ...}).
    `keep_packed`: the packed weights from (and for) the file's packed cache (gguf/packed_cache.py)."""
    with WithoutWeightInit():  # allocated, never written: untouched pages cost no memory, and each is replaced below
        model = model_class(hf_config, max_positions=max_model_len)
    linears, floats = model.gguf_layout()
    kernels_used: Counter = Counter()
    specs: list = []  # the block and float weights, packed together below
    plans = {}
    for path, parts in linears.items():
        if path.endswith(".weight"):
            bias_parts = linears.get(path.removesuffix(".weight") + ".bias")
            bias = _float_rows(checkpoint, bias_parts) if bias_parts and bias_parts[0][0] in checkpoint.tensors else None
            plans[path.removesuffix(".weight")] = (_plan(checkpoint, parts, kernels_used, specs), bias)
    expert_layout = model.gguf_expert_layout() if hasattr(model, "gguf_expert_layout") else {}
    expert_plans = {path: _expert_plan(checkpoint, names, kernels_used, specs) for path, names in expert_layout.items()}
    packed = _packed(checkpoint, specs, keep=keep_packed)
    for path, (runs, bias) in plans.items():
        _set(model, path, _linear(runs, packed, bias))
    for path, plan in expert_plans.items():
        _set(model, path, _expert_linear(plan, packed))
    for path, name in floats.items():
        _set(model, path, nn.Parameter(checkpoint.float_tensor(name), requires_grad=False))
    set_rope_factors(model, checkpoint)
    table = checkpoint.tensors["token_embd.weight"]
    if model.cfg.tie_word_embeddings and isinstance(model.lm_head, GroupLinear):
        model.embed_tokens = model.lm_head.embedding()  # the packed rows serve lookups: no file page stays resident
    else:
        model.embed_tokens = FileEmbedding(checkpoint.raw_tensor("token_embd.weight"), table.shape[1], table.type)
    for path, name in file_embeddings(model).items():  # other lookup tables (Gemma 4's per-layer inputs)
        entry = checkpoint.tensors[name]
        _set(model, path, FileEmbedding(checkpoint.raw_tensor(name), entry.shape[1], entry.type))
    prefetch_for([m for m in model.modules() if isinstance(m, (GroupLinear, BlockLinear, FloatLinear))])
    checkpoint.release_pages()  # the packed copies are what the model reads from now on
    return model.eval(), kernels_used


def file_embeddings(model) -> dict[str, str]:
    """A family's lookup tables besides the token embedding, by module path: the file's tensor of each."""
    tables = getattr(model, "gguf_embeddings", None)
    return tables() if tables is not None else {}


def _plan(checkpoint: GGUFCheckpoint, parts: list[tuple[str, int | None]], kernels_used: Counter, specs: list) -> list:
    """A linear's runs of neighbouring tensors of one type (each packed as one weight; Q4_0 / Q4_1 /
    Q8_0 parts all one GroupLinear): where its packed weight will be in `specs` (appended here),
    with the linear's class and shape."""
    types = [checkpoint.tensors[name].type for name, _ in parts]
    for kind in types:
        kernels_used[f"{kind} {KERNELS[kind]}"] += 1
    if all(kind in GROUPED_TYPES for kind in types):
        return [_group_plan(checkpoint, parts, specs)]
    runs: list[list[tuple[str, int | None]]] = []
    for part, kind in zip(parts, types):
        if runs and checkpoint.tensors[runs[-1][0][0]].type == kind:
            runs[-1].append(part)
        else:
            runs.append([part])
    return [_run_plan(checkpoint, run, specs) for run in runs]


def _run_plan(checkpoint: GGUFCheckpoint, run: list[tuple[str, int | None]], specs: list):
    kind = checkpoint.tensors[run[0][0]].type
    if kind in GROUPED_TYPES:
        return _group_plan(checkpoint, run, specs)
    order, rows = _row_order(checkpoint, run)
    columns = checkpoint.tensors[run[0][0]].shape[1]
    specs.append(([checkpoint.raw_tensor(name) for name, _ in run], columns, kind, order, [name for name, _ in run]))
    return (FloatLinear if kind in FLOAT_TYPES else BlockLinear, len(specs) - 1, rows, columns, kind)


def _row_order(checkpoint: GGUFCheckpoint, parts: list[tuple[str, int | None]]) -> tuple[torch.Tensor | None, int]:
    """Our order of the parts' rows, as indices into their rows one after another (None: theirs,
    no part a Q or K whose heads' halves llama.cpp interleaved), and how many rows there are."""
    orders, first = [], 0
    for name, heads in parts:
        rows = checkpoint.tensors[name].shape[0]
        orders.append(first + (_uninterleave_rows(rows, heads) if heads is not None else torch.arange(rows)))
        first += rows
    return (torch.cat(orders) if any(heads is not None for _, heads in parts) else None), first


def _packed(checkpoint: GGUFCheckpoint, specs: list, keep: bool) -> list[torch.Tensor]:
    """The block, float and group weights: mapped from the packed cache of an earlier start, else
    packed from the file (and cached for the next start)."""
    cache = None
    if specs and keep:
        keys = [packed_cache.spec_key(spec[4], *spec[1:4]) for spec in specs]
        cache = packed_cache.PackedCache(checkpoint.cache, checkpoint.path, keys)
        mapped = cache.load()
        if mapped is not None:
            log.info("packed weights read from %s", cache.folder / cache.file_name)
            return mapped
    checkpoint.populate()
    blocks = iter(pack_file_weights([spec[:4] for spec in specs if spec[2] != GROUP_KIND]))
    packed = [_pack_groups(checkpoint, spec) if spec[2] == GROUP_KIND else next(blocks) for spec in specs]
    if cache is not None:
        cache.save_later(packed)
    return packed


def _expert_plan(checkpoint: GGUFCheckpoint, names: list[str], kernels_used: Counter, specs: list) -> list:
    """A layer's experts of one projection (gate and up fused per expert where the file stores them
    in one type): 3-D tensors [E, rows, columns] packed as one weight of E * rows rows, expert after
    expert, which with rows a multiple of the kernels' 16 channels is each expert packed alone, so
    `expert_linear` reads one expert's blocks as one run. Parts of different types stay apart
    (ExpertParts). Group types (Q4_0 / Q4_1 / Q8_0), and rows not whole channel blocks, are
    de-quantized to float32 instead (the torch path): llama.cpp's Q4_K_M writes k-quant experts."""
    missing = [name for name in names if name not in checkpoint.tensors]
    if missing:
        raise UnsupportedModelError(
            f"this GGUF has no {missing[0]}: its experts are stored one tensor each (an older Mixtral conversion); "
            "convert the model again with a current llama.cpp (experts as one 3-D tensor per layer)"
        )
    entries = [checkpoint.tensors[name] for name in names]
    experts, _, columns = entries[0].shape
    for entry in entries:
        kernels_used[f"{entry.type} experts"] += 1
    kinds = {entry.type for entry in entries}
    in_place = all(entry.type in GGUF_BLOCK_TYPES + FLOAT_TYPES and entry.shape[1] % EXPERT_CHANNELS == 0 for entry in entries)
    if not in_place:
        log.warning(
            "experts %s de-quantized to float32 (types %s): only k-quant and float experts run in place", names, sorted(kinds)
        )
        weight = torch.cat(
            [dequantize(checkpoint.raw_tensor(n), e.type, e.shape, torch.float32) for n, e in zip(names, entries)], dim=1
        )
        return [("float", weight)]
    groups = [list(zip(names, entries))] if len(kinds) == 1 else [[(n, e)] for n, e in zip(names, entries)]
    plans = []
    for group in groups:
        rows = [entry.shape[1] for _, entry in group]
        base = torch.arange(experts * rows[0]).view(experts, rows[0])
        # our rows: expert e's rows of each part in turn (gate then up); the parts' rows follow one another
        order = (
            torch.cat([base + i * experts * rows[0] for i in range(len(group))], dim=1).reshape(-1) if len(group) > 1 else None
        )
        kind = group[0][1].type
        specs.append(([checkpoint.raw_tensor(name) for name, _ in group], columns, kind, order, [name for name, _ in group]))
        plans.append(("packed", len(specs) - 1, experts, sum(rows), columns, kind))
    return plans


EXPERT_CHANNELS = 16  # the block and float kernels' channels a packed block (kernels/blocks/block_dot.h)


def _expert_linear(plans: list, packed: list[torch.Tensor]):
    linears = []
    for plan in plans:
        if plan[0] == "float":
            weight = plan[1]
            linear = ExpertLinear(weight.shape[0], weight.shape[1], weight.shape[2])
            linear.weight = nn.Parameter(weight, requires_grad=False)
        else:
            _, index, experts, rows, columns, kind = plan
            linear = ExpertLinear(
                experts, rows, columns, packed=packed[index].view(experts, rows // EXPERT_CHANNELS, -1), kind=kind
            )
        linears.append(linear)
    return linears[0] if len(linears) == 1 else ExpertParts(linears)


def _linear(runs: list, packed: list[torch.Tensor], bias) -> RowKernelLinear:
    linears = [run if isinstance(run, nn.Module) else run[0](packed[run[1]], *run[2:]) for run in runs]
    if len(linears) == 1:
        linears[0].bias = bias
        return linears[0]
    return PartsLinear(linears, bias)


GROUP_KIND = "groups"  # a spec of Q4_0 / Q4_1 / Q8_0 parts, packed by _pack_groups (not pack_file_weights)


def _group_plan(checkpoint: GGUFCheckpoint, parts: list[tuple[str, int | None]], specs: list):
    """A GroupLinear's plan: its parts as one spec, packed (or mapped from the packed cache) with
    the rest. A fused Q/K/V of 4- and 8-bit tensors goes 8-bit: a 4-bit level is an 8-bit level of
    the same value."""
    bits = 8 if any(checkpoint.tensors[name].type == "q8_0" for name, _ in parts) else 4
    order, rows = _row_order(checkpoint, parts)
    columns = checkpoint.tensors[parts[0][0]].shape[1]
    specs.append((list(parts), columns, GROUP_KIND, order, [f"{name}:{bits}" for name, _ in parts]))
    return (GroupLinear, len(specs) - 1, rows, columns, bits)


def _pack_groups(checkpoint: GGUFCheckpoint, spec) -> torch.Tensor:
    """A group spec's levels, scales and minimums in our row order (the spec's), packed for the group kernel."""
    parts, _, _, order, _ = spec
    pieces = [checkpoint.groups(name) for name, _ in parts]  # (levels, scales, minimums, bits) each
    tensors = [piece[:3] for piece in pieces]
    # one tensor (a tied output, a Q8_0 embedding) is taken as it comes: a copy of 262k rows costs seconds
    levels, scales, minimums = tensors[0] if len(tensors) == 1 else (torch.cat(column) for column in zip(*tensors))
    if order is not None:
        levels, scales, minimums = levels[order], scales[order], minimums[order]
    return GroupLinear.pack(levels, scales, minimums, max(piece[3] for piece in pieces))


def _float_rows(checkpoint: GGUFCheckpoint, parts: list[tuple[str, int | None]]) -> torch.Tensor:
    """Float vectors (biases) of the parts, concatenated in our row order."""
    pieces = []
    for name, heads in parts:
        values = checkpoint.float_tensor(name)
        pieces.append(values[_uninterleave_rows(len(values), heads)] if heads is not None else values)
    return torch.cat(pieces)


def set_rope_factors(model: nn.Module, checkpoint: GGUFCheckpoint) -> None:
    """Llama 3.x files keep their rope scaling as per-frequency factors (`rope_freqs.weight`, as
    llama.cpp's converter writes it): each frequency is divided by its factor. Phi-3's LongRoPE
    files keep two sets (`rope_factors_long` / `_short`), of which the model takes its context's."""
    if "rope_freqs.weight" in checkpoint.tensors and hasattr(model, "rotary"):
        model.rotary.scale_frequencies(checkpoint.float_tensor("rope_freqs.weight"))
    if "rope_factors_long.weight" in checkpoint.tensors and hasattr(model, "set_rope_factors"):
        model.set_rope_factors(
            checkpoint.float_tensor("rope_factors_long.weight"), checkpoint.float_tensor("rope_factors_short.weight")
        )


def _uninterleave_rows(rows: int, heads: int) -> torch.Tensor:
    """The row order HF's GGUF reader gives Q or K: llama.cpp stored each head's two rotary halves interleaved."""
    half = rows // heads // 2
    return torch.arange(rows).reshape(heads, half, 2).transpose(1, 2).reshape(rows)


def _set(model: nn.Module, path: str, value) -> None:
    parent_path, _, name = path.rpartition(".")
    setattr(model.get_submodule(parent_path) if parent_path else model, name, value)
