//! Per-run state (DESIGN §2, §7): each run's events in span start-time order,
//! deduplicated by span_id, with one [`Detector`] per profile.
//!
//! Exporters send spans in end order and may split a run over several requests, so a
//! span can arrive after later-starting ones. Appending in order (the common case) feeds
//! the detectors incrementally, O(window) per event and profile. A request holding spans
//! that land before the end of the sequence makes the run replay its kept events once (per
//! request, not per late span), so the final set of detections never depends on batching
//! or arrival order; that costs O(kept events · window), at most `max_events_per_run`.
//! Detections that a replay finds and that were never reported are reported as new; each
//! (profile, completing span, pattern) is reported at most once in the life of the run.
//!
//! Memory is bounded by an idle TTL, a cap on runs and a cap on the estimated bytes of all
//! run state ([`RunState::heap_bytes`]), the least recently seen run evicted first in O(1)
//! (an `lru` recency list beside the concurrent map), and by a cap on events kept per run. Forgotten events are folded into a base detector
//! state, so call ordinals, occurrences and later detections are unchanged by forgetting;
//! a late span that starts before every kept event is then left out of detection. The
//! list of a run's detections keeps those of kept events plus at most `max_events_per_run`
//! of forgotten ones (it grows by at most one per call and profile).

use foldhash::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;

use crate::conventions::event::span_of_call;
use crate::detector::{Detection, Detector, Observation, Pattern, ProfileSettings};
use crate::fingerprint::Fingerprint;

mod call_context;
mod kept;
pub mod merge;
pub use call_context::{CallContext, CallKey, ToolCallPart};
use kept::KeptEvent;
pub use merge::CallHop;
mod reload;
pub use reload::ProfileSet;
mod span_ids;
mod what_if;
pub use what_if::WhatIf;

/// Registry limits. Config section `[registry]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RegistryConfig {
    /// A run unseen for this long is dropped (default `10m`).
    #[serde(with = "humantime_serde")]
    pub idle_ttl: Duration,
    /// At most this many runs are tracked; the least recently seen is evicted first
    /// (default 100 000).
    pub max_runs: usize,
    /// Events kept per run for re-ordering (default 10 000). Past it, the oldest are
    /// forgotten: a late span older than every kept event is then ignored.
    pub max_events_per_run: usize,
    /// Estimated bytes of all run state together (default 1 GiB, see
    /// [`RunState::heap_bytes`]); over it the least recently seen runs are evicted. The run
    /// being updated is never evicted for its own size (`max_events_per_run` bounds it).
    pub max_bytes: u64,
}

/// Default `registry.max_bytes`: 1 GiB of estimated run state.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

impl RegistryConfig {
    /// Checks the section.
    ///
    /// # Errors
    /// `(key, reason)` naming the offending key.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.max_bytes == 0 {
            return Err(("registry.max_bytes".into(), "must be above 0".into()));
        }
        Ok(())
    }
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            idle_ttl: Duration::from_secs(600),
            max_runs: 100_000,
            max_events_per_run: 10_000,
            max_bytes: DEFAULT_MAX_BYTES,
        }
    }
}

/// A trace_id as a run holds it: inline up to 16 bytes (every valid OTLP trace_id, 24
/// bytes in all), on the heap past that, so any byte string is kept exactly.
pub type TraceId = SmallVec<[u8; 16]>;
/// A span_id (or parent span_id) as a run holds it: inline up to 8 bytes (every valid
/// OTLP span_id, 24 bytes in all), on the heap past that.
pub type SpanId = SmallVec<[u8; 8]>;

/// One extracted, fingerprinted span on its way into a run.
#[derive(Clone, Debug)]
pub struct RunEvent {
    /// Run key: the trace_id hex, or the configured attribute's value.
    pub run_key: Arc<str>,
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// Span start and end, ns since the Unix epoch.
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub service_name: Option<Arc<str>>,
    pub agent_name: Option<Arc<str>>,
    pub observation: Observation,
    /// Parent span, completeness, call ids and message parts: how copies and double traces
    /// of one call are recognised ([`merge`]).
    pub call: CallContext,
}

impl RunEvent {
    fn order_key(&self) -> (u64, u64, &[u8]) {
        (
            self.start_time_unix_nano,
            self.end_time_unix_nano,
            &self.span_id,
        )
    }
}

/// A detection with the span context it applies to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunDetection {
    /// Index of the profile in the registry's profile list.
    pub profile_index: usize,
    pub profile: Arc<ProfileSettings>,
    /// What the detector found; shared, so the copy the run keeps and the copy
    /// [`Registry::observe`] returns (then reported, logged and signalled) are one
    /// allocation, not two lists of tools, fingerprints and members each.
    pub detection: Arc<Detection>,
    pub run_key: Arc<str>,
    /// trace_id and span_id of the span that completed the detection (inline when 16 and
    /// 8 bytes, as valid ids are).
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// span_ids of the spans that formed it, in start order (inline each: a loop of ten
    /// calls was ten allocations, twice, per detection). Shared: the copy the run keeps and
    /// the copy [`Registry::observe`] returns are one list.
    pub span_ids: Arc<[SpanId]>,
    /// End time of the completing span (ns since the Unix epoch).
    pub time_unix_nano: u64,
    /// 1-based count of detections in this run with the same profile, pattern and
    /// fingerprints, up to and including this one.
    pub occurrence: u32,
    pub service_name: Option<Arc<str>>,
    pub agent_name: Option<Arc<str>>,
}

