//! LlamaIndex tool calls, as its two instrumentations record them (seen in
//! `tests/fixtures/corpus/llamaindex/`, recorded with llama-index-core 0.14).
//!
//! * **OpenLLMetry** (`opentelemetry-instrumentation-llamaindex`) has no `tool` span kind
//!   for agent tools: the workflow step `call_tool` is a `traceloop.span.kind` = `task`
//!   span (named like every other step, e.g. `BaseWorkflowAgent.task`) that alone carries
//!   `tool.name` and `tool.arguments` (JSON text; written even with content capture off).
//!   Its `traceloop.entity.output` is the `ToolCallResult` JSON: `tool_id` (the model's
//!   call id) and `tool_output`, a `ToolOutput`. The `FunctionTool.task` span nested in it
//!   has no tool name and is not read (one call, one event).
//! * **OpenInference** (`openinference-instrumentation-llama-index`): a `TOOL` span named
//!   `<Tool class>.acall` / `.call` (`FunctionTool.acall`) with `tool.name`;
//!   `input.value` is the call's bound arguments `{"kwargs": {<arguments>}}`, `output.value`
//!   the `ToolOutput` JSON.
//!
//! A `ToolOutput` is `{"blocks", "tool_name", "raw_input": {"args", "kwargs"}, "raw_output",
//! "is_error"}`; `raw_input` repeats the arguments, volatile ones included, so the result
//! read is `raw_output` (the tool's return value); `is_error: true` makes the call an
//! error with that text. The arguments read are the `kwargs` object when positional
//! `args` are empty. OpenInference's hidden content (`__REDACTED__`) reads as not captured.

use serde_json::Value as Json;

