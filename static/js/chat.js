// The chat window: streams a reply from /v1/chat/completions (SSE over fetch) token by token,
// shows its time to first token and tokens/s, and Stop aborts the fetch, which closes the
// connection: the server sees the disconnect, aborts the engine request and records it `aborted`.
import { num, seconds } from "./format.js";
import { sseData } from "./sse.js";

const byId = (id) => document.getElementById(id);

export class ChatWindow {
  constructor({ url, onFinished, model = () => "" }) {
    this.url = url;
    this.model = model; // the picker's choice ("" with one model: the server's default)
    this.onFinished = onFinished;
    this.history = []; // the conversation sent with each request
    this.controller = null;
    this.log = byId("chat-log");
    this.form = byId("chat-form");
    this.prompt = byId("chat-prompt");
    this.sendButton = byId("chat-send");
    this.stopButton = byId("chat-stop");
    const keyInput = byId("chat-api-key"); // present only when the server requires API keys
    if (keyInput) keyInput.value = sessionStorage.getItem("minivllm-api-key") ?? "";
    this.form.addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    this.prompt.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.send();
      }
    });
    this.stopButton.addEventListener("click", () => this.stop());
    byId("chat-clear").addEventListener("click", () => this.clear());
    bindOutput("chat-temperature", "temperature-value");
    bindOutput("chat-top-p", "top-p-value");
  }

  params() {
    const params = {
      temperature: Number(byId("chat-temperature").value),
      top_p: Number(byId("chat-top-p").value),
      max_tokens: Number(byId("chat-max-tokens").value),
    };
    if (byId("chat-json")?.checked) params.response_format = { type: "json_object" };  // constrained decoding
    return params;
  }

  /** JSON, plus the API key the user typed when the server requires one (kept for this tab only). */
  headers() {
    const headers = { "Content-Type": "application/json" };
    const key = byId("chat-api-key")?.value.trim();
    if (key) {
      sessionStorage.setItem("minivllm-api-key", key);
      headers.Authorization = `Bearer ${key}`;
    }
    return headers;
  }

  async send() {
    const text = this.prompt.value.trim();
    if (!text || this.controller) return;
    this.prompt.value = "";
    this.log.querySelector(".chat-empty")?.remove();
    this.log.append(message("user", text));
    const reply = message("assistant", "");
    reply.dataset.state = "streaming";
    this.log.append(reply);
    const messages = [...this.history, { role: "user", content: text }];
    this.controller = new AbortController();
    this.setBusy(true);
    const run = new ReplyMetrics(reply);
    try {
      const response = await fetch(this.url, {
        method: "POST",
        headers: this.headers(),
        body: JSON.stringify({
          ...(this.model() ? { model: this.model() } : {}),
          messages,
          stream: true,
          stream_options: { include_usage: true },
          ...this.params(),
        }),
        signal: this.controller.signal,
      });
      if (!response.ok) {
        const body = await response.json().catch(() => ({}));
        throw new Error(body.error?.message ?? `HTTP ${response.status}`);
      }
      for await (const data of sseData(response)) {
        if (data === "[DONE]") break;
        run.consume(JSON.parse(data));
      }
      run.finish("done");
      this.history = [...messages, { role: "assistant", content: run.text }];
    } catch (error) {
      if (error.name === "AbortError") {
        run.finish("stopped");
        this.history = [...messages, { role: "assistant", content: run.text }];
      } else {
        run.fail(error.message);
      }
    } finally {
      this.controller = null;
      this.setBusy(false);
      this.scroll();
      this.onFinished?.();
    }
  }

  stop() {
    this.controller?.abort();
  }

  clear() {
    this.stop();
    this.history = [];
    this.log.replaceChildren();
  }

  setBusy(busy) {
    this.sendButton.disabled = busy;
    this.stopButton.disabled = !busy;
  }

  scroll() {
    this.log.scrollTop = this.log.scrollHeight;
  }
}

/** One streamed reply: its text, and the timings measured in the browser. */
class ReplyMetrics {
  constructor(element) {
    this.element = element;
    this.body = element.querySelector(".msg-text");
    this.meta = element.querySelector(".msg-meta");
    this.startedAt = performance.now();
    this.firstAt = null;
    this.lastAt = null;
    this.text = "";
    this.pieces = 0;
    this.completionTokens = null;
    this.finishReason = null;
  }

  consume(chunk) {
    if (chunk.error) throw new Error(chunk.error.message);
    if (chunk.id) this.element.dataset.requestId = chunk.id;
    if (chunk.usage) this.completionTokens = chunk.usage.completion_tokens;
    const choice = chunk.choices?.[0];
    if (!choice) return;
    if (choice.finish_reason) this.finishReason = choice.finish_reason;
    const piece = choice.delta?.content;
    if (!piece) return;
    const now = performance.now();
    this.firstAt ??= now;
    this.lastAt = now;
    this.pieces += 1;
    this.text += piece;
    this.body.textContent = this.text;
    this.element.dataset.chunks = String(this.pieces);
    this.showMetrics();
    this.element.parentElement.scrollTop = this.element.parentElement.scrollHeight;
  }

  showMetrics(extra = "") {
    const tokens = this.completionTokens ?? this.pieces;
    // decode rate: tokens after the first over the time since the first (TTFT is shown apart)
    const span = (this.lastAt - this.firstAt) / 1000;
    const rate = tokens > 1 && span > 0 ? (tokens - 1) / span : null;
    const parts = [
      `TTFT ${this.firstAt === null ? "—" : seconds((this.firstAt - this.startedAt) / 1000)}`,
      `${rate === null ? "—" : num(rate, 1)} tok/s`,
      `${num(tokens)} tokens`,
    ];
    if (extra) parts.push(extra);
    this.meta.textContent = parts.join(" · ");
    if (rate !== null) this.element.dataset.tokensPerSecond = rate.toFixed(2);
    if (this.firstAt !== null) this.element.dataset.ttftMs = (this.firstAt - this.startedAt).toFixed(0);
  }

  finish(state) {
    this.element.dataset.state = state;
    this.showMetrics(state === "stopped" ? "stopped" : this.finishReason ?? "");
  }

  fail(reason) {
    this.element.dataset.state = "error";
    this.meta.textContent = `error: ${reason}`;
  }
}

function message(role, text) {
  const li = document.createElement("li");
  li.className = `msg ${role}`;
  const body = document.createElement("div");
  body.className = "msg-text";
  body.textContent = text;
  li.append(body);
  if (role === "assistant") {
    const meta = document.createElement("div");
    meta.className = "msg-meta";
    meta.textContent = "waiting for the first token…";
    li.append(meta);
  }
  return li;
}

function bindOutput(inputId, outputId) {
  const input = byId(inputId);
  const output = byId(outputId);
  input.addEventListener("input", () => (output.textContent = input.value));
}
