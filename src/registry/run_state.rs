//! One run's state: its kept events, detectors, detections and what it forgot, and the
//! estimate of its heap bytes that the byte cap counts.

use foldhash::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use smallvec::SmallVec;

use crate::detector::{Detection, Detector};
use crate::fingerprint::Fingerprint;

use super::records::{Identity, OccurrenceKey};
#[cfg(doc)]
use super::Registry;
use super::{kept, merge, span_ids, KeptEvent, RunDetection, SpanId};

/// What a run counts of its detections.
#[derive(Default)]
pub(super) struct Tallies {
    /// Detections per (profile, pattern, fingerprints) in `detections`.
    pub(super) occurrences: HashMap<OccurrenceKey, u32>,
    /// Identities already returned by `observe` for kept events: a detection is reported
    /// once even if a replay drops it and a later replay finds it again.
    pub(super) reported: HashSet<Identity>,
    /// The order key (start, end, span_id) of the last kept event when the run was last
    /// approved ([`Registry::approve`]): a replay forgets the loops in progress there
    /// again, so a late span does not undo an approval.
    pub(super) approved_through: Option<(u64, u64, SpanId)>,
}

pub(super) struct RunState {
    /// Kept events in order (ties: end time, then span_id); span_ids unique. Their run key
    /// is the run's.
    pub(super) events: Vec<KeptEvent>,
    /// Where each span_id of `events` is (the dedupe key; an empty span_id is a key like
    /// any other).
    pub(super) seen: span_ids::SpanIds,
    /// Detector state after every kept event (fed incrementally while spans arrive in order).
    pub(super) detectors: Detectors,
    /// Every detection of the run in sequence order: those completed by forgotten events
    /// (the first [`Forgotten::detections`]), then those of kept events.
    pub(super) detections: Vec<RunDetection>,
    /// Occurrence counts and reported identities: created with the run's first detection
    /// (most runs have none, and two empty hash tables cost 96 bytes inline).
    pub(super) tallies: Option<Box<Tallies>>,
    /// What the run keeps of the events it forgot: created when it first forgets one
    /// (most runs never do).
    pub(super) forgotten: Option<Box<Forgotten>>,
    /// When the run was last seen ([`Registry::observe`]'s `now`), against the registry's
    /// epoch: 8 bytes where an `Instant` takes 16.
    pub(super) last_seen: SeenAt,
    /// Message parts waiting for their tool call (joins).
    pub(super) calls: merge::CallIndex,
    /// Origins (trace, names, tool) of kept events in the order first seen, for new events
    /// to share: the first [`kept::MAX_ORIGINS`], and past them the first to bring a
    /// service or agent name (the run's names in summaries are the first listed).
    pub(super) origins: Vec<Arc<kept::Origin>>,
}

/// An instant as signed nanoseconds after an epoch (the registry's creation): ±292 years,
/// saturating beyond.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct SeenAt(i64);

impl SeenAt {
    /// `now` against `epoch`.
    pub(super) fn new(epoch: Instant, now: Instant) -> Self {
        let nanos = |d: std::time::Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
        SeenAt(match now.checked_duration_since(epoch) {
            Some(after) => nanos(after),
            None => -nanos(epoch.duration_since(now)),
        })
    }

    /// The instant again (to the nanosecond; clamped to what `Instant` can hold).
    pub(super) fn instant(self, epoch: Instant) -> Instant {
        let d = std::time::Duration::from_nanos(self.0.unsigned_abs());
        if self.0 >= 0 {
            epoch.checked_add(d).unwrap_or(epoch)
        } else {
            epoch.checked_sub(d).unwrap_or(epoch)
        }
    }
}

/// One detector per profile, inline in the run state up to the two built-in profiles (one
/// allocation fewer per run than a separate list).
pub(super) type Detectors = SmallVec<[Detector; 2]>;

/// What a run keeps of the events it forgot from the front (past `max_events_per_run`).
pub(super) struct Forgotten {
    /// Detector state after the forgotten events only: a replay starts here, so forgetting
    /// events never changes ordinals, occurrences or what later calls are compared with.
    pub(super) base: Detectors,
    /// Detections completed by forgotten events, at the front of the run's list.
    pub(super) detections: usize,
    /// Events forgotten, in all, and how many of them were tool calls.
    pub(super) events: usize,
    pub(super) tool_calls: usize,
}

impl RunState {
    /// Events forgotten from the front (cap), in all.
    pub(super) fn forgotten_events(&self) -> usize {
        self.forgotten.as_ref().map_or(0, |f| f.events)
    }

    /// Tool calls among the forgotten events.
    pub(super) fn forgotten_tool_calls(&self) -> usize {
        self.forgotten.as_ref().map_or(0, |f| f.tool_calls)
    }

    /// Detections of forgotten events (at the front of `detections`).
    pub(super) fn base_detections(&self) -> usize {
        self.forgotten.as_ref().map_or(0, |f| f.detections)
    }

    /// Lists `origin` for later events to share, unless listed or the list is full and it
    /// brings no first service or agent name (one slot more at a time: most runs list one
    /// origin per tool, a handful).
    pub(super) fn list_origin(&mut self, origin: &Arc<kept::Origin>) {
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
    pub(super) fn service_name(&self) -> Option<Arc<str>> {
        self.origins.iter().find_map(|o| o.service_name.clone())
    }

    /// The first agent name among the run's events.
    pub(super) fn agent_name(&self) -> Option<Arc<str>> {
        self.origins.iter().find_map(|o| o.agent_name.clone())
    }

    /// Estimated heap bytes of this run's state: the one place the registry's byte
    /// accounting (`registry.max_bytes`) is computed, O(1) per call. It counts the kept
    /// events (every slot of the list; valid span and parent ids are inline) and the listed
    /// shared origins (trace_id, names and tool name, at least one), the dedupe index of
    /// span_ids (past 16 events: a 32-bit position and a control byte per slot), the detections kept
    /// with their span id lists, the occurrence and reported sets, the pending message parts
    /// and, per profile, the live detector state (once it has seen an event) and, once an
    /// event was forgotten, the base state, at a flat [`DETECTOR_BYTES`] each. Not counted: origins past the listed
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
        // A detector that has seen nothing yet (a run's held first event) has no window.
        let fed = self
            .detectors
            .iter()
            .filter(|d| d.observations() > 0)
            .count();
        let detectors = fed * DETECTOR_BYTES
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
