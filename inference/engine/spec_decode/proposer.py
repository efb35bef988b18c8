"""Speculative decoding's proposer and its policy: which running sequences guess their next tokens
this step, and how many.

At a few streams a decode step costs one pass over the weights whatever its row count, so a step
that also verifies k guessed tokens costs little more than a plain one, and every accepted guess is
a token for free. Guesses come from the sequence itself (an n-gram lookup in its prompt and output,
engine/spec_decode/ngram_index.py) or, first, from the request's own prediction (OpenAI's Predicted Outputs:
the text the reply will mostly repeat). The engine verifies them (spec_decode/verification.py).

Guessing pays only where it is cheap and right, and `auto` decides both from measurements, not from
constants tuned on one machine:
- cost: per batch size (a power-of-two bucket of decoding sequences), the loop times decode-only
  steps with and without drafts. A draft row pays when its chance of being accepted exceeds
  B x (marginal time of a row) / (step time without drafts): one more row costs its time and
  yields that chance of a token, against B tokens per step. At one stream that threshold is a few
  percent; once a step is compute-bound it nears one and speculation switches itself off.
- acceptance: each sequence keeps a running estimate `alpha` of how often its first guess is right;
  the i-th guessed token is proposed while alpha^i exceeds the threshold. The estimate learns
  from every verification and, for free, from every step the sequence does not guess: its lookup
  is made anyway (a few dict reads) and scored against the token the step then writes. So a
  sequence guesses only once its own text has shown that guesses land (MIN_EVIDENCE outcomes),
  stops as soon as they stop landing, and starts again when its text turns repetitive, without
  a verification spent to find out. Prose, whose lookups rarely land, never pays for guesses.
A request's prediction is the client's own guess, asked for by name (and billed for when
rejected): its sequence guesses from it whatever the cost model says, as far as the prediction
goes. The cost model rules the n-gram guesses only.
`ngram` speculates whenever the lookup finds something (no cost model); `off` never does.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from .ngram_index import NgramIndex

SPEC_MODES = ("auto", "off", "ngram")

PRIOR_ACCEPTANCE = 0.3  # a new sequence's estimate before its first outcome
ACCEPTANCE_RATE = 0.15  # weight of each outcome (a verified position or a scored lookup) in the estimate
MIN_EVIDENCE = 3  # outcomes a sequence's estimate needs before its n-grams are guessed from
PROBE_THRESHOLD = 0.2  # the threshold a drafted probe guesses under, before a draft row is priced
COST_RATE = 0.2  # weight of each step's time in the per-bucket averages
SAMPLES_BEFORE_TRUSTED = 4  # steps each arm of a bucket needs before its cost is used
OUTLIER_FACTOR = 2.0  # a step counts for at most this many times its arm's average
REFRESH_EVERY = 256  # a bucket's steps between re-measurements of the arm it does not use
PREDICTION_SLACK = 256  # prediction tokens kept beyond twice max_tokens


@dataclass
class SequenceSpeculation:
    """One sequence's speculation state and counts (reported in usage and the history row)."""

    index: NgramIndex
    prediction: list[int] | None = None
    prediction_index: NgramIndex | None = None
    acceptance: float = PRIOR_ACCEPTANCE
    evidence: int = 0  # outcomes the estimate has learned from
    shadow: int | None = None  # the lookup's guess at the next token, made on a step without guesses
    shadow_at: int = 0  # where that token will stand in the sequence
    draft: list[int] = field(default_factory=list)  # this step's guesses
    draft_from_prediction: bool = False
    proposed: int = 0
    accepted: int = 0
    prediction_proposed: int = 0
    prediction_accepted: int = 0


