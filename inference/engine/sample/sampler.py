"""Batched, per-request sampling.

One call turns a step's logits [B, V] into one token per row. Every row carries its own
parameters; they become [B]-shaped tensors so the arithmetic runs once for the whole batch.

Randomness uses the Gumbel-max trick: argmax(logits / T + G) with G = -log(-log U) is a draw
from softmax(logits / T). A seeded row draws its V uniforms only from its own generator, so its
tokens do not depend on what else is in the batch or at which row it sits.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import torch

from ..outputs import TokenLogprob
from ..runner.transfers import fetch, tensor_to_device, to_device
from .sampling_params import SamplingParams

# Temperatures below this are treated as greedy: dividing by them overflows float32.
_MIN_TEMPERATURE = 1e-5
# Tokens sorted for a top-p row without top-k before falling back to a full-vocabulary sort.
_TOP_P_CANDIDATES = 1024


@dataclass
class SamplingContext:
    """One row of the batch: the request's parameters and the tokens it has seen."""

    params: SamplingParams
    prompt_token_ids: list[int]
    output_token_ids: list[int]  # generated so far (before this step)
    generator: torch.Generator | None  # from make_generator(params.seed, device); None = unseeded
    eos_token_ids: set[int]
    allowed: torch.Tensor | None = None  # [V] bool from the request's grammar (engine/sample/structured.py)


@dataclass
class SamplerOutput:
    token_ids: list[int]
    logprobs: list[TokenLogprob | None]  # None for rows that did not ask; token text left ""


def make_generator(seed: int | None, device) -> torch.Generator | None:
    """A per-request generator, created once when the request arrives."""
    if seed is None:
        return None
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return generator


def _is_greedy(params: SamplingParams) -> bool:
    return params.temperature < _MIN_TEMPERATURE


def _has_penalty(params: SamplingParams) -> bool:
    return params.repetition_penalty != 1.0 or params.presence_penalty != 0.0 or params.frequency_penalty != 0.0


def _min_tokens_active(ctx: SamplingContext) -> bool:
    return len(ctx.output_token_ids) < ctx.params.min_tokens


def _edits_logits(ctx: SamplingContext) -> bool:
    return _has_penalty(ctx.params) or _min_tokens_active(ctx) or bool(ctx.params.logit_bias) or ctx.allowed is not None


class Sampler:
    """Callable turning logits [B, V] plus one SamplingContext per row into tokens."""

    @staticmethod
    def prompt_logprobs(logits: torch.Tensor, targets: list[int], top: int) -> list[tuple[float, list[tuple[int, float]]]]:
        """For each row of a prompt's logits [n, V]: the logprob of the prompt's next token
        (`targets`, one per row) and the `top` most likely (token id, logprob) there."""
        logp = torch.log_softmax(logits.float(), dim=-1)
        chosen = logp.gather(1, to_device(targets, torch.long, logp.device).unsqueeze(1)).squeeze(1)
        if not top:
            (chosen_lp,) = fetch(chosen)
            return [(lp, []) for lp in chosen_lp]
        top_values, top_indices = logp.topk(top, dim=-1)
        chosen_lp, top_lp, top_ids = fetch(chosen, top_values, top_indices)
        return [(lp, list(zip(ids, lps))) for lp, ids, lps in zip(chosen_lp, top_ids, top_lp)]

    def __call__(self, logits: torch.Tensor, contexts: list[SamplingContext]) -> SamplerOutput:
        if logits.dim() != 2 or logits.shape[0] != len(contexts):
            raise ValueError(f"logits {tuple(logits.shape)} do not match {len(contexts)} contexts")
        if all(_is_greedy(c.params) and not _edits_logits(c) for c in contexts):
            # Hot path for plain greedy decoding: one reduction. max's indices are argmax's (the
            # first maximum on ties) at ~0.4x its time on CPU: 0.4 against 1.0 ms over
            # [32, 49152] (docs/performance-log.md, section 32).
            tokens = logits.max(dim=-1).indices
        else:
            tokens = self._sample(logits, contexts)
        return with_logprobs(logits, contexts, tokens)

    def _sample(self, logits: torch.Tensor, contexts: list[SamplingContext]) -> torch.Tensor:
        x = logits.float()
        if any(_edits_logits(c) for c in contexts):
            x = x.clone() if x is logits else x  # never edit the caller's tensor
            apply_logit_bias(x, contexts)
            apply_penalties(x, contexts)
            apply_min_tokens(x, contexts)
            apply_grammar(x, contexts)

        greedy = [i for i, c in enumerate(contexts) if _is_greedy(c.params)]
        drawn = [i for i, c in enumerate(contexts) if not _is_greedy(c.params)]
        if not drawn:
            return x.argmax(dim=-1)
        sub = [contexts[i] for i in drawn]
        scores = filtered_logits(x if not greedy else x[_index(drawn, x.device)], sub)
        scores += draw_gumbel(scores.shape, [c.generator for c in sub], scores.device)
        sampled = scores.argmax(dim=-1)
        if not greedy:
            return sampled
        chosen = torch.empty(len(contexts), dtype=torch.long, device=x.device)
        greedy_rows = _index(greedy, x.device)
        chosen[greedy_rows] = x[greedy_rows].argmax(dim=-1)
        chosen[_index(drawn, x.device)] = sampled
        return chosen


