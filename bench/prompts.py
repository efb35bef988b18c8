"""Seeded random prompts shared by serve.py and baselines.py, so both measure the same inputs.

A prompt is a run of random whole words taken from the tokenizer's vocabulary, each one token
with its leading space (GPT-2-style pre-tokenization splits on spaces, so such words never merge):
the prompt is plain text any server accepts, yet it encodes to exactly `input_len` tokens.
Requests are drawn one after another from one RNG, so the first k of N requests are the same
for any N — a short one-at-a-time baseline reuses the head of a longer serving run.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SPACE_MARK = "\u0120"  # "Ġ", the byte-level BPE mark for a leading space


@dataclass(frozen=True)
class BenchRequest:
    prompt: str
    prompt_len: int
    output_len: int


def parse_length(text: str | int) -> tuple[int, int]:
    """'64' -> (64, 64); '16-256' -> (16, 256), both ends included."""
    if isinstance(text, int):
        low = high = text
    else:
        parts = str(text).strip().split("-")
        if len(parts) not in (1, 2) or not all(p.strip().isdigit() for p in parts):
            raise ValueError(f"length must be N or LOW-HIGH, got {text!r}")
        low, high = int(parts[0]), int(parts[-1])
    if not 1 <= low <= high:
        raise ValueError(f"length range must satisfy 1 <= low <= high, got {text!r}")
    return low, high


def word_list(tokenizer) -> list[str]:
    """Vocabulary entries that are ' ' + 3 or more ASCII letters, sorted so the list is stable."""
    words = []
    for token in tokenizer.get_vocab():
        body = token[1:]
        if token.startswith(SPACE_MARK) and len(body) >= 3 and body.isascii() and body.isalpha():
            words.append(" " + body)
    if len(words) < 100:
        raise ValueError("this tokenizer has too few whole-word tokens for random prompts")
    return sorted(words)


def make_requests(tokenizer, *, num_prompts: int, input_len: str | int, output_len: str | int, seed: int) -> list[BenchRequest]:
    in_low, in_high = parse_length(input_len)
    out_low, out_high = parse_length(output_len)
    words = word_list(tokenizer)
    rng = random.Random(seed)
    requests = []
    for _ in range(num_prompts):
        n_in = rng.randint(in_low, in_high)
        n_out = rng.randint(out_low, out_high)
        prompt = "".join(rng.choice(words) for _ in range(n_in))
        requests.append(
            BenchRequest(prompt=prompt, prompt_len=len(tokenizer.encode(prompt, add_special_tokens=False)), output_len=n_out)
        )
    return requests