#[cfg(test)]
impl RunDetection {
    /// A detection for tests: `pattern` over `tool_names` (one fingerprint `[7; 32]` each)
    /// at `severity` under the built-in nudge profile, completed by span `[2; 8]` of trace
    /// `[1; 16]` in run `run`; counts, times, members and names zero or empty.
    pub(crate) fn sample(
        pattern: crate::detector::Pattern,
        tool_names: &[&str],
        severity: crate::detector::Severity,
    ) -> RunDetection {
        RunDetection {
            profile_index: 0,
            profile: Arc::new(ProfileSettings::nudge()),
            detection: Arc::new(Detection {
                pattern,
                tool_names: tool_names.iter().map(|t| Arc::from(*t)).collect(),
                count: 0,
                window: 0,
                severity,
                fingerprints: vec![[7; 32]; tool_names.len()],
                members: vec![],
                call: None,
                response: None,
                budget: None,
                evidence: Default::default(),
            }),
            run_key: Arc::from("run"),
            trace_id: [1; 16].as_slice().into(),
            span_id: [2; 8].as_slice().into(),
            span_ids: Arc::new([]),
            time_unix_nano: 0,
            occurrence: 0,
            service_name: None,
            agent_name: None,
        }
    }
}

impl RunDetection {
    fn identity(&self) -> Identity {
        (
            self.profile_index,
            self.span_id.clone(),
            self.detection.pattern,
        )
    }
}

fn occurrence_key(d: &RunDetection) -> OccurrenceKey {
    (
        d.profile_index,
        d.detection.pattern,
        SmallVec::from_slice(&d.detection.fingerprints),
    )
}

/// A repeated call in a run: what `GET /v1/traces/{trace_id}/loops` lists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RepeatedCall {
    pub fingerprint: Fingerprint,
    pub tool_name: Arc<str>,
    /// 1-based tool-call ordinals (start order), ascending.
    pub step_indices: Vec<usize>,
}

/// A read-only view of one run.
#[derive(Clone, Debug)]
pub struct RunSummary {
    pub run_key: Arc<str>,
    pub service_name: Option<Arc<str>>,
    pub agent_name: Option<Arc<str>>,
    pub tool_calls: usize,
    pub detections: Vec<RunDetection>,
    pub last_seen: Instant,
}

/// Key under which detections are counted for `occurrence`: (profile index, pattern, the
/// loop's call fingerprints, inline up to two: built for every detection, and looked up
/// again when an event is forgotten).
type OccurrenceKey = (usize, Pattern, SmallVec<[Fingerprint; 2]>);
/// What makes a detection "the same" across replays: (profile index, completing span_id,
/// pattern). A run holds each span_id once, so this names at most one detection.
type Identity = (usize, SpanId, Pattern);

/// What a run counts of its detections.
#[derive(Default)]
struct Tallies {
    /// Detections per (profile, pattern, fingerprints) in `detections`.
    occurrences: HashMap<OccurrenceKey, u32>,
    /// Identities already returned by `observe` for kept events: a detection is reported
    /// once even if a replay drops it and a later replay finds it again.
    reported: HashSet<Identity>,
    /// The order key (start, end, span_id) of the last kept event when the run was last
    /// approved ([`Registry::approve`]): a replay forgets the loops in progress there
    /// again, so a late span does not undo an approval.
    approved_through: Option<(u64, u64, SpanId)>,
}

struct RunState {
    /// Kept events in order (ties: end time, then span_id); span_ids unique. Their run key
    /// is the run's.
    events: Vec<KeptEvent>,
    /// Where each span_id of `events` is (the dedupe key; an empty span_id is a key like
    /// any other).
    seen: span_ids::SpanIds,
    /// Detector state after every kept event (fed incrementally while spans arrive in order).
    detectors: Detectors,
    /// Every detection of the run in sequence order: those completed by forgotten events
    /// (the first [`Forgotten::detections`]), then those of kept events.
    detections: Vec<RunDetection>,
    /// Occurrence counts and reported identities: created with the run's first detection
    /// (most runs have none, and two empty hash tables cost 96 bytes inline).
    tallies: Option<Box<Tallies>>,
    /// What the run keeps of the events it forgot: created when it first forgets one
    /// (most runs never do).
    forgotten: Option<Box<Forgotten>>,
    last_seen: Instant,
    /// Message parts waiting for their tool call (joins).
    calls: merge::CallIndex,
    /// Origins (trace, names, tool) of kept events in the order first seen, for new events
    /// to share: the first [`kept::MAX_ORIGINS`], and past them the first to bring a
    /// service or agent name (the run's names in summaries are the first listed).
    origins: Vec<Arc<kept::Origin>>,
}

