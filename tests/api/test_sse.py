"""SSE events: one `data:` line each, whatever text a model generates."""

from __future__ import annotations

import json

from inference.api.common.sse import event

# Every character str.splitlines (and httpx's line reader, which follows it) breaks a line at.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def test_generated_line_breaks_stay_inside_one_data_line():
    text = "".join(f"{c}x" for c in LINE_BREAKS) + "é漢🙂"
    raw = event({"choices": [{"delta": {"content": text}}]}).decode("utf-8")
    assert raw.endswith("\n\n")
    lines = raw[:-2].splitlines()
    assert len(lines) == 1 and lines[0].startswith("data: ")
    assert json.loads(lines[0][6:])["choices"][0]["delta"]["content"] == text


def test_plain_text_is_left_unescaped():
    assert event({"text": "héllo 漢"}) == 'data: {"text":"héllo 漢"}\n\n'.encode()
