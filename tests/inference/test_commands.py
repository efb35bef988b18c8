"""manage.py generate (and runengine --prompt, its old name) drive LLMEngine's token loop and report what it did."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command


@pytest.mark.parametrize("command", ["generate", "runengine"])
def test_generate_prints_device_text_and_speed(tiny_llama_dir, command):
    out = StringIO()
    call_command(
        command,
        "--model",
        tiny_llama_dir,
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--prompt",
        "The future of AI inference is",
        "--max-tokens",
        "12",
        "--seed",
        "1",
        stdout=out,
    )
    text = out.getvalue()
    for label in (
        "model:",
        "device: cpu",
        "dtype:  float32",
        "prompt: 'The future of AI inference is'",
        "output:",
        "tokens:",
        "tokens/s",
    ):
        assert label in text


def test_runengine_rejects_bad_params(tiny_llama_dir):
    with pytest.raises(CommandError):
        call_command("runengine", "--model", tiny_llama_dir, "--temperature", "-1", stdout=StringIO())
    with pytest.raises(CommandError, match="temperature"):
        call_command("generate", "--model", tiny_llama_dir, "--prompt", "hi", "--temperature", "-1", stdout=StringIO())


def test_generate_needs_a_prompt():
    with pytest.raises(CommandError, match="--prompt"):
        call_command("generate", stdout=StringIO())
