//! What a detector is fed and what it reports: an [`Observation`] (one step of a run) and
//! a [`Detection`] (a loop found), with the [`Evidence`] that results differing byte for
//! byte were still no progress. Re-exported at `crate::detector`.

use std::sync::Arc;

use super::{budget, CallTraits, Pattern, Severity};
use crate::fingerprint::Fingerprint;

/// One step of a run, in start-time order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Observation {
    /// A tool call. `call_fingerprint` is `None` when the arguments were not captured:
    /// the call still counts for the call ordinal but is invisible to the patterns.
    ToolCall {
        tool_name: Arc<str>,
        call_fingerprint: Option<Fingerprint>,
        /// `None` when the result was not captured (never counts for repeated_result,
        /// never shows progress). The comparison fingerprint ([`crate::compare`]): noise
        /// and echoed arguments of a plain-text result are out of it.
        result_fingerprint: Option<Fingerprint>,
        /// What the engine read beside the fingerprints (default: nothing known).
        traits: CallTraits,
    },
    /// A model response without tool calls; `text_fingerprint` is the SHA-256 of its text
    /// lower-cased with whitespace collapsed and trimmed
    /// ([`crate::fingerprint::text_fingerprint`]), so a run keeps 32 bytes per response.
    TextResponse { text_fingerprint: Fingerprint },
    /// A model response that requested tool calls: resets the repeated_text streak.
    ToolCallResponse,
    /// A tool call's result recorded on a span of its own (google-adk 0.1.0–1.1.x
    /// `tool_response [name]`): no call. It takes its place in the sequence (an
    /// observation index) and changes nothing else; the registry gives its result to the
    /// observation of its call (`registry::merge::observation`).
    ToolResult {
        tool_name: Arc<str>,
        result_fingerprint: Fingerprint,
        /// The result's half of the call's traits ([`CallTraits::with_result_of`]).
        traits: CallTraits,
    },
    /// A model response whose span has a span of the same response nested in it (one LLM
    /// call traced by two instrumentations): the nested span is the response, this one
    /// takes its place in the sequence and changes nothing. The registry observes it so
    /// (`registry::merge::observation`), never the engine.
    OuterResponse,
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
    /// For `budget_exceeded`: which budget, its limit and the figure.
    pub budget: Option<budget::Exceeded>,
    /// Why results that differ byte for byte were not taken as progress.
    pub evidence: Evidence,
}

/// Why a detection's results count as no progress though their bytes differ (said on the
/// detection's reason and in `explain`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Evidence {
    /// Nothing to say: the results were the same, or changed (progress).
    #[default]
    None,
    /// Volatile noise (timestamps, counters, addresses…) was removed from the results
    /// before they were compared: they may have differed only there.
    Noise,
    /// A result grew by the same block at each call.
    Growth,
}

impl Evidence {
    /// `"noise"`, `"growth"`, or `None`.
    pub fn as_str(self) -> Option<&'static str> {
        match self {
            Evidence::None => None,
            Evidence::Noise => Some("noise"),
            Evidence::Growth => Some("growth"),
        }
    }
}
