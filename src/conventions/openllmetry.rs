//! OpenLLMetry (Traceloop) tool spans: `traceloop.span.kind` = `tool`.
//!
//! Tool name `traceloop.entity.name` (else the span name without its `.tool` suffix),
//! arguments `traceloop.entity.input` (Traceloop's JSON of the call, kept as found),
//! result `traceloop.entity.output`; no call id. Traceloop LLM spans are read by
//! [`super::model_response`] (`gen_ai.completion.N.*`).

use super::{agent_name, call_status, first_str, payload_attr};
use crate::event::{EventKind, ExtractedEvent, ToolCall};
use crate::otlp::{attr_str, Span};

/// Convention label on events from this module.
pub const CONVENTION: &str = "openllmetry";

/// The tool call of a Traceloop `tool` span; `None` for other spans.
pub fn extract(span: &Span) -> Option<ExtractedEvent> {
    let attrs = &span.attributes;
    if attr_str(attrs, "traceloop.span.kind") != Some("tool") {
        return None;
    }
    let from_span_name = span.name.strip_suffix(".tool").unwrap_or(&span.name);
    let name = first_str(attrs, &["traceloop.entity.name"])
        .or(Some(from_span_name).filter(|s| !s.is_empty()))?;
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(ToolCall {
            tool_name: name.to_owned(),
            call_id: None,
            arguments: payload_attr(attrs, &["traceloop.entity.input"]),
            result: payload_attr(attrs, &["traceloop.entity.output"]),
            status: call_status(span),
        }),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

#[cfg(test)]
mod tests {
    use crate::conventions::extract;
    use crate::conventions::test_support::*;
    use crate::event::{CallStatus, EventKind, Payload};

    #[test]
    fn traceloop_tool_span() {
        let mut sp = span(
            "get_weather.tool",
            vec![
                kvs("traceloop.span.kind", "tool"),
                kvs("traceloop.entity.name", "get_weather"),
                kvs(
                    "traceloop.entity.input",
                    r#"{"args":[],"kwargs":{"city":"Paris"}}"#,
                ),
                kvs("traceloop.entity.output", r#""sunny""#),
            ],
        );
        sp.status = error_status("timeout");
        let ev = extract(&sp).expect("tool call");
        assert_eq!(ev.convention, "openllmetry");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "get_weather");
        assert_eq!(
            c.arguments,
            Some(Payload::Text(
                r#"{"args":[],"kwargs":{"city":"Paris"}}"#.into()
            ))
        );
        assert_eq!(c.result, Some(Payload::Text(r#""sunny""#.into())));
        assert_eq!(c.call_id, None);
        assert_eq!(
            c.status,
            CallStatus::Error {
                message: "timeout".into()
            }
        );
    }

    #[test]
    fn name_from_span_name_and_non_tool_kinds_ignored() {
        let sp = span("search.tool", vec![kvs("traceloop.span.kind", "tool")]);
        let EventKind::ToolCall(c) = extract(&sp).expect("tool call").kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "search");
        assert_eq!(c.arguments, None);
        let task = span("plan.task", vec![kvs("traceloop.span.kind", "task")]);
        assert_eq!(extract(&task), None);
    }
}
