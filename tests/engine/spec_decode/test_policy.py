"""Who guesses, and how much (engine/spec_decode/proposer.py, spec_decode/ngram_index.py): the lookup finds the latest
earlier occurrence of the longest recent n-gram; `auto` proposes a guess only where its measured
cost and the sequence's hit rate say it pays, learning that rate from the lookups it does not verify too."""

from __future__ import annotations

import pytest

from inference.engine.sample.sampling_params import SamplingParams
from inference.engine.sequence import Sequence, SequenceStatus
from inference.engine.spec_decode.ngram_index import NgramIndex
from inference.engine.spec_decode.proposer import MIN_EVIDENCE, SAMPLES_BEFORE_TRUSTED, Speculator


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
    seq = Sequence("r", token_ids, SamplingParams(max_tokens=4000, **params))
    seq.token_ids.append(token_ids[0])  # one output token, not yet computed: the next step decodes it
    seq.status = SequenceStatus.RUNNING
    seq.num_computed_tokens = len(seq) - 1
    return seq


PATTERN = [3, 4, 5, 6, 7, 8]
REPEATING = PATTERN * 4


def repeating(position: int) -> int:
    """The token a REPEATING sequence writes at `position`: its text goes on repeating."""
    return PATTERN[position % len(PATTERN)]


def prose(seed: int):
    """Text whose lookups find matches (a small vocabulary) that are mostly wrong (drawn at random:
    one in 40 lands)."""
    import random

    draws: dict[int, int] = {}
    rng = random.Random(seed)
    return lambda position: draws.setdefault(position, rng.randrange(40))


def write(speculator: Speculator, seq: Sequence, truth) -> None:
    """One step's outcome for `seq`: its guesses checked against the text it writes (`truth`), then
    the accepted ones and one more written, as the engine's verification does."""
    draft, start = seq.draft, len(seq)
    accepted = 0
    while accepted < len(draft) and draft[accepted] == truth(start + accepted):
        accepted += 1
    if draft:
        speculator.record(seq, accepted, accepted + 1)
    seq.token_ids.extend(truth(start + i) for i in range(accepted + 1))
    seq.num_computed_tokens = len(seq) - 1


def measured(speculator: Speculator, seqs: list[Sequence], step_time, truth=repeating, steps=4 * SAMPLES_BEFORE_TRUSTED) -> int:
    """Runs the policy over steps that take `step_time(draft rows)` seconds; the draft rows it verified."""
    verified = 0
    for _ in range(steps):
        speculator.propose(seqs, max_model_len=8192)
        rows = sum(len(s.draft) for s in seqs)
        verified += rows
        speculator.observe_step(step_time(rows), had_prefill=False, draft_rows=rows)
        for seq in seqs:
            write(speculator, seq, truth)
    return verified


def test_at_one_stream_a_cheap_row_keeps_guessing():
    speculator = Speculator("auto", max_tokens=8)
    seq = decoding(REPEATING)
    speculator.attach(seq, None)
    measured(speculator, [seq], lambda rows: 0.050 + 0.00025 * rows)  # a memory-bound step: a row costs 0.5%
    assert speculator.buckets[1].threshold(1) == pytest.approx(0.005)
    speculator.propose([seq], max_model_len=8192)
    assert len(seq.draft) == 8  # every guess has landed: as many as it may


def test_as_many_guesses_as_the_hit_rate_pays_for():
    """The i-th guess is proposed while alpha^i exceeds the row's price: at alpha 0.5 and a 0.5%
    threshold, seven (0.5^7 > 0.005 > 0.5^8)."""
    speculator = Speculator("auto", max_tokens=8)
    seq = decoding(REPEATING)
    speculator.attach(seq, None)
    measured(speculator, [seq], lambda rows: 0.050 + 0.00025 * rows)
    seq.spec.acceptance = 0.5
    speculator.propose([seq], max_model_len=8192)
    assert len(seq.draft) == 7


def test_a_sequence_guesses_only_once_its_lookups_have_landed():
    """Its first steps score the lookup against the written token instead of verifying it."""
    speculator = Speculator("auto", max_tokens=8)
    seq = decoding(REPEATING)
    speculator.attach(seq, None)
    guessed = []
    for _ in range(6):
        speculator.propose([seq], max_model_len=8192)
        guessed.append(len(seq.draft))
        speculator.observe_step(0.010 + 0.0005 * len(seq.draft), had_prefill=False, draft_rows=len(seq.draft))
        write(speculator, seq, repeating)
    assert guessed[:MIN_EVIDENCE] == [0] * MIN_EVIDENCE and seq.spec.evidence >= MIN_EVIDENCE
    assert speculator.buckets[1].drafted.samples > 0  # then a drafted probe priced a row


