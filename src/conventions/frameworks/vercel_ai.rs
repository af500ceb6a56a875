//! Vercel AI SDK telemetry (`experimental_telemetry`, TypeScript agents).
//!
//! Tool span: name / `operation.name` = `ai.toolCall`; tool name `ai.toolCall.name`,
//! arguments `ai.toolCall.args`, result `ai.toolCall.result`, call id `ai.toolCall.id`.
//! Model responses: the provider-call spans `ai.generateText.doGenerate` /
//! `ai.streamText.doStream` with `ai.response.toolCalls` (a response that called tools)
//! or `ai.response.text`. Inputs/outputs are only present when the SDK's
//! `recordInputs` / `recordOutputs` are on.

use crate::conventions::event::{EventKind, ExtractedEvent, ModelResponse, SplitSpan, ToolCall};
use crate::conventions::{
    agent_name, call_id, call_status, first_str, json_from_any_value, payload_attr,
};
use crate::otlp::view::{attr, attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "vercel-ai";

const PROVIDER_CALLS: [&str; 2] = ["ai.generateText.doGenerate", "ai.streamText.doStream"];

fn operation<'a>(span: &'a SpanView<'_>) -> &'a str {
    attr_str(&span.attributes, "operation.name")
        .or_else(|| attr_str(&span.attributes, "ai.operationId"))
        .unwrap_or(&span.name)
}

/// The tool call or model response of a Vercel AI SDK span; `None` for other spans.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let operation = operation(span);
    let attrs = &span.attributes;
    let kind = if operation.starts_with("ai.toolCall") {
        EventKind::ToolCall(ToolCall {
            tool_name: first_str(attrs, &["ai.toolCall.name"])?.to_owned(),
            call_id: call_id(attrs, "ai.toolCall.id"),
            arguments: payload_attr(attrs, &["ai.toolCall.args", "ai.toolCall.input"]),
            result: payload_attr(attrs, &["ai.toolCall.result", "ai.toolCall.output"]),
            status: call_status(span),
            split: SplitSpan::Whole,
        })
    } else if PROVIDER_CALLS.iter().any(|p| operation.starts_with(p)) {
        let tool_calls = attr(attrs, "ai.response.toolCalls")
            .and_then(json_from_any_value)
            .is_some_and(|v| v.as_array().is_some_and(|a| !a.is_empty()));
        if tool_calls {
            EventKind::ModelResponse(ModelResponse::ToolCalls)
        } else {
            let text = attr_str(attrs, "ai.response.text")?;
            EventKind::ModelResponse(ModelResponse::Text(text.to_owned()))
        }
    } else {
        return None;
    };
    Some(ExtractedEvent {
        kind,
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

#[cfg(test)]
mod tests {
    use crate::conventions::event::{EventKind, ModelResponse, Payload};
    use crate::conventions::extract;
    use crate::conventions::test_support::*;

    #[test]
    fn tool_call_span() {
        let sp = span(
            "ai.toolCall",
            vec![
                kvs("operation.name", "ai.toolCall"),
                kvs("ai.operationId", "ai.toolCall"),
                kvs("ai.toolCall.name", "noop"),
                kvs("ai.toolCall.id", "call_THX"),
                kvs("ai.toolCall.args", r#"{"reason":"asked"}"#),
                kvs("ai.toolCall.result", r#"{"ok":true}"#),
            ],
        );
        let ev = extract(&sp).expect("tool call");
        assert_eq!(ev.convention, "vercel-ai");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "noop");
        assert_eq!(c.call_id.as_deref(), Some("call_THX"));
        assert_eq!(
            c.arguments,
            Some(Payload::Text(r#"{"reason":"asked"}"#.into()))
        );
        assert_eq!(c.result, Some(Payload::Text(r#"{"ok":true}"#.into())));
        // AI SDK 5 names them `input` / `output`.
        let mut v5 = sp.clone();
        v5.attributes[4] = kvs("ai.toolCall.input", r#"{"reason":"asked"}"#);
        v5.attributes[5] = kvs("ai.toolCall.output", r#"{"ok":true}"#);
        let EventKind::ToolCall(c5) = extract(&v5).expect("tool call").kind else {
            panic!("not a tool call")
        };
        assert_eq!((c5.arguments, c5.result), (c.arguments, c.result));
    }

    #[test]
    fn provider_call_spans_are_model_responses() {
        let text = span(
            "ai.generateText.doGenerate",
            vec![
                kvs("operation.name", "ai.generateText.doGenerate my-fn"),
                kvs("ai.response.text", "The answer is 42."),
            ],
        );
        assert_eq!(
            extract(&text).map(|e| e.kind),
            Some(EventKind::ModelResponse(ModelResponse::Text(
                "The answer is 42.".into()
            )))
        );
        let tools = span(
            "ai.streamText.doStream",
            vec![
                kvs("ai.response.text", ""),
                kvs(
                    "ai.response.toolCalls",
                    r#"[{"toolCallType":"function","toolCallId":"c1","toolName":"search","args":"{}"}]"#,
                ),
            ],
        );
        assert_eq!(
            extract(&tools).map(|e| e.kind),
            Some(EventKind::ModelResponse(ModelResponse::ToolCalls))
        );
        // outputs not recorded: not an event
        assert_eq!(extract(&span("ai.generateText.doGenerate", vec![])), None);
        // the outer ai.generateText span is not a provider call
        assert_eq!(
            extract(&span(
                "ai.generateText",
                vec![kvs("ai.response.text", "The answer is 42.")]
            )),
            None
        );
    }
}
