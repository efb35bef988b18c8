"""Chat messages -> prompt text, with the tokenizer's own chat template.

Rendering only runs Jinja (no tokenization), so it is safe on the event loop while the engine
thread uses the same tokenizer.
"""

from __future__ import annotations

import logging

from .errors import bad_request

log = logging.getLogger("inference.chat")


def render(tokenizer, messages: list[dict], *, add_generation_prompt: bool = True) -> str:
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        return _plain(messages, add_generation_prompt)
    try:
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    except Exception as exc:  # templates raise for e.g. role orders they do not allow
        raise bad_request(f"messages do not fit the model's chat template: {exc}", param="messages") from None


def _plain(messages: list[dict], add_generation_prompt: bool = True) -> str:
    """For models without a template: a readable transcript ending with the assistant's turn."""
    lines = [f"{m['role']}: {m['content']}" for m in messages]
    return "\n".join(lines) + ("\nassistant:" if add_generation_prompt else "")
