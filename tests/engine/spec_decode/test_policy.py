"""Who guesses, and how much (engine/spec_decode/proposer.py, spec_decode/ngram_index.py): the lookup finds the latest
earlier occurrence of the longest recent n-gram; `auto` proposes a guess only where its measured
cost and the sequence's hit rate say it pays, and backs off a sequence whose guesses fail."""

from __future__ import annotations

import pytest

from inference.engine.sample.sampling_params import SamplingParams
from inference.engine.sequence import Sequence, SequenceStatus
from inference.engine.spec_decode.ngram_index import NgramIndex
from inference.engine.spec_decode.proposer import SAMPLES_BEFORE_TRUSTED, Speculator


def test_the_longest_recent_ngram_finds_what_followed_its_latest_occurrence():
    tokens = [1, 2, 3, 9, 1, 2, 3, 4, 5, 6, 7, 8, 2, 3]
    index = NgramIndex(tokens, min_n=2, max_n=4)
    # "2 3" occurred at 1-2 (then 9) and at 5-6 (then 4 5 6): the latest wins
    assert index.propose(3) == [4, 5, 6]
    tokens.extend([4, 5, 6])  # the guess came true: the index grows with the list it reads
    assert index.propose(2) == [7, 8]
    tokens.append(42)  # nothing ends in 42 earlier
    assert index.propose(4) == []


def test_a_longer_match_wins_over_a_later_shorter_one():
    tokens = [7, 8, 9, 10, 11, 0, 8, 9, 12, 5, 7, 8, 9]
    index = NgramIndex(tokens, min_n=2, max_n=3)
    assert index.propose(2) == [10, 11]  # "7 8 9" beats the later "8 9" (which was followed by 12)


def test_another_lists_suffix_looks_up_in_this_index():
    prediction = [5, 6, 7, 8, 9, 10]
    index = NgramIndex(prediction, min_n=2, max_n=4)
    assert index.propose(3, suffix=[1, 2, 6, 7]) == [8, 9, 10]
    assert index.propose(3, suffix=[1, 2, 3]) == []


def decoding(token_ids: list[int], **params) -> Sequence:
    seq = Sequence("r", token_ids, SamplingParams(max_tokens=200, **params))
    seq.token_ids.append(token_ids[0])  # one output token, not yet computed: the next step decodes it
    seq.status = SequenceStatus.RUNNING
    seq.num_computed_tokens = len(seq) - 1
    return seq


REPEATING = [3, 4, 5, 6, 7, 8] * 4


def measured(speculator: Speculator, seqs: list[Sequence], step_time) -> None:
    """Runs the policy over steps that take `step_time(draft rows)` seconds."""
    for _ in range(4 * SAMPLES_BEFORE_TRUSTED):
        speculator.propose(seqs, max_model_len=4096)
        rows = sum(len(s.draft) for s in seqs)
        speculator.observe_step(step_time(rows), had_prefill=False, draft_rows=rows)


def test_at_one_stream_a_cheap_row_keeps_guessing():
    speculator = Speculator("auto", max_tokens=8)
    seq = decoding(REPEATING)
    speculator.attach(seq, None)
    measured(speculator, [seq], lambda rows: 0.050 + 0.00025 * rows)  # a memory-bound step: a row costs 0.5%
    assert speculator.buckets[1].threshold(1) == pytest.approx(0.005)
    speculator.propose([seq], max_model_len=4096)
    assert len(seq.draft) == 7  # 0.5^7 > 0.005 > 0.5^8


def test_one_stalled_step_does_not_switch_guessing_off():
    """A cold shape's first run (or a page fault, another process on the core) can take twenty
    steps' time once: the cost estimate must not price a draft row off for hundreds of steps."""
    speculator = Speculator("auto", max_tokens=8)
    seq = decoding(REPEATING)
    speculator.attach(seq, None)
    stalls = iter([False, True] + [False] * 4 * SAMPLES_BEFORE_TRUSTED)  # the first drafted step stalls

    def step_time(rows):
        return (0.200 if next(stalls) else 0.010) + 0.0005 * rows

    measured(speculator, [seq], step_time)
    bucket = speculator.buckets[1]
    assert bucket.drafted.seconds < 0.020 and bucket.threshold(1) < 0.2
    speculator.propose([seq], max_model_len=4096)
    assert seq.draft  # still guessing
    bucket.drafted.add(1.0, 8)  # a later stall moves the estimate by at most OUTLIER_FACTOR's share
    assert bucket.drafted.seconds < 0.015


def test_replies_with_nothing_to_guess_leave_the_drafted_probe_open():
    """Steps where no sequence has a guess measure nothing about a draft row: after many of them
    a sequence that can guess (here from its prediction) still gets to, and the row is priced."""
    speculator = Speculator("auto", max_tokens=8)
    plain = decoding(list(range(100, 140)))  # nothing repeats: no n-gram to look up
    speculator.attach(plain, None)
    measured(speculator, [plain], lambda rows: 0.010 + 0.0005 * rows)
    measured(speculator, [plain], lambda rows: 0.010 + 0.0005 * rows)
    assert speculator.buckets[1].drafted.samples == 0
    predicted = decoding([1, 2, 3])
    speculator.attach(predicted, [1, 4, 5, 6, 7, 8, 9, 10])  # the reply so far ([1]) follows it
    measured(speculator, [predicted], lambda rows: 0.010 + 0.0005 * rows)
    assert speculator.buckets[1].drafted.samples >= SAMPLES_BEFORE_TRUSTED
    assert predicted.spec.draft_from_prediction and predicted.spec.draft[:2] == [4, 5]  # and it guesses on


