"""Official chat templates as text fixtures (tests/support/chat_templates/: its README says where
each comes from), and a tokenizer that renders one with transformers' own apply_chat_template: the
reference our rendering, parsers and grammars are held to, without the model's weights."""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path

FOLDER = Path(__file__).parent / "chat_templates"
QWEN35 = "Qwen3.5-4B.jinja"
GEMMA4 = "google-gemma-4-31B-it.jinja"
SHA256 = {
    QWEN35: "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715",
    GEMMA4: "85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98",
}


def template(name: str) -> str:
    """The template's text, checked to be the file as published."""
    data = (FOLDER / name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == SHA256[name], f"{name} is not the official template"
    return data.decode()


def tokenizer_with(tokenizer, name: str):
    """A shallow copy of `tokenizer` whose chat template is the official one (the vocabulary is
    shared: only the template differs)."""
    copied = copy.copy(tokenizer)
    copied.chat_template = template(name)
    return copied