@dataclass
class _Arm:
    """Running averages of one kind of decode-only step in one bucket, robust to a stalled step
    (a cold shape's first run, a page fault, another process taking the core): the first
    SAMPLES_BEFORE_TRUSTED steps give their median, and afterwards a step counts for at most
    OUTLIER_FACTOR times the average. A plain mean let one 200 ms step among 10 ms ones price
    a draft row above every sequence's hit rate, switching speculation off until the next
    refresh, hundreds of steps later."""

    seconds: float = 0.0
    draft_rows: float = 0.0
    samples: int = 0
    first: list = field(default_factory=list)  # (seconds, draft rows) of the first steps

    def add(self, seconds: float, draft_rows: int) -> None:
        self.samples += 1
        if self.samples <= SAMPLES_BEFORE_TRUSTED:
            self.first.append((seconds, draft_rows))
            self.seconds = statistics.median(s for s, _ in self.first)
            self.draft_rows = statistics.median(r for _, r in self.first)
            return
        seconds = min(seconds, OUTLIER_FACTOR * self.seconds)
        self.seconds += COST_RATE * (seconds - self.seconds)
        self.draft_rows += COST_RATE * (draft_rows - self.draft_rows)


@dataclass
class _Bucket:
    plain: _Arm = field(default_factory=_Arm)
    drafted: _Arm = field(default_factory=_Arm)
    steps: int = 0
    probes: dict = field(default_factory=lambda: {"plain": 0, "drafted": 0})  # first measurements tried

    def threshold(self, decoding: int) -> float:
        """The acceptance chance above which one more draft row pays: 1 (none) until both arms are
        measured, when only the probes guess."""
        if self.plain.samples < SAMPLES_BEFORE_TRUSTED or self.drafted.samples < SAMPLES_BEFORE_TRUSTED:
            return 1.0
        row = max(self.drafted.seconds - self.plain.seconds, 0.0) / max(self.drafted.draft_rows, 1e-9)
        return min(1.0, decoding * row / max(self.plain.seconds, 1e-9))

    def probe(self) -> str | None:
        """Which arm this step must measure: each until it has its samples (a bounded number of
        tries: steps that also prefill do not count, and a busy server may have few others), then
        each now and then. A drafted probe counts as tried (`probes`) only where some sequence had
        a guess: replies with nothing to look up must not use the tries up, or the bucket would
        never price a draft row and never guess again."""
        self.steps += 1
        for name, arm in (("plain", self.plain), ("drafted", self.drafted)):
            first = arm.samples < SAMPLES_BEFORE_TRUSTED and self.probes[name] < 4 * SAMPLES_BEFORE_TRUSTED
            if first and self.steps % 2 == (name == "plain"):
                return name
        if self.steps % REFRESH_EVERY == 0:
            return "plain"
        if self.steps % REFRESH_EVERY == REFRESH_EVERY // 2:
            return "drafted"
        return None


