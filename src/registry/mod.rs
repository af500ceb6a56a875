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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use dashmap::DashMap;
use serde::{Deserialize, Serialize};

use crate::conventions::event::span_of_call;
use crate::detector::{Detector, Observation, ProfileSettings};

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
mod eviction;
mod feeding;
mod queries;
mod records;
mod run_state;
pub use eviction::EvictionCause;
use eviction::Recency;
use records::{occurrence_key, Identity, OccurrenceKey};
pub use records::{RepeatedCall, RunDetection, RunEvent, RunSummary, SpanId, TraceId};
use run_state::{Detectors, RunState};
pub use run_state::{ALLOCATION_BYTES, DETECTOR_BYTES};

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
    /// What runs' last-seen times count from ([`run_state::SeenAt`]).
    epoch: Instant,
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
            epoch: Instant::now(),
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
                run.last_seen = run_state::SeenAt::new(self.epoch, now);
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
            last_seen: run_state::SeenAt::new(self.epoch, now),
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
        // A run's first event alone waits for a second before its detectors see it: a run
        // of one call then holds no copy of that call per profile ([`Registry::held_first`]).
        let hold_first = batch.len() == 1
            && run.events.is_empty()
            && run.forgotten.is_none()
            && run
                .detectors
                .iter()
                .all(|d| d.settings().needs_two_observations());
        let held = self.held_first(run);
        if !hold_first {
            reserve_histories(run, batch, usize::from(held));
        }
        if held {
            self.feed(key, run, 0, out);
        }
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
                if !(hold_first && index == 0) {
                    self.feed(key, run, index, out);
                }
            } else {
                needs_replay = true;
            }
        }
        if needs_replay {
            self.replay(key, run, out);
        }
        self.enforce_event_cap(run);
    }
}

/// Makes room in every detector's history for the tool calls of `batch` that carry a call
/// fingerprint (the only ones a history keeps), one allocation per request rather than one
/// per call; each history reserves at most its length plus one ([`Detector::reserve_calls`]).
/// `held`: calls held back from the detectors ([`Registry::held_first`]) fed before the batch.
fn reserve_histories(run: &mut RunState, batch: &[RunEvent], held: usize) {
    let calls = held
        + batch
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

#[cfg(test)]
mod held_tests;
#[cfg(test)]
mod response_tests;
#[cfg(test)]
mod tests;
