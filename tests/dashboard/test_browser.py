"""End to end in headless Chromium (Debian's, driven by Playwright) against a live Daphne serving
the real SmolLM2: the page connects, shows a load, streams a chat reply, stops one, survives a
server restart (that one on a site without an engine, which restarts in a second or two). Only waits with generous timeouts, never a timed assertion.

MINIVLLM_SCREENSHOT=1 writes the screenshot under load to docs/dashboard.png (else to a tmp dir).
"""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from tests.support.daphne_server import REPO
from tests.support.engine_fixtures import wait_until
from tests.support.sse import events_of

from .live import load

pytestmark = [pytest.mark.live, pytest.mark.real_model]
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
WAIT_MS = 120_000  # generous: a busy 2-core machine runs the model, the server and the browser
# a picture worth keeping: several seconds of throughput drawn, slots busy and well into decoding
MID_LOAD = """Number(document.getElementById('tps-sparkline').dataset.nonzero) >= 6
    && document.querySelectorAll('#slots .slot.busy').length >= 2
    && Math.max(...[...document.querySelectorAll('#slots .slot.busy .slot-tokens')].map(e => parseInt(e.textContent))) >= 15"""


@pytest.fixture(scope="module")
def server(daphne_server):
    """The default server (make run's settings), shared with the soak."""
    return daphne_server()


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail("/usr/bin/chromium is missing: `make test` installs it (make chromium)")
        pytest.skip("/usr/bin/chromium is missing: run `make chromium`")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def open_dashboard(browser, server, **viewport):
    page = browser.new_page(viewport=viewport or {"width": 1280, "height": 800})
    page.set_default_timeout(WAIT_MS)
    page.errors, page.exceptions = [], []
    page.on("console", lambda message: page.errors.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: page.exceptions.append(str(error)))
    page.goto(f"{server.url}/")
    page.wait_for_selector("#connection[data-state=live]")
    return page


@pytest.fixture(scope="module")
def page(browser, server):
    """One page for the module, as a person would keep it open: chat and load accumulate on it."""
    page = open_dashboard(browser, server)
    yield page
    page.close()


def send_chat(page, prompt: str, *, max_tokens: int, temperature: float = 0.0):
    page.fill("#chat-max-tokens", str(max_tokens))
    page.eval_on_selector(
        "#chat-temperature", "(el, v) => { el.value = v; el.dispatchEvent(new Event('input')); }", str(temperature)
    )
    page.fill("#chat-prompt", prompt)
    page.click("#chat-send")
    return page.locator(".msg.assistant").last


def test_page_loads_and_websocket_connects(page, server):
    page.wait_for_function("document.getElementById('model-name').textContent.startsWith('SmolLM2')")
    assert page.locator("#slots .slot").count() == 32  # MINIVLLM_MAX_NUM_SEQS default on CPU
    assert page.text_content("#model-device") == "cpu"
    assert page.text_content("#model-architecture") == "llama, full attention"
    assert page.text_content("#model-weights") == "GGUF blocks: Q4_1 ×210, Q8_0 ×1; KV float16"  # what runs, not the dtype
    page.wait_for_selector("body[data-health=ok]")
    assert page.is_hidden("#offline-banner")
    assert "CPU" in page.text_content("#memory-label")  # labelled as process vs system memory
    page.wait_for_function("document.querySelector('#memory-gauge .gauge-value').textContent.endsWith('%')")
    assert page.errors == [] and page.exceptions == []


def test_chat_streams_a_reply(page, server):
    reply = send_chat(page, "What is the capital of France? Answer in one sentence.", max_tokens=40)
    page.wait_for_selector(".msg.assistant:last-child[data-state=done]")
    text = reply.locator(".msg-text").evaluate("el => el.textContent")
    request_id = reply.get_attribute("data-request-id")
    assert text.strip() and int(reply.get_attribute("data-chunks")) > 1  # token by token, not one blob
    assert reply.get_attribute("data-ttft-ms") is not None and "tok/s" in reply.locator(".msg-meta").inner_text()
    assert wait_until(lambda: server.row(request_id).get("status") == "completed", timeout=30)
    assert server.row(request_id)["output_text"] == text
    page.wait_for_selector(f"#recent-requests tr[data-request-id='{request_id}'][data-status=completed]")
    # the reply's decode steps: their time outside the model, and the model's beside it
    page.wait_for_function("/^[0-9]+[.][0-9]{2} ms$/.test(document.getElementById('step-overhead').textContent)")
    assert page.text_content("#step-split").startswith("model ")
    assert page.errors == [] and page.exceptions == []