class Speculator:
    """Sets `seq.spec.draft` on the sequences that guess this step, learns from how it went."""

    def __init__(self, mode: str = "auto", max_tokens: int = 8, min_n: int = 2, max_n: int = 4):
        if mode not in SPEC_MODES:
            raise ValueError(f"speculative must be one of {', '.join(SPEC_MODES)}, got {mode!r}")
        self.mode = mode
        self.max_tokens = max_tokens
        self.min_n, self.max_n = min_n, max_n
        self.buckets: dict[int, _Bucket] = {}
        self._step_kind: tuple[int, bool] | None = None  # (bucket, drafted) of the step being timed
        self.verification_steps = 0  # sequence-steps that verified guesses
        self.verified_tokens = 0  # tokens those produced (accepted guesses plus the sampled one)
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0

    @property
    def enabled(self) -> bool:
        return self.mode != "off" and self.max_tokens > 0

    def attach(self, seq, prediction: list[int] | None) -> None:
        """Gives a new sequence its lookup index (over its own tokens) and its prediction's."""
        seq.spec = SequenceSpeculation(NgramIndex(seq.token_ids, self.min_n, self.max_n))
        if prediction:  # no reply needs more of it than it can write (and a little to find its place again)
            limit = 2 * (seq.params.max_tokens or len(prediction)) + PREDICTION_SLACK
            seq.spec.prediction = list(prediction[:limit])
            seq.spec.prediction_index = NgramIndex(seq.spec.prediction, self.min_n, self.max_n)

    # -- proposing -------------------------------------------------------------------------

    def propose(self, running: list, max_model_len: int) -> None:
        """Chooses this step's drafts among the running sequences about to decode."""
        decoding = [seq for seq in running if _decodes_next(seq)]
        for seq in running:
            if seq.spec is not None:
                seq.spec.draft = []
        self._step_kind = None
        if not self.enabled or not decoding:
            return
        bucket_id = len(decoding).bit_length()
        bucket = self.buckets.setdefault(bucket_id, _Bucket())
        probe = bucket.probe() if self.mode == "auto" else None
        if self.mode == "ngram":
            threshold = 0.0
        else:
            threshold = PROBE_THRESHOLD if probe == "drafted" else bucket.threshold(len(decoding))
        drafted = False
        for seq in decoding:
            if self.mode == "auto":
                _score_shadow(seq)
            guessed = probe != "plain" and (  # (a plain probe measures a step without drafts)
                # the client's guess first: verified whatever the cost model says
                (_has_prediction(seq) and self._propose_one(seq, 0.0, max_model_len, prediction_only=True))
                or (threshold < 1.0 and self._propose_one(seq, threshold, max_model_len))
            )
            drafted |= guessed
            if self.mode == "auto" and not guessed:
                _make_shadow(seq)
        if probe == "plain" or (probe == "drafted" and drafted):
            bucket.probes[probe] += 1
        self._step_kind = (bucket_id, drafted)

    def _propose_one(self, seq, threshold: float, max_model_len: int, prediction_only: bool = False) -> bool:
        """Sets the sequence's draft (True where it has one): `prediction_only`, as far as its
        prediction goes, unpriced; else as many guesses as the cost `threshold` and its hit rate say."""
        spec = seq.spec
        if spec is None or not _may_speculate(seq):
            return False
        room = max_model_len - len(seq)
        if seq.params.max_tokens is not None:
            room = min(room, seq.params.max_tokens - seq.num_output_tokens)
        wanted = min(self.max_tokens, room - 1)  # the step samples one token past the guesses
        if wanted <= 0:
            return False
        if self.mode == "auto" and not prediction_only:
            if spec.evidence < MIN_EVIDENCE:
                return False
            worth = 0
            while worth < wanted and spec.acceptance ** (worth + 1) > threshold:
                worth += 1
            if worth == 0:  # its guesses do not pay now (its lookups are still scored: `_score_shadow`)
                return False
            wanted = min(wanted, worth)
        draft, from_prediction = (self._from_prediction(seq, wanted), True) if prediction_only else self._lookup(seq, wanted)
        if draft and seq.active_matcher is not None:
            draft = draft[: seq.matcher.validate_tokens(draft)]  # a guess the grammar forbids is never proposed
        if draft and seq.tool_trigger is not None:
            if seq.reasoning is not None and seq.reasoning.active:  # the answer's first token must not be a guess's
                draft = draft[: seq.reasoning.before_end(seq.output_token_ids, draft)]
            else:
                draft = draft[: seq.tool_trigger.speculable(draft)]  # the token completing a tag is the model's to draw
        if not draft:
            return False
        spec.draft, spec.draft_from_prediction = draft, from_prediction
        return True

    def _lookup(self, seq, k: int) -> tuple[list[int], bool]:
        """The guesses: the prediction's continuation first, then the sequence's own n-grams."""
        draft = self._from_prediction(seq, k)
        return (draft, True) if draft else (seq.spec.index.propose(k), False)

    @staticmethod
    def _from_prediction(seq, k: int) -> list[int]:
        """Up to k guesses from the request's prediction: its continuation while the reply follows
        it, else what follows the reply's last tokens in it (after an edit); none without one."""
        spec = seq.spec
        if spec.prediction is None:
            return []
        output = seq.output_token_ids
        if spec.prediction[: len(output)] == output:  # the reply follows the prediction so far
            return spec.prediction[len(output) : len(output) + k]
        return spec.prediction_index.propose(k, suffix=seq.token_ids)

    # -- learning ---------------------------------------------------------------------------

    def record(self, seq, accepted: int, written: int) -> None:
        """After a verification of `seq.spec.draft`: `accepted` of its guesses were right, and the
        sequence wrote `written` tokens (fewer than accepted + 1 where it finished among them: the
        counts report what was written, the estimate learns from every right guess)."""
        spec = seq.spec
        proposed, taken = len(spec.draft), min(accepted, written)
        spec.proposed += proposed
        spec.accepted += taken
        if spec.draft_from_prediction:
            spec.prediction_proposed += proposed
            spec.prediction_accepted += taken
        self.num_draft_tokens += proposed
        self.num_accepted_tokens += taken
        self.verification_steps += 1
        self.verified_tokens += written
        for outcome in [1.0] * accepted + ([0.0] if accepted < proposed else []):
            _learn(spec, outcome)
        spec.draft = []

    def observe_step(self, seconds: float, had_prefill: bool, draft_rows: int) -> None:
        """The last step's time, for its bucket's cost averages (decode-only steps only: a prefill
        chunk's time says nothing about what a draft row costs)."""
        kind, self._step_kind = self._step_kind, None
        if kind is None or had_prefill:
            return
        bucket_id, drafted = kind
        bucket = self.buckets[bucket_id]
        if drafted and draft_rows:
            bucket.drafted.add(seconds, draft_rows)
        elif not drafted:
            bucket.plain.add(seconds, 0)


