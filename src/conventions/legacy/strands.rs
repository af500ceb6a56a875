//! strands-agents 0.1.x tool spans (before the GenAI semconv spans of v0.2.0).
//!
//! `Tracer.start_tool_call_span` opens a span named `Tool: {name}` with `tool.name`,
//! `tool.id` (the model's `toolUseId`), `tool.parameters` (`json.dumps` of the tool input)
//! and `gen_ai.prompt` (the whole `ToolUse`); `end_tool_call_span` adds `tool.result` (and
//! the same text as `gen_ai.completion`: `json.dumps` of the `ToolResult` content list,
//! e.g. `[{"text": "…"}]`) and `tool.status` (`success` / `error`); an exception sets the
//! span status to ERROR. No `gen_ai.operation.name`: from v0.2.0 the same span name comes
//! with `gen_ai.operation.name` = `execute_tool` and is read by [`crate::conventions::frameworks::genai`].
//! A `tool.status` of `error` (the tool returned an error result) is a failed call whose
//! message is the result's text.
//! Source: strands-agents/sdk-python `src/strands/telemetry/tracer.py`, tags v0.1.0 –
//! v0.1.9 (first commit b3890bb8, 2025-05-16, to the parent of f20a4051, 2025-07-01).
//!
//! Model responses of the same releases: `start_model_invoke_span` opens `Model invoke`
//! (`gen_ai.system` = `strands-agents`, no `gen_ai.operation.name`, so no inference-span
//! reader sees it) and `end_model_invoke_span` sets `gen_ai.completion` to `json.dumps` of
//! the message's content blocks (`[{"text": …}]`, `[{"toolUse": …}]`), read by
//! [`summarize`]. From v0.2.0 that span is `chat` with a `gen_ai.choice` event
//! ([`crate::conventions::frameworks::genai`]).

use serde_json::Value as Json;

use crate::conventions::event::{CallStatus, EventKind, ExtractedEvent, SplitSpan, ToolCall};
use crate::conventions::messages::model_response::summarize;
use crate::conventions::{
    agent_name, call_id, call_status, first_str, json_from_any_value, payload_attr,
};
use crate::otlp::view::{attr, attr_str, SpanView};

/// Span name of a strands 0.1.x model invocation.
const MODEL_INVOKE: &str = "Model invoke";

/// Convention label on events from this module.
pub const CONVENTION: &str = "strands-legacy";

/// The tool call of a strands 0.1.x `Tool: {name}` span, the model response of its
/// `Model invoke` span; `None` for other spans.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let attrs = &span.attributes;
    if span.name == MODEL_INVOKE {
        return model_response(span);
    }
    let name = first_str(attrs, &["tool.name"])?;
    if span.name.strip_prefix("Tool: ") != Some(name)
        || attr_str(attrs, "gen_ai.operation.name").is_some()
        || attr_str(attrs, "openinference.span.kind").is_some()
    {
        return None;
    }
    let mut status = call_status(span);
    if status == CallStatus::Ok && attr_str(attrs, "tool.status") == Some("error") {
        status = CallStatus::Error {
            message: attr_str(attrs, "tool.result")
                .map(result_text)
                .unwrap_or_default(),
        };
    }
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(ToolCall {
            tool_name: name.to_owned(),
            call_id: call_id(attrs, "tool.id"),
            arguments: payload_attr(attrs, &["tool.parameters"]),
            result: payload_attr(attrs, &["tool.result"]),
            status,
            split: SplitSpan::Whole,
        }),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

