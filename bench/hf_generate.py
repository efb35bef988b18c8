"""Timed HF `model.generate` calls: the baselines' engine room (never used by the product).

A logits processor that only reads the clock gives each step's time without changing the output,
so the baselines get TTFT and ITL as the *earliest* moment a token exists. A static batch
returns its tokens all at once when its longest member is done, so each member's end-to-end
latency is the whole batch's time, whatever it asked for.
"""

from __future__ import annotations

import time

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from .metrics import RequestRecord
from .prompts import BenchRequest


class StepClock(LogitsProcessor):
    """Records when each decoding step's logits are ready; returns the scores untouched."""

    def __init__(self):
        self.times: list[float] = []

    def __call__(self, input_ids, scores):
        self.times.append(time.perf_counter())
        return scores


def generate_batch(model, tokenizer, batch: list[BenchRequest]) -> tuple[list[RequestRecord], int]:
    """One greedy `generate` over `batch` (left-padded), run until its longest member's length.

    Returns one record per member, counting only the tokens that member wanted, and the number
    of tokens the batch actually computed (rows x steps), padding waste included.
    """
    steps = max(r.output_len for r in batch)
    clock = StepClock()
    start = time.perf_counter()
    inputs = tokenizer([r.prompt for r in batch], return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.inference_mode():
        output = model.generate(
            **inputs,
            max_new_tokens=steps,
            min_new_tokens=steps,  # no early EOS, like ignore_eos on the server
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            logits_processor=LogitsProcessorList([clock]),
        )
    end = time.perf_counter()
    computed = output.shape[0] * (output.shape[1] - inputs["input_ids"].shape[1])
    records = []
    for request, prompt_len in zip(batch, inputs["attention_mask"].sum(dim=1).tolist()):
        records.append(
            RequestRecord(
                start=start,
                chunk_times=clock.times[: request.output_len],
                end=end,
                output_tokens=request.output_len,
                prompt_tokens=int(prompt_len),
                wanted_tokens=request.output_len,
            )
        )
    return records, computed


def prepare(model, tokenizer) -> None:
    """Left padding (generation continues from the real last token) and one warm-up call."""
    tokenizer.padding_side = "left"
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    generate_batch(model, tokenizer, [BenchRequest(prompt=" warm up", prompt_len=2, output_len=2)] * 2)