/// One detector per profile, inline in the run state up to the two built-in profiles (one
/// allocation fewer per run than a separate list).
type Detectors = SmallVec<[Detector; 2]>;

/// What a run keeps of the events it forgot from the front (past `max_events_per_run`).
struct Forgotten {
    /// Detector state after the forgotten events only: a replay starts here, so forgetting
    /// events never changes ordinals, occurrences or what later calls are compared with.
    base: Detectors,
    /// Detections completed by forgotten events, at the front of the run's list.
    detections: usize,
    /// Events forgotten, in all, and how many of them were tool calls.
    events: usize,
    tool_calls: usize,
}

impl RunState {
    /// Events forgotten from the front (cap), in all.
    fn forgotten_events(&self) -> usize {
        self.forgotten.as_ref().map_or(0, |f| f.events)
    }

    /// Tool calls among the forgotten events.
    fn forgotten_tool_calls(&self) -> usize {
        self.forgotten.as_ref().map_or(0, |f| f.tool_calls)
    }

    /// Detections of forgotten events (at the front of `detections`).
    fn base_detections(&self) -> usize {
        self.forgotten.as_ref().map_or(0, |f| f.detections)
    }

    /// Lists `origin` for later events to share, unless listed or the list is full and it
    /// brings no first service or agent name (one slot more at a time: most runs list one
    /// origin per tool, a handful).
    fn list_origin(&mut self, origin: &Arc<kept::Origin>) {
        if self.origins.iter().any(|o| Arc::ptr_eq(o, origin)) {
            return;
        }
        let first_name = |name: fn(&kept::Origin) -> &Option<Arc<str>>| {
            name(origin).is_some() && self.origins.iter().all(|o| name(o).is_none())
        };
        if self.origins.len() < kept::MAX_ORIGINS
            || first_name(|o| &o.service_name)
            || first_name(|o| &o.agent_name)
        {
            self.origins.reserve_exact(1);
            self.origins.push(origin.clone());
        }
    }

    /// The first service name among the run's events (in the order they were kept).
    fn service_name(&self) -> Option<Arc<str>> {
        self.origins.iter().find_map(|o| o.service_name.clone())
    }

    /// The first agent name among the run's events.
    fn agent_name(&self) -> Option<Arc<str>> {
        self.origins.iter().find_map(|o| o.agent_name.clone())
    }

    /// Estimated heap bytes of this run's state: the one place the registry's byte
    /// accounting (`registry.max_bytes`) is computed, O(1) per call. It counts the kept
    /// events (every slot of the list; valid span and parent ids are inline) and the listed
    /// shared origins (trace_id, names and tool name, at least one), the dedupe index of
    /// span_ids (past 16 events: a 32-bit position and a control byte per slot), the detections kept
    /// with their span id lists, the occurrence and reported sets, the pending message parts
    /// and, per profile, the live detector state and, once an event was forgotten, the base
    /// state, at a flat [`DETECTOR_BYTES`] each. Not counted: origins past the listed
    /// [`kept::MAX_ORIGINS`], and the box of the few events with ids over 8 bytes, an MCP
    /// request, an end over 18 minutes after the start or message parts (only inference
    /// spans carry parts). Allocator overhead is folded into
    /// [`ALLOCATION_BYTES`] per heap allocation. An estimate, not a measurement: adapt it
    /// here when the state's layout changes.
    pub fn heap_bytes(&self) -> u64 {
        use std::mem::size_of;
        let a = ALLOCATION_BYTES;
        // The completing span's ids are inline; its members' span ids (a window holds at
        // most 20) one list of inline ids; the detector's finding one shared allocation.
        let detection = size_of::<RunDetection>()
            + a
            + 10 * size_of::<SpanId>()
            + (2 * size_of::<usize>() + size_of::<Detection>() + a);
        // Span and parent ids are inline in the event (valid OTLP lengths); trace_id and
        // names are shared, counted once per run.
        let events = self.events.capacity() * size_of::<KeptEvent>()
            + self.origins.capacity() * size_of::<Arc<kept::Origin>>()
            + self.origins.len().max(1) * (size_of::<kept::Origin>() + 16 + a);
        let detections = self.detections.capacity() * size_of::<RunDetection>()
            + self.detections.len() * (detection - size_of::<RunDetection>());
        let sets = self.seen.heap_bytes()
            + self.tallies.as_ref().map_or(0, |t| {
                size_of::<Tallies>()
                    + t.occurrences.capacity() * (size_of::<OccurrenceKey>() + 4)
                    // Keys of loops over more than two fingerprints hold them on the heap.
                    + t.occurrences
                        .keys()
                        .filter(|(_, _, fingerprints)| fingerprints.spilled())
                        .map(|(_, _, fingerprints)| a + fingerprints.len() * size_of::<Fingerprint>())
                        .sum::<usize>()
                    + t.reported.capacity() * size_of::<Identity>()
            });
        let detectors = self.detectors.len() * DETECTOR_BYTES
            + self.forgotten.as_ref().map_or(0, |f| {
                size_of::<Forgotten>() + f.base.len() * DETECTOR_BYTES
            });
        (size_of::<Box<RunState>>()
            + size_of::<RunState>()
            + events
            + detections
            + sets
            + detectors
            + self.calls.heap_bytes()) as u64
    }
}

