// Tokens/second over a sliding time window, drawn as an inline SVG path (no charting library).
import { num } from "../format.js";

const WIDTH = 300;
const HEIGHT = 80;

export class Sparkline {
  constructor(svg, { windowS = 60, nowLabel, peakLabel }) {
    this.svg = svg;
    this.windowMs = windowS * 1000;
    this.line = svg.querySelector(".spark-line");
    this.area = svg.querySelector(".spark-area");
    this.nowLabel = nowLabel;
    this.peakLabel = peakLabel;
    this.points = []; // [timestamp ms, value]
  }

  push(value, at = performance.now()) {
    if (value === null || value === undefined) return; // not measured: leave a gap, invent nothing
    this.points.push([at, value]);
    while (this.points.length && at - this.points[0][0] > this.windowMs) this.points.shift();
    this.draw(at);
    this.nowLabel.textContent = num(value, 1);
  }

  draw(now) {
    const peak = Math.max(0, ...this.points.map(([, v]) => v));
    const scale = peak > 0 ? peak * 1.1 : 1;
    const xy = this.points.map(([t, v]) => [
      (WIDTH * (t - (now - this.windowMs))) / this.windowMs,
      HEIGHT - (HEIGHT * v) / scale,
    ]);
    const line = xy.map(([x, y], i) => `${i ? "L" : "M"}${x.toFixed(1)},${y.toFixed(1)}`).join(" ");
    this.line.setAttribute("d", line);
    this.area.setAttribute("d", xy.length ? `${line} L${xy.at(-1)[0].toFixed(1)},${HEIGHT} L${xy[0][0].toFixed(1)},${HEIGHT} Z` : "");
    this.svg.dataset.points = String(this.points.length);
    this.svg.dataset.peak = String(peak);
    this.svg.dataset.nonzero = String(this.points.filter(([, v]) => v > 0).length);
    this.peakLabel.textContent = `peak ${num(peak, 1)}`;
  }
}