def _index(rows: list[int], device) -> torch.Tensor:
    """Row numbers as an index tensor on the device (a Python list as an index would be copied
    there with a wait)."""
    return to_device(rows, torch.long, device)


def _row_param(contexts: list[SamplingContext], name: str, device) -> torch.Tensor:
    return to_device([getattr(c.params, name) for c in contexts], torch.float32, device)


def _scatter_index(rows_of_ids: list[tuple[int, list[int]]], device) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, token) index tensors for every token of every listed row."""
    rows: list[int] = []
    cols: list[int] = []
    for row, ids in rows_of_ids:
        rows.extend([row] * len(ids))
        cols.extend(ids)
    return _index(rows, device), _index(cols, device)


def apply_logit_bias(x: torch.Tensor, contexts: list[SamplingContext]) -> None:
    """In place: each row's logit_bias added to its tokens' logits (a sparse add: only the biased
    tokens are touched). -100 bans a token in practice, +100 forces it, as in OpenAI's API."""
    biased = [(i, c.params.logit_bias) for i, c in enumerate(contexts) if c.params.logit_bias]
    if not biased:
        return
    rows, cols = _scatter_index([(i, list(bias)) for i, bias in biased], x.device)
    values = to_device([b for _, bias in biased for b in bias.values()], x.dtype, x.device)
    x.index_put_((rows, cols), values, accumulate=True)


def apply_grammar(x: torch.Tensor, contexts: list[SamplingContext]) -> None:
    """In place, last: tokens a row's grammar does not allow next get -inf, whatever else raised them."""
    rows = [i for i, c in enumerate(contexts) if c.allowed is not None]
    if rows:
        allowed = tensor_to_device(torch.stack([contexts[i].allowed for i in rows]), x.device)
        index = _index(rows, x.device)
        x[index] = x[index].masked_fill(~allowed, float("-inf"))


def apply_penalties(x: torch.Tensor, contexts: list[SamplingContext]) -> None:
    """In place: repetition penalty (HF: prompt + output), then frequency/presence (OpenAI: output only).

    Only the logits of seen tokens are read and written, so the cost follows the number of
    distinct seen tokens rather than batch x vocabulary.
    """
    seen = [
        (i, list(set(c.prompt_token_ids).union(c.output_token_ids)))
        for i, c in enumerate(contexts)
        if c.params.repetition_penalty != 1.0
    ]
    if seen:
        rows, cols = _scatter_index(seen, x.device)
        penalty = _row_param(contexts, "repetition_penalty", x.device)[rows]
        values = x[rows, cols]
        x[rows, cols] = torch.where(values > 0, values / penalty, values * penalty)

    counted = [
        (i, Counter(c.output_token_ids))
        for i, c in enumerate(contexts)
        if (c.params.frequency_penalty != 0.0 or c.params.presence_penalty != 0.0) and c.output_token_ids
    ]
    if counted:
        rows, cols = _scatter_index([(i, list(counts)) for i, counts in counted], x.device)
        counts = to_device([n for _, c in counted for n in c.values()], x.dtype, x.device)
        frequency = _row_param(contexts, "frequency_penalty", x.device)[rows]
        presence = _row_param(contexts, "presence_penalty", x.device)[rows]
        x[rows, cols] -= frequency * counts + presence


