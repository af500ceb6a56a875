//! `openai-agents-opentelemetry` 0.1.x, the OpenTelemetry tracing processor for the OpenAI
//! Agents SDK before it adopted the GenAI names (from 0.2 its function spans are GenAI
//! `execute_tool {name}` spans, read by [`super::genai`] with their `gen_ai.tool.input` /
//! `gen_ai.tool.output` events).
//!
//! 0.1.x names a function span `tool: {name}` and writes `agent.span.type` = `function`,
//! `tool.name`, `tool.input` (only when the SDK gave the span its input before it started,
//! which the SDK's own function tools never do: their arguments are not captured) and, at
//! the end, `tool.output` (`str()` of the tool's output, cut to 4096 characters); an SDK
//! span error is the span status (`ERROR`, the error's message). No
//! `gen_ai.operation.name`, so the GenAI claim never sees these spans.
//!
//! Source: `openai-agents-opentelemetry` 0.1.0/0.1.1 `opentelemetry_processor.py`
//! (`_map_function_span`, `_update_function_span`, `on_span_end`); recorded in
//! `tests/fixtures/shapes/openai_agents_otel_0_1_tool_span.json`.

use crate::conventions::event::{EventKind, ExtractedEvent, SplitSpan, ToolCall};
use crate::conventions::{agent_name, call_status, first_str, payload_attr};
use crate::otlp::view::{attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "openai-agents-otel";

/// The tool call of a 0.1.x function span (`agent.span.type` = `function` with
/// `tool.name`); `None` for every other span.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let attrs = &span.attributes;
    if attr_str(attrs, "agent.span.type") != Some("function") {
        return None;
    }
    let name = first_str(attrs, &["tool.name"])?;
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(ToolCall {
            tool_name: name.to_owned(),
            call_id: None,
            arguments: payload_attr(attrs, &["tool.input"]),
            result: payload_attr(attrs, &["tool.output"]),
            status: call_status(span),
            split: SplitSpan::Whole,
        }),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conventions::event::{CallStatus, Payload};
    use crate::conventions::test_support::{error_status, kvs, span};

    #[test]
    fn function_span_is_a_call_and_other_spans_are_not() {
        let mut tool = span(
            "tool: get_weather",
            vec![
                kvs("agent.span.type", "function"),
                kvs("tool.name", "get_weather"),
                kvs("tool.output", "sunny"),
            ],
        );
        let event = extract(&SpanView::from(&tool)).expect("a call");
        assert_eq!(event.convention, CONVENTION);
        let EventKind::ToolCall(call) = event.kind else {
            panic!("not a call")
        };
        assert_eq!(call.tool_name, "get_weather");
        assert_eq!(call.arguments, None);
        assert_eq!(call.result, Some(Payload::Text("sunny".into())));
        tool.status = error_status("Error running tool");
        let EventKind::ToolCall(failed) = extract(&SpanView::from(&tool)).unwrap().kind else {
            panic!("not a call")
        };
        assert_eq!(
            failed.status,
            CallStatus::Error {
                message: "Error running tool".into()
            }
        );
        // The agent and generation spans of the same processor are no calls.
        let agent = span(
            "agent: weather_agent",
            vec![kvs("agent.span.type", "agent"), kvs("agent.name", "w")],
        );
        assert_eq!(extract(&SpanView::from(&agent)), None);
        // A function span without a tool name is no call.
        let nameless = span("tool: ", vec![kvs("agent.span.type", "function")]);
        assert_eq!(extract(&SpanView::from(&nameless)), None);
    }
}
