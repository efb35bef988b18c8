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


def test_a_stuck_shutdown_exits_non_zero_with_every_threads_stack():
    """runengine's watchdog: a stop that has not finished `grace_s` after the signal prints the
    stacks and exits 70, so a supervisor or a test can tell a stall from a clean stop (exit 0)."""
    import os
    import subprocess
    import sys

    stuck = (
        "import threading, time\n"
        "from inference.management.commands.runengine import _exit_if_stuck\n"
        "_exit_if_stuck(0.2)\n"
        "threading.Event().wait(60)  # a shutdown that never ends\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "minivllm_site.settings", "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", stuck], capture_output=True, text=True, timeout=60, env=env)
    assert done.returncode == 70, done.stderr
    assert "exit 70 (a stuck shutdown" in done.stderr and "Thread" in done.stderr
