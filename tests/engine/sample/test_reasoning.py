"""The engine's reasoning phase: it ends at the end marker's tokens, and a spent budget forces them."""

from inference.engine.sample.reasoning import ReasoningState

END = [7, 8, 9]


def run(state: ReasoningState, sampled: list[int]) -> list[int]:
    """Appends each token (the forced one instead, while forcing), as the engine does."""
    output = []
    for token in sampled:
        forced = state.forced_token
        output.append(forced if forced is not None else token)
        state.observe(output)
    return output


def test_the_phase_ends_at_the_marker_the_model_writes():
    state = ReasoningState(END, budget=None)
    run(state, [1, 2, 7, 8, 9])
    assert not state.active and state.tokens == 5 and state.forced_token is None


def test_a_spent_budget_forces_the_whole_marker_then_lets_the_answer_go():
    state = ReasoningState(END, budget=3)
    output = run(state, [1, 2, 3, 4, 5, 6, 42, 43])
    assert output[:6] == [1, 2, 3, 7, 8, 9] and output[6:] == [42, 43]
    assert not state.active and state.tokens == 6


def test_a_marker_begun_by_the_model_when_the_budget_runs_out_is_written_whole():
    state = ReasoningState(END, budget=2)
    output = run(state, [1, 7, 0, 0, 0, 5])
    assert output[:5] == [1, 7, 7, 8, 9] and not state.active


START = [3, 4]


def test_a_reply_that_may_open_the_block_reasons_once_it_does():
    state = ReasoningState(END, budget=None, start_ids=START)
    output = []
    for token in [3, 4, 1, 7, 8, 9]:
        output.append(token)
        assert state.observe(output) is False
    assert not state.active and state.tokens == 6


def test_a_reply_that_does_not_open_it_has_no_reasoning_phase():
    state = ReasoningState(END, budget=2, start_ids=START)
    assert state.observe([3]) is False and state.active  # still maybe the marker
    assert state.observe([3, 5]) is True and not state.active and state.forced_token is None
