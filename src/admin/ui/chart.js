// The time axis of /ui: runs and loop runs per one-minute bucket over the last hour (the
// fleet view's buckets), with kills marked above their bucket. Built once; each poll only
// moves bars and relabels, so the chart never flickers.
import { setAttr, setText } from "./dom.js";

const NS = "http://www.w3.org/2000/svg";
const W = 1000, H = 210, LEFT = 44, RIGHT = 8, TOP = 22, BOTTOM = 24;
const PLOT_H = H - TOP - BOTTOM;

function svg(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

/** The smallest of 1, 2, 5 × 10^k at or above `n` (at least 2, so the mid line is whole). */
function niceMax(n) {
  let step = 1;
  for (;;) {
    for (const m of [1, 2, 5]) if (m * step >= Math.max(n, 2)) return m * step;
    step *= 10;
  }
}

function hhmm(unix) {
  return new Date(unix * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hour12: false });
}

export class TimeChart {
  /** Draws into `container` (emptied once). */
  constructor(container) {
    this.root = svg("svg", { viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": "runs, loop runs and kills per minute" });
    this.grid = svg("g", { class: "grid" });
    this.bars = svg("g", { class: "bars" });
    this.axis = svg("g", { class: "axis" });
    this.root.append(this.grid, this.bars, this.axis);
    this.gridLines = [0, 0.5, 1].map(f => {
      const y = TOP + PLOT_H * (1 - f);
      const line = svg("line", { x1: LEFT, x2: W - RIGHT, y1: y, y2: y });
      const label = svg("text", { x: LEFT - 6, y: y + 4, "text-anchor": "end" }, "");
      this.grid.append(line, label);
      return { f, label };
    });
    this.slots = [];
    this.labels = [];
    container.replaceChildren(this.root);
  }

  slot(i) {
    while (this.slots.length <= i) {
      const g = svg("g", { class: "bucket" });
      const title = svg("title", {}, "");
      const runs = svg("rect", { class: "runs" });
      const loops = svg("rect", { class: "loops" });
      const kill = svg("path", { class: "kill" });
      const killText = svg("text", { class: "kill-count", "text-anchor": "middle" }, "");
      g.append(title, runs, loops, kill, killText);
      this.bars.append(g);
      this.slots.push({ g, title, runs, loops, kill, killText });
    }
    return this.slots[i];
  }

  label(i) {
    while (this.labels.length <= i) {
      const t = svg("text", { "text-anchor": "middle", y: H - 6 }, "");
      this.axis.append(t);
      this.labels.push(t);
    }
    return this.labels[i];
  }

  /** Shows `fleet.buckets` (oldest first, one per `fleet.bucket_seconds`). */
  update(fleet) {
    const buckets = fleet.buckets;
    const max = niceMax(Math.max(0, ...buckets.map(b => b.runs)));
    for (const { f, label } of this.gridLines) setText(label, String(max * f));
    const bw = (W - LEFT - RIGHT) / Math.max(1, buckets.length);
    const h = n => (PLOT_H * n) / max;
    let labels = 0;
    buckets.forEach((b, i) => {
      const s = this.slot(i);
      const x = LEFT + i * bw;
      setAttr(s.g, "display", null);
      setAttr(s.g, "data-start", b.start_unix);
      setAttr(s.g, "data-runs", b.runs);
      setAttr(s.g, "data-loop-runs", b.loop_runs);
      setAttr(s.g, "data-kills", b.kills);
      setText(s.title, `${hhmm(b.start_unix)} · ${b.runs} runs started, ${b.loop_runs} looped, ${b.kills} kills`);
      for (const [rect, n] of [[s.runs, b.runs], [s.loops, b.loop_runs]]) {
        setAttr(rect, "x", (x + 1).toFixed(1));
        setAttr(rect, "width", Math.max(1, bw - 2).toFixed(1));
        setAttr(rect, "y", (TOP + PLOT_H - h(n)).toFixed(1));
        setAttr(rect, "height", h(n).toFixed(1));
      }
      const cx = x + bw / 2, top = TOP + PLOT_H - h(b.runs) - 4;
      setAttr(s.kill, "d", b.kills > 0 ? `M${(cx - 5).toFixed(1)},${(top - 8).toFixed(1)} h10 l-5,8 z` : "");
      setText(s.killText, b.kills > 1 ? String(b.kills) : "");
      setAttr(s.killText, "x", cx.toFixed(1));
      setAttr(s.killText, "y", (top - 11).toFixed(1));
      // A label every 10 minutes, and "now" under the current bucket (the 10-minute label
      // just before it is left out rather than drawn over it).
      const tenMinutes = b.start_unix % 600 === 0 && i < buckets.length - 4;
      if (tenMinutes || i === buckets.length - 1) {
        const t = this.label(labels++);
        setText(t, i === buckets.length - 1 ? "now" : hhmm(b.start_unix));
        setAttr(t, "x", Math.min(W - RIGHT - 12, cx).toFixed(1));
      }
    });
    this.slots.slice(buckets.length).forEach(s => setAttr(s.g, "display", "none"));
    this.labels.slice(labels).forEach(t => setText(t, ""));
  }
}
