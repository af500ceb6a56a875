//! Extraction of tool-call and model-response events from spans, one module per
//! convention (DESIGN §2). Conventions are tried in order; the first that claims a span wins.

use crate::event::ExtractedEvent;
use crate::otlp::Span;

/// Reads one span. Returns `None` for spans that are neither a tool call nor an
/// inference span (and for pseudo tool spans such as ADK's `execute_tool (merged)`).
pub fn extract(span: &Span) -> Option<ExtractedEvent> {
    let _ = span;
    None
}
