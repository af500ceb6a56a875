//! Fleet aggregates (issue 10): runs, loop runs and loop rate per `service.name` and per
//! agent (`gen_ai.agent.name`) in one-minute buckets, for the last window and the one
//! before, and kills by reason (pattern), each also per group. Read by `/v1/summary`
//! (`fleet`), `/v1/fleet?service=…&agent=…` (the same for the matching groups), `/metrics`
//! (`loopwatch_runs_started_total`, `loopwatch_loop_runs_total`, `loopwatch_kills_total`)
//! and the `/ui` page.
//!
//! A run counts in the bucket where loopwatch first saw it; it is a *loop run* once it has
//! a `warn` or `kill` detection (`info` = progress, as `/v1/runs?looping=true`), and that
//! loop is credited to the bucket the run started in, so a window's loop rate is "of the
//! runs that started in it, the share that looped". Kills count `kill` detections in the
//! bucket where they happened. Runs are learnt from detections as they are reported and
//! from a periodic sample of the registry ([`Fleet::sample`], more often than the
//! registry's idle TTL, so no run is missed). Wall-clock time; this is admin-side
//! plumbing, never the detector.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

// Looked up by run key for every warn and kill detection (SipHash showed under a loop
// storm's profile): randomly seeded foldhash, as the registry's per-span maps.
use foldhash::HashMap;
use serde::{Deserialize, Serialize};

use crate::detector::Severity;
use crate::registry::{Registry, RunDetection};

/// Length of one bucket, in seconds.
pub const BUCKET_SECS: u64 = 60;
/// Buckets in one window (the last window and the one before are compared): 10 minutes.
pub const WINDOW_BUCKETS: u64 = 10;
/// Buckets kept (the chart's span): 60 minutes.
pub const HISTORY_BUCKETS: u64 = 60;
/// Runs remembered for crediting a late loop to their start bucket; past this, new runs
/// are counted in `untracked_runs` only.
pub const MAX_TRACKED_RUNS: usize = 200_000;
/// Name used for a run without `service.name` or `gen_ai.agent.name`.
pub const UNKNOWN: &str = "unknown";
/// Distinct (service.name, gen_ai.agent.name) groups counted under their own names, at
/// most; runs of any further group count under [`OTHER`] for both. `service.name` comes
/// from whoever sends spans, and each group is a label set of three metric families and an
/// entry of `/v1/summary` kept for the life of the process: without a cap a client that
/// names a service per request grows both without bound.
pub const MAX_GROUPS: usize = 1000;
/// Name of the group that runs of groups past [`MAX_GROUPS`] count under.
pub const OTHER: &str = "other";

/// (service.name, gen_ai.agent.name): the run's interned names, shared (a new run's group
/// is keyed in three maps; cloning it copies no string).
type Group = (Arc<str>, Arc<str>);

#[derive(Default, Clone, Copy)]
struct Counts {
    runs: u64,
    loop_runs: u64,
}

#[derive(Default)]
struct Bucket {
    groups: BTreeMap<Group, Counts>,
    /// Kills by group and pattern name.
    kills: BTreeMap<(Group, &'static str), u64>,
}

struct TrackedRun {
    /// Unix second at which its start bucket begins.
    bucket: u64,
    group: Group,
    looped: bool,
}

#[derive(Default)]
struct State {
    /// Bucket start (unix seconds) → counts; at most `HISTORY_BUCKETS`.
    buckets: BTreeMap<u64, Bucket>,
    runs: HashMap<Arc<str>, TrackedRun>,
    /// Cumulative counts since start (Prometheus counters).
    totals: BTreeMap<Group, Counts>,
    /// Cumulative kills by group and pattern name.
    kills_total: BTreeMap<(Group, &'static str), u64>,
    untracked_runs: u64,
    /// The bucket of the last prune made for want of room in `runs` (see `observe_run`).
    pruned_for_room: Option<u64>,
    /// Prunes that scanned the runs (diagnostics; read by the tests).
    prune_scans: u64,
}

/// The fleet aggregates of one process. Cheap to share (`&Fleet` is `Sync`).
#[derive(Default)]
pub struct Fleet {
    state: Mutex<State>,
}

/// Seconds since the Unix epoch, now.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn bucket_of(unix: u64) -> u64 {
    unix - unix % BUCKET_SECS
}

fn group_of(service: Option<&Arc<str>>, agent: Option<&Arc<str>>) -> Group {
    static UNKNOWN_NAME: std::sync::LazyLock<Arc<str>> =
        std::sync::LazyLock::new(|| Arc::from(UNKNOWN));
    let name = |name: Option<&Arc<str>>| name.unwrap_or(&UNKNOWN_NAME).clone();
    (name(service), name(agent))
}

impl State {
    /// `group` if it is counted under its own names (already, or with room for it under
    /// [`MAX_GROUPS`]), else the [`OTHER`] group.
    fn admit(&self, group: Group) -> Group {
        if self.totals.contains_key(&group) || self.totals.len() < MAX_GROUPS {
            return group;
        }
        static OTHER_NAME: std::sync::LazyLock<Arc<str>> =
            std::sync::LazyLock::new(|| Arc::from(OTHER));
        (OTHER_NAME.clone(), OTHER_NAME.clone())
    }

