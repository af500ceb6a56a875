// The drill-down of one run in /ui: facts, trace links, detections with why they fired,
// and every step in order (tool, times, short fingerprints, what the detector made of it).
// Never argument, result or text content: the API only has fingerprints.
import { el, setAttr, setText, syncChildren, ago, clock, setFingerprint } from "./dom.js";
import { worst, setSeverity } from "./runs.js";

const $ = id => document.getElementById(id);

function stepLabel(s) {
  switch (s.kind) {
    case "tool_call": return s.tool_name;
    case "tool_result": return s.tool_name + " (result span)";
    case "text_response": return "model: text";
    case "tool_call_response": return "model → tools";
    default: return "model (traced twice)";
  }
}

function detectionKey(d) { return `${d.profile}/${d.pattern}/${d.span_id}/${d.budget}`; }

export class RunPanel {
  constructor(onProfile) {
    this.section = $("run");
    this.profileSelect = $("run-profile");
    this.profileSelect.addEventListener("change", () => onProfile(this.profileSelect.value));
  }

  /** Hides the panel. */
  hide() {
    this.section.hidden = true;
    document.body.classList.remove("with-run");
  }

  /** Shows that `runKey` is not (or no longer) held. */
  missing(runKey, message) {
    this.open(runKey);
    setText($("run-missing"), message);
    $("run-missing").hidden = false;
    $("run-body").hidden = true;
  }

  open(runKey) {
    this.section.hidden = false;
    document.body.classList.add("with-run");
    setText($("run-key"), runKey);
    setAttr(this.section, "data-run-key", runKey);
  }

  /** Shows `detail` (the `data` of `/v1/runs/{run_key}`); `profile` picks the verdicts
   *  shown (null: the profile of the most severe detection). Returns the profile shown. */
  show(detail, profile) {
    this.open(detail.run_key);
    $("run-missing").hidden = true;
    $("run-body").hidden = false;
    const steps = detail.steps;
    const t0 = steps.length ? steps[0].start_time_unix_nano : 0;
    const last = steps.length ? Math.max(...steps.map(s => s.end_time_unix_nano)) : 0;
    setText($("run-service"), detail.service_name || "unknown");
    setText($("run-agent"), detail.agent_name || "unknown");
    setText($("run-calls"), detail.tool_calls);
    setText($("run-state"), detail.looping ? "looping" : "ok");
    setAttr($("run-state"), "class", detail.looping ? "state looping" : "state ok");
    const took = (last - t0) / 1e9;
    setText($("run-span"), steps.length ? `${clock(t0)} – ${clock(last)} (${took.toFixed(took < 10 ? 3 : 1)} s)` : "–");
    setText($("run-idle"), ago(detail.idle_seconds));

    syncChildren($("run-traces"), detail.traces, t => t.trace_id, () =>
      el("li", {}, el("code", {}), " ", el("a", { target: "_blank", rel: "noopener noreferrer", class: "trace-link" }, "open in tracing UI ↗")),
    (li, t) => {
      setText(li.firstChild, t.trace_id);
      const a = li.lastChild;
      const ok = typeof t.url === "string" && /^https?:\/\//.test(t.url);
      setAttr(a, "href", ok ? t.url : null);
      a.hidden = !ok;
    });
    $("run-trace-hint").hidden = detail.traces.some(t => t.url);

    syncChildren($("run-detections"), detail.detections, detectionKey, () =>
      el("li", {}, el("span", {}), " ", el("strong", {}), el("span", { class: "meta" }), el("p", { class: "reason" })),
    (li, d) => {
      const [badge, , pattern, meta, reason] = li.childNodes;
      setAttr(li, "data-pattern", d.pattern);
      setAttr(li, "data-severity", d.severity);
      setAttr(li, "data-profile", d.profile);
      setSeverity(badge, d.severity);
      setText(pattern, d.pattern);
      const at = d.call ? `call ${d.call}` : d.response ? `response ${d.response}` : "";
      setText(meta, ` · profile ${d.profile} · occurrence ${d.occurrence}` + (at ? ` · at ${at}` : "") + ` · ${clock(d.time_unix_nano)}`);
      setText(reason, d.reason);
    });
    $("run-no-detections").hidden = detail.detections.length > 0;

    const profiles = [...new Set(steps.flatMap(s => Object.keys(s.verdicts)))].sort();
    const fallback = (worst(detail.detections) || {}).profile || profiles[0] || "";
    const chosen = profiles.includes(profile) ? profile : fallback;
    syncChildren(this.profileSelect, profiles, p => p, p => el("option", { value: p }, p), () => {});
    if (this.profileSelect.value !== chosen) this.profileSelect.value = chosen;

    setText($("run-omitted"), detail.steps_omitted ? `${detail.steps_omitted} earlier steps not listed` : "");
    const seen = new Map();
    const keyed = steps.map(s => {
      const n = (seen.get(s.span_id) || 0) + 1;
      seen.set(s.span_id, n);
      return { s, key: `${s.trace_id}/${s.span_id}/${n}` };
    });
    syncChildren($("run-steps").tBodies[0], keyed, k => k.key, () => {
      const cells = ["num", "num time", "num", "tool", "fp-cell", "fp-cell", "loop", "why"].map(c => el("td", { class: c }));
      cells[4].append(el("span", {}));
      cells[5].append(el("span", {}));
      return el("tr", {}, ...cells);
    }, (row, { s }) => {
      const [call, time, dur, tool, args, result, loop, why] = row.cells;
      setAttr(row, "data-call", s.call ?? null);
      setAttr(row, "data-kind", s.kind);
      setAttr(row, "data-in-loop", s.detections.length ? "true" : null);
      setText(call, s.call ?? "·");
      setText(time, "+" + ((s.start_time_unix_nano - t0) / 1e9).toFixed(3) + " s");
      setAttr(time, "title", clock(s.start_time_unix_nano));
      setText(dur, ((s.end_time_unix_nano - s.start_time_unix_nano) / 1e6).toFixed(0) + " ms");
      setText(tool, stepLabel(s));
      const isCall = s.kind === "tool_call";
      setFingerprint(args.firstChild, isCall ? s.arguments : s.text, isCall ? "not captured" : s.kind === "text_response" ? "–" : "");
      setFingerprint(result.firstChild, s.result, isCall ? "not captured" : "");
      // The loops of the profile shown that this step is one of the calls of.
      const loops = s.detections.map(i => detail.detections[i]).filter(d => d && d.profile === chosen);
      setText(loop, [...new Set(loops.map(d => `${d.pattern} ${d.severity}`))].join(", "));
      const verdict = s.verdicts[chosen] || "";
      setText(why, verdict);
      const minor = s.kind === "tool_call_response" || s.kind === "outer_response";
      setAttr(row, "class", verdict.startsWith("FIRED") ? "fired" : loops.length ? "in-loop" : minor ? "minor" : null);
    });
    setAttr(this.section, "data-loaded", detail.run_key);
    return chosen;
  }
}