/// The response of a `Model invoke` span: `gen_ai.completion` (content blocks), when the
/// span is strands' (`gen_ai.system`) and no GenAI operation is set.
fn model_response(span: &SpanView) -> Option<ExtractedEvent> {
    let attrs = &span.attributes;
    if attr_str(attrs, "gen_ai.system") != Some("strands-agents")
        || attr_str(attrs, "gen_ai.operation.name").is_some()
    {
        return None;
    }
    let content = attr(attrs, "gen_ai.completion").and_then(json_from_any_value)?;
    Some(ExtractedEvent {
        kind: EventKind::ModelResponse(summarize(&content)?),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

/// The `text` parts of a `ToolResult` content list joined with `\n`; the recorded text
/// when it is not such a list.
fn result_text(recorded: &str) -> String {
    let Ok(Json::Array(parts)) = serde_json::from_str::<Json>(recorded) else {
        return recorded.to_owned();
    };
    let texts: Vec<&str> = parts
        .iter()
        .filter_map(|p| p.get("text")?.as_str())
        .collect();
    if texts.is_empty() {
        recorded.to_owned()
    } else {
        texts.join("\n")
    }
}

#[cfg(test)]
mod tests {
    use crate::conventions::event::{CallStatus, EventKind, ModelResponse, Payload};
    use crate::conventions::extract;
    use crate::conventions::test_support::*;

    /// `Model invoke` as v0.1.9 `start_model_invoke_span` / `end_model_invoke_span` write it.
    fn model_invoke(completion: &str) -> opentelemetry_proto::tonic::trace::v1::Span {
        span(
            "Model invoke",
            vec![
                kvs("gen_ai.event.start_time", "2025-06-01T00:00:00+00:00"),
                kvs("gen_ai.system", "strands-agents"),
                kvs("agent.name", "Strands Agent"),
                kvs("gen_ai.agent.name", "Strands Agent"),
                kvs(
                    "gen_ai.prompt",
                    r#"[{"role": "user", "content": [{"text": "hi"}]}]"#,
                ),
                kvs("gen_ai.request.model", "us.anthropic.claude"),
                kvs("gen_ai.completion", completion),
                kvs("gen_ai.usage.total_tokens", "3"),
            ],
        )
    }

    #[test]
    fn model_invoke_completion_is_the_response() {
        let ev = extract(&model_invoke(r#"[{"text": "I cannot find it."}]"#)).expect("a response");
        assert_eq!(ev.convention, "strands-legacy");
        assert_eq!(ev.agent_name.as_deref(), Some("Strands Agent"));
        assert_eq!(
            ev.kind,
            EventKind::ModelResponse(ModelResponse::Text("I cannot find it.".into()))
        );
        let calls = model_invoke(
            r#"[{"text": "Let me check."}, {"toolUse": {"toolUseId": "t1", "name": "f", "input": {}}}]"#,
        );
        assert_eq!(
            extract(&calls).expect("a response").kind,
            EventKind::ModelResponse(ModelResponse::ToolCalls)
        );
        // Another system's span of that name is not strands'.
        let mut other = model_invoke(r#"[{"text": "x"}]"#);
        other.attributes[1] = kvs("gen_ai.system", "openai");
        assert_eq!(extract(&other), None);
    }

    fn tool_span(status: &str, result: &str) -> opentelemetry_proto::tonic::trace::v1::Span {
        span(
            "Tool: word_count",
            vec![
                kvs(
                    "gen_ai.event.start_time",
                    "2025-06-12T09:30:01.120000+00:00",
                ),
                kvs(
                    "gen_ai.prompt",
                    r#"{"toolUseId": "tooluse_kZ3pQm1xS2aT", "name": "word_count", "input": {"text": "hello world"}}"#,
                ),
                kvs("tool.name", "word_count"),
                kvs("tool.id", "tooluse_kZ3pQm1xS2aT"),
                kvs("tool.parameters", r#"{"text": "hello world"}"#),
                kvs("tool.result", result),
                kvs("gen_ai.completion", result),
                kvs("tool.status", status),
            ],
        )
    }

    #[test]
    fn tool_span_is_a_tool_call() {
        let ev = extract(&tool_span("success", r#"[{"text": "2"}]"#)).expect("a tool call");
        assert_eq!(ev.convention, "strands-legacy");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "word_count");
        assert_eq!(c.call_id.as_deref(), Some("tooluse_kZ3pQm1xS2aT"));
        assert_eq!(
            c.arguments,
            Some(Payload::Text(r#"{"text": "hello world"}"#.into()))
        );
        assert_eq!(c.result, Some(Payload::Text(r#"[{"text": "2"}]"#.into())));
        assert_eq!(c.status, CallStatus::Ok);
    }

    #[test]
    fn error_status_is_a_failed_call_with_the_result_text() {
        let ev = extract(&tool_span(
            "error",
            r#"[{"text": "Error: tool failed: rate limited"}]"#,
        ))
        .expect("a tool call");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(
            c.status,
            CallStatus::Error {
                message: "Error: tool failed: rate limited".into()
            }
        );
    }

    #[test]
    fn other_spans_are_not_claimed() {
        // The event-loop cycle span also carries `tool.result`, but no `tool.name`.
        let cycle = span(
            "Cycle 1",
            vec![kvs("tool.result", r#"[{"toolResult": {}}]"#)],
        );
        assert_eq!(extract(&cycle), None);
        // A span name that is not `Tool: <tool.name>`.
        let other = span(
            "Tool: other",
            vec![kvs("tool.name", "word_count"), kvs("tool.parameters", "{}")],
        );
        assert_eq!(extract(&other), None);
        // strands ≥ 0.2: the same name with GenAI attributes is GenAI's.
        let mut v2 = tool_span("success", r#"[{"text": "2"}]"#);
        v2.attributes
            .push(kvs("gen_ai.operation.name", "execute_tool"));
        v2.attributes.push(kvs("gen_ai.tool.name", "word_count"));
        assert_eq!(extract(&v2).expect("a tool call").convention, "genai");
    }
}
