//! LiveKit Agents' own tracing (`livekit.agents.telemetry.set_tracer_provider`).
//!
//! The voice pipeline runs each function tool the model asked for inside a span named
//! `function_tool` with `lk.function_tool.id` (the model's call id; not in the earliest
//! 1.x releases), `lk.function_tool.name`, `lk.function_tool.arguments` (the model's raw
//! JSON arguments string; from 1.3 re-written as `json.dumps` of the parsed arguments when
//! they needed repair) and, once the tool returned or raised, `lk.function_tool.output`
//! (the `FunctionCallOutput.output` string sent back to the model) and
//! `lk.function_tool.is_error` (bool). A raised tool leaves the span status unset and
//! writes the error text as the output with `is_error` = true: read as a failed call whose
//! message is that text. No `gen_ai.operation.name`, so the GenAI claim never sees these
//! spans; they are read by the table of readers (`src/conventions/mod.rs` `READERS`).
//!
//! Sources: livekit/agents `livekit-agents/livekit/agents/voice/generation.py`
//! (`_execute_tools_task`, its `_traceable_fnc_tool`; `make_tool_output`) and
//! `livekit-agents/livekit/agents/telemetry/trace_types.py` (`ATTR_FUNCTION_TOOL_*`;
//! `debug/trace_types.py` in early 1.0 releases).

use crate::conventions::event::{CallStatus, EventKind, ExtractedEvent, SplitSpan, ToolCall};
use crate::conventions::{agent_name, call_id, call_status, first_str, payload_attr};
use crate::otlp::view::{attr, attr_str, SpanView, ValueView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "livekit";

/// LiveKit's span name for one function-tool execution.
pub const SPAN_NAME: &str = "function_tool";

/// The tool call of a LiveKit `function_tool` span (with `lk.function_tool.name`); `None`
/// for other spans. Arguments `lk.function_tool.arguments`, result
/// `lk.function_tool.output`, call id `lk.function_tool.id`; `lk.function_tool.is_error`
/// = true makes it a failed call (the output is the error text).
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    if span.name != SPAN_NAME {
        return None;
    }
    let attrs = &span.attributes;
    let name = first_str(attrs, &["lk.function_tool.name"])?;
    let mut status = call_status(span);
    let is_error = matches!(
        attr(attrs, "lk.function_tool.is_error").and_then(|v| v.value.as_ref()),
        Some(ValueView::BoolValue(true))
    );
    if status == CallStatus::Ok && is_error {
        status = CallStatus::Error {
            message: attr_str(attrs, "lk.function_tool.output")
                .unwrap_or_default()
                .to_owned(),
        };
    }
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(ToolCall {
            tool_name: name.to_owned(),
            call_id: call_id(attrs, "lk.function_tool.id"),
            arguments: payload_attr(attrs, &["lk.function_tool.arguments"]),
            result: payload_attr(attrs, &["lk.function_tool.output"]),
            status,
            split: SplitSpan::Whole,
        }),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conventions::event::Payload;
    use crate::conventions::test_support::{kv, kvs, span};
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue};

    fn boolean(b: bool) -> AnyValue {
        AnyValue {
            value: Some(Value::BoolValue(b)),
        }
    }

    fn call(s: &crate::otlp::Span) -> ToolCall {
        match extract(&SpanView::from(s)).expect("read").kind {
            EventKind::ToolCall(call) => call,
            other => panic!("not a call: {other:?}"),
        }
    }

    #[test]
    fn function_tool_span_is_a_call() {
        let s = span(
            SPAN_NAME,
            vec![
                kvs("lk.function_tool.id", "call_1"),
                kvs("lk.function_tool.name", "get_weather"),
                kvs("lk.function_tool.arguments", r#"{"city":"Paris"}"#),
                kvs("lk.function_tool.output", "18C"),
                kv("lk.function_tool.is_error", boolean(false)),
            ],
        );
        let c = call(&s);
        assert_eq!(c.tool_name, "get_weather");
        assert_eq!(c.call_id.as_deref(), Some("call_1"));
        assert_eq!(
            c.arguments,
            Some(Payload::Text(r#"{"city":"Paris"}"#.into()))
        );
        assert_eq!(c.result, Some(Payload::Text("18C".into())));
        assert_eq!(c.status, CallStatus::Ok);
    }

    #[test]
    fn is_error_makes_a_failed_call_with_the_output_as_message() {
        let s = span(
            SPAN_NAME,
            vec![
                kvs("lk.function_tool.name", "get_weather"),
                kvs("lk.function_tool.output", "An internal error occurred"),
                kv("lk.function_tool.is_error", boolean(true)),
            ],
        );
        let c = call(&s);
        assert_eq!(c.call_id, None);
        assert_eq!(
            c.status,
            CallStatus::Error {
                message: "An internal error occurred".into()
            }
        );
    }

    #[test]
    fn other_spans_are_not_read() {
        let unnamed = span(SPAN_NAME, vec![kvs("lk.function_tool.arguments", "{}")]);
        assert!(extract(&SpanView::from(&unnamed)).is_none());
        let other = span(
            "llm_node",
            vec![kvs("lk.function_tool.name", "get_weather")],
        );
        assert!(extract(&SpanView::from(&other)).is_none());
    }
}
