//! OpenInference (Arize) spans: `openinference.span.kind` = `TOOL` (tool calls) and
//! `LLM` (model responses).
//!
//! Tool spans: name `tool.name` (else the span name), arguments `input.value` (not
//! `tool.parameters`, which is the JSON schema), result `output.value`. OpenInference has
//! no call id on the tool span; openinference-instrumentation-langchain records the result
//! as a serialised `ToolMessage` (`{"type":"tool","data":{…,"tool_call_id":…}}`), and its
//! `tool_call_id` is used as the call id when present. Hidden content (`__REDACTED__`,
//! OpenInference's `OPENINFERENCE_HIDE_INPUTS/OUTPUTS`) reads as not captured. For one-parameter LangChain tools
//! `input.value` is the bare value (`42`, `Paris`), kept as found.
//!
//! LLM spans: `llm.output_messages.N.message.tool_calls.M.…` → [`ModelResponse::ToolCalls`];
//! otherwise the texts `llm.output_messages.N.message.content` (and
//! `…message.contents.M.message_content.text`), in index order, joined with `\n`.
//! No output messages (hidden outputs) → `None`.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use super::{agent_name, call_status, first_str, payload_attr};
use crate::event::{EventKind, ExtractedEvent, ModelResponse, Payload, SplitSpan, ToolCall};
use crate::otlp::view::{attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "openinference";

const SPAN_KIND: &str = "openinference.span.kind";
const OUTPUT_MESSAGES: &str = "llm.output_messages.";

/// A tool call for a `TOOL` span, a model response for an `LLM` span with captured
/// output; `None` otherwise.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let kind = match attr_str(&span.attributes, SPAN_KIND)? {
        "TOOL" => EventKind::ToolCall(tool_call(span)?),
        "LLM" => EventKind::ModelResponse(model_response(span)?),
        _ => return None,
    };
    Some(ExtractedEvent {
        kind,
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

fn tool_call(span: &SpanView) -> Option<ToolCall> {
    let attrs = &span.attributes;
    let name =
        first_str(attrs, &["tool.name"]).or(Some(span.name.as_ref()).filter(|s| !s.is_empty()))?;
    Some(ToolCall {
        tool_name: name.to_owned(),
        call_id: attr_str(attrs, "output.value").and_then(tool_message_call_id),
        arguments: payload_attr(attrs, &["input.value"])
            .filter(|p| !is_redacted(p))
            .map(|p| crewai_tool_use_arguments(span, &p).unwrap_or(p)),
        result: payload_attr(attrs, &["output.value"]).filter(|p| !is_redacted(p)),
        status: call_status(span),
        split: SplitSpan::Whole,
    })
}

/// The arguments of CrewAI's `ToolUsage._use(tool_string, tool, calling)` as
/// openinference-instrumentation-crewai traces it (`_ToolUseWrapper`: span `{tool}._use`,
/// `input.value` the JSON of the bound arguments, `_get_input_value`): `tool_string` is the
/// agent's raw text ("Thought: … Action Input: …", different whenever the thought is) and
/// `tool` the tool's repr, so the call's arguments are `calling.arguments` (the parsed
/// `ToolCalling`, JSON through its `dict()`). `None` for any other span or shape, which
/// keeps `input.value` as recorded. Source: Arize-ai/openinference
/// `python/instrumentation/openinference-instrumentation-crewai/src/openinference/
/// instrumentation/crewai/_wrappers.py`; crewAIInc/crewAI `tools/tool_usage.py`.
fn crewai_tool_use_arguments(span: &SpanView, input: &Payload) -> Option<Payload> {
    if !span.name.ends_with("._use") {
        return None;
    }
    let Payload::Text(text) = input else {
        return None;
    };
    let Json::Object(mut bound) = serde_json::from_str::<Json>(text).ok()? else {
        return None;
    };
    if !bound.contains_key("tool_string") {
        return None;
    }
    let Json::Object(mut calling) = bound.remove("calling")? else {
        return None;
    };
    calling.remove("arguments").map(Payload::Json)
}

/// OpenInference's placeholder for hidden inputs/outputs (`OPENINFERENCE_HIDE_INPUTS` /
/// `OPENINFERENCE_HIDE_OUTPUTS`): not captured, not content.
pub fn is_redacted(payload: &Payload) -> bool {
    matches!(payload, Payload::Text(t) if t == "__REDACTED__")
}

/// `tool_call_id` of a LangChain `ToolMessage` serialised as
/// `{"type":"tool","data":{…}}` (or its flat form `{"type":"tool","tool_call_id":…}`).
fn tool_message_call_id(output: &str) -> Option<String> {
    if !output.trim_start().starts_with('{') {
        return None;
    }
    let value: Json = serde_json::from_str(output).ok()?;
    if value.get("type").and_then(Json::as_str) != Some("tool") {
        return None;
    }
    value
        .get("data")
        .unwrap_or(&value)
        .get("tool_call_id")
        .and_then(Json::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

fn model_response(span: &SpanView) -> Option<ModelResponse> {
    // (message index, content index) → text; BTreeMap keeps index order.
    let mut texts: BTreeMap<(u64, u64), &str> = BTreeMap::new();
    let mut tool_calls = false;
    for kv in &span.attributes {
        let Some(rest) = kv.key.strip_prefix(OUTPUT_MESSAGES) else {
            continue;
        };
        let Some((index, field)) = rest.split_once(".message.") else {
            continue;
        };
        let Ok(index) = index.parse::<u64>() else {
            continue;
        };
        if field.starts_with("tool_calls.") || field.starts_with("function_call_") {
            tool_calls = true;
            continue;
        }
        let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(crate::otlp::view::ValueView::StringValue(s)) => s.as_ref(),
            _ => continue,
        };
        if field == "content" {
            texts.insert((index, 0), value);
        } else if let Some(sub) = field
            .strip_prefix("contents.")
            .and_then(|r| r.strip_suffix(".message_content.text"))
        {
            // content parts sort after `content` (0); an index at u64::MAX cannot be shifted
            if let Some(sub) = sub.parse::<u64>().ok().and_then(|s| s.checked_add(1)) {
                texts.insert((index, sub), value);
            }
        }
    }
    if tool_calls {
        return Some(ModelResponse::ToolCalls);
    }
    if texts.is_empty() {
        return None;
    }
    Some(ModelResponse::Text(
        texts.into_values().collect::<Vec<_>>().join("\n"),
    ))
}

#[cfg(test)]
mod tests {
    use crate::conventions::extract;
    use crate::conventions::test_support::*;
    use crate::event::{CallStatus, EventKind, ModelResponse, Payload};

    #[test]
    fn tool_span_reads_input_not_schema() {
        let sp = span(
            "fetch_url",
            vec![
                kvs("tool.name", "fetch_url"),
                kvs(
                    "input.value",
                    r#"{"url": "https://example.com/a", "limit": 1}"#,
                ),
                kvs("output.value", "Error: connection refused"),
                kvs("tool.parameters", r#"{"properties":{}}"#),
                kvs("openinference.span.kind", "TOOL"),
            ],
        );
        let ev = extract(&sp).expect("tool call");
        assert_eq!(ev.convention, "openinference");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "fetch_url");
        assert_eq!(
            c.arguments,
            Some(Payload::Text(
                r#"{"url": "https://example.com/a", "limit": 1}"#.into()
            ))
        );
        assert_eq!(
            c.result,
            Some(Payload::Text("Error: connection refused".into()))
        );
        assert_eq!(c.call_id, None);
        assert_eq!(c.status, CallStatus::Ok);
    }

    #[test]
    fn langchain_tool_message_call_id_and_bare_value() {
        let mut sp = span(
            "check_status",
            vec![
                kvs("input.value", "42"),
                kvs(
                    "output.value",
                    r#"{"type": "tool", "data": {"content": "queued", "tool_call_id": "call_s2_1"}}"#,
                ),
                kvs("openinference.span.kind", "TOOL"),
            ],
        );
        sp.status = error_status("ToolException");
        let EventKind::ToolCall(c) = extract(&sp).expect("tool call").kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "check_status", "falls back to the span name");
        assert_eq!(c.arguments, Some(Payload::Text("42".into())));
        assert_eq!(c.call_id.as_deref(), Some("call_s2_1"));
        assert_eq!(
            c.status,
            CallStatus::Error {
                message: "ToolException".into()
            }
        );
    }

    #[test]
    fn llm_span_tool_calls_and_text() {
        let calls = span(
            "generation",
            vec![
                kvs("openinference.span.kind", "LLM"),
                kvs("llm.output_messages.0.message.role", "assistant"),
                kvs(
                    "llm.output_messages.0.message.tool_calls.0.tool_call.id",
                    "c1",
                ),
                kvs(
                    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
                    "f",
                ),
            ],
        );
        assert_eq!(
            extract(&calls).expect("response").kind,
            EventKind::ModelResponse(ModelResponse::ToolCalls)
        );
        let text = span(
            "generation",
            vec![
                kvs("openinference.span.kind", "LLM"),
                kvs("llm.output_messages.1.message.content", "second"),
                kvs("llm.output_messages.0.message.content", "first"),
                kvs("llm.input_messages.0.message.content", "prompt, not output"),
            ],
        );
        assert_eq!(
            extract(&text).expect("response").kind,
            EventKind::ModelResponse(ModelResponse::Text("first\nsecond".into()))
        );
        let hidden = span("generation", vec![kvs("openinference.span.kind", "LLM")]);
        assert_eq!(extract(&hidden), None);
        // an out-of-range content index is skipped, never an overflow
        let huge = span(
            "generation",
            vec![
                kvs("openinference.span.kind", "LLM"),
                kvs("llm.output_messages.0.message.content", "kept"),
                kvs(
                    "llm.output_messages.0.message.contents.18446744073709551615.message_content.text",
                    "skipped",
                ),
            ],
        );
        assert_eq!(
            extract(&huge).expect("response").kind,
            EventKind::ModelResponse(ModelResponse::Text("kept".into()))
        );
    }

    #[test]
    fn crewai_tool_use_reads_the_calling_arguments_not_the_agent_text() {
        let span_with = |thought: &str| {
            let input = serde_json::json!({
                "tool_string": format!("Thought: {thought}\nAction: get_weather\nAction Input: {{\"city\": \"Paris\"}}"),
                "tool": "CrewStructuredTool(name='get_weather', description='Tool Name: get_weather')",
                "calling": {"tool_name": "get_weather", "arguments": {"city": "Paris"}},
            });
            span(
                "get_weather._use",
                vec![
                    kvs("openinference.span.kind", "TOOL"),
                    kvs("tool.name", "get_weather"),
                    kvs("input.value", &input.to_string()),
                    kvs("output.value", "Error: upstream timeout"),
                ],
            )
        };
        let arguments = |thought: &str| {
            let EventKind::ToolCall(call) = extract(&span_with(thought)).expect("a tool call").kind
            else {
                panic!("not a tool call")
            };
            call.arguments
        };
        let expected = Some(Payload::Json(serde_json::json!({"city": "Paris"})));
        assert_eq!(arguments("I need the weather"), expected);
        assert_eq!(arguments("Let me try again"), expected);

        // The same input on a span not named `{tool}._use` is kept as recorded.
        let mut other = span_with("x");
        other.name = "get_weather".into();
        let EventKind::ToolCall(call) = extract(&other).unwrap().kind else {
            panic!("not a tool call")
        };
        assert!(matches!(call.arguments, Some(Payload::Text(t)) if t.contains("tool_string")));
    }

    #[test]
    fn other_kinds_ignored() {
        let chain = span("turn", vec![kvs("openinference.span.kind", "CHAIN")]);
        assert_eq!(extract(&chain), None);
    }
}