def test_one_stalled_step_does_not_switch_guessing_off():
    """A cold shape's first run (or a page fault, another process on the core) can take twenty
    steps' time once: the cost estimate must not price a draft row off for hundreds of steps."""
    speculator = Speculator("auto", max_tokens=8)
    seq = decoding(REPEATING)
    speculator.attach(seq, None)
    stalled = []

    def step_time(rows):
        stall = rows > 0 and not any(stalled)  # the first drafted step stalls
        stalled.append(stall)
        return (0.200 if stall else 0.010) + 0.0005 * rows

    measured(speculator, [seq], step_time, steps=8 * SAMPLES_BEFORE_TRUSTED)
    bucket = speculator.buckets[1]
    assert any(stalled) and bucket.drafted.seconds < 0.020 and bucket.threshold(1) < 0.2
    speculator.propose([seq], max_model_len=8192)
    assert seq.draft  # still guessing
    before = bucket.drafted.seconds
    bucket.drafted.add(1.0, 8)  # a later stall moves the estimate by at most OUTLIER_FACTOR's share
    assert bucket.drafted.seconds <= before * 1.2 + 1e-9


def test_replies_with_nothing_to_guess_leave_the_drafted_probe_open():
    """Steps where no sequence has a guess measure nothing about a draft row: after many of them
    a sequence that can guess (here from its prediction) still gets to, and the row is priced."""
    speculator = Speculator("auto", max_tokens=8)
    plain = decoding(list(range(100, 140)))  # nothing repeats: no n-gram to look up
    speculator.attach(plain, None)
    fresh = iter(range(1000, 100000))
    measured(speculator, [plain], lambda rows: 0.010 + 0.0005 * rows, truth=lambda _: next(fresh), steps=32)
    assert speculator.buckets[1].drafted.samples == 0
    predicted = decoding([1, 2, 3])
    speculator.attach(predicted, [1, 4, 5, 6, 7, 8, 9, 10])  # the reply so far ([1]) follows it
    speculator.propose([predicted], max_model_len=8192)
    assert predicted.spec.draft_from_prediction and predicted.draft[:2] == [4, 5]
    speculator.observe_step(0.014, had_prefill=False, draft_rows=len(predicted.draft))
    assert speculator.buckets[1].drafted.samples == 1  # the row is being priced


def test_a_compute_bound_batch_stops_guessing():
    speculator = Speculator("auto", max_tokens=8)
    seqs = [decoding(REPEATING) for _ in range(32)]
    for seq in seqs:
        speculator.attach(seq, None)
    measured(speculator, seqs, lambda rows: 0.100 * (32 + rows) / 32)  # compute-bound: time follows the rows
    assert speculator.buckets[6].threshold(32) == pytest.approx(1.0)
    speculator.propose(seqs, max_model_len=8192)
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
    predicted = seqs[0] = decoding([50, 51])
    predicted.token_ids[-1] = 10
    speculator.attach(predicted, [10, 11, 12, 13, 14, 15, 16, 17, 18])
    strayed = seqs[1] = decoding(REPEATING)  # a reply that left its prediction, with nothing of it to find again
    speculator.attach(strayed, [77, 78, 79, 80])
    speculator.propose(seqs, max_model_len=8192)
    assert (predicted.draft, predicted.spec.draft_from_prediction) == ([11, 12, 13, 14, 15, 16, 17, 18], True)
    assert all(s.draft == [] for s in seqs[1:])  # its own n-grams are still the cost model's to allow


def test_a_sequence_whose_guesses_fail_stops_and_starts_again_when_its_text_repeats():
    """No verification is spent to notice either: its lookups are scored against what it writes."""
    speculator = Speculator("auto", max_tokens=8)
    seq = decoding(REPEATING)
    speculator.attach(seq, None)
    step_time = lambda rows: 0.050 + 0.005 * rows  # noqa: E731 (a row costs 10%: a 1-in-40 hit does not pay)
    measured(speculator, [seq], step_time)
    assert seq.spec.accepted > 0
    wrong = prose(seed=1)
    proposed = seq.spec.proposed
    measured(speculator, [seq], step_time, truth=wrong, steps=200)
    late = seq.spec.proposed
    measured(speculator, [seq], step_time, truth=wrong, steps=200)
    assert late - proposed < 60 and seq.spec.proposed - late < 10  # it stopped, and stays stopped
    length = len(seq)
    measured(speculator, [seq], step_time, steps=20)  # the text repeats again
    assert len(seq) - length > 40  # guessing again, and right


@pytest.mark.parametrize("streams", [1, 8, 32])
def test_prose_at_any_load_verifies_few_guesses(streams):
    """On text whose lookups mostly miss, the few guesses made are the ones the scores allowed."""
    speculator = Speculator("auto", max_tokens=8)
    seqs = [decoding(list(range(12))) for _ in range(streams)]
    for seq in seqs:
        speculator.attach(seq, None)
    rows = measured(speculator, seqs, lambda rows: 0.010 * (1 + streams / 32) + 0.0005 * rows, truth=prose(streams), steps=64)
    assert rows <= 64 * streams * 0.05


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
        for seq in seqs:
            write(speculator, seq, repeating)
    assert 0 < drafted_steps <= 4 * SAMPLES_BEFORE_TRUSTED + 1  # the first tries, then one refresh in 256 steps
