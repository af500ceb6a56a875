//! What the registry takes in and hands out: events on their way into a run, the
//! detections it reports, and summaries of runs.

use std::sync::Arc;
use std::time::Instant;

use smallvec::SmallVec;

use crate::detector::{Detection, Observation, Pattern, ProfileSettings};
use crate::fingerprint::Fingerprint;

use super::CallContext;
#[cfg(doc)]
use super::Registry;

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
    pub(super) fn order_key(&self) -> (u64, u64, &[u8]) {
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
    pub(super) fn identity(&self) -> Identity {
        (
            self.profile_index,
            self.span_id.clone(),
            self.detection.pattern,
        )
    }
}

pub(super) fn occurrence_key(d: &RunDetection) -> OccurrenceKey {
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
pub(super) type OccurrenceKey = (usize, Pattern, SmallVec<[Fingerprint; 2]>);
/// What makes a detection "the same" across replays: (profile index, completing span_id,
/// pattern). A run holds each span_id once, so this names at most one detection.
pub(super) type Identity = (usize, SpanId, Pattern);