def test_the_speculation_tile_counts_accepted_guesses(page, server):
    page.wait_for_function("document.getElementById('spec-mode').textContent === 'auto'")
    passage = "The keeper climbed the spiral stairs at dusk, trimmed the wick and polished the great lens of the lighthouse."
    send_chat(page, f"Repeat the following text exactly.\n\n{passage}", max_tokens=40)
    page.wait_for_selector(".msg.assistant:last-child[data-state=done]")
    # the reply repeats its prompt: the n-gram lookup guessed, and the tile shows what was taken
    page.wait_for_function("document.getElementById('spec-acceptance').textContent.endsWith('%')")
    page.wait_for_function(
        "/[1-9][0-9,]* of [0-9,]+ guessed tokens accepted/.test(document.getElementById('spec-label').textContent)"
    )
    assert float(page.text_content("#spec-tokens-per-step")) > 1
    assert page.errors == [] and page.exceptions == []


def test_load_fills_slots_and_moves_sparkline(page, server, tmp_path):
    shot = REPO / "docs" / "dashboard.png" if os.environ.get("MINIVLLM_SCREENSHOT") == "1" else tmp_path / "dashboard.png"
    tokens_before = page.text_content("#total-tokens")
    with ThreadPoolExecutor(12) as pool:
        completions = load(server, pool, requests=12, max_tokens=60)
        page.wait_for_selector("#slots .slot.busy")
        page.wait_for_function("Number(document.getElementById('tps-sparkline').dataset.peak) > 0")
        # the screenshot: mid-load, once the sparkline has a few seconds of throughput in it
        wait_until(lambda: all(f.done() for f in completions) or page.evaluate(MID_LOAD), timeout=WAIT_MS / 1000, interval=0.1)
        page.screenshot(path=str(shot))
        assert [f.result() for f in completions] == [200] * 12
    assert shot.stat().st_size > 10_000
    assert page.text_content("#total-tokens") != tokens_before
    page.wait_for_function("document.querySelectorAll('#recent-requests tr[data-status=completed]').length >= 12")
    page.wait_for_function("document.getElementById('slots').dataset.busy === '0'")  # the load drained
    assert page.errors == [] and page.exceptions == []


