//! Langfuse's OTel SDK (v3): observations are spans with `langfuse.observation.type`.
//!
//! A tool span has `langfuse.observation.type` = `tool`; the tool name is the span name
//! (the observation name), arguments `langfuse.observation.input` (the `@observe`
//! decorator records `{"args": [...], "kwargs": {...}}`: with no positional arguments the
//! keyword arguments are the arguments), result `langfuse.observation.output`, status from
//! the span status (Langfuse also writes `langfuse.observation.level` = `ERROR` with
//! `langfuse.observation.status_message`). Source: langfuse-python `langfuse/_client/
//! attributes.py` and `span.py` (observation types `span`, `generation`, `tool`, …).

use super::{agent_name, call_status, first_str, payload_attr, wrappers};
use crate::event::{CallStatus, EventKind, ExtractedEvent, SplitSpan, ToolCall};
use crate::otlp::view::{attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "langfuse";

/// The tool call of a Langfuse `tool` observation; `None` for other spans.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let attrs = &span.attributes;
    if attr_str(attrs, "langfuse.observation.type") != Some("tool") {
        return None;
    }
    let name = Some(span.name.as_ref()).filter(|n| !n.is_empty())?;
    let mut status = call_status(span);
    if status == CallStatus::Ok && attr_str(attrs, "langfuse.observation.level") == Some("ERROR") {
        status = CallStatus::Error {
            message: first_str(attrs, &["langfuse.observation.status_message"])
                .unwrap_or_default()
                .to_owned(),
        };
    }
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(ToolCall {
            tool_name: name.to_owned(),
            call_id: None,
            arguments: payload_attr(attrs, &["langfuse.observation.input"])
                .map(wrappers::decorator_arguments),
            result: payload_attr(attrs, &["langfuse.observation.output"]),
            status,
            split: SplitSpan::Whole,
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
    use serde_json::json;

    #[test]
    fn tool_observation() {
        let sp = span(
            "lookup_order",
            vec![
                kvs("langfuse.observation.type", "tool"),
                kvs(
                    "langfuse.observation.input",
                    r#"{"args":[],"kwargs":{"order_id":"A-17"}}"#,
                ),
                kvs("langfuse.observation.output", r#""order not found""#),
            ],
        );
        let ev = extract(&sp).expect("a tool call");
        assert_eq!(ev.convention, "langfuse");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "lookup_order");
        assert_eq!(
            c.arguments,
            Some(Payload::Json(json!({"order_id": "A-17"})))
        );
        assert_eq!(c.result, Some(Payload::Text(r#""order not found""#.into())));
        assert_eq!(c.status, CallStatus::Ok);
    }

    #[test]
    fn error_level_and_other_types() {
        let sp = span(
            "lookup_order",
            vec![
                kvs("langfuse.observation.type", "tool"),
                kvs("langfuse.observation.level", "ERROR"),
                kvs("langfuse.observation.status_message", "timeout"),
            ],
        );
        let EventKind::ToolCall(c) = extract(&sp).expect("a tool call").kind else {
            panic!("not a tool call")
        };
        assert_eq!(
            c.status,
            CallStatus::Error {
                message: "timeout".into()
            }
        );
        let generation = span("llm", vec![kvs("langfuse.observation.type", "generation")]);
        assert_eq!(extract(&generation), None);
    }
}