/// Flat estimate of one detector's state (its window of calls and streaks): 640 bytes.
/// Calibrated with `benches/registry_eviction.rs` (100 000 runs of 3 calls under the two
/// built-in profiles: RSS grew 415 MiB; with 2 KiB here the estimate said 960 MiB).
pub const DETECTOR_BYTES: usize = 640;
/// Estimated allocator overhead per heap allocation: 16 bytes.
pub const ALLOCATION_BYTES: usize = 16;

/// Why a run was dropped from memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionCause {
    /// Unseen for `idle_ttl`.
    Idle,
    /// Over `max_runs`.
    Capacity,
    /// Over `max_bytes`.
    Bytes,
}

/// The recency order of the runs (least recently seen first) with each run's estimated
/// bytes, and their sum. Held only briefly, and always after (never before) a map shard
/// lock, so it cannot deadlock with the map.
struct Recency {
    order: lru::LruCache<Arc<str>, u64, foldhash::fast::RandomState>,
    bytes: u64,
}

/// Counters kept by the registry (read by `/metrics`).
#[derive(Debug, Default)]
pub struct RegistryStats {
    pub runs_evicted_idle: AtomicU64,
    pub runs_evicted_capacity: AtomicU64,
    /// Runs evicted because the estimated state passed `registry.max_bytes`.
    pub runs_evicted_bytes: AtomicU64,
    pub duplicate_spans: AtomicU64,
    pub events_forgotten: AtomicU64,
    /// Tool calls placed in their run without arguments after the one-call rule and joins
    /// with what the run held (DESIGN §3): the inner span of a call traced twice is not
    /// counted. Counted when placed: a call whose arguments arrive later on another span
    /// of it (an outer span or model span in a later request) stays counted.
    pub tool_calls_without_arguments: AtomicU64,
}

/// All runs, keyed by run key. Shared by the receivers (through the pipeline), the
/// offline scan and the admin API.
pub struct Registry {
    /// Boxed: a map slot is then a key and a pointer, so the table's spare slots (up to
    /// half of them after it grows) cost 24 bytes each rather than a whole `RunState`.
    runs: DashMap<Arc<str>, Box<RunState>, foldhash::fast::RandomState>,
    recency: Mutex<Recency>,
    /// The profiles new runs are judged under; swapped whole by [`Registry::set_profiles`]
    /// (a run's own detectors name the set it was last judged under).
    profiles: arc_swap::ArcSwap<ProfileSet>,
    config: RegistryConfig,
    stats: RegistryStats,
}

impl Registry {
    /// A registry running `profiles` side by side on every run.
    pub fn new(profiles: Vec<ProfileSettings>, config: RegistryConfig) -> Self {
        Registry {
            runs: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            recency: Mutex::new(Recency {
                order: lru::LruCache::unbounded_with_hasher(foldhash::fast::RandomState::default()),
                bytes: 0,
            }),
            profiles: arc_swap::ArcSwap::from_pointee(profiles.into_iter().map(Arc::new).collect()),
            config,
            stats: RegistryStats::default(),
        }
    }

    /// The profiles in the order detections refer to them (the current set: a reload
    /// swaps it, [`Registry::set_profiles`]).
    pub fn profiles(&self) -> Arc<ProfileSet> {
        self.profiles.load_full()
    }

    /// The limits this registry was built with.
    pub fn config(&self) -> &RegistryConfig {
        &self.config
    }

    pub fn stats(&self) -> &RegistryStats {
        &self.stats
    }

    /// Number of runs tracked.
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    /// Estimated bytes of all run state ([`RunState::heap_bytes`], as of each run's last
    /// update).
    pub fn state_bytes(&self) -> u64 {
        self.recency().bytes
    }

    fn recency(&self) -> MutexGuard<'_, Recency> {
        // A panic while holding this lock cannot leave the list and sum inconsistent
        // beyond one run's estimate.
        self.recency.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks `key` most recently seen with `bytes` of state, and picks the least recently
    /// seen runs to evict while over `max_runs` or `max_bytes` (never `key` itself). O(1)
    /// per run touched or evicted. Called with `key`'s map entry held.
    fn touch(&self, key: &Arc<str>, bytes: u64) -> Vec<(Arc<str>, EvictionCause)> {
        let max_runs = self.config.max_runs.max(1);
        let max_bytes = self.config.max_bytes.max(1);
        let mut recency = self.recency();
        let recency = &mut *recency;
        if let Some(old) = recency.order.put(key.clone(), bytes) {
            recency.bytes -= old.min(recency.bytes);
        }
        recency.bytes += bytes;
        let mut victims = Vec::new();
        while recency.order.len() > 1 {
            let cause = if recency.order.len() > max_runs {
                EvictionCause::Capacity
            } else if recency.bytes > max_bytes {
                EvictionCause::Bytes
            } else {
                break;
            };
            let Some((victim, victim_bytes)) = recency.order.pop_lru() else {
                break;
            };
            recency.bytes -= victim_bytes.min(recency.bytes);
            victims.push((victim, cause));
        }
        victims
    }

