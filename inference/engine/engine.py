"""LLMEngine: requests in, one scheduled forward pass per `step()`, per-request deltas out.

Synchronous and single-threaded on purpose: `engine_thread.EngineThread` drives it from a
background thread (in the web process, or in `manage.py runengine`'s worker); tests drive it directly.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass

from .config import EngineConfig
from .engine_state import ModelInfo
from .engine_stats import EngineStats
from .errors import FatalDeviceError, is_fatal_device_error
from .fault_hooks import FaultHooks
from .kv_cache.block_pool import BlockCopy
from .kv_cache.coordinator import KVCacheCoordinator
from .kv_cache.memory_plan import fit_context, plan_kv_blocks
from .layers.pooling import pooling_for
from .loader import ModelBundle, load_model
from .model_runner import ModelRunner, StepLogits
from .output_processor import OutputProcessor
from .outputs import RequestOutput
from .prompt import check_request, prompt_token_ids
from .resume import check_resume, replay
from .runner.memory_profile import engine_bytes
from .sample.request_decoding import RequestDecoding
from .sample.sampler import Sampler, SamplerOutput
from .sample.sampling_params import SamplingParams
from .sample.structured import NO_MASKS, Grammars, PendingMasks
from .sample.tool_call_steps import ToolCallSteps
from .scheduler import ScheduledBatch, Scheduler
from .sequence import Sequence
from .spec_decode.proposer import Speculator
from .spec_decode.verification import Verifier, verify_contexts
from .timing.step_times import StepTimes

log = logging.getLogger("minivllm.engine")


@dataclass
class StepSample:
    """What a step's rows sampled: plain rows' sequences, then the verifying ones' k+1 rows each."""

    seqs: list[Sequence]
    verifies: list[Sequence]
    sampled: SamplerOutput
    saved: dict  # a seeded verification's generator state before sampling (verify rewinds it)
    vocab: int
    now: float