    fn prune(&mut self, now: u64) {
        let oldest = bucket_of(now).saturating_sub((HISTORY_BUCKETS - 1) * BUCKET_SECS);
        self.buckets.retain(|start, _| *start >= oldest);
        self.runs.retain(|_, r| r.bucket >= oldest);
        self.prune_scans += 1;
    }

    /// One detection (see [`Fleet::observe_detections`]).
    fn observe_detection(&mut self, d: &RunDetection, now: u64) {
        if d.detection.severity == Severity::Info {
            return;
        }
        if !self.runs.contains_key(&d.run_key) {
            let group = group_of(d.service_name.as_ref(), d.agent_name.as_ref());
            self.observe_run(&d.run_key, group, now);
        }
        if d.detection.severity == Severity::Kill {
            let group = match self.runs.get(&d.run_key) {
                Some(run) => run.group.clone(),
                None => self.admit(group_of(d.service_name.as_ref(), d.agent_name.as_ref())),
            };
            let key = (group, d.detection.pattern.as_str());
            *self.kills_total.entry(key.clone()).or_default() += 1;
            *self
                .buckets
                .entry(bucket_of(now))
                .or_default()
                .kills
                .entry(key)
                .or_default() += 1;
        }
        let Some(run) = self.runs.get_mut(&d.run_key) else {
            return;
        };
        if run.looped {
            return;
        }
        run.looped = true;
        let (bucket, group) = (run.bucket, run.group.clone());
        self.totals.entry(group.clone()).or_default().loop_runs += 1;
        if let Some(b) = self.buckets.get_mut(&bucket) {
            b.groups.entry(group).or_default().loop_runs += 1;
        }
    }

    fn observe_run(&mut self, run_key: &Arc<str>, group: Group, now: u64) {
        if self.runs.contains_key(run_key) {
            return;
        }
        if self.runs.len() >= MAX_TRACKED_RUNS {
            // A prune drops the runs that started before the history, which only moves
            // when the bucket does: once per bucket, not once per new run (a scan of every
            // tracked run each time, under the lock the span path takes to count
            // detections, for each of a registry sample's thousands of runs).
            // Only a later bucket than the last one's can free more (callers read the
            // clock before the lock, so two of them may bring adjacent buckets in turn).
            let bucket = bucket_of(now);
            if self.pruned_for_room.is_none_or(|last| bucket > last) {
                self.prune(now);
                self.pruned_for_room = Some(bucket);
            }
            if self.runs.len() >= MAX_TRACKED_RUNS {
                self.untracked_runs += 1;
                return;
            }
        }
        let group = self.admit(group);
        let bucket = bucket_of(now);
        self.buckets
            .entry(bucket)
            .or_default()
            .groups
            .entry(group.clone())
            .or_default()
            .runs += 1;
        self.totals.entry(group.clone()).or_default().runs += 1;
        self.runs.insert(
            run_key.clone(),
            TrackedRun {
                bucket,
                group,
                looped: false,
            },
        );
    }
}

impl Fleet {
    /// Counts detections (one lock for all): each one's run (if new), a run's first
    /// warn/kill as a loop run, and a kill under its pattern. `now` is unix seconds.
    pub fn observe_detections(&self, detections: &[RunDetection], now: u64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for d in detections {
            s.observe_detection(d, now);
        }
    }

