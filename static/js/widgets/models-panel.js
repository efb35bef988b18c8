// The models panel: every model the server can serve (its status, memory, requests in flight and
// throughput), with load / unload buttons (llama-server router's POST /models/load and /unload),
// and the chat window's model picker kept to the same list.
import { num, DASH } from "../format.js";

export class ModelsPanel {
  constructor(table, picker, { loadUrl, unloadUrl, headers }) {
    this.body = table.querySelector("tbody");
    this.picker = picker;
    this.loadUrl = loadUrl;
    this.unloadUrl = unloadUrl;
    this.headers = headers; // the chat's headers: its API key where the server requires one
    this.pending = new Set(); // models with a load or unload on its way
    this.body.addEventListener("click", (event) => {
      const button = event.target.closest("button[data-action]");
      if (button) this.act(button.dataset.action, button.dataset.model, button);
    });
  }

  update(models) {
    if (!Array.isArray(models)) return;
    this.body.replaceChildren(...models.map((model) => this.row(model)));
    this.syncPicker(models);
  }

  row(model) {
    const row = document.createElement("tr");
    row.dataset.model = model.id;
    row.dataset.status = model.status;
    const cells = [
      model.id + (model.default ? " (default)" : ""),
      model.status,
      model.memory_mb === null ? DASH : `${num(Math.round(model.memory_mb))} MB`,
      num(model.in_flight),
      model.tokens_per_second === null ? DASH : model.tokens_per_second.toFixed(1),
      model.total_tokens_generated === null ? DASH : num(model.total_tokens_generated),
    ];
    cells.forEach((text, index) => {
      const cell = document.createElement("td");
      cell.textContent = text;
      if (index >= 2) cell.className = "num";
      if (index === 1 && model.error) cell.title = model.error;
      row.append(cell);
    });
    const actions = document.createElement("td");
    row.append(actions);
    if (model.managed === false) return row; // remote mode: the runengine workers hold the models
    const loaded = model.status === "loaded" || model.status === "loading";
    const button = document.createElement("button");
    button.type = "button";
    button.className = "link-button";
    button.dataset.action = loaded ? "unload" : "load";
    button.dataset.model = model.id;
    button.textContent = this.pending.has(model.id) ? "…" : button.dataset.action;
    button.disabled = this.pending.has(model.id) || model.status === "loading";
    actions.append(button);
    return row;
  }

  syncPicker(models) {
    const chosen = this.picker.value;
    const ids = models.map((model) => model.id);
    if (ids.join("\n") !== [...this.picker.options].map((option) => option.value).join("\n")) {
      this.picker.replaceChildren(
        ...models.map((model) => {
          const option = document.createElement("option");
          option.value = model.id;
          option.textContent = model.id;
          return option;
        }),
      );
      const fallback = models.find((model) => model.default) ?? models.find((model) => model.status === "loaded") ?? models[0];
      this.picker.value = ids.includes(chosen) ? chosen : (fallback?.id ?? "");
    }
    for (const option of this.picker.options) {
      const model = models.find((entry) => entry.id === option.value);
      option.textContent = model.status === "loaded" ? model.id : `${model.id} (${model.status})`;
    }
    this.picker.closest("label").hidden = models.length < 2; // one model: nothing to pick
  }

  async act(action, model, button) {
    this.pending.add(model);
    button.disabled = true;
    button.textContent = "…";
    try {
      const response = await fetch(action === "load" ? this.loadUrl : this.unloadUrl, {
        method: "POST",
        headers: this.headers(),
        body: JSON.stringify({ model }),
      });
      if (!response.ok) {
        const body = await response.json().catch(() => ({}));
        button.title = body.error?.message ?? `${action} failed (${response.status})`;
      }
    } finally {
      this.pending.delete(model);
    }
  }
}
