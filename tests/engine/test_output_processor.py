"""OutputProcessor: a sampled token written, its end decided, the request's output made (no model)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from inference.engine.detokenizer import IncrementalDetokenizer
from inference.engine.kv_cache.coordinator import KVCacheCoordinator
from inference.engine.output_processor import OutputProcessor
from inference.engine.sample.sampling_params import SamplingParams
from inference.engine.scheduler import Scheduler
from inference.engine.sequence import Sequence

EOS = 2


@pytest.fixture
def make(smollm_tokenizer):
    scheduler = Scheduler(KVCacheCoordinator(64, 4), max_num_seqs=4, max_num_batched_tokens=64)
    requests: dict[str, list[Sequence]] = {}
    processor = OutputProcessor(scheduler, requests, SimpleNamespace(eos_token_ids={EOS}), max_model_len=12)

    def add(request_id: str, params: SamplingParams, prompt=(100, 101, 102)) -> Sequence:
        seq = Sequence(request_id, list(prompt), params)
        seq.detokenizer = IncrementalDetokenizer(smollm_tokenizer, list(prompt), stop=params.stop)
        requests.setdefault(request_id, []).append(seq)
        scheduler.add(seq)
        return seq

    return processor, add


@pytest.mark.parametrize(
    "params, tokens, reason",
    [
        (SamplingParams(max_tokens=3), [50, 51, 52], "length"),
        (SamplingParams(max_tokens=20), [50, EOS], "stop"),
        (SamplingParams(max_tokens=20, ignore_eos=True), [50, EOS, 51], None),
        (SamplingParams(max_tokens=20, stop_token_ids=[51]), [50, 51], "stop"),
        (SamplingParams(max_tokens=None), [50] * 9, "length"),  # the context (12) is full
    ],
)
def test_a_completion_ends_for_the_first_reason_that_holds(make, params, tokens, reason):
    processor, add = make
    seq = add("r", params)
    outputs = [processor.append_token(seq, token_id, None, now=1.0) for token_id in tokens]
    assert [out.finish_reason for out in outputs[:-1]] == [None] * (len(tokens) - 1)
    assert outputs[-1].finish_reason == reason and outputs[-1].finished == (reason is not None)
    assert outputs[-1].completion_tokens == len(tokens) and seq.first_token_time == 1.0
    assert processor.requests == ({} if reason else {"r": [seq]})  # an ended request is forgotten


def test_a_request_ends_with_its_last_completion(make):
    processor, add = make
    first, second = add("n", SamplingParams(max_tokens=1)), add("n", SamplingParams(max_tokens=2))
    out = processor.append_token(first, 50, None, now=1.0)
    assert out.finish_reason == "length" and not out.finished  # the other completion still runs
    processor.append_token(second, 50, None, now=1.0)
    assert processor.append_token(second, 51, None, now=2.0).finished and processor.requests == {}


def test_an_abort_ends_every_completion_and_an_unknown_id_is_none(make):
    processor, add = make
    seqs = [add("gone", SamplingParams(max_tokens=5)) for _ in range(2)]
    out = processor.aborted("gone")
    assert (out.finished, out.finish_reason) == (True, "abort") and all(s.finish_reason == "abort" for s in seqs)
    assert processor.aborted("gone") is None and processor.aborted("never") is None
