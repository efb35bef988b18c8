"""The one way into the engine: tokenized once, checked once, max_tokens settled, the row written."""

import dataclasses

import pytest

from inference.engine.engine_state import ModelInfo
from inference.engine.errors import PromptTooLongError
from inference.engine.sample.sampling_params import SamplingParams, SamplingParamsError
from inference.models import GenerationRequest
from inference.serving import submission
from inference.serving.generation_input import GenerationInput
from inference.serving.submission import PromptLimitError, RequestRecord

pytestmark = pytest.mark.django_db(transaction=True)


def chat_input(**params) -> GenerationInput:
    """Chat without max_tokens, as validation hands it over."""
    return GenerationInput(endpoint="chat.completions", params=SamplingParams(max_tokens=None, **params))


def info(tokenizer, max_model_len=64, kv_capacity_tokens=None) -> ModelInfo:
    return ModelInfo("tiny", tokenizer, max_model_len, kv_capacity_tokens, vocab_size=len(tokenizer))


def record(request_id: str) -> RequestRecord:
    return RequestRecord(request_id, "completions", "tiny", "10.0.0.1", False, "Hello there", None)


def test_the_rest_of_the_context_is_computed_not_found_by_trial(smollm_tokenizer, settings):
    settings.MINIVLLM_MAX_OUTPUT_TOKENS = 0
    ids = smollm_tokenizer("Hello there, how are you?").input_ids
    token_ids, params = submission.plan(info(smollm_tokenizer, 64), "Hello there, how are you?", chat_input())
    assert token_ids == ids and params.max_tokens == 64 - len(ids)
    # a KV pool smaller than the context bounds it instead
    _, params = submission.plan(info(smollm_tokenizer, 64, kv_capacity_tokens=40), ids, chat_input())
    assert params.max_tokens == 40 - len(ids)
    # the server's output cap still applies
    settings.MINIVLLM_MAX_OUTPUT_TOKENS = 10
    _, params = submission.plan(info(smollm_tokenizer, 64), ids, chat_input())
    assert params.max_tokens == 10


def test_no_room_left_names_the_numbers(smollm_tokenizer):
    ids = list(range(100, 160))
    with pytest.raises(PromptTooLongError) as err:
        submission.plan(info(smollm_tokenizer, 64), ids, chat_input(min_tokens=8))
    assert (err.value.prompt_tokens, err.value.max_tokens, err.value.max_model_len) == (60, 8, 64)
    with pytest.raises(SamplingParamsError, match=r"\[0, "):
        submission.plan(info(smollm_tokenizer), [1, len(smollm_tokenizer)], chat_input())


def test_the_prompt_cap_counts_what_the_engine_holds(engine_client, settings):
    """MINIVLLM_MAX_PROMPT_TOKENS is checked on the ids the engine receives, not a second count."""
    text = "count these tokens exactly"
    held = engine_client.engine.tokenize(text)
    inp = GenerationInput(endpoint="completions", params=SamplingParams(max_tokens=2), prompts=[text])
    settings.MINIVLLM_MAX_PROMPT_TOKENS = len(held)
    assert submission.plan(engine_client.model_info, text, inp)[0] == held
    settings.MINIVLLM_MAX_PROMPT_TOKENS = len(held) - 1
    with pytest.raises(PromptLimitError, match=f"has {len(held)} tokens; at most {len(held) - 1}"):
        submission.plan(engine_client.model_info, text, inp)


async def test_accepted_and_refused_rows_are_written_alike(engine_client):
    inp = GenerationInput(endpoint="completions", params=SamplingParams(max_tokens=3), prompts=["Hello there"])
    job = await submission.submit(engine_client, engine_client.model_info, record("cmpl-taken"), inp, "Hello there")
    outputs = [out async for out in job]
    await job.close()
    assert outputs[-1].prompt_tokens == len(engine_client.engine.tokenize("Hello there"))
    too_long = GenerationInput(
        endpoint="completions", params=SamplingParams(max_tokens=engine_client.engine.max_model_len), prompts=["x"]
    )
    with pytest.raises(PromptTooLongError):
        await submission.submit(engine_client, engine_client.model_info, record("cmpl-refused"), too_long, "Hello there")
    taken = await GenerationRequest.objects.aget(id="cmpl-taken")
    refused = await GenerationRequest.objects.aget(id="cmpl-refused")
    assert (taken.status, refused.status) == ("completed", "rejected")
    assert "maximum context length" in refused.error
    same = ("endpoint", "model", "client_address", "stream", "prompt", "messages")
    assert [getattr(taken, f) for f in same] == [getattr(refused, f) for f in same]
    assert refused.sampling_params["max_tokens"] == engine_client.engine.max_model_len


def test_the_checkpoints_sampling_defaults_fill_only_what_the_request_left_out(smollm_tokenizer):
    model = ModelInfo("tiny", smollm_tokenizer, 64, None, len(smollm_tokenizer), {"temperature": 0.3, "top_k": 20})
    left_out = GenerationInput(endpoint="completions", params=SamplingParams(max_tokens=2), given=frozenset({"prompt"}))
    _, params = submission.plan(model, [5, 6], left_out)
    assert (params.temperature, params.top_k, params.top_p) == (0.3, 20, 1.0)
    asked = GenerationInput(
        endpoint="completions", params=SamplingParams(max_tokens=2, temperature=0.9), given=frozenset({"prompt", "temperature"})
    )
    _, params = submission.plan(model, [5, 6], asked)
    assert (params.temperature, params.top_k) == (0.9, 20)


def test_n_above_the_engines_slots_is_refused_before_it_is_queued(smollm_tokenizer):
    model = ModelInfo("tiny", smollm_tokenizer, 64, None, len(smollm_tokenizer), num_slots=4)
    inp = GenerationInput(endpoint="completions", params=SamplingParams(max_tokens=2, n=5))
    with pytest.raises(SamplingParamsError, match="at most 4") as err:
        submission.plan(model, [5, 6], inp)
    assert err.value.param == "n"


async def test_a_long_prompt_is_tokenized_off_the_event_loop(engine_client):
    """The event loop delivers every stream's events; a long prompt's tokenizing must not hold it.
    The tokenizer here returns only once the event loop has run another task meanwhile: that can
    happen only if it runs on another thread (on the loop's own it would wait out its timeout)."""
    import asyncio
    import threading

    real = engine_client.model_info.tokenizer
    started, loop_ran, calls = threading.Event(), threading.Event(), []

    class WaitsForTheLoop:
        def __getattr__(self, name):
            return getattr(real, name)

        def __call__(self, text, *args, **kwargs):
            started.set()
            calls.append((threading.get_ident(), loop_ran.wait(timeout=10)))
            return real(text, *args, **kwargs)

    async def run_while_tokenizing():
        while not started.is_set():
            await asyncio.sleep(0.001)
        loop_ran.set()

    info = dataclasses.replace(engine_client.model_info, tokenizer=WaitsForTheLoop())
    text = " ".join(f"word{i} lorem ipsum dolor" for i in range(2000))[:30000]
    inp = GenerationInput(endpoint="completions", params=SamplingParams(max_tokens=2), prompts=[text])
    other_task = asyncio.create_task(run_while_tokenizing())
    with pytest.raises(PromptTooLongError):  # refused only once counted: the tiny model's context is shorter
        await submission.submit(engine_client, info, record("long"), inp, text)
    await asyncio.wait_for(other_task, timeout=10)
    assert calls == [(calls[0][0], True)] and calls[0][0] != threading.get_ident()