class LLMEngine(RequestDecoding, ToolCallSteps):
    def __init__(self, config: EngineConfig | None = None, bundle: ModelBundle | None = None):
        self.config = config = config or EngineConfig()
        self.bundle = bundle = bundle or load_model(config)
        model, device = bundle.model, bundle.device
        self.tokenizer = bundle.tokenizer
        self.kv_dtype = config.kv_dtype_for(bundle.dtype, device.type, bundle.exact_format)
        self.num_slots = config.slots_for(device.type)
        num_blocks = config.num_kv_blocks or plan_kv_blocks(
            config, bundle, self.kv_dtype, self.num_slots, engine_bytes(config, bundle, self.kv_dtype, self.num_slots)
        )
        self.max_model_len = fit_context(num_blocks, config.block_size, bundle.max_model_len)
        # one manager per kind of cache the model keeps (kv_cache/coordinator.py)
        self.kv_cache = KVCacheCoordinator.for_model(model, num_blocks, config, self.num_slots, self.max_model_len)
        self.scheduler = Scheduler(self.kv_cache, self.num_slots, config.max_num_batched_tokens)
        self.model_runner = ModelRunner(
            model,
            num_blocks,
            config.block_size,
            bundle.dtype,
            device,
            self.kv_dtype,
            cpu_step=bundle.cpu_step,
            num_window_blocks=self.kv_cache.num_window_blocks,
            num_state_slots=self.kv_cache.num_state_slots,
        )
        if device.type == "cuda" and config.cuda_graphs == "auto" and not self.kv_cache.others:
            # every table as wide as the longest context a sequence reaches, its guesses included
            max_blocks = -(-(self.max_model_len + config.spec_tokens + 1) // config.block_size)
            self.model_runner.enable_static_decode(self.num_slots, max_blocks, graphs=True)
        self.pooling = pooling_for(config.pooling, config.model)
        self.weights_mb = bundle.weight_bytes / 2**20  # counted once: the weights never change after load
        # what runs, for people (the dashboard, /v1/models): the family and its attention, the formats
        self.architecture = f"{bundle.architecture or 'unknown'}, {bundle.attention_layout}"
        self.weights = f"{bundle.weights_label or bundle.dtype_name}; KV {str(self.kv_dtype).removeprefix('torch.')}"
        # what the web side needs of the model, built once here (engine clients hand it on as it is)
        dims = self.pooling.matryoshka_dimensions
        self.model_info = ModelInfo(
            self.model_name,
            self.tokenizer,
            self.max_model_len,
            num_blocks * config.block_size,
            model.vocab_size,
            bundle.sampling_defaults,
            self.num_slots,
            pooling=self.pooling.kind,
            hidden_size=getattr(getattr(model, "cfg", None), "hidden_size", None),
            matryoshka_dimensions=list(dims) if dims is not None else None,
            architecture=self.architecture,
            weights=self.weights,
        )
        self.sampler = Sampler()
        self.speculator = Speculator(config.speculative, config.spec_tokens, config.spec_ngram_min, config.spec_ngram_max)
        self.requests: dict[str, list[Sequence]] = {}  # each request's completions (n of them once forked)
        self.output_processor = OutputProcessor(self.scheduler, self.requests, bundle, self.max_model_len)
        self.verifier = Verifier(self.output_processor, self.speculator, self.kv_cache)
        self._pending: list[RequestOutput] = []  # outputs of aborts, delivered by the next step
        self.started_at = time.monotonic()
        self.num_steps = 0
        self.step_times = StepTimes()  # where decode steps' time goes (the dashboard's overhead per step)
        self.total_prompt_tokens = 0
        self.test_faults = FaultHooks()  # test-only: its step hook (engine/fault_hooks.py)
        self._grammars: Grammars | None = None
        self.grammar_mask_seconds = 0.0
        self.grammar_mask_rows = 0
        self.grammar_mask_wait_seconds = 0.0  # the part of the masks' time the loop waited, after the forward
        self._grammars_lock = threading.Lock()
        self._markers: dict[str, list[int]] = {}  # reasoning markers' token ids
        self._hidden_ids: frozenset[int] | None = None  # the special tokens replies skip (detokenizer.py)
        kv_dtype = str(self.kv_dtype).removeprefix("torch.")
        log.info(
            "engine ready: %s on %s (%s), %d KV blocks of %d tokens (%s), %d slots",
            *(self.model_name, self.device, self.dtype, num_blocks, config.block_size, kv_dtype, self.num_slots),
        )
        if bundle.start_phases is not None:  # the load's first engine: what the start spent, part by part
            bundle.start_phases.lap("KV pool and runner")
            log.info("start-up: %s", bundle.start_phases.line())
            bundle.start_phases = None

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
        pool, ids (prompt, logit_bias) outside the vocabulary, or more completions than slots."""
        check_request(
            prompt_token_ids, params, vocab_size=self.bundle.model.vocab_size, limit=self.token_limit, num_slots=self.num_slots
        )

    def add_request(
        self, request_id: str, prompt_token_ids: list[int], params: SamplingParams | None = None, resume: list | None = None
    ) -> None:
        """Queues a prompt given as token ids (`tokenize` makes them from text). With params.n > 1
        the prompt is computed once and its n completions fork from it (`_fork`). `resume`: a request
        another engine was serving, per completion the tokens it delivered (None: that completion
        had finished); each unfinished one carries on from there (engine/resume.py)."""
        params = params or SamplingParams()
        if request_id in self.requests:
            raise ValueError(f"request id {request_id!r} is already in use")
        if isinstance(prompt_token_ids, str):
            raise TypeError("add_request takes token ids; engine.tokenize(text) makes them")
        token_ids = list(prompt_token_ids)
        self.check_request(token_ids, params)
        if resume is not None:
            check_resume(resume, params.n)
            seqs = []
            for index, delivered in enumerate(resume):
                if delivered is not None:
                    seq = self._sequence(request_id, token_ids, params.child(index), index)
                    seq.forks_left = 0  # every unfinished completion is its own sequence from the start
                    replay(self, seq, delivered)
                    seqs.append(seq)
        else:
            seqs = [self._sequence(request_id, token_ids, params, index=0)]
        self.requests[request_id] = seqs
        for seq in seqs:
            self.scheduler.add(seq)
        self.total_prompt_tokens += len(token_ids)

    def abort(self, request_id: str) -> bool:
        """Frees the request's slots and blocks now (every completion of it); its final output
        comes with the next step."""
        output = self.output_processor.aborted(request_id)
        if output is None:
            return False
        self._pending.append(output)
        return True

    def has_work(self) -> bool:
        return self.scheduler.has_work() or bool(self._pending)

    # -- the step -------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """One pass of the loop: schedule -> run the model -> sample and verify -> the outputs."""
        outputs, self._pending = self._pending, []
        times = self.step_times
        times.begin()
        started = time.perf_counter()
        self.speculator.propose(self.scheduler.running, self.max_model_len)
        batch = self.scheduler.schedule()
        if batch.is_empty:
            return outputs
        self.num_steps += 1
        draft_rows = batch.num_verify_rows - len(batch.verifies)
        # constrained rows' masks are computed on the mask thread while the model runs
        masks = self._grammars.start_masks(batch.sampling) if self._grammars is not None else NO_MASKS
        counted = not batch.prefills  # a prefill chunk's forward would swamp the loop's own time
        try:
            self.test_faults.fire("step")
            times.lap("schedule")
            inputs = self.model_runner.prepare(batch)
            times.lap("inputs")
            step = self.model_runner.compute(inputs)
            times.lap("forward")
            outputs.extend(self._computed(batch, step))
            sampled = self._sample(batch, step, masks)
            times.lap("sample")
            detokenizing = self.output_processor.detokenize_seconds
            outputs.extend(self._process(sampled) if sampled is not None else [])
            times.lap("outputs")
            times.move(self.output_processor.detokenize_seconds - detokenizing, "outputs", "detokenize")
        except Exception as exc:  # a failed forward pass fails its requests, not the engine
            masks.settle()
            if is_fatal_device_error(exc):  # ... unless it broke the device: then no later step would run
                log.critical("the device failed; the engine ends: %s: %s", type(exc).__name__, exc)
                raise FatalDeviceError(f"{type(exc).__name__}: {exc}") from exc
            log.exception("model step failed")
            outputs.extend(self.output_processor.failed(batch, exc))
            counted = False
        times.end(counted)
        self.speculator.observe_step(time.perf_counter() - started, bool(batch.prefills), draft_rows)
        return outputs

    def _computed(self, batch: ScheduledBatch, step: StepLogits) -> list[RequestOutput]:
        """The step's tokens are in the cache: their blocks become findable, asked-for prompt
        logprobs are recorded, and embedding requests whose prompt completed end."""
        for seq, n in [(s, 1) for s in batch.decodes] + batch.prefills:
            seq.num_computed_tokens += n
            self.kv_cache.register_computed_blocks(seq)
        for seq, first, logits in step.prompt:
            # logprobs of the prompt tokens at positions first+1.., and the top alternatives at each
            targets = seq.token_ids[first + 1 : first + 1 + logits.shape[0]]
            rows = self.sampler.prompt_logprobs(logits, targets, seq.params.prompt_logprobs or 0)
            self.output_processor.record_prompt_logprobs(seq, first, targets, rows)
        return [self.output_processor.pooled(seq, vector.tolist()) for seq, vector in step.pooled]

    def _sample(self, batch: ScheduledBatch, step: StepLogits, pending: PendingMasks) -> StepSample | None:
        """Every row that samples this step, plain and verifying, in one sampler call: the step's
        one transfer to the host (None where no row samples)."""
        logits, seqs = self._with_forks(step.sampling, step.sampling_seqs) if step.sampling is not None else (None, [])
        verifies = batch.verifies if step.verify is not None else []
        masks = self._collect_masks(pending, seqs + batch.verifies)
        contexts = [self._context(seq, self._allowed(seq, masks)) for seq in seqs]
        saved = {}
        for seq in verifies:
            contexts.extend(verify_contexts(seq, masks, self._grammars, self._context))
            if seq.generator is not None:
                saved[id(seq)] = seq.generator.get_state()
        if not contexts:
            return None
        rows = step.joined(logits)
        states = self._states_at_start(seqs)  # a redrawn opening token reuses its first draw's noise
        sampled = self.sampler(rows, contexts)
        self._open_calls_at_start(seqs, rows, sampled, states)
        return StepSample(seqs, verifies, sampled, saved, rows.shape[1], time.monotonic())

    def _process(self, sample: StepSample) -> list[RequestOutput]:
        """Each plain row's token written, then each verification's accepted guesses and one more."""
        seqs, sampled, now, processor = sample.seqs, sample.sampled, sample.now, self.output_processor
        processor.generated.add(now, len(seqs))
        outputs = [processor.append_token(seq, t, lp, now) for seq, t, lp in zip(seqs, sampled.token_ids, sampled.logprobs)]
        self._watch_tool_calls(seqs)
        if sample.verifies:
            verified = SamplerOutput(sampled.token_ids[len(seqs) :], sampled.logprobs[len(seqs) :])
            outputs += self.verifier.verify(verified, sample.verifies, sample.saved, sample.vocab, now)
            self._watch_tool_calls(sample.verifies)  # a guess stops before a tag: the token after it opens one
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

    def _fork(self, parent: Sequence, copies: list[BlockCopy]) -> list[Sequence]:
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

    # -- observation ----------------------------------------------------------------------

    def stats(self) -> EngineStats:
        return EngineStats.of(self)