def apply_min_tokens(x: torch.Tensor, contexts: list[SamplingContext]) -> None:
    """In place: forbid EOS and stop_token_ids until a row has min_tokens outputs.

    ignore_eos is not handled here: it only means EOS does not end the request, which is
    the engine's decision.
    """
    banned = [
        (i, list(set(c.eos_token_ids).union(c.params.stop_token_ids))) for i, c in enumerate(contexts) if _min_tokens_active(c)
    ]
    banned = [(i, [t for t in ids if t < x.shape[1]]) for i, ids in banned]
    if any(ids for _, ids in banned):
        rows, cols = _scatter_index(banned, x.device)
        x[rows, cols] = float("-inf")


def filtered_logits(x: torch.Tensor, contexts: list[SamplingContext]) -> torch.Tensor:
    """A new tensor of logits / temperature with tokens removed by top-k, top-p and min-p at -inf."""
    scores = x / _row_param(contexts, "temperature", x.device).unsqueeze(1)
    vocab = x.shape[1]
    if any(0 < c.params.top_k < vocab or c.params.top_p < 1.0 for c in contexts):
        scores.masked_fill_(~keep_mask(scores, contexts), float("-inf"))
    if any(c.params.min_p > 0 for c in contexts):
        # p / p_max < min_p, in log space; relative to the top token, so earlier masks do not move it.
        log_min_p = _row_param(contexts, "min_p", x.device).log().unsqueeze(1)
        cut = scores.max(dim=-1, keepdim=True).values + log_min_p
        scores.masked_fill_(scores < cut, float("-inf"))
    return scores


def keep_mask(x: torch.Tensor, contexts: list[SamplingContext]) -> torch.Tensor:
    """Boolean [B, V]: tokens surviving top-k then top-p on already temperature-scaled logits.

    top-k keeps the k largest logits; top-p then keeps the smallest set of those, most probable
    first, whose probability (renormalised over the top-k survivors) reaches p. A full sort of
    the vocabulary is slow on CPU, so only the best candidates are sorted (topk) and the sort is
    widened to the whole vocabulary only when some nucleus does not fit in them. Rows with both
    filters off keep everything, whatever their neighbours use.
    """
    vocab = x.shape[1]
    top_k = [c.params.top_k if 0 < c.params.top_k < vocab else vocab for c in contexts]
    top_p = [float(c.params.top_p) for c in contexts]
    if all(row_k == vocab for row_k in top_k) and all(row_p >= 1.0 for row_p in top_p):
        return torch.ones_like(x, dtype=torch.bool)
    k_on = to_device([row_k < vocab for row_k in top_k], torch.bool, x.device)
    p_on = to_device([row_p < 1.0 for row_p in top_p], torch.bool, x.device)

    k = to_device(top_k, torch.long, x.device).unsqueeze(1)
    p = to_device(top_p, torch.float32, x.device).unsqueeze(1)
    # A nucleus without top-k may not fit in the candidates; finding out costs the CPU nothing
    # but would make a GPU wait, where sorting the whole vocabulary is cheap instead.
    unbounded = any(row_k == vocab and row_p < 1.0 for row_k, row_p in zip(top_k, top_p))
    wanted = max(row_k if row_k < vocab else (_TOP_P_CANDIDATES if row_p < 1.0 else 1) for row_k, row_p in zip(top_k, top_p))
    candidates = vocab if unbounded and x.device.type != "cpu" else min(vocab, wanted)
    while True:
        values, order = x.topk(candidates, dim=-1)  # sorted, largest first
        remove = torch.arange(candidates, device=x.device).unsqueeze(0) >= k
        if all(row_p >= 1.0 for row_p in top_p):
            break
        # Normalise over the top-k survivors, or over the whole vocabulary when top-k is off.
        lse = torch.where(
            k_on.unsqueeze(1),
            torch.logsumexp(values.masked_fill(remove, float("-inf")), dim=-1, keepdim=True),
            torch.logsumexp(x, dim=-1, keepdim=True),
        )
        probs = (values - lse).exp()
        cumulative = probs.cumsum(dim=-1)
        remove |= (cumulative - probs >= p) & p_on.unsqueeze(1)
        if candidates == vocab or not unbounded:
            break
        too_narrow = p_on & ~k_on & (cumulative[:, -1] < p.squeeze(1))
        if not bool(too_narrow.any()):
            break
        candidates = vocab
    remove[:, 0] = False  # the most likely token always survives
    keep = torch.zeros_like(x, dtype=torch.bool).scatter_(1, order, ~remove)
    return keep | ~(k_on | p_on).unsqueeze(1)


