// The runs table of /ui: one row per run, keyed by run key and updated in place; a click
// (or Enter) on a row opens its drill-down.
import { el, setAttr, setText, syncChildren, ago } from "./dom.js";

const RANK = { info: 0, warn: 1, require_approval: 2, kill: 3 };

/** The most severe of `detections` (the latest among equals), or null. */
export function worst(detections) {
  let best = null;
  for (const d of detections || []) {
    if (!best || (RANK[d.severity] ?? 0) >= (RANK[best.severity] ?? 0)) best = d;
  }
  return best;
}

/** A severity badge (`span.sev-<severity>`), updated in place. */
export function setSeverity(node, severity) {
  setText(node, severity || "");
  setAttr(node, "class", severity ? "sev sev-" + severity : "sev");
}

export class RunsTable {
  /** `table`: the runs `<table>`; `onSelect(runKey)` when a row is chosen. */
  constructor(table, onSelect) {
    this.body = table.tBodies[0];
    const pick = e => {
      const row = e.target.closest("tr[data-key]");
      if (row) onSelect(row.dataset.key);
    };
    this.body.addEventListener("click", pick);
    this.body.addEventListener("keydown", e => { if (e.key === "Enter") pick(e); });
  }

  /** Shows `runs` (most recent first), marking `selected` (a run key or null). */
  update(runs, selected) {
    syncChildren(this.body, runs, r => r.run_key, () => {
      const cells = ["state", "run mono", "service", "agent", "num calls", "detection", "num idle"].map(c => el("td", { class: c }));
      cells[0].append(el("span", {}));
      cells[5].append(el("span", {}), el("span", { class: "pattern" }));
      return el("tr", { tabindex: "0" }, ...cells);
    }, (row, r) => {
      const [state, key, service, agent, calls, detection, idle] = row.cells;
      setAttr(row, "data-run-key", r.run_key);
      setAttr(row, "data-looping", String(r.looping));
      setAttr(row, "aria-selected", String(r.run_key === selected));
      setText(state.firstChild, r.looping ? "looping" : "ok");
      setAttr(state.firstChild, "class", r.looping ? "state looping" : "state ok");
      setText(key, r.run_key.length > 16 ? r.run_key.slice(0, 16) + "…" : r.run_key);
      setAttr(key, "title", r.run_key);
      setText(service, r.service_name || "unknown");
      setText(agent, r.agent_name || "unknown");
      setText(calls, r.tool_calls);
      const d = worst(r.detections);
      setSeverity(detection.firstChild, d && d.severity);
      setText(detection.lastChild, d ? " " + d.pattern + (r.detections.length > 1 ? ` (+${r.detections.length - 1})` : "") : "");
      setText(idle, ago(r.idle_seconds));
    });
  }
}
