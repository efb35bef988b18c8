// One cell per batch slot: green while a request decodes there, with its id (and which of its n
// choices, from the second on) and tokens so far.
import { shortId } from "../format.js";

export class SlotGrid {
  constructor(list, summary) {
    this.list = list;
    this.summary = summary;
  }

  update(slots, numSlots) {
    const count = numSlots ?? slots.length;
    while (this.list.children.length < count) this.list.append(this.cell(this.list.children.length));
    while (this.list.children.length > count) this.list.lastElementChild.remove();
    let busy = 0;
    slots.forEach((slot, index) => {
      const cell = this.list.children[index];
      if (!cell) return;
      const isBusy = Boolean(slot.request_id);
      busy += isBusy;
      cell.classList.toggle("busy", isBusy);
      const choice = isBusy && slot.choice ? ` · choice ${slot.choice}` : "";
      cell.dataset.choice = isBusy ? String(slot.choice ?? 0) : "";
      cell.title = isBusy ? `${slot.request_id}${choice}` : "idle";
      cell.querySelector(".slot-id").textContent = isBusy ? `${shortId(slot.request_id)}${choice}` : "idle";
      cell.querySelector(".slot-tokens").textContent = isBusy ? `${slot.tokens} tok` : "";
    });
    this.list.dataset.busy = String(busy);
    this.summary.textContent = count ? `${busy} / ${count} busy` : "engine not running";
  }

  cell(index) {
    const li = document.createElement("li");
    li.className = "slot";
    li.dataset.index = String(index);
    li.innerHTML = `<span class="slot-index">#${index}</span><span class="slot-id">idle</span><span class="slot-tokens"></span>`;
    return li;
  }
}
