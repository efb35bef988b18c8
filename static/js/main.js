// Wires the dashboard: stats from /ws/stats drive the widgets; /health drives the offline
// banner; the request table polls /api/requests/. Config comes from the page (json_script).
import { ChatWindow } from "./chat.js";
import { watchHealth } from "./health.js";
import { StatsSocket } from "./stats-socket.js";
import { renderEngineInfo, renderKvCache, renderSpeculation } from "./widgets/engine-panels.js";
import { MemoryGauge } from "./widgets/gauge.js";
import { ModelsPanel } from "./widgets/models-panel.js";
import { RequestsTable } from "./widgets/requests-table.js";
import { SlotGrid } from "./widgets/slots.js";
import { Sparkline } from "./widgets/sparkline.js";

const byId = (id) => document.getElementById(id);
const readJson = (id) => JSON.parse(byId(id).textContent);

const config = readJson("dashboard-config");
const gauge = new MemoryGauge(byId("memory-gauge"), byId("memory-label"), byId("memory-legend"));
const sparkline = new Sparkline(byId("tps-sparkline"), {
  windowS: config.sparkline_window_s,
  nowLabel: byId("tps-now"),
  peakLabel: byId("tps-peak"),
});
const slots = new SlotGrid(byId("slots"), byId("slots-summary"));
const requests = new RequestsTable(document.querySelector("#recent-requests tbody"), {
  url: config.urls.requests,
  limit: config.recent_requests,
  adminUrl: config.urls.admin_request,
  placeholder: config.request_id_placeholder,
});

const chat = new ChatWindow({ url: config.urls.chat, onFinished: () => requests.refresh(), model: () => byId("chat-model").value });
const models = new ModelsPanel(byId("models-table"), byId("chat-model"), {
  loadUrl: config.urls.load_model,
  unloadUrl: config.urls.unload_model,
  headers: () => chat.headers(),
});

function render(stats, { live = true } = {}) {
  renderEngineInfo(stats);
  renderKvCache(stats);
  renderSpeculation(stats);
  gauge.update(stats);
  slots.update(stats.slots ?? [], stats.num_slots);
  models.update(stats.models);
  if (live) sparkline.push(stats.tokens_per_second);
}

function showConnection(state, delayMs) {
  const pill = byId("connection");
  pill.dataset.state = state;
  pill.textContent =
    state === "live" ? "live" : state === "reconnecting" ? `reconnecting in ${(delayMs / 1000).toFixed(1)} s` : "connecting…";
  document.body.classList.toggle("stale", state !== "live");
}

const socket = new StatsSocket(config.urls.stats_socket, {
  onStats: (stats) => render(stats),
  onState: showConnection,
  minDelayMs: config.reconnect_min_ms,
  maxDelayMs: config.reconnect_max_ms,
});

watchHealth(config.urls.health, config.health_poll_ms, (healthy, reason) => {
  byId("offline-banner").hidden = healthy;
  byId("offline-reason").textContent = reason;
  document.body.dataset.health = healthy ? "ok" : "offline";
  if (healthy) socket.reconnectNow();
});

render(readJson("initial-stats"), { live: false });
socket.connect();
requests.poll(config.requests_poll_ms);