    /// Removes runs [`Registry::touch`] picked, unless seen again since (then they are back
    /// in the recency list and stay); counts each removal by cause.
    fn evict(&self, victims: Vec<(Arc<str>, EvictionCause)>) {
        for (key, cause) in victims {
            let removed = self
                .runs
                .remove_if(&key, |k, _| !self.recency().order.contains(k))
                .is_some();
            if removed {
                let counter = match cause {
                    EvictionCause::Idle => &self.stats.runs_evicted_idle,
                    EvictionCause::Capacity => &self.stats.runs_evicted_capacity,
                    EvictionCause::Bytes => &self.stats.runs_evicted_bytes,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Adds events (any runs, any order) and returns the detections not reported before,
    /// in run order then sequence order. A span already seen in its run (same span_id) is
    /// ignored and counted in `duplicate_spans`. `now` drives the idle TTL and LRU (the
    /// detector itself reads no clock).
    ///
    /// Cost: events arriving in order cost O(window) each per profile. A request holding
    /// spans that start before the run's last kept event re-orders the run and replays it
    /// once (not once per late span): O(kept events · window) per profile, bounded by
    /// `max_events_per_run`. A detection is reported at most once per (profile, completing
    /// span, pattern), whatever replays find later.
    pub fn observe(&self, mut events: Vec<RunEvent>, now: Instant) -> Vec<RunDetection> {
        events.sort_by(|a, b| {
            a.run_key
                .cmp(&b.run_key)
                .then_with(|| a.order_key().cmp(&b.order_key()))
        });
        let mut new_detections = Vec::new();
        let mut rest = events.as_slice();
        while let Some(first) = rest.first() {
            let len = rest
                .iter()
                .position(|e| e.run_key != first.run_key)
                .unwrap_or(rest.len());
            let (batch, tail) = rest.split_at(len);
            rest = tail;
            let victims = {
                let mut run = self
                    .runs
                    .entry(first.run_key.clone())
                    .or_insert_with(|| Box::new(self.new_run(now)));
                run.last_seen = now;
                self.adopt_current_profiles(&first.run_key, &mut run, &mut new_detections);
                self.insert_batch(&first.run_key, &mut run, batch, &mut new_detections);
                self.touch(&first.run_key, run.heap_bytes())
            };
            // After the entry is released: a victim may share its map shard.
            self.evict(victims);
        }
        new_detections
    }

    /// Moves the events of the spans in `moves` (span_id → new run key) out of run `from`
    /// into their new runs, as if they had arrived there (a `trace_and_agent` call keyed by
    /// its trace before its agent was known). Run `from` replays without them, and is
    /// dropped when nothing is left of it. Events forgotten past the cap, or merged into
    /// another call, are not moved. Returns the detections not reported before.
    pub fn rehome(
        &self,
        from: &str,
        moves: &std::collections::HashMap<Vec<u8>, Arc<str>>,
        now: Instant,
    ) -> Vec<RunDetection> {
        let mut out = Vec::new();
        let mut moved = Vec::new();
        if let Some(mut run) = self.runs.get_mut(from) {
            let key = run.key().clone();
            let (taken, kept): (Vec<KeptEvent>, Vec<KeptEvent>) = std::mem::take(&mut run.events)
                .into_iter()
                .partition(|e| moves.contains_key(span_of_call(e.span_id())));
            run.events = kept;
            let state: &mut RunState = &mut run;
            state.seen.rebuild(&state.events);
            for event in taken {
                let to = &moves[span_of_call(event.span_id())];
                let mut event = event.to_run_event(to);
                // The agent the call was moved to names it, when it named none itself.
                if event.agent_name.is_none() {
                    event.agent_name =
                        crate::conventions::run_key::agent_of_run_key(to).map(Arc::from);
                }
                moved.push(event);
            }
            if !moved.is_empty() {
                self.replay(&key, &mut run, &mut out);
            }
        }
        if !moved.is_empty() {
            // Atomic: a request that added to the run meanwhile keeps it.
            self.runs.remove_if(from, |_, run| {
                run.events.is_empty() && run.detections.is_empty() && run.forgotten.is_none()
            });
        }
        // The guard on `from` is released: observing may lock any shard.
        out.extend(self.observe(moved, now));
        out
    }

    /// Applies call hops ([`merge::relink`]) to the runs that hold their child tool calls
    /// already (a hop's run is not created: a tool call arriving later finds its hop in the
    /// engine); runs that change replay. Returns the detections not reported before.
    pub fn relink(&self, hops: &[merge::CallHop]) -> Vec<RunDetection> {
        let mut out = Vec::new();
        for hop in hops {
            if let Some(mut run) = self.runs.get_mut(hop.run_key.as_ref()) {
                let key = run.key().clone();
                if merge::relink(&mut run, hop) {
                    self.replay(&key, &mut run, &mut out);
                }
            }
        }
        out
    }

    fn new_run(&self, now: Instant) -> RunState {
        RunState {
            events: Vec::new(),
            seen: span_ids::SpanIds::default(),
            detectors: self
                .profiles
                .load()
                .iter()
                .map(|p| Detector::new(p.clone()))
                .collect(),
            detections: Vec::new(),
            tallies: None,
            forgotten: None,
            last_seen: now,
            calls: merge::CallIndex::default(),
            origins: Vec::new(),
        }
    }

    /// Detectors in their initial state for the profiles `like` applies (a run's own set,
    /// so one operation never mixes the profiles of two reloads).
    fn fresh_detectors(like: &Detectors) -> Detectors {
        like.iter()
            .map(|d| Detector::new(d.shared_settings().clone()))
            .collect()
    }

    fn insert_batch(
        &self,
        key: &Arc<str>,
        run: &mut RunState,
        batch: &[RunEvent],
        out: &mut Vec<RunDetection>,
    ) {
        let mut needs_replay = false;
        reserve_histories(run, batch);
        for (i, event) in batch.iter().enumerate() {
            let (event, counted_without_arguments) = match merge::place(run, event) {
                merge::Placement::Duplicate => {
                    self.stats.duplicate_spans.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                merge::Placement::Absorbed { changed } => {
                    needs_replay |= changed;
                    continue;
                }
                merge::Placement::Insert {
                    event,
                    changed,
                    replaces_without_arguments,
                } => {
                    needs_replay |= changed;
                    (event, replaces_without_arguments)
                }
            };
            let in_order = run
                .events
                .last()
                .is_none_or(|last| last.order_key() < event.order_key());
            let position = if in_order {
                run.events.len()
            } else {
                run.events
                    .partition_point(|e| e.order_key() < event.order_key())
            };
            if position == 0 && run.forgotten.is_some() {
                // Starts before every event still held: its place among the forgotten
                // ones is unknown, so it is left out of detection (still forwarded).
                self.stats.events_forgotten.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if event.without_arguments() && !counted_without_arguments {
                self.stats
                    .tool_calls_without_arguments
                    .fetch_add(1, Ordering::Relaxed);
            }
            run.list_origin(&event.origin);
            insert_event(&mut run.events, position, event, batch.len() - i);
            run.seen.inserted(&run.events, position);
            if in_order && !needs_replay {
                let index = run.events.len() - 1;
                let observation = merge::observation(&run.events, index);
                let mut detectors = std::mem::take(&mut run.detectors);
                for (profile_index, detector) in detectors.iter_mut().enumerate() {
                    if let Some(d) = detector.observe(&observation) {
                        let profile = detector.shared_settings().clone();
                        self.record(key, run, (profile_index, profile), d, index, out);
                    }
                }
                run.detectors = detectors;
            } else {
                needs_replay = true;
            }
        }
        if needs_replay {
            self.replay(key, run, out);
        }
        self.enforce_event_cap(run);
    }

    /// Re-runs the kept events from the base state; reports detections not reported before.
    fn replay(&self, key: &Arc<str>, run: &mut RunState, out: &mut Vec<RunDetection>) {
        let dropped = run.detections.split_off(run.base_detections());
        if let Some(tallies) = &mut run.tallies {
            for d in &dropped {
                if let Some(n) = tallies.occurrences.get_mut(&occurrence_key(d)) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        let mut detectors = match &run.forgotten {
            Some(forgotten) => forgotten.base.clone(),
            None => Self::fresh_detectors(&run.detectors),
        };
        // With an approval: the last kept event at or before it (`Some(None)`: it came
        // before every kept event), after which the loops in progress are forgotten again.
        let reset_after = run
            .tallies
            .as_ref()
            .and_then(|t| t.approved_through.as_ref())
            .map(|(start, end, span)| {
                let approved = (*start, *end, span.as_slice());
                run.events.iter().rposition(|e| e.order_key() <= approved)
            });
        if reset_after == Some(None) {
            detectors.iter_mut().for_each(Detector::forget_loops);
        }
        for index in 0..run.events.len() {
            let observation = merge::observation(&run.events, index);
            for (profile_index, detector) in detectors.iter_mut().enumerate() {
                if let Some(d) = detector.observe(&observation) {
                    let profile = detector.shared_settings().clone();
                    self.record(key, run, (profile_index, profile), d, index, out);
                }
            }
            if reset_after == Some(Some(index)) {
                detectors.iter_mut().for_each(Detector::forget_loops);
            }
        }
        run.detectors = detectors;
    }

    /// Attaches span context to a detection completed by `events[index]`, counts its
    /// occurrence, appends it to the run and reports it unless reported before.
    fn record(
        &self,
        run_key: &Arc<str>,
        run: &mut RunState,
        (profile_index, profile): (usize, Arc<ProfileSettings>),
        detection: Detection,
        index: usize,
        out: &mut Vec<RunDetection>,
    ) {
        let completing = &run.events[index];
        // Detector indices count every observation since the run began, forgotten ones too.
        // Gathered on the stack first: collecting a filtered iterator straight into an
        // `Arc<[_]>` would allocate a `Vec` and then the `Arc`.
        let span_ids: SmallVec<[SpanId; 16]> = detection
            .members
            .iter()
            .filter_map(|m| m.checked_sub(run.forgotten_events()))
            .filter_map(|i| run.events.get(i))
            .map(|e| SpanId::from(span_of_call(e.span_id())))
            .collect();
        let span_ids = Arc::from(span_ids.as_slice());
        let mut rd = RunDetection {
            profile_index,
            profile,
            detection: Arc::new(detection),
            run_key: run_key.clone(),
            trace_id: completing.trace_id().into(),
            // The span, not the call's id in the run, when the span records several calls
            // (one span, one identity per profile and pattern).
            span_id: span_of_call(completing.span_id()).into(),
            span_ids,
            time_unix_nano: completing.end_time_unix_nano(),
            occurrence: 0,
            service_name: completing.origin.service_name.clone(),
            agent_name: completing.origin.agent_name.clone(),
        };
        let tallies = run.tallies.get_or_insert_default();
        let count = tallies.occurrences.entry(occurrence_key(&rd)).or_insert(0);
        *count += 1;
        rd.occurrence = *count;
        if tallies.reported.insert(rd.identity()) {
            out.push(rd.clone());
        }
        run.detections.push(rd);
    }

    /// Keeps at most `max_events_per_run` events. The forgotten ones are fed to the base
    /// detectors, so detection continues exactly; only re-ordering of spans that start
    /// before every kept event is lost.
    fn enforce_event_cap(&self, run: &mut RunState) {
        let cap = self.config.max_events_per_run.max(1);
        if run.events.len() <= cap {
            return;
        }
        let excess = run.events.len() - cap;
        let mut forgotten = run.forgotten.take().unwrap_or_else(|| {
            Box::new(Forgotten {
                base: Self::fresh_detectors(&run.detectors),
                detections: 0,
                events: 0,
                tool_calls: 0,
            })
        });
        for index in 0..excess {
            // Observed with the events still held (a call takes its result span's result).
            let observation = merge::observation(&run.events, index);
            for detector in &mut forgotten.base {
                if detector.observe(&observation).is_some() {
                    // Already in `detections`: the base replays what was detected.
                    forgotten.detections += 1;
                }
            }
        }
        run.seen.removing_front(&run.events, excess);
        for event in run.events.drain(..excess) {
            if event.is_tool_call() {
                forgotten.tool_calls += 1;
            }
            if let Some(tallies) = &mut run.tallies {
                for profile_index in 0..run.detectors.len() {
                    for pattern in Pattern::ALL {
                        tallies.reported.remove(&(
                            profile_index,
                            SpanId::from(span_of_call(event.span_id())),
                            pattern,
                        ));
                    }
                }
            }
        }
        forgotten.detections = forgotten.detections.min(run.detections.len());
        // Detections of forgotten events are history: keep at most `cap` of them, so a run
        // that loops for ever holds bounded memory (occurrence counts live in `occurrences`).
        let old_detections = forgotten.detections.saturating_sub(cap);
        run.detections.drain(..old_detections);
        forgotten.detections -= old_detections;
        forgotten.events += excess;
        run.forgotten = Some(forgotten);
        self.stats
            .events_forgotten
            .fetch_add(excess as u64, Ordering::Relaxed);
    }

    /// Drops runs idle for longer than `idle_ttl` at `now`; returns how many.
    pub fn evict_idle(&self, now: Instant) -> usize {
        let ttl = self.config.idle_ttl;
        let mut evicted = 0;
        self.runs.retain(|key, run| {
            let keep = now.saturating_duration_since(run.last_seen) <= ttl;
            if !keep {
                let mut recency = self.recency();
                if let Some(bytes) = recency.order.pop(key) {
                    recency.bytes -= bytes.min(recency.bytes);
                }
                evicted += 1;
            }
            keep
        });
        self.stats
            .runs_evicted_idle
            .fetch_add(evicted as u64, Ordering::Relaxed);
        evicted
    }

    /// Approves the run `run_key` (an answer to `require_approval`): every profile forgets
    /// the loops in progress, so the calls that formed them no longer count; call ordinals
    /// and occurrence counts go on. `false` for a run the registry does not hold.
    pub fn approve(&self, run_key: &str) -> bool {
        let Some(mut run) = self.runs.get_mut(run_key) else {
            return false;
        };
        let through = run.events.last().map(|e| {
            let (start, end, span) = e.order_key();
            (start, end, SpanId::from_slice(span))
        });
        run.tallies.get_or_insert_default().approved_through = through;
        run.detectors.iter_mut().for_each(Detector::forget_loops);
        true
    }

    /// The current (final) detections of a run, in sequence order; `None` for an unknown run.
    pub fn detections(&self, run_key: &str) -> Option<Vec<RunDetection>> {
        self.runs.get(run_key).map(|r| r.detections.clone())
    }

    /// The kept events of a run in sequence order (span start time), each with the
    /// observation its detectors were fed ([`merge::observation`]: a call traced on two
    /// sibling spans with its result span's result), e.g. for `loopwatch explain`; `None`
    /// for an unknown run.
    pub fn events(&self, run_key: &str) -> Option<Vec<RunEvent>> {
        self.runs.get(run_key).map(|r| {
            (0..r.events.len())
                .map(|index| RunEvent {
                    observation: merge::observation(&r.events, index),
                    ..r.events[index].to_run_event(r.key())
                })
                .collect()
        })
    }

    /// The key of the run holding a span of `trace_id` (lowercase hex): the trace_id itself
    /// when runs are keyed by trace, else the first run (by key) with an event of that trace.
    /// The fallback scans every run's kept events: for admin queries, not the span path.
    pub fn run_key_for_trace(&self, trace_id_hex: &str) -> Option<Arc<str>> {
        if let Some(run) = self.runs.get(trace_id_hex) {
            return Some(run.key().clone());
        }
        let trace_id = hex::decode(trace_id_hex).ok()?;
        let mut keys: Vec<Arc<str>> = self
            .runs
            .iter()
            .filter(|run| run.events.iter().any(|e| e.trace_id() == trace_id))
            .map(|run| run.key().clone())
            .collect();
        keys.sort();
        keys.into_iter().next()
    }

    /// A summary of one run.
    pub fn run(&self, run_key: &str) -> Option<RunSummary> {
        self.runs.get(run_key).map(|r| summarize(r.key(), &r))
    }

    /// Summaries of all runs (unordered).
    pub fn runs(&self) -> Vec<RunSummary> {
        self.runs.iter().map(|r| summarize(r.key(), &r)).collect()
    }

    /// Repeated call fingerprints of a run (hits ≥ 2), most hits first (ties: first step),
    /// with their 1-based tool-call ordinals. `None` for an unknown run.
    pub fn repeated_calls(&self, run_key: &str) -> Option<Vec<RepeatedCall>> {
        let run = self.runs.get(run_key)?;
        let mut by_fingerprint: Vec<RepeatedCall> = Vec::new();
        let mut ordinal = run.forgotten_tool_calls();
        for event in &run.events {
            if let (true, Some(tool_name)) = (event.is_tool_call(), event.tool_name()) {
                ordinal += 1;
                let Some(fp) = event.call_fingerprint() else {
                    continue;
                };
                match by_fingerprint.iter_mut().find(|r| &r.fingerprint == fp) {
                    Some(r) => r.step_indices.push(ordinal),
                    None => by_fingerprint.push(RepeatedCall {
                        fingerprint: *fp,
                        tool_name: tool_name.clone(),
                        step_indices: vec![ordinal],
                    }),
                }
            }
        }
        by_fingerprint.retain(|r| r.step_indices.len() >= 2);
        by_fingerprint.sort_by(|a, b| {
            b.step_indices
                .len()
                .cmp(&a.step_indices.len())
                .then(a.step_indices[0].cmp(&b.step_indices[0]))
        });
        Some(by_fingerprint)
    }
}

/// Makes room in every detector's history for the tool calls of `batch` that carry a call
/// fingerprint (the only ones a history keeps), one allocation per request rather than one
/// per call; each history reserves at most its length plus one ([`Detector::reserve_calls`]).
fn reserve_histories(run: &mut RunState, batch: &[RunEvent]) {
    let calls = batch
        .iter()
        .filter(|e| {
            matches!(
                e.observation,
                Observation::ToolCall {
                    call_fingerprint: Some(_),
                    ..
                }
            )
        })
        .count();
    for detector in run.detectors.iter_mut() {
        detector.reserve_calls(calls);
    }
}

/// Inserts `event` at `position`. A full list grows by an eighth (at least one slot) rather
/// than doubling, so a one-call run holds one slot and a long run at most 1/8 unused
/// slack; or, when more of the request may follow (`arriving`, this event included, an
/// upper bound: duplicates and merged copies among them are not inserted), by all of them
/// at once: a ten-call run arriving in one request was reallocated nine times. Nothing is
/// reserved for a request that inserts nothing (a retried request of duplicates).
fn insert_event(events: &mut Vec<KeptEvent>, position: usize, event: KeptEvent, arriving: usize) {
    if events.len() == events.capacity() {
        events.reserve_exact((events.len() / 8 + 1).max(arriving));
    }
    events.insert(position, event);
}

fn summarize(key: &Arc<str>, run: &RunState) -> RunSummary {
    RunSummary {
        run_key: key.clone(),
        service_name: run.service_name(),
        agent_name: run.agent_name(),
        tool_calls: run.events.iter().filter(|e| e.is_tool_call()).count()
            + run.forgotten_tool_calls(),
        detections: run.detections.clone(),
        last_seen: run.last_seen,
    }
}

#[cfg(test)]
mod response_tests;
#[cfg(test)]
mod tests;