def test_the_n_choices_of_one_request_fill_n_slots(page, server):
    body = {"prompt": "Three endings to a story:", "n": 3, "max_tokens": 300, "ignore_eos": True, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/completions", json=body, timeout=120) as resp:
        lines = resp.iter_lines()  # held open: the request runs while the page looks
        request_id = events_of([next(line for line in lines if line.startswith("data: {"))])[0]["id"]
        page.wait_for_function(
            "ids => [...document.querySelectorAll('#slots .slot.busy')].filter(e => e.title.startsWith(ids)).length === 3",
            arg=request_id,
        )
        choices = page.eval_on_selector_all(
            "#slots .slot.busy", "(cells, id) => cells.filter(e => e.title.startsWith(id)).map(e => e.dataset.choice)", request_id
        )
        assert sorted(choices) == ["0", "1", "2"]
    page.wait_for_function("document.getElementById('slots').dataset.busy === '0'")  # the disconnect freed all three
    assert page.errors == [] and page.exceptions == []


def test_json_mode_replies_with_a_json_object(page, server):
    """Greedy, on a cleared chat (the request carries no earlier turns), this prompt's reply ends
    its object well within max_tokens (34 tokens), so the whole reply is checked on every run."""
    page.click("#chat-clear")
    page.check("#chat-json")
    try:
        reply = send_chat(page, "Describe a cat as JSON.", max_tokens=200)
        page.wait_for_selector(".msg.assistant:last-child[data-state=done]", timeout=WAIT_MS)
        request_id = reply.get_attribute("data-request-id")
        assert wait_until(lambda: server.row(request_id).get("status") == "completed", timeout=30)
        row = server.row(request_id)
        assert json.loads(row["sampling_params"])["structured"]["kind"] == "json_object"  # the history says what was asked
        assert row["finish_reason"] == "stop", row["output_text"]
        assert isinstance(json.loads(row["output_text"]), dict), row["output_text"]
        assert reply.locator(".msg-text").evaluate("el => el.textContent") == row["output_text"]  # what the page showed
    finally:
        page.uncheck("#chat-json")


def test_stop_aborts_the_request(page, server):
    reply = send_chat(page, "Write a very long story about a dragon who learns to bake bread.", max_tokens=400)
    page.wait_for_function("Number(document.querySelector('.msg.assistant:last-child').dataset.chunks) >= 3")
    page.click("#chat-stop")
    page.wait_for_selector(".msg.assistant:last-child[data-state=stopped]")
    request_id = reply.get_attribute("data-request-id")
    # the fetch was aborted: the server saw the disconnect, aborted the engine request, closed the row
    assert wait_until(lambda: server.row(request_id).get("status") == "aborted", timeout=30)
    row = server.row(request_id)
    assert row["finish_reason"] == "abort" and 0 < row["completion_tokens"] < 400
    page.wait_for_selector(f"#recent-requests tr[data-request-id='{request_id}'][data-status=aborted]")
    assert page.is_enabled("#chat-send") and page.is_disabled("#chat-stop")
    assert page.errors == [] and page.exceptions == []


def test_phone_layout_has_no_horizontal_scroll(browser, server):
    phone = open_dashboard(browser, server, width=390, height=844)
    try:
        assert phone.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
        assert phone.is_visible("#chat-prompt") and phone.locator("#slots .slot").count() == 32
        assert phone.errors == [] and phone.exceptions == []
    finally:
        phone.close()


@pytest.fixture(scope="module")
def engineless_server(daphne_server):
    """The site without an engine (/health stays 503, as while a model loads); its own, since a test restarts it."""
    live = daphne_server.fresh(MINIVLLM_AUTOSTART="0")
    yield live
    live.stop()


def test_offline_banner_and_reconnect_after_server_restart(browser, engineless_server):
    """/health is 503 without an engine: the banner says why. After a restart the socket comes back."""
    server = engineless_server
    page = open_dashboard(browser, server)
    try:
        page.wait_for_selector("#offline-banner", state="visible")
        assert "not been started" in page.text_content("#offline-reason")
        assert page.text_content("#uptime") == "not started" and page.locator("#slots .slot").count() == 0
        server.stop()
        page.wait_for_selector("#connection[data-state=reconnecting]")
        page.wait_for_function("document.getElementById('offline-reason').textContent.includes('unreachable')")
        server.start()
        page.wait_for_selector("#connection[data-state=live]")
        page.wait_for_function("!document.getElementById('offline-reason').textContent.includes('unreachable')")
        assert page.exceptions == []  # connection-refused console lines are expected while it is down
    finally:
        page.close()


def test_memory_gauge_shows_gpu_memory_on_cuda(browser, engineless_server):
    """The gauge module on its own, fed a CUDA snapshot (this machine has no GPU to serve one)."""
    page = open_dashboard(browser, engineless_server)
    try:
        result = page.evaluate("""async () => {
            const { MemoryGauge } = await import('/static/js/widgets/gauge.js');
            const svg = document.getElementById('memory-gauge').cloneNode(true);
            const label = document.createElement('p'), legend = document.createElement('p');
            new MemoryGauge(svg, label, legend).update({
                device: 'cuda:0', gpu_memory_used_mb: 4096, gpu_memory_total_mb: 16384, gpu_memory_pct: 25,
                process_rss_mb: 900, system_memory_total_mb: 64000, system_memory_pct: 10 });
            return { mode: svg.dataset.mode, label: label.textContent, value: svg.querySelector('.gauge-value').textContent,
                     caption: svg.querySelector('.gauge-caption').textContent,
                     inner: svg.querySelector('.gauge-arc.inner').style.display };
        }""")
        assert result == {
            "mode": "gpu",
            "label": "GPU memory (cuda:0)",
            "value": "25%",
            "caption": "4.0 GB / 16.0 GB",
            "inner": "none",
        }
        assert page.get_attribute("#memory-gauge", "data-mode") == "cpu"  # the live page, on this CPU machine
        assert page.exceptions == []
    finally:
        page.close()


@pytest.fixture(scope="module")
def folder_server(daphne_server, tmp_path_factory):
    """A folder of two real models (the embedded SmolLM2, Qwen2.5-Coder-0.5B), one loaded at a time."""
    from inference.engine.loader import embedded_model_source
    from tests.support import real_gguf

    folder = tmp_path_factory.mktemp("dashboard-models")
    embedded = embedded_model_source()
    os.symlink(os.path.join(embedded.path, embedded.gguf_file), folder / "smollm2.gguf")
    os.symlink(real_gguf.QWEN25_CODER.file_or_skip(), folder / "qwen-coder.gguf")
    live = daphne_server.fresh(MINIVLLM_MODELS_DIR=str(folder), MINIVLLM_MODELS_MAX="1", MINIVLLM_KV_CACHE_MB="64")
    yield live
    live.stop()


def test_the_models_panel_and_the_chat_windows_picker(browser, folder_server):
    page = open_dashboard(browser, folder_server)
    try:
        page.wait_for_selector("#models-table tr[data-model=qwen-coder][data-status=unloaded]")
        assert page.locator("#models-table tbody tr").count() == 2 and page.is_visible("#chat-model")
        page.select_option("#chat-model", "qwen-coder")
        reply = send_chat(page, "Say hello.", max_tokens=6)
        page.wait_for_selector(".msg.assistant:last-child[data-state=done]")
        request_id = reply.get_attribute("data-request-id")
        assert folder_server.row(request_id)["model"] == "qwen-coder"
        row = "#models-table tr[data-model=qwen-coder]"
        page.wait_for_selector(f"{row}[data-status=loaded]")
        page.wait_for_function(f"document.querySelector('{row} td:nth-child(3)').textContent.endsWith('MB')")
        page.click(f"{row} button[data-action=unload]")
        page.wait_for_selector(f"{row}[data-status=unloaded]")
        page.click("#models-table tr[data-model=smollm2] button[data-action=load]")
        page.wait_for_selector("#models-table tr[data-model=smollm2][data-status=loaded]")
        assert httpx.get(f"{folder_server.url}/models", timeout=30).json()["data"][1]["status"]["value"] == "loaded"
        assert page.errors == [] and page.exceptions == []
    finally:
        page.close()
