//! Signals (DESIGN §6): the `loopwatch.signal.v1` record and its sinks.

use serde::{Deserialize, Serialize};

/// A loop signal, schema `loopwatch.signal.v1` (`schemas/loopwatch.signal.v1.json`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Signal {
    /// Always `"loopwatch.signal.v1"`.
    pub schema: String,
    /// Stable for the same (run_key, profile, pattern, occurrence): lowercase hex, 32 chars.
    pub id: String,
    /// 1-based count of detections of this loop (same profile, pattern, fingerprints) in the run.
    pub occurrence: u32,
    /// `"info"`, `"warn"` or `"kill"`.
    pub severity: String,
    /// End time (ns since the Unix epoch) of the span that completed the detection.
    pub time_unix_nano: u64,
    /// Lowercase hex trace_id of the completing span.
    pub trace_id: String,
    /// The run key (trace_id hex by default, or the configured attribute's value).
    pub run_key: String,
    pub service_name: Option<String>,
    pub agent_name: Option<String>,
    pub profile: String,
    /// `"warn"` or `"kill"`.
    pub action: String,
    pub pattern: String,
    pub tool_names: Vec<String>,
    pub count: u32,
    pub window: u32,
    /// Short external fingerprints (16 hex chars) of the repeated calls.
    pub fingerprints: Vec<String>,
    /// Hex span_ids of the calls that formed the loop, in start order.
    pub span_ids: Vec<String>,
    pub first_span_id: String,
    /// A nudge text an agent runtime can inject into the conversation.
    pub message: String,
}
