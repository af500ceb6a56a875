// loopwatch /ui: polls the admin API every 2 s and updates the page in place. The view
// (filters, the open run, the profile shown) lives in the URL query, so a view can be
// linked: ?service=…&agent=…&looping=1&run=<run key>&profile=<profile>.
import { el, setText, syncChildren, pct } from "./dom.js";
import { TimeChart } from "./chart.js";
import { RunsTable } from "./runs.js";
import { RunPanel } from "./run.js";

const $ = id => document.getElementById(id);
const POLL_MS = 2000;
// Steps of the open run fetched per poll (the latest; the page says how many are left out).
const STEP_LIMIT = 500;
const KEYS = ["service", "agent", "looping", "run", "profile"];

function readView() {
  const q = new URLSearchParams(location.search);
  const view = {};
  for (const k of KEYS) view[k] = q.get(k) || null;
  return view;
}

let view = readView();

function writeView(push) {
  const q = new URLSearchParams();
  for (const k of KEYS) if (view[k]) q.set(k, view[k]);
  const url = location.pathname + (q.toString() ? "?" + q : "");
  if (url !== location.pathname + location.search) history[push ? "pushState" : "replaceState"](null, "", url);
}

class Unauthorized extends Error {}

async function getJson(path) {
  const r = await fetch(path, { cache: "no-store", credentials: "same-origin" });
  if (r.status === 401) throw new Unauthorized("session ended");
  if (r.status === 404) return null;
  if (!r.ok) throw new Error(path + ": HTTP " + r.status);
  return r.json();
}

function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== null && v !== undefined && v !== "") q.set(k, v);
  return q.toString();
}

const chart = new TimeChart($("chart"));
const runsTable = new RunsTable($("runs"), key => { view.run = key; writeView(true); poll(); });
const panel = new RunPanel(profile => { view.profile = profile; writeView(false); poll(); });

$("run-close").addEventListener("click", () => { view.run = null; view.profile = null; writeView(true); poll(); });
for (const [id, key] of [["f-service", "service"], ["f-agent", "agent"]]) {
  $(id).addEventListener("change", e => { view[key] = e.target.value || null; writeView(false); poll(); });
}
$("f-looping").addEventListener("change", e => { view.looping = e.target.checked ? "1" : null; writeView(false); poll(); });
window.addEventListener("popstate", () => { view = readView(); poll(); });
if (document.body.dataset.auth !== "on") $("logout").hidden = true;

/** Keeps a filter `<select>`'s choices (names counted so far, plus the current one). */
function syncSelect(select, names, current) {
  const all = [...new Set([...names, ...(current ? [current] : [])])].sort();
  const options = [{ value: "", label: "all" }, ...all.map(n => ({ value: n, label: n }))];
  syncChildren(select, options, o => o.value, o => el("option", { value: o.value }, o.label), () => {});
  if (select.value !== (current || "")) select.value = current || "";
}

function showFleet(fleet) {
  const last = fleet.last_window, prev = fleet.previous_window;
  for (const e of document.querySelectorAll(".window-min")) setText(e, fleet.window_seconds / 60);
  setText($("runs-last"), last.runs);
  setText($("runs-prev"), "previous: " + prev.runs);
  setText($("loops-last"), last.loop_runs);
  setText($("loops-prev"), "previous: " + prev.loop_runs);
  setText($("rate-last"), pct(last.loop_rate));
  setText($("rate-prev"), "previous: " + pct(prev.loop_rate));
  const reasons = Object.entries(fleet.kills_by_reason);
  syncChildren($("kills"), reasons.length ? reasons : [["none", null]], ([p]) => p, () => el("li", {}), (li, [pattern, n]) => {
    if (n === null) { setText(li, "none"); return; }
    li.dataset.pattern = pattern;
    setText(li, pattern + ": " + n);
  });
  chart.update(fleet);
  syncSelect($("f-service"), fleet.services, view.service);
  syncSelect($("f-agent"), fleet.agents, view.agent);
}

let polling = null, again = false;

/** Reads the API and updates the page; a call during a poll runs once more after it. */
async function poll() {
  if (polling) { again = true; return; }
  polling = (async () => {
    $("f-looping").checked = view.looping === "1";
    const filters = { service: view.service, agent: view.agent };
    try {
      const [fleet, runs, detail] = await Promise.all([
        getJson("/v1/fleet?" + query(filters)),
        getJson("/v1/runs?" + query({ ...filters, looping: view.looping ? "true" : null, limit: 100 })),
        view.run ? getJson("/v1/runs/" + encodeURIComponent(view.run) + "?limit=" + STEP_LIMIT) : Promise.resolve(undefined),
      ]);
      showFleet(fleet);
      runsTable.update(runs.data, view.run);
      setText($("runs-count"), `${runs.data.length} shown` + (view.looping ? ", looping only" : ""));
      if (!view.run) panel.hide();
      else if (detail === null) panel.missing(view.run, "loopwatch no longer holds this run (idle past registry.idle_ttl, or never seen).");
      else {
        const shown = panel.show(detail.data, view.profile);
        if (view.profile && shown !== view.profile) { view.profile = null; writeView(false); }
      }
      setText($("status"), "updated " + new Date().toLocaleTimeString([], { hour12: false }));
      document.body.dataset.loaded = "true";
    } catch (e) {
      if (e instanceof Unauthorized && document.body.dataset.auth === "on") { location.reload(); return; }
      setText($("status"), "error: " + e.message);
    }
  })();
  try { await polling; } finally { polling = null; }
  if (again) { again = false; poll(); }
}

poll();
setInterval(poll, POLL_MS);