    /// Learns the runs the registry holds now (call more often than `registry.idle_ttl`)
    /// and forgets buckets older than the history.
    pub fn sample(&self, registry: &Registry, now: u64) {
        let runs = registry.runs();
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        for run in runs {
            let group = group_of(run.service_name.as_ref(), run.agent_name.as_ref());
            s.observe_run(&run.run_key, group, now);
        }
        s.prune(now);
    }

    /// The names `service` and `agent` are counted under: their own (`unknown` when
    /// absent) once their group is counted, [`OTHER`] for a group past [`MAX_GROUPS`].
    /// For labels of other metrics, so they stay within the same groups.
    pub fn group_names(&self, service: Option<&str>, agent: Option<&str>) -> (String, String) {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let group: Group = (
            Arc::from(service.unwrap_or(UNKNOWN)),
            Arc::from(agent.unwrap_or(UNKNOWN)),
        );
        let (service, agent) = s.admit(group);
        (service.to_string(), agent.to_string())
    }

    /// Cumulative (service, agent) → (runs started, loop runs), for `/metrics`.
    pub fn totals(&self) -> Vec<(String, String, u64, u64)> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.totals
            .iter()
            .map(|((svc, agent), c)| (svc.to_string(), agent.to_string(), c.runs, c.loop_runs))
            .collect()
    }

    /// Cumulative kill detections by pattern, for `/metrics`.
    pub fn kills_total(&self) -> BTreeMap<String, u64> {
        let s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        by_name(&s.kills_total, &GroupFilter::default())
    }

    /// The aggregates as `/v1/summary` (`fleet`) shows them, at unix second `now`.
    pub fn view(&self, now: u64) -> FleetView {
        self.view_of(now, &GroupFilter::default())
    }

    /// The aggregates of the groups `filter` matches, as `/v1/fleet` and `/ui` show them,
    /// at unix second `now`; `services` and `agents` list every name counted, matched or not.
    pub fn view_of(&self, now: u64, filter: &GroupFilter) -> FleetView {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        s.prune(now);
        let current_start = bucket_of(now);
        let window = WINDOW_BUCKETS * BUCKET_SECS;
        let last_start = current_start.saturating_sub((WINDOW_BUCKETS - 1) * BUCKET_SECS);
        let previous_start = last_start.saturating_sub(window);
        let mut last = WindowStats::new(last_start, window);
        let mut previous = WindowStats::new(previous_start, window);
        let mut buckets = Vec::new();
        let mut start = current_start.saturating_sub((HISTORY_BUCKETS - 1) * BUCKET_SECS);
        while start <= current_start {
            let mut view = BucketView {
                start_unix: start,
                ..BucketView::default()
            };
            if let Some(b) = s.buckets.get(&start) {
                for ((service, agent), c) in b.groups.iter().filter(|(g, _)| filter.matches(g)) {
                    view.total.add(c.runs, c.loop_runs);
                    view.by_agent
                        .entry(agent.to_string())
                        .or_default()
                        .add(c.runs, c.loop_runs);
                    for w in [&mut last, &mut previous] {
                        if w.contains(start) {
                            w.total.add(c.runs, c.loop_runs);
                            w.by_service
                                .entry(service.to_string())
                                .or_default()
                                .add(c.runs, c.loop_runs);
                            w.by_agent
                                .entry(agent.to_string())
                                .or_default()
                                .add(c.runs, c.loop_runs);
                        }
                    }
                }
                for ((_, pattern), n) in b.kills.iter().filter(|((g, _), _)| filter.matches(g)) {
                    view.kills += n;
                    for w in [&mut last, &mut previous] {
                        if w.contains(start) {
                            *w.kills_by_reason.entry(pattern.to_string()).or_default() += n;
                        }
                    }
                }
            }
            buckets.push(view);
            start += BUCKET_SECS;
        }
        FleetView {
            bucket_seconds: BUCKET_SECS,
            window_seconds: window,
            last_window: last,
            previous_window: previous,
            kills_by_reason: by_name(&s.kills_total, filter),
            untracked_runs: s.untracked_runs,
            buckets,
            services: names(s.totals.keys().map(|(service, _)| service)),
            agents: names(s.totals.keys().map(|(_, agent)| agent)),
        }
    }
}

