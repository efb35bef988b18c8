// The /ws/stats feed, reconnecting with exponential backoff (plus jitter) when the server goes away.

export class StatsSocket {
  constructor(path, { onStats, onState, minDelayMs = 500, maxDelayMs = 10000 }) {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    this.url = `${scheme}//${location.host}${path}`;
    this.onStats = onStats;
    this.onState = onState;
    this.minDelayMs = minDelayMs;
    this.maxDelayMs = maxDelayMs;
    this.attempts = 0;
    this.timer = null;
    this.ws = null;
  }

  connect() {
    clearTimeout(this.timer);
    this.timer = null;
    this.onState("connecting");
    const ws = new WebSocket(this.url);
    this.ws = ws;
    ws.onopen = () => {
      this.attempts = 0;
      this.onState("live");
    };
    ws.onmessage = (event) => this.onStats(JSON.parse(event.data));
    ws.onclose = () => {
      if (this.ws === ws) this.scheduleReconnect();
    };
  }

  scheduleReconnect() {
    const base = Math.min(this.maxDelayMs, this.minDelayMs * 2 ** this.attempts);
    const delay = Math.round(base * (0.75 + Math.random() * 0.5)); // jitter: clients don't stampede a restarted server
    this.attempts += 1;
    this.onState("reconnecting", delay);
    this.timer = setTimeout(() => this.connect(), delay);
  }

  /** Skips the rest of a backoff wait: /health says the server is back. */
  reconnectNow() {
    if (this.timer !== null) {
      this.attempts = 0;
      this.connect();
    }
  }

  get open() {
    return this.ws !== null && this.ws.readyState === WebSocket.OPEN;
  }
}
