// loopwatch /ui: polls the admin API every 2 s and renders the fleet view. Text is always
// set with textContent (never innerHTML): run keys, tool and agent names come from spans.
"use strict";

const COLORS = ["#1565c0", "#c62828", "#2e7d32", "#6a1b9a", "#ef6c00", "#00838f", "#4e342e", "#ad1457"];
const callsCache = new Map(); // trace_id -> repeated calls, refreshed each poll for shown loops

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function pct(x) { return (100 * x).toFixed(1) + " %"; }

async function getJson(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

function renderWindows(fleet) {
  const last = fleet.last_window, prev = fleet.previous_window;
  for (const e of document.querySelectorAll(".window-min")) e.textContent = fleet.window_seconds / 60;
  document.getElementById("runs-last").textContent = last.runs;
  document.getElementById("runs-prev").textContent = "previous: " + prev.runs;
  document.getElementById("loops-last").textContent = last.loop_runs;
  document.getElementById("loops-prev").textContent = "previous: " + prev.loop_runs;
  document.getElementById("rate-last").textContent = pct(last.loop_rate);
  document.getElementById("rate-prev").textContent = "previous: " + pct(prev.loop_rate);
  const kills = document.getElementById("kills");
  kills.replaceChildren();
  const reasons = Object.entries(fleet.kills_by_reason);
  if (reasons.length === 0) kills.append(el("li", {}, "none"));
  for (const [pattern, n] of reasons) kills.append(el("li", { "data-pattern": pattern }, pattern + ": " + n));
}

// Loop rate per agent over the buckets that had runs, as SVG polylines.
function renderChart(fleet) {
  const ns = "http://www.w3.org/2000/svg";
  const W = 1000, H = 220, PAD = 30;
  const buckets = fleet.buckets;
  const agents = [...new Set(buckets.flatMap(b => Object.keys(b.by_agent)))].sort();
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  const x = i => PAD + (W - 2 * PAD) * (buckets.length > 1 ? i / (buckets.length - 1) : 0);
  const y = r => H - PAD - (H - 2 * PAD) * r;
  for (const r of [0, 0.5, 1]) {
    const line = document.createElementNS(ns, "line");
    Object.entries({ x1: PAD, x2: W - PAD, y1: y(r), y2: y(r), stroke: "#ddd" }).forEach(([k, v]) => line.setAttribute(k, v));
    svg.append(line);
    const t = document.createElementNS(ns, "text");
    Object.entries({ x: 2, y: y(r) + 4, "font-size": 11, fill: "#777" }).forEach(([k, v]) => t.setAttribute(k, v));
    t.textContent = (100 * r) + "%";
    svg.append(t);
  }
  const legend = document.getElementById("legend");
  legend.replaceChildren();
  agents.forEach((agent, n) => {
    const color = COLORS[n % COLORS.length];
    const points = [];
    buckets.forEach((b, i) => {
      const c = b.by_agent[agent];
      if (c && c.runs > 0) points.push([x(i), y(c.loop_rate)]);
    });
    const path = document.createElementNS(ns, "polyline");
    path.setAttribute("class", "agent-line");
    path.setAttribute("data-agent", agent);
    path.setAttribute("fill", "none");
    path.setAttribute("stroke", color);
    path.setAttribute("stroke-width", "2");
    path.setAttribute("points", points.map(p => p.join(",")).join(" "));
    svg.append(path);
    for (const [px, py] of points) {
      const dot = document.createElementNS(ns, "circle");
      Object.entries({ cx: px, cy: py, r: 4, fill: color }).forEach(([k, v]) => dot.setAttribute(k, v));
      svg.append(dot);
    }
    const swatch = el("span", {});
    swatch.style.background = color;
    legend.append(el("li", { "data-agent": agent }, swatch, agent));
  });
  document.getElementById("chart").replaceChildren(svg);
}

function renderRuns(runs) {
  const body = document.querySelector("#runs tbody");
  body.replaceChildren();
  for (const r of runs) {
    body.append(el("tr", { "data-run-key": r.run_key },
      el("td", { class: "mono" }, r.run_key.slice(0, 16)),
      el("td", {}, r.service_name || "unknown"),
      el("td", {}, r.agent_name || "unknown"),
      el("td", {}, r.tool_calls),
      el("td", {}, r.idle_seconds.toFixed(0) + " s"),
      el("td", r.looping ? { class: "looping" } : {}, r.looping ? "looping" : "ok")));
  }
}

// Repeated calls of a trace: tool name, short fingerprint (16 hex chars), hits and steps.
function callsCell(calls) {
  const list = el("ul", { class: "calls" });
  for (const c of calls || []) {
    list.append(el("li", { "data-fingerprint": c.fingerprint.slice(0, 16) },
      c.tool_name + " ", el("span", { class: "fp" }, c.fingerprint.slice(0, 16)),
      " ×" + c.hits + " at steps " + c.step_indices.join(", ")));
  }
  return el("td", {}, list);
}

async function renderLoops(loopingRuns) {
  const rows = [];
  for (const run of loopingRuns) {
    for (const d of run.detections) {
      if (d.severity === "info") continue;
      rows.push({ run, d });
    }
  }
  rows.sort((a, b) => a.run.idle_seconds - b.run.idle_seconds);
  const shown = rows.slice(0, 20);
  for (const trace of new Set(shown.map(r => r.d.trace_id))) {
    try {
      callsCache.set(trace, (await getJson("/v1/traces/" + trace + "/loops")).data);
    } catch (e) { /* the run may have been evicted meanwhile */ }
  }
  const body = document.querySelector("#loops tbody");
  body.replaceChildren();
  for (const { run, d } of shown) {
    body.append(el("tr", { "data-trace-id": d.trace_id, "data-pattern": d.pattern, "data-severity": d.severity },
      el("td", {}, el("span", { class: "sev-" + d.severity }, d.severity)),
      el("td", {}, d.pattern),
      el("td", {}, d.tools.join(", ")),
      el("td", {}, d.count),
      el("td", {}, d.profile),
      el("td", {}, (run.service_name || "unknown") + " / " + (run.agent_name || "unknown")),
      el("td", { class: "mono" }, d.trace_id.slice(0, 16)),
      callsCell(callsCache.get(d.trace_id))));
  }
}

async function poll() {
  const status = document.getElementById("status");
  try {
    const [summary, runs, looping] = await Promise.all([
      getJson("/v1/summary"),
      getJson("/v1/runs?limit=50"),
      getJson("/v1/runs?looping=true&limit=20"),
    ]);
    renderWindows(summary.fleet);
    renderChart(summary.fleet);
    renderRuns(runs.data);
    await renderLoops(looping.data);
    status.textContent = "updated " + new Date().toLocaleTimeString() + " · " + summary.runs + " runs tracked";
    document.body.dataset.loaded = "true";
  } catch (e) {
    status.textContent = "error: " + e.message;
  }
}

poll();
setInterval(poll, 2000);
