//! OpenLLMetry (Traceloop) tool spans: `traceloop.span.kind` = `tool`.
//!
//! Tool name `traceloop.entity.name` (else `gen_ai.tool.name`, else the span name without
//! its `.tool` suffix), arguments `traceloop.entity.input` (else `gen_ai.tool.call.arguments`),
//! result `traceloop.entity.output` (else `gen_ai.tool.call.result`), call id
//! `gen_ai.tool.call.id` where written. OpenLLMetry 0.6x writes both spellings on LangChain
//! tool spans (the `gen_ai.*` ones holding the same callback context) and only the
//! `gen_ai.*` ones on OpenAI Agents SDK tool spans (`<tool>.tool`).
//! Traceloop LLM spans' responses are `gen_ai.completion.N.*` ([`RESPONSE_READER`]).
//!
//! The `@tool` decorator records `{"args": [...], "kwargs": {...}}`, stable per call, kept
//! as found. The LangChain callback handler records the callback's whole context:
//! input `{"input_str", "tags", "metadata", "inputs", "kwargs"}` and output
//! `{"output", "kwargs"}`, where `metadata` carries per-step LangGraph checkpoint ids; so
//! for that shape the arguments are `inputs` (else `input_str`) and the result is `output`.
//! Otherwise two identical calls would never fingerprint alike.