def _learn(spec: SequenceSpeculation, outcome: float) -> None:
    spec.acceptance += ACCEPTANCE_RATE * (outcome - spec.acceptance)
    spec.evidence += 1


def _score_shadow(seq) -> None:
    """The last step's unverified lookup against the token that step wrote: an outcome for free."""
    spec = seq.spec
    if spec is None or spec.shadow is None:
        return
    if len(seq.token_ids) > spec.shadow_at:
        _learn(spec, 1.0 if seq.token_ids[spec.shadow_at] == spec.shadow else 0.0)
    spec.shadow = None


def _make_shadow(seq) -> None:
    """What the lookup would guess next, on a step where the sequence does not guess: scored next step."""
    spec = seq.spec
    if spec is None or _has_prediction(seq) or not _may_speculate(seq):
        return
    guess = spec.index.propose(1)
    if guess:
        spec.shadow, spec.shadow_at = guess[0], len(seq.token_ids)


def _has_prediction(seq) -> bool:
    return seq.spec is not None and seq.spec.prediction is not None


def _decodes_next(seq) -> bool:
    """Running, its prompt computed, one token to compute: its next step is a decode."""
    return seq.num_uncomputed_tokens == 1 and seq.num_computed_tokens > 0 and not seq.forks_left


def _may_speculate(seq) -> bool:
    """Whether guessed tokens can be verified exactly as they would be sampled one by one: not an
    embedding, not before a watched answer's first token (it may be drawn again:
    engine/sample/tool_trigger.py; in a reasoning block a guess stops before the end marker's last
    token, later before a tag, or where a `{` that is deciding leaves every call: `_propose_one`),
    and not while a reasoning phase could
    change the row's mask between guesses (a pending opening, a budget that forces the end marker,
    or a grammar waiting for the end)."""
    if seq.params.pooling is not None:
        return False
    reasoning = seq.reasoning
    thinking = reasoning is not None and reasoning.active
    if seq.tool_trigger is not None and not seq.tool_trigger.may_guess and not thinking:
        return False
    if not thinking:
        return True
    return seq.matcher is None and reasoning.budget is None and not reasoning.pending
