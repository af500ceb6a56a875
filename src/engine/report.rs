//! The serialisable record of a detection, shared by `scan --format json` and the admin API.

use serde::{Deserialize, Serialize};

use crate::otlp::hex_id;
use crate::registry::RunDetection;

/// One detection as `scan --format json` prints it and the admin API lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetectionRecord {
    pub trace_id: String,
    pub span_id: String,
    pub profile: String,
    pub pattern: String,
    pub tools: Vec<String>,
    pub count: usize,
    pub severity: String,
    pub occurrence: u32,
    /// 1-based tool-call ordinal within the run, in start order (null for repeated_text).
    pub call: Option<usize>,
    /// 1-based index among the run's text-only model responses (null otherwise).
    pub response: Option<usize>,
}

impl From<&RunDetection> for DetectionRecord {
    fn from(d: &RunDetection) -> Self {
        DetectionRecord {
            trace_id: hex_id(&d.trace_id),
            span_id: hex_id(&d.span_id),
            profile: d.profile.name.clone(),
            pattern: d.detection.pattern.as_str().to_string(),
            tools: d
                .detection
                .tool_names
                .iter()
                .map(|t| t.to_string())
                .collect(),
            count: d.detection.count,
            severity: d.detection.severity.as_str().to_string(),
            occurrence: d.occurrence,
            call: d.detection.call,
            response: d.detection.response,
        }
    }
}