def test_a_compute_bound_batch_stops_guessing():
    speculator = Speculator("auto", max_tokens=8)
    seqs = [decoding(REPEATING) for _ in range(32)]
    for seq in seqs:
        speculator.attach(seq, None)
    measured(speculator, seqs, lambda rows: 0.100 * (32 + rows) / 32)  # compute-bound: time follows the rows
    assert speculator.buckets[6].threshold(32) == pytest.approx(1.0)
    speculator.propose(seqs, max_model_len=4096)
    assert all(s.draft == [] for s in seqs)


def test_a_prediction_is_guessed_from_even_where_the_cost_model_says_guesses_do_not_pay():
    """CI saw a Predicted Output accept 0 of its 37 tokens on a loaded machine: the cost model had
    priced draft rows out. The prediction is the client's guess, asked for by name: always verified."""
    speculator = Speculator("auto", max_tokens=8)
    seqs = [decoding(REPEATING) for _ in range(32)]
    for seq in seqs:
        speculator.attach(seq, None)
    measured(speculator, seqs, lambda rows: 0.100 * (32 + rows) / 32)
    assert speculator.buckets[6].threshold(32) == pytest.approx(1.0)  # n-gram guesses do not pay here
    predicted = seqs[0]
    predicted.token_ids[-1] = 10
    speculator.attach(predicted, [10, 11, 12, 13, 14, 15, 16, 17, 18])
    speculator.propose(seqs, max_model_len=4096)
    assert (predicted.draft, predicted.spec.draft_from_prediction) == ([11, 12, 13, 14, 15, 16, 17, 18], True)
    assert all(s.draft == [] for s in seqs[1:])
    strayed = seqs[1]  # a reply that left its prediction, with nothing of it to find again
    strayed.token_ids[-1] = 10
    speculator.attach(strayed, [77, 78, 79, 80])
    speculator.propose(seqs, max_model_len=4096)
    assert strayed.draft == []  # its own n-grams are still the cost model's to allow


def test_a_sequence_whose_guesses_fail_stops_and_probes_now_and_then():
    speculator = Speculator("auto", max_tokens=8)
    seq = decoding(REPEATING)
    speculator.attach(seq, None)
    measured(speculator, [seq], lambda rows: 0.050 + 0.0005 * rows)
    guessed = []
    for _ in range(80):
        speculator.propose([seq], max_model_len=4096)
        guessed.append(len(seq.draft))
        if seq.draft:
            speculator.record(seq, accepted=0, written=1)  # never right
        seq.token_ids.append(1)  # the sequence moves on a token
        seq.num_computed_tokens += 1
    assert guessed[0] > 1 and guessed[-20:].count(0) >= 15  # it stopped, save a one-token probe now and then
    assert max(guessed[-40:]) == 1


def test_ngram_mode_always_guesses_and_off_never_does():
    for mode, expected in (("ngram", 8), ("off", 0)):
        speculator = Speculator(mode, max_tokens=8)
        seq = decoding(REPEATING * 2)
        speculator.attach(seq, None)
        speculator.propose([seq], max_model_len=4096)
        assert len(seq.draft) == expected


def test_a_prediction_is_followed_first_and_found_again_after_an_edit():
    speculator = Speculator("ngram", max_tokens=4)
    seq = decoding([50, 51, 52])
    seq.token_ids[-1] = 10  # the reply so far: [10]
    speculator.attach(seq, [10, 11, 12, 13, 14, 15, 16, 17, 18])
    speculator.propose([seq], max_model_len=4096)
    assert (seq.draft, seq.spec.draft_from_prediction) == ([11, 12, 13, 14], True)
    seq.token_ids.extend([11, 99, 13, 14])  # an edit: 99 where the prediction has 12
    seq.num_computed_tokens = len(seq) - 1
    speculator.propose([seq], max_model_len=4096)
    assert seq.draft == [15, 16, 17, 18]  # "13 14" found in the prediction


def test_a_server_that_always_prefills_probes_a_bounded_number_of_times():
    speculator = Speculator("auto", max_tokens=8)
    seqs = [decoding(REPEATING) for _ in range(8)]
    for seq in seqs:
        speculator.attach(seq, None)
    drafted_steps = 0
    for _ in range(200):  # every step also carries a prefill chunk: no cost is ever measured
        speculator.propose(seqs, max_model_len=4096)
        rows = sum(len(s.draft) for s in seqs)
        drafted_steps += rows > 0
        speculator.observe_step(0.05, had_prefill=True, draft_rows=rows)
    assert 0 < drafted_steps <= 4 * SAMPLES_BEFORE_TRUSTED + 1  # the first tries, then one refresh in 256 steps
