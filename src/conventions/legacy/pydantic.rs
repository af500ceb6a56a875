//! pydantic-ai ≤ v2 instrumentation (and Logfire): tool spans named `running tool`.
//!
//! Tool name `gen_ai.tool.name` (else the `logfire.msg` suffix after `running tool: `),
//! arguments `tool_arguments`, result `tool_response`, call id `gen_ai.tool.call.id`.
//! pydantic-ai v2 also sets `gen_ai.operation.name=execute_tool` on these spans; the GenAI
//! convention leaves `running tool` spans to this module so each yields one event, and
//! the newer names are read first when a span carries both.
//!
//! pydantic-ai v1 model responses: the inference span's attribute `events`, a JSON list of
//! events, of which those with `event.name` = `gen_ai.choice` ([`RESPONSE_READER`], tried
//! last). Their label is `genai`: the events are GenAI's `gen_ai.choice` events.

use serde_json::Value as Json;

use crate::conventions::event::{EventKind, ExtractedEvent};
use crate::conventions::frameworks::genai::read_tool_call;
use crate::conventions::messages::model_response::{summarize, Found, ResponseReader};
use crate::conventions::{agent_name, json_from_any_value};
use crate::otlp::view::{attr, attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "pydantic-legacy";

/// Span name of a pydantic-ai ≤ v2 tool execution.
pub const SPAN_NAME: &str = "running tool";

/// The tool call of a `running tool` span; `None` for other spans or when no tool name is
/// recorded.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    if span.name != SPAN_NAME {
        return None;
    }
    let attrs = &span.attributes;
    let name = attr_str(attrs, "gen_ai.tool.name")
        .filter(|s| !s.is_empty())
        .or_else(|| {
            attr_str(attrs, "logfire.msg")
                .and_then(|m| m.strip_prefix("running tool: "))
                .map(str::trim)
                .filter(|s| !s.is_empty())
        })?;
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(read_tool_call(span, name)),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

/// pydantic-ai v1's response source of an inference span ([`crate::conventions::messages::model_response`]).
pub const RESPONSE_READER: ResponseReader = ResponseReader {
    convention: crate::conventions::frameworks::genai::CONVENTION,
    read: read_response,
};

fn read_response(span: &SpanView) -> Found {
    let events = attr(&span.attributes, "events").and_then(json_from_any_value)?;
    let choices: Vec<Json> = events
        .as_array()?
        .iter()
        .filter(|e| e.get("event.name").and_then(Json::as_str) == Some("gen_ai.choice"))
        .cloned()
        .collect();
    Some(summarize(&Json::Array(choices)))
}

#[cfg(test)]
mod tests {
    use crate::conventions::event::{CallStatus, EventKind, Payload, ToolCall};
    use crate::conventions::extract;
    use crate::conventions::test_support::*;

    fn tool(span: &opentelemetry_proto::tonic::trace::v1::Span) -> (ToolCall, &'static str) {
        let ev = extract(span).expect("one tool call");
        match ev.kind {
            EventKind::ToolCall(c) => (c, ev.convention),
            other => panic!("expected a tool call, got {other:?}"),
        }
    }

    fn v2_span() -> opentelemetry_proto::tonic::trace::v1::Span {
        span(
            "running tool",
            vec![
                kvs("gen_ai.operation.name", "execute_tool"),
                kvs("gen_ai.tool.name", "fetch_url"),
                kvs("gen_ai.tool.call.id", "call_s1_1"),
                kvs(
                    "tool_arguments",
                    r#"{"url":"https://example.com/a","limit":1}"#,
                ),
                kvs("logfire.msg", "running tool: fetch_url"),
                kvs("tool_response", "Error: connection refused"),
            ],
        )
    }

    #[test]
    fn pydantic_v2_span_is_one_call_with_legacy_fields() {
        let (c, convention) = tool(&v2_span());
        assert_eq!(convention, "pydantic-legacy");
        assert_eq!(c.tool_name, "fetch_url");
        assert_eq!(c.call_id.as_deref(), Some("call_s1_1"));
        assert_eq!(
            c.arguments,
            Some(Payload::Text(
                r#"{"url":"https://example.com/a","limit":1}"#.into()
            ))
        );
        assert_eq!(
            c.result,
            Some(Payload::Text("Error: connection refused".into()))
        );
    }

    #[test]
    fn old_and_new_names_count_once_new_wins() {
        let mut sp = v2_span();
        sp.attributes
            .push(kvs("gen_ai.tool.call.arguments", r#"{"new":true}"#));
        sp.attributes
            .push(kvs("gen_ai.tool.call.result", "new result"));
        let (c, _) = tool(&sp);
        assert_eq!(c.arguments, Some(Payload::Text(r#"{"new":true}"#.into())));
        assert_eq!(c.result, Some(Payload::Text("new result".into())));
    }

    #[test]
    fn name_from_logfire_msg_and_error_status() {
        let mut sp = span(
            "running tool",
            vec![
                kvs("logfire.msg", "running tool: grep"),
                kvs("tool_arguments", "{}"),
            ],
        );
        sp.status = error_status("ValueError: bad");
        let (c, _) = tool(&sp);
        assert_eq!(c.tool_name, "grep");
        assert_eq!(
            c.status,
            CallStatus::Error {
                message: "ValueError: bad".into()
            }
        );
    }

    #[test]
    fn pending_running_tool_is_skipped() {
        let mut sp = v2_span();
        sp.attributes.push(kvs("logfire.span_type", "pending_span"));
        assert_eq!(extract(&sp), None);
    }
}
