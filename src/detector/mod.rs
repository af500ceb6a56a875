//! The loop detector: a pure, synchronous state machine (no I/O, no async, no clock).
//!
//! Feed a run's observations in span start-time order to [`Detector::observe`]; it returns
//! at most one [`Detection`] per observation (DESIGN §4; `shared/oracle/reference.py` is the
//! executable statement of the rules).

pub mod profile;

use std::sync::Arc;

use crate::fingerprint::Fingerprint;
pub use profile::{Action, ProfileSettings};

/// One step of a run, in start-time order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// A tool call. `call_fingerprint` is `None` when the arguments were not captured:
    /// the call still counts for the call ordinal but is invisible to the patterns.
    ToolCall {
        tool_name: Arc<str>,
        call_fingerprint: Option<Fingerprint>,
        /// `None` when the result was not captured (never counts for repeated_result,
        /// never shows progress).
        result_fingerprint: Option<Fingerprint>,
    },
    /// A model response without tool calls; `normalized_text` is lower-cased with
    /// whitespace collapsed and trimmed ([`crate::fingerprint::normalize_text`]).
    TextResponse { normalized_text: String },
    /// A model response that requested tool calls: resets the repeated_text streak.
    ToolCallResponse,
}

/// Loop patterns, in the order they are checked for a tool call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Pattern {
    RepeatedResult,
    AlternatingCalls,
    Cycle,
    RepeatedCall,
    RepeatedText,
}

impl Pattern {
    /// The wire name (`loop.pattern`, signals, scan output), e.g. `"repeated_call"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Pattern::RepeatedResult => "repeated_result",
            Pattern::AlternatingCalls => "alternating_calls",
            Pattern::Cycle => "cycle",
            Pattern::RepeatedCall => "repeated_call",
            Pattern::RepeatedText => "repeated_text",
        }
    }
}

/// How serious a detection is. `Info` = progress was seen (never a kill).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    Info,
    Warn,
    Kill,
}

impl Severity {
    /// `"info"`, `"warn"` or `"kill"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warn => "warn",
            Severity::Kill => "kill",
        }
    }
}

/// A detected loop.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Detection {
    pub pattern: Pattern,
    /// Tool names in pattern order (`[A, B]` for alternating, the p calls of a cycle,
    /// one name otherwise, empty for repeated_text).
    pub tool_names: Vec<Arc<str>>,
    /// The threshold that fired (repeated_call: the number of occurrences in the window).
    pub count: usize,
    /// The profile's window (tool calls).
    pub window: usize,
    pub severity: Severity,
    /// Distinct call fingerprints of the pattern, in pattern order (empty for repeated_text).
    pub fingerprints: Vec<Fingerprint>,
    /// 0-based indices (into the sequence of observations given to this detector) of the
    /// observations that formed the detection, ascending; the last is the completing one.
    pub members: Vec<usize>,
    /// 1-based tool-call ordinal of the completing call (`None` for repeated_text).
    pub call: Option<usize>,
    /// 1-based ordinal among text responses (`None` for call patterns).
    pub response: Option<usize>,
}

/// Per-run, per-profile detector state.
#[derive(Clone, Debug)]
pub struct Detector {
    settings: Arc<ProfileSettings>,
}

impl Detector {
    pub fn new(settings: Arc<ProfileSettings>) -> Self {
        Detector { settings }
    }

    /// The profile this detector applies.
    pub fn settings(&self) -> &ProfileSettings {
        &self.settings
    }

    /// Feeds the next observation; returns the detection it completes, if any.
    pub fn observe(&mut self, observation: &Observation) -> Option<Detection> {
        let _ = observation;
        None
    }
}
