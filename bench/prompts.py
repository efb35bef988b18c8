"""Seeded random prompts shared by serve.py and baselines.py, so both measure the same inputs;
and the fixed chat questions the one-client figures are measured on (CHAT_QUESTIONS, below).

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
SPACE_MARKS = (SPACE_MARK, "\u2581")  # and "▁", sentencepiece's (Gemma's vocabulary)


@dataclass(frozen=True)
class BenchRequest:
    prompt: str
    prompt_len: int
    output_len: int
    # a chat request's own fields (messages, tools, ...): sent to /v1/chat/completions instead of the prompt
    chat: dict | None = None


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
        if token.startswith(SPACE_MARKS) and len(body) >= 3 and body.isascii() and body.isalpha():
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


# One-client speed is measured on these (bench/peer.py, peer_large.py, speculative.py): questions a
# chat user asks, whose answers are prose that does not repeat. Random words make a model loop, and
# n-gram speculation predicts the loop, so a one-client figure on them says little about real use.
CHAT_QUESTIONS = (
    "Explain how a refrigerator keeps food cold.",
    "What were the main causes of the French Revolution?",
    "Describe the water cycle to a ten-year-old.",
    "How does a bicycle stay upright while it moves?",
    "Give me three tips for writing a clear email to a colleague, with an example of each.",
    "Why is the sky blue during the day and red at sunset?",
    "What is the difference between a virus and a bacterium?",
    "How do bees make honey?",
    "Explain what a compiler does, in plain words.",
    "Plan a three-day trip to Lisbon for someone who likes museums and food.",
    "What should I think about before adopting a dog?",
    "How does compound interest work? Walk me through an example.",
    "Summarise the plot of Romeo and Juliet.",
    "What are the benefits and the risks of running every day?",
    "How do vaccines teach the immune system to fight a disease?",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
)
CHAT = "chat"  # an input length that means: CHAT_QUESTIONS behind the chat template


def chat_prompt(tokenizer, question: str) -> str:
    """The question behind the tokenizer's chat template (as a chat request would be), or as it is
    where the tokenizer has none."""
    if getattr(tokenizer, "chat_template", None):
        chat = [{"role": "user", "content": question}]
        return tokenizer.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    return question


def chat_requests(tokenizer, *, num_prompts: int, output_len: str | int, seed: int) -> list[BenchRequest]:
    """`num_prompts` of CHAT_QUESTIONS in a seeded order (each once before any repeats)."""
    out_low, out_high = parse_length(output_len)
    rng = random.Random(seed)
    order = list(CHAT_QUESTIONS)
    rng.shuffle(order)
    requests = []
    for i in range(num_prompts):
        prompt = chat_prompt(tokenizer, order[i % len(order)])
        requests.append(
            BenchRequest(
                prompt=prompt,
                prompt_len=len(tokenizer.encode(prompt, add_special_tokens=False)),
                output_len=rng.randint(out_low, out_high),
            )
        )
    return requests


def requests_for(tokenizer, *, num_prompts: int, input_len: str | int, output_len: str | int, seed: int) -> list[BenchRequest]:
    """Chat questions where `input_len` is CHAT, else random words of that many tokens."""
    if input_len == CHAT:
        return chat_requests(tokenizer, num_prompts=num_prompts, output_len=output_len, seed=seed)
    return make_requests(tokenizer, num_prompts=num_prompts, input_len=input_len, output_len=output_len, seed=seed)
