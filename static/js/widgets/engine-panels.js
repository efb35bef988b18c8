// The plain-number panels: model line, counters, KV-cache bar, prefix-cache hit rate and speculation.
import { duration, num, pct, DASH } from "../format.js";

const byId = (id) => document.getElementById(id);

export function renderEngineInfo(stats) {
  byId("model-name").textContent = stats.model ?? DASH;
  byId("model-device").textContent = stats.device ?? DASH;
  byId("model-dtype").textContent = stats.dtype ?? DASH;
  byId("model-architecture").textContent = stats.architecture ?? DASH;
  byId("model-weights").textContent = stats.weights ?? DASH;
  byId("queue-depth").textContent = num(stats.queue_depth);
  byId("running").textContent = stats.batch_size === null ? DASH : `${num(stats.batch_size)} / ${num(stats.num_slots)}`;
  byId("total-tokens").textContent = num(stats.total_tokens_generated);
  byId("resumed").textContent = num(stats.num_requests_resumed);
  renderStepOverhead(stats.step_times);
  byId("uptime").textContent = stats.engine_state === "ready" ? duration(stats.uptime_seconds) : (stats.engine_state ?? DASH).replace("_", " ");
}

// A decode step's time outside the model (engine/timing/step_times.py), and the model's own beside it.
function renderStepOverhead(times) {
  const counted = times && times.steps > 0;
  byId("step-overhead").textContent = counted ? `${times.overhead_ms.toFixed(2)} ms` : DASH;
  byId("step-split").textContent = counted ? `model ${times.recent_ms.forward.toFixed(2)} ms` : "";
}

export function renderKvCache(stats) {
  const used = stats.kv_cache_usage_pct;
  const bar = byId("kv-bar");
  bar.style.width = `${used ?? 0}%`;
  bar.dataset.level = used > 90 ? "high" : used > 70 ? "mid" : "low";
  bar.parentElement.setAttribute("aria-valuenow", String(used ?? 0));
  byId("kv-label").textContent =
    stats.kv_blocks_total === null ? DASH : `${pct(used)} · ${num(stats.kv_blocks_used)} / ${num(stats.kv_blocks_total)} blocks`;
  const rate = stats.prefix_cache_hit_rate;
  byId("prefix-hit-rate").textContent = rate === null ? DASH : pct(rate * 100);
  byId("prefix-label").textContent =
    stats.prefix_cache_queries === null ? DASH : `${num(stats.prefix_cache_hits)} of ${num(stats.prefix_cache_queries)} prompt blocks reused`;
}

export function renderSpeculation(stats) {
  byId("spec-mode").textContent = stats.speculative ?? "";
  const rate = stats.spec_acceptance_rate;
  byId("spec-acceptance").textContent = rate === null || rate === undefined ? DASH : pct(rate * 100);
  const perStep = stats.spec_tokens_per_step;
  byId("spec-tokens-per-step").textContent = perStep === null || perStep === undefined ? DASH : perStep.toFixed(2);
  byId("spec-label").textContent =
    stats.spec_draft_tokens === null || stats.spec_draft_tokens === undefined
      ? DASH
      : `${num(stats.spec_accepted_tokens)} of ${num(stats.spec_draft_tokens)} guessed tokens accepted`;
}
