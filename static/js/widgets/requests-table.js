// The last N rows of the request history (GET /api/requests/), each linking to its admin page.
import { age, num, seconds, shortId } from "../format.js";

export class RequestsTable {
  constructor(tbody, { url, limit, adminUrl, placeholder }) {
    this.tbody = tbody;
    this.url = url;
    this.limit = limit;
    this.adminUrl = adminUrl;
    this.placeholder = placeholder;
  }

  async refresh() {
    try {
      const response = await fetch(this.url, { cache: "no-store" });
      if (!response.ok) return;
      const body = await response.json();
      this.render((body.results ?? body).slice(0, this.limit));
    } catch {
      // offline: keep the last rows; the banner already says why
    }
  }

  poll(intervalMs) {
    const tick = async () => {
      await this.refresh();
      setTimeout(tick, intervalMs);
    };
    tick();
  }

  render(rows) {
    this.tbody.replaceChildren(...rows.map((row) => this.row(row)));
  }

  row(request) {
    const tr = document.createElement("tr");
    tr.dataset.requestId = request.id;
    tr.dataset.status = request.status;
    const link = document.createElement("a");
    link.href = this.adminUrl.replace(this.placeholder, encodeURIComponent(request.id));
    link.textContent = shortId(request.id);
    link.title = request.id;
    const status = document.createElement("span");
    status.className = `status status-${request.status}`;
    status.textContent = request.status;
    const cells = [
      link,
      request.endpoint,
      status,
      `${num(request.prompt_tokens)} → ${num(request.completion_tokens)}`,
      seconds(request.time_to_first_token),
      seconds(request.latency),
      age(request.created),
    ];
    cells.forEach((content, index) => {
      const td = document.createElement("td");
      if (index >= 3) td.className = "num";
      td.append(content);
      tr.append(td);
    });
    return tr;
  }
}
