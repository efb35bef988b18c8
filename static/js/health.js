// Polls /health: the "engine offline" banner shows whenever it is not 200 (loading, dead, stalled, unreachable).

export function watchHealth(url, intervalMs, onChange) {
  let last = null;
  async function poll() {
    let healthy = false;
    let reason = "the server is unreachable";
    try {
      const response = await fetch(url, { cache: "no-store" });
      healthy = response.status === 200;
      if (!healthy) {
        const body = await response.json().catch(() => ({}));
        reason = body.reason || `/health answered ${response.status}`;
      }
    } catch {
      // network error: the server is down or restarting
    }
    const state = healthy ? "ok" : reason;
    if (state !== last) {
      last = state;
      onChange(healthy, healthy ? "" : reason);
    }
    setTimeout(poll, intervalMs);
  }
  poll();
}