use crate::conventions::event::{
    CallStatus, EventKind, ExtractedEvent, Payload, SplitSpan, ToolCall,
};
use crate::conventions::frameworks::openinference::is_redacted;
use crate::conventions::{agent_name, call_status, first_str, payload_attr};
use crate::otlp::view::{attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "llamaindex";

/// The tool call of a LlamaIndex tool span (either instrumentation); `None` for other spans.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let attrs = &span.attributes;
    let call = if attr_str(attrs, "traceloop.span.kind").is_some() {
        let name = first_str(attrs, &["tool.name"])?;
        let output = payload_attr(attrs, &["traceloop.entity.output"]).and_then(json_of);
        let tool_output = output.as_ref().and_then(|o| o.get("tool_output"));
        ToolCall {
            tool_name: name.to_owned(),
            call_id: output
                .as_ref()
                .and_then(|o| o.get("tool_id"))
                .and_then(Json::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_owned),
            arguments: payload_attr(attrs, &["tool.arguments"]),
            result: tool_output.map(raw_output),
            status: error_of(tool_output).unwrap_or_else(|| call_status(span)),
            split: SplitSpan::Whole,
        }
    } else {
        if attr_str(attrs, "openinference.span.kind") != Some("TOOL") || !is_tool_method(&span.name)
        {
            return None;
        }
        let name = first_str(attrs, &["tool.name"])?;
        let input = payload_attr(attrs, &["input.value"]).filter(|p| !is_redacted(p));
        let output = payload_attr(attrs, &["output.value"]).filter(|p| !is_redacted(p));
        let tool_output = output.clone().and_then(json_of).filter(is_tool_output);
        ToolCall {
            tool_name: name.to_owned(),
            call_id: None,
            arguments: input.map(unwrap_kwargs),
            result: match &tool_output {
                Some(o) => Some(raw_output(o)),
                None => output,
            },
            status: error_of(tool_output.as_ref()).unwrap_or_else(|| call_status(span)),
            split: SplitSpan::Whole,
        }
    };
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(call),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

/// `FunctionTool.acall`, `QueryEngineTool.call`, …: LlamaIndex's instrumentation names a
/// span `<class>.<method>`; tools are the classes ending in `Tool`.
fn is_tool_method(span_name: &str) -> bool {
    span_name.rsplit_once('.').is_some_and(|(class, method)| {
        class.ends_with("Tool") && matches!(method, "call" | "acall")
    })
}

fn json_of(payload: Payload) -> Option<Json> {
    match payload {
        Payload::Json(v) => Some(v),
        Payload::Text(t) => serde_json::from_str(&t).ok(),
        Payload::Bytes(b) => serde_json::from_slice(&b).ok(),
    }
}

fn is_tool_output(value: &Json) -> bool {
    value.get("raw_output").is_some() && value.get("tool_name").is_some()
}

/// `raw_output` of a `ToolOutput` (the tool's return value); the whole value otherwise.
fn raw_output(tool_output: &Json) -> Payload {
    Payload::Json(tool_output.get("raw_output").unwrap_or(tool_output).clone())
}

/// `is_error: true` → an error call whose message is the output text.
fn error_of(tool_output: Option<&Json>) -> Option<CallStatus> {
    let o = tool_output?;
    if o.get("is_error").and_then(Json::as_bool) != Some(true) {
        return None;
    }
    let message = match o.get("raw_output") {
        Some(Json::String(s)) => s.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    };
    Some(CallStatus::Error { message })
}

/// `{"kwargs": {...}}` (with `args` absent or empty) → the `kwargs` object; anything else
/// as found.
fn unwrap_kwargs(payload: Payload) -> Payload {
    let Some(Json::Object(map)) = json_of(payload.clone()) else {
        return payload;
    };
    let positional_empty = map
        .get("args")
        .is_none_or(|a| a.as_array().is_some_and(Vec::is_empty));
    let only_call_keys = map.keys().all(|k| k == "args" || k == "kwargs");
    match map.get("kwargs") {
        Some(kwargs @ Json::Object(_)) if positional_empty && only_call_keys => {
            Payload::Json(kwargs.clone())
        }
        _ => payload,
    }
}

#[cfg(test)]
mod tests {
    use crate::conventions::event::{CallStatus, EventKind, Payload, ToolCall};
    use crate::conventions::extract;
    use crate::conventions::test_support::*;
    use serde_json::json;

    fn call(sp: &opentelemetry_proto::tonic::trace::v1::Span) -> ToolCall {
        let ev = extract(sp).expect("tool call");
        assert_eq!(ev.convention, "llamaindex");
        match ev.kind {
            EventKind::ToolCall(c) => c,
            other => panic!("not a tool call: {other:?}"),
        }
    }

    fn tool_output(raw_output: &str, is_error: bool) -> String {
        json!({
            "blocks": [{"text": raw_output}],
            "tool_name": "lookup_user",
            "raw_input": {"args": [], "kwargs": {"user_id": "u-17", "request_id": "req-1"}},
            "raw_output": raw_output,
            "is_error": is_error,
        })
        .to_string()
    }

    #[test]
    fn openllmetry_call_tool_step() {
        let output = format!(
            r#"{{"tool_name":"lookup_user","tool_kwargs":{{"user_id":"u-17"}},"tool_id":"call_1","tool_output":{},"return_direct":false}}"#,
            tool_output("user u-17: active", false)
        );
        let sp = span(
            "BaseWorkflowAgent.task",
            vec![
                kvs("traceloop.span.kind", "task"),
                kvs("traceloop.entity.name", "BaseWorkflowAgent.task"),
                kvs("tool.name", "lookup_user"),
                kvs("tool.arguments", r#"{"user_id": "u-17"}"#),
                kvs("traceloop.entity.output", &output),
            ],
        );
        let c = call(&sp);
        assert_eq!(c.tool_name, "lookup_user");
        assert_eq!(c.call_id.as_deref(), Some("call_1"));
        assert_eq!(
            c.arguments,
            Some(Payload::Text(r#"{"user_id": "u-17"}"#.into()))
        );
        assert_eq!(c.result, Some(Payload::Json(json!("user u-17: active"))));
        assert_eq!(c.status, CallStatus::Ok);
    }

    #[test]
    fn openllmetry_content_off_keeps_name_and_arguments() {
        let sp = span(
            "BaseWorkflowAgent.task",
            vec![
                kvs("traceloop.span.kind", "task"),
                kvs("tool.name", "grep"),
                kvs("tool.arguments", r#"{"pattern": "TODO"}"#),
            ],
        );
        let c = call(&sp);
        assert_eq!(c.tool_name, "grep");
        assert!(c.arguments.is_some());
        assert_eq!(c.result, None);
        assert_eq!(c.call_id, None);
    }

    #[test]
    fn openllmetry_steps_without_a_tool_name_are_not_calls() {
        for name in ["BaseWorkflowAgent.task", "FunctionTool.task"] {
            let sp = span(
                name,
                vec![
                    kvs("traceloop.span.kind", "task"),
                    kvs("traceloop.entity.input", r#"{"kwargs": {"path": "a.py"}}"#),
                ],
            );
            assert_eq!(extract(&sp), None, "{name}");
        }
    }

    #[test]
    fn openinference_function_tool_unwraps_kwargs_and_tool_output() {
        let sp = span(
            "FunctionTool.acall",
            vec![
                kvs("openinference.span.kind", "TOOL"),
                kvs("tool.name", "lookup_user"),
                kvs(
                    "input.value",
                    r#"{"kwargs": {"user_id": "u-17", "request_id": "req-1"}}"#,
                ),
                kvs("output.value", &tool_output("boom", true)),
            ],
        );
        let c = call(&sp);
        assert_eq!(c.tool_name, "lookup_user");
        assert_eq!(
            c.arguments,
            Some(Payload::Json(
                json!({"user_id": "u-17", "request_id": "req-1"})
            ))
        );
        assert_eq!(c.result, Some(Payload::Json(json!("boom"))));
        assert_eq!(
            c.status,
            CallStatus::Error {
                message: "boom".into()
            }
        );
    }

    #[test]
    fn openinference_positional_arguments_and_hidden_content_kept_honest() {
        let sp = span(
            "FunctionTool.call",
            vec![
                kvs("openinference.span.kind", "TOOL"),
                kvs("tool.name", "add"),
                kvs("input.value", r#"{"args": [1, 2], "kwargs": {}}"#),
                kvs("output.value", "__REDACTED__"),
            ],
        );
        let c = call(&sp);
        assert_eq!(
            c.arguments,
            Some(Payload::Text(r#"{"args": [1, 2], "kwargs": {}}"#.into()))
        );
        assert_eq!(c.result, None);
        let hidden = span(
            "FunctionTool.acall",
            vec![
                kvs("openinference.span.kind", "TOOL"),
                kvs("tool.name", "add"),
                kvs("input.value", "__REDACTED__"),
            ],
        );
        assert_eq!(call(&hidden).arguments, None);
    }

    #[test]
    fn other_openinference_tool_spans_are_left_to_openinference() {
        let sp = span(
            "fetch_url",
            vec![
                kvs("openinference.span.kind", "TOOL"),
                kvs("tool.name", "fetch_url"),
                kvs("input.value", r#"{"kwargs": {"url": "x"}}"#),
            ],
        );
        assert_eq!(extract(&sp).expect("tool call").convention, "openinference");
    }
}
