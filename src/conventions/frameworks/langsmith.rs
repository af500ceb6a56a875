//! LangSmith's OpenTelemetry export of its runs (`LANGSMITH_OTEL_ENABLED`, `OTEL_ENABLED`).
//!
//! The LangSmith SDK turns each run (a LangChain / LangGraph callback run, or a
//! `@traceable(run_type="tool")` function) into one span named after the run (`get_weather`,
//! not `execute_tool {name}`), with `langsmith.span.kind` = the run type (`tool`),
//! `langsmith.trace.name` = the run name, `gen_ai.operation.name` = `execute_tool` for a
//! tool run, `gen_ai.prompt` = the run's inputs as JSON text (a LangChain tool's arguments
//! dict, `{"input": "…"}` for a string input, a traceable function's bound arguments) and
//! `gen_ai.completion` = its outputs as JSON text (`{"output": X}`, X a LangChain
//! `ToolMessage` for tool calls from a model, unwrapped by [`crate::conventions::wrappers`]), plus run
//! ids (`langsmith.span.id`, `langsmith.span.dotted_order`, …) and
//! `langsmith.metadata.*`. An error sets the span status to ERROR with an `exception`
//! event. The Python exporter writes no `gen_ai.tool.name`; the JS translator adds
//! `gen_ai.tool.name` (the run name) and `gen_ai.tool.call.id` when LangChain forwards it.
//! Neither writes `gen_ai.tool.call.arguments` / `.result`, so the GenAI claim would take
//! the span (its `gen_ai.operation.name`) and find no name (Python) or no content (JS):
//! these spans are read here, before the GenAI claim (`src/conventions/mod.rs`
//! `extract_raw`), on `langsmith.span.kind` = `tool` alone.
//!
//! Sources: langchain-ai/langsmith-sdk `python/langsmith/_internal/otel/_otel_exporter.py`
//! (`OTELExporter._create_span_for_run`, `_set_span_attributes`, `_set_io_attributes`,
//! `WELL_KNOWN_OPERATION_NAMES`), `js/src/experimental/otel/translator.ts`
//! (`LangSmithToOTELTranslator.setSpanAttributes`, `setIOAttributes`).

use crate::conventions::event::{EventKind, ExtractedEvent, SplitSpan, ToolCall};
use crate::conventions::{agent_name, call_id, call_status, first_str, payload_attr};
use crate::otlp::view::{attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "langsmith";

/// True for a LangSmith tool-run span (`langsmith.span.kind` = `tool`).
pub fn is_tool_span(span: &SpanView) -> bool {
    attr_str(&span.attributes, "langsmith.span.kind") == Some("tool")
}

/// The tool call of a LangSmith tool-run span; `None` for other spans. Tool name:
/// `gen_ai.tool.name`, else `langsmith.trace.name`, else the span name; arguments
/// `gen_ai.prompt` (else `gen_ai.tool.call.arguments`); result `gen_ai.completion` (else
/// `gen_ai.tool.call.result`); call id `gen_ai.tool.call.id` where written.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    if !is_tool_span(span) {
        return None;
    }
    let attrs = &span.attributes;
    let name = first_str(attrs, &["gen_ai.tool.name", "langsmith.trace.name"])
        .or_else(|| Some(span.name.as_ref()).filter(|n| !n.is_empty()))?;
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(ToolCall {
            tool_name: name.to_owned(),
            call_id: call_id(attrs, "gen_ai.tool.call.id"),
            arguments: payload_attr(attrs, &["gen_ai.prompt", "gen_ai.tool.call.arguments"]),
            result: payload_attr(attrs, &["gen_ai.completion", "gen_ai.tool.call.result"]),
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

    fn read(s: &crate::otlp::Span) -> ToolCall {
        match extract(&SpanView::from(s)).expect("read").kind {
            EventKind::ToolCall(call) => call,
            other => panic!("not a call: {other:?}"),
        }
    }

    #[test]
    fn python_tool_run_is_named_by_its_run_name() {
        let s = span(
            "get_weather",
            vec![
                kvs("langsmith.span.kind", "tool"),
                kvs("langsmith.trace.name", "get_weather"),
                kvs("gen_ai.operation.name", "execute_tool"),
                kvs("gen_ai.prompt", r#"{"city": "Paris"}"#),
                kvs("gen_ai.completion", r#"{"output": "18C"}"#),
            ],
        );
        let call = read(&s);
        assert_eq!(call.tool_name, "get_weather");
        assert_eq!(
            call.arguments,
            Some(Payload::Text(r#"{"city": "Paris"}"#.into()))
        );
        assert_eq!(
            call.result,
            Some(Payload::Text(r#"{"output": "18C"}"#.into()))
        );
        assert_eq!(call.call_id, None);
        assert_eq!(call.status, CallStatus::Ok);
    }

    #[test]
    fn js_tool_run_takes_gen_ai_tool_name_and_call_id() {
        let mut s = span(
            "lookup",
            vec![
                kvs("langsmith.span.kind", "tool"),
                kvs("gen_ai.tool.name", "get_weather"),
                kvs("gen_ai.tool.call.id", "call_1"),
                kvs("gen_ai.prompt", r#"{"input":"Paris"}"#),
            ],
        );
        s.status = error_status("boom");
        let call = read(&s);
        assert_eq!(call.tool_name, "get_weather");
        assert_eq!(call.call_id.as_deref(), Some("call_1"));
        assert_eq!(call.result, None);
        assert_eq!(
            call.status,
            CallStatus::Error {
                message: "boom".into()
            }
        );
    }

    #[test]
    fn other_run_kinds_are_not_read() {
        let s = span(
            "ChatOpenAI",
            vec![
                kvs("langsmith.span.kind", "llm"),
                kvs("gen_ai.prompt", "{}"),
            ],
        );
        assert!(extract(&SpanView::from(&s)).is_none());
    }
}
