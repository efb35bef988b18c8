// Circular memory gauge (inline SVG). On CUDA: GPU memory used / total. On CPU there is no
// device memory to show, so the outer ring is this process's RSS against system RAM and the
// inner ring is the whole system's use; the labels say so.
import { megabytes, pct, DASH } from "../format.js";

function setArc(circle, fraction) {
  const circumference = 2 * Math.PI * Number(circle.getAttribute("r"));
  const f = Math.min(1, Math.max(0, fraction ?? 0));
  circle.style.strokeDasharray = `${circumference}`;
  circle.style.strokeDashoffset = `${circumference * (1 - f)}`; // animated by a CSS transition
  circle.dataset.level = f > 0.85 ? "high" : f > 0.65 ? "mid" : "low";
}

export class MemoryGauge {
  constructor(svg, label, legend) {
    this.svg = svg;
    this.label = label;
    this.legend = legend;
    [this.outer, this.inner] = svg.querySelectorAll(".gauge-arc");
    this.innerTrack = svg.querySelector(".gauge-track.inner");
    this.value = svg.querySelector(".gauge-value");
    this.caption = svg.querySelector(".gauge-caption");
  }

  update(stats) {
    const onGpu = stats.gpu_memory_total_mb !== null && stats.gpu_memory_total_mb !== undefined;
    if (onGpu) {
      const fraction = stats.gpu_memory_used_mb / stats.gpu_memory_total_mb;
      this.show(fraction, null, `${megabytes(stats.gpu_memory_used_mb)} / ${megabytes(stats.gpu_memory_total_mb)}`);
      this.label.textContent = `GPU memory (${stats.device})`;
      this.legend.textContent = `${pct(stats.gpu_memory_pct)} of device memory in use`;
      this.svg.dataset.mode = "gpu";
    } else if (stats.system_memory_total_mb) {
      const fraction = stats.process_rss_mb / stats.system_memory_total_mb;
      this.show(fraction, stats.system_memory_pct / 100, `${megabytes(stats.process_rss_mb)} / ${megabytes(stats.system_memory_total_mb)}`);
      this.label.textContent = "CPU: server process vs system RAM";
      this.legend.textContent = `outer ring: this process · inner ring: whole system (${pct(stats.system_memory_pct, 0)})`;
      this.svg.dataset.mode = "cpu";
    } else {
      this.value.textContent = DASH;
    }
  }

  show(fraction, innerFraction, caption) {
    setArc(this.outer, fraction);
    const hasInner = innerFraction !== null;
    this.inner.style.display = this.innerTrack.style.display = hasInner ? "" : "none";
    if (hasInner) setArc(this.inner, innerFraction);
    this.value.textContent = pct(fraction * 100, fraction < 0.1 ? 1 : 0);
    this.caption.textContent = caption;
  }
}