use crate::conventions::event::{
    EventKind, ExtractedEvent, ModelResponse, Payload, SplitSpan, ToolCall,
};
use crate::conventions::json::fields::object_fields;
use crate::conventions::messages::model_response::{Found, ResponseReader};
use crate::conventions::{agent_name, call_status, first_str, payload_attr};
use crate::otlp::view::{attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "openllmetry";

/// True for a Traceloop `tool` span (`traceloop.span.kind` = `tool`).
pub fn is_tool_span(span: &SpanView) -> bool {
    attr_str(&span.attributes, "traceloop.span.kind") == Some("tool")
}

/// True for the `mcp.server` span OpenLLMetry's FastMCP instrumentation puts between the
/// client's `{name}.tool` span and the server's own `{name}.tool` span of one MCP
/// `tools/call` (`traceloop.span.kind` = `server`; traceloop/openllmetry
/// `packages/opentelemetry-instrumentation-mcp/.../fastmcp_instrumentation.py`: the server
/// tool span is that span's child, and the client's context reaches the server through
/// the request's `params._meta` traceparent, `instrumentation.py`). A call hop
/// ([`crate::conventions::is_call_hop`]).
pub fn is_server_span(span: &SpanView) -> bool {
    attr_str(&span.attributes, "traceloop.span.kind") == Some("server")
}

/// The tool call of a Traceloop `tool` span; `None` for other spans.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let attrs = &span.attributes;
    if !is_tool_span(span) {
        return None;
    }
    let from_span_name = span.name.strip_suffix(".tool").unwrap_or(&span.name);
    let name = first_str(attrs, &["traceloop.entity.name", "gen_ai.tool.name"])
        .or(Some(from_span_name).filter(|s| !s.is_empty()))?;
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(ToolCall {
            tool_name: name.to_owned(),
            call_id: crate::conventions::call_id(attrs, "gen_ai.tool.call.id"),
            arguments: payload_attr(
                attrs,
                &["traceloop.entity.input", "gen_ai.tool.call.arguments"],
            )
            .map(|p| unwrap_callback(p, &["inputs", "input_str"], "input_str")),
            result: payload_attr(
                attrs,
                &["traceloop.entity.output", "gen_ai.tool.call.result"],
            )
            .map(|p| unwrap_callback(p, &["output"], "kwargs")),
            status: call_status(span),
            split: SplitSpan::Whole,
        }),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

/// For the LangChain callback shape (a JSON object holding `marker`), the first non-null
/// of `fields`; any other payload unchanged. Text is read for those fields only
/// ([`crate::conventions::json::fields`]).
fn unwrap_callback(payload: Payload, fields: &[&str], marker: &str) -> Payload {
    let picked = match &payload {
        Payload::Text(text) => object_fields(text, fields, marker)
            .filter(|(marked, _)| *marked)
            .and_then(|(_, values)| values.into_iter().flatten().find(|v| !v.is_null())),
        Payload::Json(serde_json::Value::Object(map)) if map.contains_key(marker) => fields
            .iter()
            .filter_map(|f| map.get(*f))
            .find(|v| !v.is_null())
            .cloned(),
        _ => None,
    };
    picked.map_or(payload, Payload::Json)
}

/// OpenLLMetry's response source of an inference span ([`crate::conventions::messages::model_response`]).
pub const RESPONSE_READER: ResponseReader = ResponseReader {
    convention: CONVENTION,
    read: read_response,
};

/// OpenLLMetry's flattened completions: `gen_ai.completion.N.content`,
/// `gen_ai.completion.N.tool_calls.M.*`, `gen_ai.completion.N.function_call.*`. Absent
/// (no tool call, no content) when none is there: the next reader is tried.
fn read_response(span: &SpanView) -> Found {
    let mut texts: Vec<(u64, &str)> = Vec::new();
    let mut tool_calls = false;
    for kv in &span.attributes {
        let Some(rest) = kv.key.strip_prefix("gen_ai.completion.") else {
            continue;
        };
        let Some((index, field)) = rest.split_once('.') else {
            continue;
        };
        let Ok(index) = index.parse::<u64>() else {
            continue;
        };
        if field.starts_with("tool_calls.") || field.starts_with("function_call.") {
            tool_calls = true;
        } else if field == "content" {
            if let Some(text) = attr_str(std::slice::from_ref(kv), &kv.key) {
                texts.push((index, text));
            }
        }
    }
    if tool_calls {
        return Some(Some(ModelResponse::ToolCalls));
    }
    if texts.is_empty() {
        return None;
    }
    texts.sort_by_key(|(i, _)| *i);
    let texts: Vec<&str> = texts.into_iter().map(|(_, t)| t).collect();
    Some(Some(ModelResponse::Text(texts.join("\n"))))
}

#[cfg(test)]
mod tests {
    use crate::conventions::event::{CallStatus, EventKind, Payload};
    use crate::conventions::extract;
    use crate::conventions::test_support::*;

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
    fn openai_agents_tool_span_reads_the_gen_ai_spelling() {
        let sp = span(
            "read_file.tool",
            vec![
                kvs("traceloop.span.kind", "tool"),
                kvs("gen_ai.operation.name", "execute_tool"),
                kvs("gen_ai.tool.name", "read_file"),
                kvs("gen_ai.tool.call.arguments", r#"{"path": "a.py"}"#),
                kvs("gen_ai.tool.call.result", "def main(): pass"),
            ],
        );
        let ev = extract(&sp).expect("tool call");
        assert_eq!(ev.convention, "openllmetry");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "read_file");
        assert_eq!(
            c.arguments,
            Some(Payload::Text(r#"{"path": "a.py"}"#.into()))
        );
        assert_eq!(c.result, Some(Payload::Text("def main(): pass".into())));
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

    #[test]
    fn langchain_callback_context_is_unwrapped_to_inputs_and_output() {
        let call = |checkpoint: &str, call_id: &str| {
            let sp = span(
                "search.tool",
                vec![
                    kvs("traceloop.span.kind", "tool"),
                    kvs("traceloop.entity.name", "search"),
                    kvs(
                        "traceloop.entity.input",
                        &format!(
                            r#"{{"input_str":"{{'q': 'otlp'}}","tags":[],"metadata":{{"langgraph_checkpoint_ns":"tools:{checkpoint}"}},"inputs":{{"q":"otlp"}},"kwargs":{{"tool_call_id":"{call_id}"}}}}"#
                        ),
                    ),
                    kvs(
                        "traceloop.entity.output",
                        &format!(r#"{{"output":"no results","kwargs":{{"run_id":"{call_id}"}}}}"#),
                    ),
                ],
            );
            let EventKind::ToolCall(c) = extract(&sp).expect("tool call").kind else {
                panic!("not a tool call")
            };
            c
        };
        let a = call("0b1c", "call_1");
        let b = call("9f8e", "call_2");
        assert_eq!(
            a.arguments,
            Some(Payload::Json(serde_json::json!({"q": "otlp"})))
        );
        assert_eq!(a.arguments, b.arguments);
        assert_eq!(
            a.result,
            Some(Payload::Json(serde_json::json!("no results")))
        );
        assert_eq!(a.result, b.result);
    }
}