def draw_gumbel(shape, generators: list[torch.Generator | None], device) -> torch.Tensor:
    """Gumbel noise [B, V] = -log(-log U): seeded rows from their own generator, the rest from the global RNG.

    argmax(logits / T + Gumbel) is a draw from softmax(logits / T) (the Gumbel-max trick), so no
    softmax or renormalisation is needed and masked (-inf) tokens can never win.
    """
    uniform = torch.empty(shape, dtype=torch.float32, device=device)
    unseeded = [i for i, g in enumerate(generators) if g is None]
    if len(unseeded) == len(generators):
        uniform.uniform_()
    elif unseeded:
        uniform[_index(unseeded, device)] = torch.rand((len(unseeded), shape[1]), dtype=torch.float32, device=device)
    for i, generator in enumerate(generators):
        if generator is not None:
            torch.rand(shape[1], generator=generator, device=device, out=uniform[i])
    # U in [0, 1): U = 0 gives -inf, which merely makes that token lose.
    return uniform.log_().neg_().log_().neg_()


def rewind_generator(generator: torch.Generator, state: torch.Tensor, used_rows: int, vocab: int, params) -> None:
    """Puts a seeded sequence's generator where `used_rows` draws leave it: the rows past the first
    rejected guess drew too (the sampler draws every row), draws plain decoding never makes. A
    sampled row draws `vocab` uniforms (sampler.draw_gumbel); a greedy one draws nothing."""
    if _is_greedy(params):
        return
    generator.set_state(state)
    scratch = torch.empty(vocab, dtype=torch.float32, device=generator.device)
    for _ in range(used_rows):
        torch.rand(vocab, generator=generator, device=generator.device, out=scratch)


def skip_draws(generator: torch.Generator | None, tokens: int, vocab: int, params) -> None:
    """Moves a seeded generator past the draws `tokens` sampled tokens took (one row of `vocab`
    uniforms each): where another engine had sampled them (engine/resume.py)."""
    if generator is None or _is_greedy(params):
        return
    scratch = torch.empty(vocab, dtype=torch.float32, device=generator.device)
    for _ in range(tokens):
        torch.rand(vocab, generator=generator, device=generator.device, out=scratch)


def with_logprobs(logits: torch.Tensor, contexts: list[SamplingContext], tokens: torch.Tensor) -> SamplerOutput:
    """The sampled tokens and, for rows that asked, raw model log-probabilities (before penalties,
    temperature and filters, like vLLM's default), fetched to the host together in one copy."""
    rows = [i for i, c in enumerate(contexts) if c.params.logprobs is not None]
    if not rows:
        (token_ids,) = fetch(tokens)
        return SamplerOutput(token_ids=token_ids, logprobs=[None] * len(contexts))
    index = _index(rows, logits.device)
    logp = torch.log_softmax(logits[index].float(), dim=-1)
    chosen = logp.gather(1, tokens[index].unsqueeze(1)).squeeze(1)
    n = max(contexts[i].params.logprobs for i in rows)
    if n:
        top_values, top_indices = logp.topk(n, dim=-1)  # sorted, most likely first
        token_ids, chosen_lp, top_lp, top_ids = fetch(tokens, chosen, top_values, top_indices)
    else:
        token_ids, chosen_lp = fetch(tokens, chosen)
        top_lp = top_ids = [[]] * len(rows)
    logprobs: list[TokenLogprob | None] = [None] * len(contexts)
    for j, i in enumerate(rows):
        want = contexts[i].params.logprobs
        top = [(tid, "", lp) for tid, lp in zip(top_ids[j][:want], top_lp[j][:want])]
        logprobs[i] = TokenLogprob(token_id=token_ids[i], token="", logprob=chosen_lp[j], top=top)
    return SamplerOutput(token_ids=token_ids, logprobs=logprobs)
