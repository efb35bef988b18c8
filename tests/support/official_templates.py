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
QWEN3 = "Qwen-Qwen3-0.6B.jinja"
LLAMA31 = "meta-llama-Llama-3.1-8B-Instruct.jinja"  # Llama 3.3-70B-Instruct's is byte for byte the same
LLAMA32 = "meta-llama-Llama-3.2-3B-Instruct.jinja"
MISTRAL_NEMO = "mistralai-Mistral-Nemo-Instruct-2407.jinja"
MINISTRAL3 = "mistralai-Ministral-3-14B-Reasoning-2512.jinja"
SMOLLM3 = "HuggingFaceTB-SmolLM3-3B.jinja"
PHI4_MINI = "microsoft-Phi-4-mini-instruct.jinja"
GEMMA3 = "google-gemma-3-it.jinja"
SHA256 = {
    QWEN35: "a4aee8afcf2e0711942cf848899be66016f8d14a889ff9ede07bca099c28f715",
    GEMMA4: "85a08664d16d8f3be4416c92427b3ac10df1024ac566cc0b4bc3bab409393f98",
    QWEN3: "87a2728cb8dc9fe424d624542f6060ec05a1d285ebbec578bb078900e33396b5",
    LLAMA31: "e10ca381b1ccc5cf9db52e371f3b6651576caee0a630b452e2816b2d404d4b65",
    LLAMA32: "5816fce10444e03c2e9ee1ef8a4a1ea61ae7e69e438613f3b17b69d0426223a4",
    MISTRAL_NEMO: "e4676cb56dffea7782fd3e2b577cfaf1e123537e6ef49b3ec7caa6c095c62272",
    MINISTRAL3: "39f03c383413f531fd302c06c7e982ad98c83f0657a8339ae25478ccb81fdcda",
    SMOLLM3: "19eacf64569032f07644ea92c8e2a87af06ee7008147557302c31e474912ca97",
    PHI4_MINI: "febf589225c9728ab791f52e8897d7607a823d45368f0a4c92fa68997b40cce9",
    GEMMA3: "7de1c58e208eda46e9c7f86397df37ec49883aeece39fb961e0a6b24088dd3c4",
}


def template(name: str) -> str:
    """The template's text, checked to be the file as published."""
    data = (FOLDER / name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == SHA256[name], f"{name} is not the official template"
    return data.decode()


def tokenizer_with(tokenizer, name: str):
    """A shallow copy of `tokenizer` whose chat template is the official one (the vocabulary is
    shared: only the template differs)."""
    return tokenizer_with_text(tokenizer, template(name))


def tokenizer_with_text(tokenizer, text: str):
    """A shallow copy of `tokenizer` whose chat template is `text` (a test's own)."""
    copied = copy.copy(tokenizer)
    copied.chat_template = text
    return copied
