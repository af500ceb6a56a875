//! Mastra's older `@mastra/otel-exporter` span converter (before its GenAI-semconv
//! `execute_tool` spans, which [`crate::conventions::frameworks::genai`] reads).
//!
//! A tool call (`TOOL_CALL` or `MCP_TOOL_CALL` Mastra span) is exported as a span named
//! `tool.execute {toolId}` with `gen_ai.operation.name` = `tool.execute`,
//! `mastra.span.type` = `tool_call` / `mcp_tool_call`, the tool id as `gen_ai.tool.name`,
//! the input as `gen_ai.tool.input` (and again as the generic `input`), the output as
//! `gen_ai.tool.output` (and `output`): a string as is, anything else `JSON.stringify`'d.
//! A failed call has span status ERROR with the error message (`MastraReadableSpan`),
//! plus `error.message`. No call id.
//! Source: mastra-ai/mastra `observability/otel-exporter/src/span-converter.ts`
//! (`buildSpanName`, `buildAttributes`, `getOperationName`), e.g. at commit b81dece1,
//! and `mastra-span.ts` (status from `errorInfo`).
//!
//! A model generation (`MODEL_GENERATION`: one whole `generate` / `stream`, all its steps)
//! is exported as `chat {model}` with `gen_ai.operation.name` = `chat`, `mastra.span.type`
//! = `model_generation` and the output `JSON.stringify`'d as `gen_ai.completion` (and
//! `output`): `{text, object, reasoning, reasoningText, files, sources, warnings}`
//! (mastra-ai/mastra `@mastra/core`: the model loop's `onFinish` calls
//! `ModelSpanTracker.endGeneration` with that output; the tracker's spans are
//! `MODEL_GENERATION` → `MODEL_STEP` → `MODEL_CHUNK`). Its `text` is the response ([`RESPONSE_READER`]),
//! as the newer exporter's `gen_ai.output.messages` (one `text` part made from `text`,
//! `gen-ai-messages.ts` `convertMastraMessagesToGenAIMessages`) reads. The output names no
//! tool calls: the generation's tool spans, between generations, break a streak.

use serde_json::Value as Json;