/// Which (service, agent) groups a view counts: `None` matches any name. A name is
/// matched as counted, so `unknown` selects runs without the attribute and `other` the
/// groups past [`MAX_GROUPS`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupFilter {
    pub service: Option<String>,
    pub agent: Option<String>,
}

impl GroupFilter {
    fn matches(&self, (service, agent): &Group) -> bool {
        self.service.as_deref().is_none_or(|s| s == &**service)
            && self.agent.as_deref().is_none_or(|a| a == &**agent)
    }
}

/// Kills of the groups `filter` matches, summed by pattern name (owned names, for the
/// views and `/metrics`).
fn by_name(
    counts: &BTreeMap<(Group, &'static str), u64>,
    filter: &GroupFilter,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for ((group, pattern), n) in counts {
        if filter.matches(group) {
            *out.entry(pattern.to_string()).or_default() += n;
        }
    }
    out
}

/// Distinct names, sorted.
fn names<'a>(names: impl Iterator<Item = &'a Arc<str>>) -> Vec<String> {
    let set: std::collections::BTreeSet<&str> = names.map(|n| &**n).collect();
    set.into_iter().map(str::to_string).collect()
}

/// Runs and loop runs of a group, with their ratio.
#[derive(Serialize, Deserialize, Debug, Default, Clone, PartialEq)]
pub struct RunCounts {
    pub runs: u64,
    pub loop_runs: u64,
    /// loop_runs / runs (0 when there are no runs).
    pub loop_rate: f64,
}

impl RunCounts {
    fn add(&mut self, runs: u64, loop_runs: u64) {
        self.runs += runs;
        self.loop_runs += loop_runs;
        self.loop_rate = if self.runs == 0 {
            0.0
        } else {
            self.loop_runs as f64 / self.runs as f64
        };
    }
}

/// One window (`window_seconds` long, starting at `start_unix`).
#[derive(Serialize, Deserialize, Debug, Default, Clone, PartialEq)]
pub struct WindowStats {
    pub start_unix: u64,
    pub end_unix: u64,
    #[serde(flatten)]
    pub total: RunCounts,
    pub by_service: BTreeMap<String, RunCounts>,
    pub by_agent: BTreeMap<String, RunCounts>,
    /// Kill detections in the window by pattern.
    pub kills_by_reason: BTreeMap<String, u64>,
}

impl WindowStats {
    fn new(start: u64, len: u64) -> Self {
        WindowStats {
            start_unix: start,
            end_unix: start + len,
            ..WindowStats::default()
        }
    }

    fn contains(&self, bucket: u64) -> bool {
        (self.start_unix..self.end_unix).contains(&bucket)
    }
}

/// One bucket of the history.
#[derive(Serialize, Deserialize, Debug, Default, Clone, PartialEq)]
pub struct BucketView {
    pub start_unix: u64,
    #[serde(flatten)]
    pub total: RunCounts,
    pub by_agent: BTreeMap<String, RunCounts>,
    /// Kill detections in the bucket.
    pub kills: u64,
}

/// `/v1/summary` → `fleet`.
#[derive(Serialize, Deserialize, Debug, Default, Clone, PartialEq)]
pub struct FleetView {
    pub bucket_seconds: u64,
    pub window_seconds: u64,
    /// The last `window_seconds`, including the current bucket.
    pub last_window: WindowStats,
    /// The window before it.
    pub previous_window: WindowStats,
    /// Kill detections since start, by pattern.
    pub kills_by_reason: BTreeMap<String, u64>,
    /// Runs not counted because `MAX_TRACKED_RUNS` runs were already tracked.
    pub untracked_runs: u64,
    /// `HISTORY_BUCKETS` buckets, oldest first, the last one being the current bucket.
    pub buckets: Vec<BucketView>,
    /// Every `service.name` counted since start (sorted; at most [`MAX_GROUPS`] + 1 with
    /// `other`), whatever the filter: the choices of `/ui`'s service filter.
    #[serde(default)]
    pub services: Vec<String>,
    /// Every agent name counted since start (sorted), whatever the filter.
    #[serde(default)]
    pub agents: Vec<String>,
}

#[cfg(test)]
mod tests;
