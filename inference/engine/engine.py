"""LLMEngine: requests in, one scheduled forward pass per `step()`, per-request deltas out.

Synchronous and single-threaded on purpose: `engine_thread.EngineThread` drives it from a
background thread (in the web process, or in `manage.py runengine`'s worker); tests drive it directly.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from .block_manager import BlockManager
from .config import EngineConfig
from .detokenizer import IncrementalDetokenizer
from .engine_state import ModelInfo
from .engine_stats import EngineStats
from .errors import FatalDeviceError, is_fatal_device_error
from .kv_pool import plan_num_blocks
from .layers.pooling import pooling_for
from .loader import ModelBundle, load_model
from .model_runner import ModelRunner
from .outputs import RequestOutput, TokenLogprob
from .prompt import check_prompt_fits, prompt_token_ids
from .runner.memory_profile import engine_peak_bytes
from .sample.reasoning import ReasoningState
from .sample.sampler import Sampler, SamplerOutput, SamplingContext, make_generator, rewind_generator
from .sample.sampling_params import SamplingParams, SamplingParamsError
from .sample.structured import NO_MASKS, Grammars, PendingMasks, one_token_mask
from .scheduler import ScheduledBatch, Scheduler
from .sequence import Sequence
from .spec_decode.proposer import Speculator
from .spec_decode.verification import accepted_count, merged_output

log = logging.getLogger("minivllm.engine")

THROUGHPUT_WINDOW_S = 10.0


@dataclass
class StepTrace:
    """What the last step ran, by request id (`LLMEngine.last_trace`): tests read it."""

    decodes: list[str] = field(default_factory=list)  # every sequence that decoded, guesses or not
    prefills: list[tuple[str, int]] = field(default_factory=list)
    preempted: list[str] = field(default_factory=list)
    verifies: list[tuple[str, int]] = field(default_factory=list)  # (request id, guesses verified)

    @classmethod
    def of(cls, batch: ScheduledBatch) -> StepTrace:
        return cls(
            decodes=[s.request_id for s in batch.decodes + batch.verifies],
            prefills=[(s.request_id, n) for s, n in batch.prefills],
            preempted=[s.request_id for s in batch.preempted],
            verifies=[(s.request_id, len(s.draft)) for s in batch.verifies],
        )

    @property
    def request_ids(self) -> set[str]:
        return set(self.decodes) | {r for r, _ in self.prefills}


class LLMEngine:
    def __init__(self, config: EngineConfig | None = None, bundle: ModelBundle | None = None):
        self.config = config or EngineConfig()
        self.bundle = bundle or load_model(self.config)
        model = self.bundle.model
        self.tokenizer = self.bundle.tokenizer
        self.kv_dtype = self.config.kv_dtype_for(self.bundle.dtype, self.bundle.device.type, self.bundle.weights_format)
        self.num_slots = self.config.slots_for(self.bundle.device.type)
        num_blocks = self.config.num_kv_blocks or self._plan_kv_blocks()
        self.max_model_len = self._fit_context(num_blocks)
        self.block_manager = BlockManager(num_blocks, self.config.block_size, self.config.enable_prefix_caching)
        self.scheduler = Scheduler(self.block_manager, self.num_slots, self.config.max_num_batched_tokens)
        self.model_runner = ModelRunner(
            model,
            num_blocks,
            self.config.block_size,
            self.bundle.dtype,
            self.bundle.device,
            self.kv_dtype,
            cpu_step=self.bundle.cpu_step,
        )
        if self.bundle.device.type == "cuda" and self.config.cuda_graphs == "auto":
            # every table as wide as the longest context a sequence reaches, its guesses included
            max_blocks = -(-(self.max_model_len + self.config.spec_tokens + 1) // self.config.block_size)
            self.model_runner.enable_static_decode(self.num_slots, max_blocks, graphs=True)
        self.pooling = pooling_for(self.config.pooling, self.config.model)
        self.weights_mb = self.bundle.weight_bytes / 2**20  # counted once: the weights never change after load
        # what the web side needs of the model, built once here (engine clients hand it on as it is)
        self.model_info = ModelInfo(
            self.model_name,
            self.tokenizer,
            self.max_model_len,
            num_blocks * self.config.block_size,
            model.vocab_size,
            self.bundle.sampling_defaults,
            self.num_slots,
            pooling=self.pooling.kind,
            hidden_size=getattr(getattr(model, "cfg", None), "hidden_size", None),
            matryoshka_dimensions=list(self.pooling.matryoshka_dimensions)
            if self.pooling.matryoshka_dimensions is not None
            else None,
        )
        self.sampler = Sampler()
        config = self.config
        self.speculator = Speculator(config.speculative, config.spec_tokens, config.spec_ngram_min, config.spec_ngram_max)
        self.requests: dict[str, list[Sequence]] = {}  # each request's completions (n of them once forked)
        self._pending: list[RequestOutput] = []  # outputs of aborts, delivered by the next step
        self.last_trace = StepTrace()
        self.started_at = time.monotonic()
        self.num_steps = 0
        self.total_prompt_tokens = 0
        self.total_generated_tokens = 0
        self._recent_tokens: deque[tuple[float, int]] = deque()
        self.step_fault_hook = None  # tests: a callable raising here fails one step's requests
        self._grammars: Grammars | None = None
        self.grammar_mask_seconds = 0.0
        self.grammar_mask_rows = 0
        self.grammar_mask_wait_seconds = 0.0  # the part of the masks' time the loop waited, after the forward
        self._grammars_lock = threading.Lock()
        self._markers: dict[str, list[int]] = {}  # reasoning markers' token ids
        log.info(
            "engine ready: %s on %s (%s), %d KV blocks of %d tokens (%s), %d slots",
            self.model_name,
            self.device,
            self.dtype,
            num_blocks,
            self.config.block_size,
            str(self.kv_dtype).removeprefix("torch."),
            self.num_slots,
        )

    def _plan_kv_blocks(self) -> int:
        """The pool's size from memory (kv_pool.plan_num_blocks); on CUDA after profiling what the
        weights and the largest step take of the engine's share."""
        config, bundle = self.config, self.bundle
        engine_bytes = 0
        if bundle.device.type == "cuda":
            engine_bytes = engine_peak_bytes(
                bundle, config.block_size, config.max_num_batched_tokens, self.kv_dtype, self.num_slots, bundle.model.vocab_size
            )
        return plan_num_blocks(
            bundle.model.kv_shape,
            config.block_size,
            self.kv_dtype,
            bundle.device,
            config.kv_cache_mb,
            config.gpu_memory_utilization,
            bundle.max_model_len,
            self.num_slots,
            engine_bytes,
        )

    def _fit_context(self, num_blocks: int) -> int:
        """The model's context, or what the KV pool holds where that is less (logged: /v1/models and
        the context-length errors report the lowered figure)."""
        capacity = num_blocks * self.config.block_size
        if capacity >= self.bundle.max_model_len:
            return self.bundle.max_model_len
        log.warning(
            "the KV pool holds %d tokens, less than the model's %d-token context: max_model_len lowered to %d "
            "(MINIVLLM_KV_CACHE_MB or MINIVLLM_NUM_KV_BLOCKS sets the pool)",
            capacity,
            self.bundle.max_model_len,
            capacity,
        )
        return capacity

    def fresh_copy(self) -> LLMEngine:
        """A new engine over the same loaded weights: empty cache, queues and counters. This one's
        KV pool is given back first, so that the new pool is planned from the memory it held (on a
        GPU, a pool planned beside the old one would shrink with every restart)."""
        self.model_runner.release_kv_pool()
        return LLMEngine(self.config, bundle=self.bundle)

    @property
    def model_name(self) -> str:
        return self.bundle.name

    @property
    def device(self) -> str:
        return str(self.bundle.device)

    @property
    def dtype(self) -> str:
        return self.bundle.dtype_name

    # -- requests -------------------------------------------------------------------------

    def tokenize(self, prompt: str | list[int]) -> list[int]:
        """The ids `add_request` takes: text by the tokenizer's own policy (engine/prompt.py)."""
        return prompt_token_ids(self.tokenizer, prompt)

    @property
    def token_limit(self) -> int:
        return self.model_info.token_limit

    def check_request(self, prompt_token_ids: list[int], params: SamplingParams) -> None:
        """Rejects what could never finish: an empty prompt, one that cannot fit the context or the
        pool, or ids (prompt, logit_bias) outside the vocabulary."""
        check_prompt_fits(prompt_token_ids, params, vocab_size=self.bundle.model.vocab_size, limit=self.token_limit)

    def add_request(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams | None = None) -> None:
        """Queues a prompt given as token ids (`tokenize` makes them from text). With params.n > 1
        the prompt is computed once and its n completions fork from it (`_fork`)."""
        params = params or SamplingParams()
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        if isinstance(prompt_token_ids, str):
            raise TypeError("add_request takes token ids; engine.tokenize(text) makes them")
        token_ids = list(prompt_token_ids)
        self.check_request(token_ids, params)
        if params.n > self.num_slots:
            raise SamplingParamsError("n", f"n must be at most {self.num_slots}, the engine's batch slots")
        seq = self._sequence(request_id, token_ids, params, index=0)
        self.requests[request_id] = [seq]
        self.scheduler.add(seq)
        self.total_prompt_tokens += len(token_ids)

    @property
    def grammars(self) -> Grammars:
        """The tokenizer as the grammar library sees it (~1 s to build): made on first use, by whichever
        thread asks first (the web side compiles a request's grammar before queueing it)."""
        with self._grammars_lock:
            if self._grammars is None:
                self._grammars = Grammars(self.tokenizer, self.bundle.model.vocab_size, self.bundle.eos_token_ids)
            return self._grammars

    def _sequence(self, request_id: str, token_ids: list[int], params: SamplingParams, index: int) -> Sequence:
        seq = Sequence(request_id, token_ids, params)
        seq.index = index
        if params.structured is not None:
            seq.matcher = self.grammars.matcher(params.structured)
        if params.reasoning is not None:
            encode = self._marker_ids
            start = params.reasoning.get("start") if not params.reasoning.get("opened", True) else None
            seq.reasoning = ReasoningState(
                encode(params.reasoning["end"]), params.reasoning.get("budget"), encode(start) if start else None
            )
        seq.generator = make_generator(params.seed, self.bundle.device)
        self.speculator.attach(seq, params.prediction)
        seq.detokenizer = IncrementalDetokenizer(
            self.tokenizer, token_ids, stop=params.stop, include_stop_str=params.include_stop_str_in_output
        )
        return seq

    def abort(self, request_id: str) -> bool:
        """Frees the request's slots and blocks now (every completion of it); its final output
        comes with the next step."""
        group = self.requests.pop(request_id, None)
        if group is None:
            return False
        running = [seq for seq in group if not seq.is_finished]
        for seq in running:
            self.scheduler.finish(seq, "abort")
        last = running[0] if running else group[0]
        self._pending.append(self._output(last, "", [], finished=True, finish_reason="abort"))
        return True

    def has_work(self) -> bool:
        return self.scheduler.has_work() or bool(self._pending)

    # -- the step -------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        outputs, self._pending = self._pending, []
        started = time.perf_counter()
        self.speculator.propose(self.scheduler.running, self.max_model_len)
        batch = self.scheduler.schedule()
        self.last_trace = StepTrace.of(batch)
        if batch.is_empty:
            return outputs
        self.num_steps += 1
        draft_rows = batch.num_verify_rows - len(batch.verifies)
        # constrained rows' masks are computed on the mask thread while the model runs
        masks = self._grammars.start_masks(batch.sampling) if self._grammars is not None else NO_MASKS
        try:
            if self.step_fault_hook is not None:
                self.step_fault_hook()
            step = self.model_runner.run(batch)
            for seq, n in [(s, 1) for s in batch.decodes] + batch.prefills:
                seq.num_computed_tokens += n
                self.block_manager.register_computed_blocks(seq)
            for seq, first, logits in step.prompt:
                self._record_prompt_logprobs(seq, first, logits)
            for seq, vector in step.pooled:  # embedding requests end with their prompt: no decode slot
                self.scheduler.finish(seq, "stop")
                outputs.append(
                    self._output(seq, "", [], finished=self._request_done(seq), finish_reason="stop", embedding=vector.tolist())
                )
            logits, seqs = self._with_forks(step.sampling, step.sampling_seqs) if step.sampling is not None else (None, [])
            allowed = self._collect_masks(masks, seqs + batch.verifies)
            outputs.extend(self._sample(step, logits, seqs, batch.verifies if step.verify is not None else [], allowed))
        except Exception as exc:  # a failed forward pass fails its requests, not the engine
            masks.settle()
            if is_fatal_device_error(exc):  # ... unless it broke the device: then no later step would run
                log.critical("the device failed; the engine ends: %s: %s", type(exc).__name__, exc)
                raise FatalDeviceError(f"{type(exc).__name__}: {exc}") from exc
            log.exception("model step failed")
            outputs.extend(self._fail(batch, exc))
        self.speculator.observe_step(time.perf_counter() - started, bool(batch.prefills), draft_rows)
        return outputs

    def _with_forks(self, logits, seqs: list[Sequence]):
        """A sequence whose prompt was just computed and that has completions to fork forks them
        now; each samples its first token from the same logits row, with its own generator."""
        if not any(seq.forks_left for seq in seqs):
            return logits, seqs
        rows, all_seqs, copies = [], [], []
        for row, seq in enumerate(seqs):
            rows.append(row)
            all_seqs.append(seq)
            for child in self._fork(seq, copies):
                rows.append(row)
                all_seqs.append(child)
        return self.model_runner.rows_for_forks(logits, rows, copies), all_seqs

    def _fork(self, parent: Sequence, copies: list[tuple[int, int]]) -> list[Sequence]:
        """The parent's other completions, sharing its prompt's computed blocks; those that run now
        (the block copies they need are added to `copies`)."""
        count, parent.forks_left = parent.forks_left, 0
        running = []
        prompt = parent.token_ids[: parent.num_prompt_tokens]
        for index in range(1, count + 1):
            child = self._sequence(parent.request_id, prompt, parent.params.child(index), index)
            child.forks_left = 0  # its params still say n: only the parent forks
            child.prompt_logprobs = None  # reported once, with completion 0
            child.arrival_time = parent.arrival_time
            child.scheduled_time = parent.scheduled_time  # it waited as long as its parent, no longer
            self.requests[parent.request_id].append(child)
            forked = self.scheduler.fork(parent, child)
            if forked is None:
                continue  # no block for its copy: it waits, then prefills through the prefix cache
            copies.extend(forked)
            child.reported_cached_tokens = parent.reported_cached_tokens
            running.append(child)
        return running

    def _record_prompt_logprobs(self, seq: Sequence, first: int, logits) -> None:
        """Logprobs of the prompt tokens at positions first+1.., and the top alternatives at each."""
        targets = seq.token_ids[first + 1 : first + 1 + logits.shape[0]]
        text = seq.detokenizer.token_text
        rows = self.sampler.prompt_logprobs(logits, targets, seq.params.prompt_logprobs or 0)
        for i, (token_id, (lp, top)) in enumerate(zip(targets, rows)):
            seq.prompt_logprobs[first + 1 + i] = TokenLogprob(
                token_id=token_id, token=text(token_id), logprob=lp, top=[(t, text(t), v) for t, v in top]
            )

    def _collect_masks(self, pending: PendingMasks, seqs: list[Sequence]) -> dict:
        """{id(seq): allowed tokens} for the constrained sequences about to sample."""
        masks, times = pending.collect(seqs)
        self.grammar_mask_seconds += times.computing
        self.grammar_mask_wait_seconds += times.waited
        self.grammar_mask_rows += times.rows
        return masks

    def _context(self, seq: Sequence, allowed, guessed: list[int] = ()) -> SamplingContext:
        """A row's sampling context; `guessed`: the guesses before this row, taken as written."""
        return SamplingContext(
            params=seq.params,
            prompt_token_ids=seq.token_ids[: seq.num_prompt_tokens],
            output_token_ids=seq.output_token_ids + list(guessed),
            generator=seq.generator,
            eos_token_ids=self.bundle.eos_token_ids,
            allowed=allowed,
        )

    def _sample(self, step, logits, seqs: list[Sequence], verifies: list[Sequence], masks: dict) -> list[RequestOutput]:
        """Every row that samples this step, plain and verifying, in one sampler call: the step's
        one transfer to the host."""
        contexts = [self._context(seq, self._allowed(seq, masks)) for seq in seqs]
        saved = {}
        for seq in verifies:
            contexts.extend(self._verify_contexts(seq, masks))
            if seq.generator is not None:
                saved[id(seq)] = seq.generator.get_state()
        if not contexts:
            return []
        rows = step.joined(logits)
        sampled = self.sampler(rows, contexts)
        now = time.monotonic()
        self._count_tokens(now, len(seqs))
        outputs = []
        for seq, token_id, logprob in zip(seqs, sampled.token_ids, sampled.logprobs):
            outputs.append(self._append_token(seq, token_id, logprob, now))
        if verifies:
            verified = SamplerOutput(sampled.token_ids[len(seqs) :], sampled.logprobs[len(seqs) :])
            outputs.extend(self._verify(verified, verifies, saved, rows.shape[1], now))
        return outputs

    def _count_tokens(self, now: float, count: int) -> None:
        self._recent_tokens.append((now, count))
        self.total_generated_tokens += count

    def _verify_contexts(self, seq: Sequence, masks: dict) -> list[SamplingContext]:
        """A verifying sequence's k+1 rows' contexts: each row sampled as the next token would be,
        its context taking the guesses before it as written (its penalties, its grammar's mask,
        min_tokens)."""
        draft = seq.draft
        row_masks = self._guess_masks(seq, masks) if seq.active_matcher is not None else [None] * (len(draft) + 1)
        return [self._context(seq, row_masks[i], draft[:i]) for i in range(len(draft) + 1)]

    def _verify(self, sampled: SamplerOutput, seqs: list[Sequence], saved: dict, vocab: int, now: float) -> list[RequestOutput]:
        """Guesses are accepted while they equal what their row sampled; the first row that
        differs (or the row after the last guess) gives one more token. The reply is therefore
        exactly the tokens sampling alone would have written: greedy token for token, sampled in
        distribution, and with a seed the same tokens, since the generator is put back where the
        written tokens alone would have left it (sampler.rewind_generator)."""
        outputs, row = [], 0
        for seq in seqs:
            draft, rows = seq.draft, len(seq.draft) + 1
            tokens, logprobs = sampled.token_ids[row : row + rows], sampled.logprobs[row : row + rows]
            row += rows
            if seq.is_finished:  # aborted while the step ran
                continue
            accepted = accepted_count(draft, tokens)
            if id(seq) in saved and accepted < len(draft):
                rewind_generator(seq.generator, saved[id(seq)], accepted + 1, vocab, seq.params)
            seq.num_computed_tokens += 1 + accepted  # the verified tokens' K/V; the rejected slots are dropped
            written = []
            for token_id, logprob in zip(tokens[: accepted + 1], logprobs):
                written.append(self._append_token(seq, token_id, logprob, now))
                if seq.is_finished:
                    break
            self.speculator.record(seq, accepted, len(written))
            # the last output carries the counts with this verification in them
            written[-1] = dataclasses.replace(written[-1], **self._spec_counts(seq))
            self._count_tokens(now, len(written))
            if not seq.is_finished:
                self.block_manager.truncate(seq)
                self.block_manager.register_computed_blocks(seq)
            outputs.append(merged_output(written))
        return outputs

    def _guess_masks(self, seq: Sequence, masks: dict) -> list:
        """A constrained sequence's mask for each verification row: the grammar after each guess
        (proposed only where the grammar accepts it), walked forward and back."""
        matcher, draft = seq.matcher, seq.draft
        rows = [masks.get(id(seq))]
        consumed = 0
        for token_id in draft:
            if not matcher.consume_token(token_id):
                break  # (proposed guesses were validated: not reached) its row cannot accept it anyway
            consumed += 1
            rows.append(self.grammars.allowed([matcher])[0])
        if consumed and not matcher.rollback(consumed):
            raise RuntimeError("the grammar matcher could not go back over the guesses")
        return rows + [None] * (len(draft) + 1 - len(rows))  # rows past a refused guess are never used

    def _marker_ids(self, marker: str) -> list[int]:
        """A reasoning marker's token ids, tokenized once per marker."""
        if marker not in self._markers:
            self._markers[marker] = self.tokenizer.encode(marker, add_special_tokens=False)
        return self._markers[marker]

    def _allowed(self, seq: Sequence, masks: dict):
        """The tokens the sequence may sample: its grammar's, or only the next token of its reasoning's
        end marker once its thinking budget is spent."""
        forced = seq.reasoning.forced_token if seq.reasoning is not None else None
        if forced is not None:
            return one_token_mask(self.bundle.model.vocab_size, forced)
        return masks.get(id(seq))

    def _append_token(self, seq: Sequence, token_id: int, logprob, now: float) -> RequestOutput:
        first = seq.first_token_time is None
        seq.token_ids.append(token_id)
        if seq.active_matcher is not None:
            seq.matcher.consume_token(token_id)
        if seq.reasoning is not None and seq.reasoning.observe(seq.output_token_ids) and seq.matcher is not None:
            for written in seq.output_token_ids:  # no reasoning after all: the grammar reads the reply from its start
                seq.matcher.consume_token(written)
        if first:
            seq.first_token_time = now
        text = seq.detokenizer.add_tokens([token_id])
        if logprob is not None:
            logprob.token = seq.detokenizer.token_text(token_id)
            logprob.top = [(tid, seq.detokenizer.token_text(tid), lp) for tid, _, lp in logprob.top]
        reason = self._finish_reason(seq, token_id)
        done = False
        if reason is not None:
            if seq.detokenizer.stop_matched is None:
                text += seq.detokenizer.finish()
            self.scheduler.finish(seq, reason)
            done = self._request_done(seq)
        prompt_logprobs = seq.prompt_logprobs if first and seq.prompt_logprobs is not None else None
        return self._output(
            seq,
            text,
            [token_id],
            finished=done,
            finish_reason=reason,
            logprobs=[logprob] if logprob else None,
            prompt_logprobs=prompt_logprobs,
        )

    def _request_done(self, seq: Sequence) -> bool:
        """Whether `seq` was the request's last unfinished completion (the request then ends)."""
        group = self.requests.get(seq.request_id, [])
        if any(not s.is_finished or s.forks_left for s in group):
            return False
        self.requests.pop(seq.request_id, None)
        return True

    def _finish_reason(self, seq: Sequence, token_id: int) -> str | None:
        params = seq.params
        if seq.detokenizer.stop_matched is not None:
            seq.stop_reason = seq.detokenizer.stop_matched
            return "stop"
        if token_id in self.bundle.eos_token_ids and not params.ignore_eos:
            return "stop"
        if token_id in params.stop_token_ids:
            seq.stop_reason = token_id
            return "stop"
        if seq.active_matcher is not None and (seq.matcher.is_stopped() or seq.matcher.is_error()):
            return "stop"  # the grammar is complete: nothing more may follow
        if (params.max_tokens is not None and seq.num_output_tokens >= params.max_tokens) or len(seq) >= self.max_model_len:
            return "length"
        return None

    def _fail(self, batch: ScheduledBatch, exc: Exception) -> list[RequestOutput]:
        """Every request with a sequence in the failed step ends with an error, all its completions."""
        outputs = []
        for seq in batch.decodes + batch.verifies + [s for s, _ in batch.prefills]:
            group = self.requests.pop(seq.request_id, None)
            if group is None:
                continue  # its request already failed through another completion
            for member in group:
                if not member.is_finished:
                    self.scheduler.finish(member, "error")
            outputs.append(self._output(seq, "", [], finished=True, finish_reason="error", error=f"{type(exc).__name__}: {exc}"))
        return outputs

    def _output(
        self,
        seq: Sequence,
        text: str,
        token_ids: list[int],
        *,
        finished: bool,
        finish_reason: str | None = None,
        logprobs=None,
        error=None,
        prompt_logprobs=None,
        embedding=None,
    ) -> RequestOutput:
        return RequestOutput(
            request_id=seq.request_id,
            text=text,
            token_ids=token_ids,
            finished=finished,
            finish_reason=finish_reason if finish_reason is not None else (seq.finish_reason if finished else None),
            prompt_tokens=seq.num_prompt_tokens,
            completion_tokens=seq.num_output_tokens,
            logprobs=logprobs,
            error=error,
            arrival_time=seq.arrival_time,
            scheduled_time=seq.scheduled_time,
            first_token_time=seq.first_token_time,
            finished_time=seq.finished_time,
            index=seq.index,
            stop_reason=seq.stop_reason,
            num_cached_tokens=seq.reported_cached_tokens,
            prompt_logprobs=prompt_logprobs,
            reasoning_tokens=seq.reasoning.tokens if seq.reasoning is not None else 0,
            embedding=embedding,
            **self._spec_counts(seq),
        )

    @staticmethod
    def _spec_counts(seq: Sequence) -> dict:
        """A completion's speculation counts so far, as RequestOutput reports them."""
        spec = seq.spec
        if spec is None:
            return {}
        return {
            "spec_draft_tokens": spec.proposed,
            "spec_accepted_tokens": spec.accepted,
            "prediction_draft_tokens": spec.prediction_proposed,
            "prediction_accepted_tokens": spec.prediction_accepted,
        }

    # -- observation ----------------------------------------------------------------------

    def tokens_per_second(self) -> float:
        now = time.monotonic()
        while self._recent_tokens and now - self._recent_tokens[0][0] > THROUGHPUT_WINDOW_S:
            self._recent_tokens.popleft()
        if not self._recent_tokens:
            return 0.0
        span = max(now - self._recent_tokens[0][0], 1.0)
        return sum(n for _, n in self._recent_tokens) / span

    def stats(self) -> EngineStats:
        blocks = self.block_manager
        slots = [
            {"request_id": seq.request_id, "choice": seq.index, "tokens": seq.num_output_tokens}
            if seq
            else {"request_id": None, "choice": None, "tokens": 0}
            for seq in self.scheduler.slots
        ]
        return EngineStats(
            model=self.model_name,
            device=self.device,
            dtype=self.dtype,
            num_slots=self.num_slots,
            running=len(self.scheduler.running),
            waiting=len(self.scheduler.waiting),
            slots=slots,
            kv_blocks_used=blocks.num_used_blocks,
            kv_blocks_total=blocks.num_blocks,
            kv_pool_mb=self.model_runner.kv_pool_bytes / 2**20,
            weights_mb=self.weights_mb,
            kv_cache_usage=blocks.num_used_blocks / blocks.num_blocks,
            prefix_cache_queries=blocks.prefix_queries,
            prefix_cache_hits=blocks.prefix_hits,
            prefix_cache_hit_rate=blocks.prefix_hits / blocks.prefix_queries if blocks.prefix_queries else 0.0,
            num_preemptions=self.scheduler.num_preemptions,
            tokens_per_second=self.tokens_per_second(),
            total_tokens_generated=self.total_generated_tokens,
            total_prompt_tokens=self.total_prompt_tokens,
            uptime_seconds=time.monotonic() - self.started_at,
            steps=self.num_steps,
            grammar_mask_seconds=self.grammar_mask_seconds,
            grammar_mask_rows=self.grammar_mask_rows,
            grammar_mask_wait_seconds=self.grammar_mask_wait_seconds,
            speculative=self.speculator.mode if self.speculator.enabled else "off",
            spec_draft_tokens=self.speculator.num_draft_tokens,
            spec_accepted_tokens=self.speculator.num_accepted_tokens,
            spec_verifications=self.speculator.verification_steps,
            spec_verified_tokens=self.speculator.verified_tokens,
        )
