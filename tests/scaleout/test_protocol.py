"""The wire form of requests and outputs survives msgpack, and engine clocks are shifted."""

import msgpack

from inference.engine.outputs import RequestOutput, TokenLogprob
from inference.engine.sample.sampling_params import SamplingParams
from inference.serving.remote import protocol as wire


def through_msgpack(data):
    return msgpack.unpackb(msgpack.packb(data), raw=False)


def test_sampling_params_round_trip():
    params = SamplingParams(max_tokens=7, temperature=0.3, top_k=5, stop=["\n"], seed=3, logprobs=2)
    assert wire.params_from_wire(through_msgpack(wire.params_to_wire(params))) == params


def test_output_round_trip_with_logprobs_and_clock_shift():
    out = RequestOutput(
        "r1",
        "hi",
        [5, 6],
        finished=True,
        finish_reason="length",
        prompt_tokens=3,
        completion_tokens=2,
        logprobs=[TokenLogprob(5, "h", -0.1, top=[(5, "h", -0.1), (7, "x", -2.0)])],
        arrival_time=100.0,
        scheduled_time=100.5,
        first_token_time=101.0,
        finished_time=102.0,
    )
    back = wire.output_from_wire(through_msgpack(wire.output_to_wire(out)), clock_offset=-50.0)
    assert back.text == "hi" and back.token_ids == [5, 6] and back.finish_reason == "length"
    assert back.logprobs == [TokenLogprob(5, "h", -0.1, top=[(5, "h", -0.1), (7, "x", -2.0)])]
    assert (back.arrival_time, back.scheduled_time, back.first_token_time, back.finished_time) == (50.0, 50.5, 51.0, 52.0)


def test_unset_times_stay_unset():
    back = wire.output_from_wire(wire.output_to_wire(RequestOutput("r2", "", [])), clock_offset=5.0)
    assert back.scheduled_time is None and back.first_token_time is None and back.finished_time is None
