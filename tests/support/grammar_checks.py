"""A tool-call grammar checked against text, and a reply replayed through the tool-call trigger,
on a real tokenizer and without an engine: the grammar is compiled and matched by the engine's own
Grammars (llguidance), the trigger is the engine's ToolTrigger fed token by token as the engine
feeds it."""

from __future__ import annotations

from inference.engine.sample.structured import Grammars
from inference.engine.sample.tool_trigger import ToolTrigger


def grammars_for(tokenizer) -> Grammars:
    return Grammars(tokenizer, len(tokenizer), {tokenizer.eos_token_id})


def encode(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False)


def accepts_ids(grammars: Grammars, spec: dict, ids: list[int]) -> bool:
    """Whether the grammar takes exactly these tokens, ending complete."""
    matcher = grammars.matcher(spec)
    return matcher.validate_tokens(ids) == len(ids) and matcher.consume_tokens(ids) and matcher.is_accepting()


def accepts(grammars: Grammars, tokenizer, grammar: str, text: str) -> bool:
    """Whether the Lark `grammar` takes `text` (as the tokenizer spells it), ending complete."""
    return accepts_ids(grammars, {"kind": "lark", "value": grammar, "param": "tools"}, encode(tokenizer, text))


def replay_trigger(tokenizer, spec: dict, text: str) -> tuple[str | None, list[int] | None, list[int]]:
    """`text` written token by token under a trigger for `spec` (SamplingParams.tool_trigger):
    (the text written when a call opened, or None; the tokens the call's matcher is fed; the ids)."""
    trigger = ToolTrigger(
        spec,
        lambda token_id: tokenizer.decode([token_id], skip_special_tokens=False),
        lambda piece: encode(tokenizer, piece),
    )
    ids = encode(tokenizer, text)
    for written in range(1, len(ids) + 1):
        opening = trigger.observe(ids[:written])
        if opening is not None:
            return tokenizer.decode(ids[:written], skip_special_tokens=False), opening, ids
    return None, None, ids
