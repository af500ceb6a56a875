//! A detection as `loopwatch explain` and `scan` report it ([`Fired`]).

use serde::Serialize;

use crate::annotate::reason;
use crate::otlp::hex_id;
use crate::registry::RunDetection;

/// A detection as `scan` reports it, with its `loop.reason`.
#[derive(Clone, Debug, Serialize)]
pub struct Fired {
    pub span_id: String,
    pub pattern: &'static str,
    pub severity: &'static str,
    pub count: usize,
    pub occurrence: u32,
    pub reason: String,
}

impl From<&RunDetection> for Fired {
    fn from(d: &RunDetection) -> Self {
        Fired {
            span_id: hex_id(&d.span_id),
            pattern: d.detection.pattern.as_str(),
            severity: d.detection.severity.as_str(),
            count: d.detection.count,
            occurrence: d.occurrence,
            reason: reason(d),
        }
    }
}