use crate::conventions::event::{EventKind, ExtractedEvent, ModelResponse, SplitSpan, ToolCall};
use crate::conventions::messages::model_response::{Found, ResponseReader};
use crate::conventions::{agent_name, call_status, first_str, json_from_any_value, payload_attr};
use crate::otlp::view::{attr, attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "mastra-legacy";

/// The `gen_ai.operation.name` of the older exporter's tool spans.
pub const OPERATION: &str = "tool.execute";

/// The tool call of an older Mastra exporter `tool.execute` span; `None` for other spans.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let attrs = &span.attributes;
    if attr_str(attrs, "gen_ai.operation.name") != Some(OPERATION) {
        return None;
    }
    let from_span_name = span
        .name
        .strip_prefix("tool.execute ")
        .filter(|n| !n.is_empty() && *n != "unknown");
    let name = first_str(attrs, &["gen_ai.tool.name"]).or(from_span_name)?;
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(ToolCall {
            tool_name: name.to_owned(),
            call_id: None,
            arguments: payload_attr(attrs, &["gen_ai.tool.input", "input"]),
            result: payload_attr(attrs, &["gen_ai.tool.output", "output"]),
            status: call_status(span),
            split: SplitSpan::Whole,
        }),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

/// The older exporter's response source of an inference span ([`crate::conventions::messages::model_response`]).
pub const RESPONSE_READER: ResponseReader = ResponseReader {
    convention: CONVENTION,
    read: read_response,
};

fn read_response(span: &SpanView) -> Found {
    let attrs = &span.attributes;
    if attr_str(attrs, "mastra.span.type") != Some("model_generation") {
        return None;
    }
    let output = attr(attrs, "gen_ai.completion").and_then(json_from_any_value)?;
    Some(
        output
            .get("text")
            .and_then(Json::as_str)
            .map(|text| ModelResponse::Text(text.to_owned())),
    )
}

#[cfg(test)]
mod tests {
    use crate::conventions::event::{CallStatus, EventKind, ModelResponse, Payload};
    use crate::conventions::extract;
    use crate::conventions::test_support::*;

    /// `chat {model}` as `buildAttributes` writes a `MODEL_GENERATION` span.
    fn generation(output: &str) -> opentelemetry_proto::tonic::trace::v1::Span {
        span(
            "chat gpt-4o-mini",
            vec![
                kvs("gen_ai.operation.name", "chat"),
                kvs("span.kind", "client"),
                kvs("mastra.span.type", "model_generation"),
                kvs("input", r#"{"messages":[{"role":"user","content":"hi"}]}"#),
                kvs(
                    "gen_ai.prompt",
                    r#"{"messages":[{"role":"user","content":"hi"}]}"#,
                ),
                kvs("output", output),
                kvs("gen_ai.completion", output),
                kvs("gen_ai.request.model", "gpt-4o-mini"),
                kvs("gen_ai.system", "openai.chat"),
            ],
        )
    }

    #[test]
    fn model_generation_text_is_the_response() {
        let ev = extract(&generation(
            r#"{"reasoning":[],"sources":[],"text":"I cannot find it.","warnings":[]}"#,
        ))
        .expect("a response");
        assert_eq!(ev.convention, "mastra-legacy");
        assert_eq!(
            ev.kind,
            EventKind::ModelResponse(ModelResponse::Text("I cannot find it.".into()))
        );
        // No text (an object output only): no response.
        assert_eq!(extract(&generation(r#"{"object":{"a":1}}"#)), None);
    }

    fn tool_span() -> opentelemetry_proto::tonic::trace::v1::Span {
        let input = r#"{"location":"London"}"#;
        let output = r#"{"temperature":14.2,"conditions":"Overcast"}"#;
        span(
            "tool.execute weatherTool",
            vec![
                kvs("gen_ai.operation.name", "tool.execute"),
                kvs("span.kind", "internal"),
                kvs("mastra.span.type", "tool_call"),
                kvs("input", input),
                kvs("gen_ai.tool.input", input),
                kvs("output", output),
                kvs("gen_ai.tool.output", output),
                kvs("gen_ai.tool.name", "weatherTool"),
                kvs(
                    "gen_ai.tool.description",
                    "Get current weather for a location",
                ),
            ],
        )
    }

    #[test]
    fn tool_execute_span_is_a_tool_call() {
        let ev = extract(&tool_span()).expect("a tool call");
        assert_eq!(ev.convention, "mastra-legacy");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "weatherTool");
        assert_eq!(
            c.arguments,
            Some(Payload::Text(r#"{"location":"London"}"#.into()))
        );
        assert_eq!(
            c.result,
            Some(Payload::Text(
                r#"{"temperature":14.2,"conditions":"Overcast"}"#.into()
            ))
        );
        assert_eq!(c.status, CallStatus::Ok);
    }

    #[test]
    fn failed_call_and_name_from_the_span_name() {
        let mut sp = tool_span();
        sp.attributes
            .retain(|kv| kv.key != "gen_ai.tool.name" && !kv.key.contains("output"));
        sp.attributes.push(kvs("error.message", "fetch failed"));
        sp.status = error_status("fetch failed");
        let EventKind::ToolCall(c) = extract(&sp).expect("a tool call").kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "weatherTool");
        assert_eq!(c.result, None);
        assert_eq!(
            c.status,
            CallStatus::Error {
                message: "fetch failed".into()
            }
        );
    }

    #[test]
    fn other_mastra_spans_are_not_claimed() {
        let agent = span(
            "agent.weatherAgent",
            vec![
                kvs("gen_ai.operation.name", "agent.run"),
                kvs("input", "What is the weather?"),
            ],
        );
        assert_eq!(extract(&agent), None);
    }
}
