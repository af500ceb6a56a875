//! DSPy tool calls as `openinference-instrumentation-dspy` records them (seen in
//! `tests/fixtures/corpus/dspy/`, DSPy 3.4 `ReAct`).
//!
//! An OpenInference `TOOL` span named `<tool>.__call__` (DSPy's `Tool.__call__`) with **no
//! `tool.name`**; `input.value` is the bound call `{"kwargs": {<arguments>}}`; `output.value`
//! is the return value as JSON text. So the tool name is the span name without
//! `.__call__`, and the arguments are `kwargs`. ReAct's own `finish` tool, which ends every
//! run, is a call like any other. Hidden content (`__REDACTED__`) reads as not captured.

use serde_json::Value as Json;

use crate::conventions::event::{EventKind, ExtractedEvent, Payload, SplitSpan, ToolCall};
use crate::conventions::frameworks::openinference::is_redacted;
use crate::conventions::{agent_name, call_status, payload_attr};
use crate::otlp::view::{attr, attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "dspy";

/// The tool call of a DSPy tool span; `None` for other spans (including OpenInference tool
/// spans that name their tool, which [`crate::conventions::frameworks::openinference`] reads).
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let attrs = &span.attributes;
    if attr_str(attrs, "openinference.span.kind") != Some("TOOL")
        || attr(attrs, "tool.name").is_some()
    {
        return None;
    }
    let name = span
        .name
        .strip_suffix(".__call__")
        .filter(|n| !n.is_empty())?;
    let arguments = payload_attr(attrs, &["input.value"])
        .filter(|p| !is_redacted(p))
        .map(unwrap_kwargs);
    let result = payload_attr(attrs, &["output.value"]).filter(|p| !is_redacted(p));
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(ToolCall {
            tool_name: name.to_owned(),
            call_id: None,
            arguments,
            result,
            status: call_status(span),
            split: SplitSpan::Whole,
        }),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

/// `{"kwargs": {...}}` (positional `args` absent or empty) → the `kwargs` object; any other
/// input as found.
fn unwrap_kwargs(payload: Payload) -> Payload {
    let Payload::Text(text) = &payload else {
        return payload;
    };
    let Ok(Json::Object(mut map)) = serde_json::from_str::<Json>(text) else {
        return payload;
    };
    let positional_empty = map
        .get("args")
        .is_none_or(|a| a.as_array().is_some_and(Vec::is_empty));
    if !positional_empty || map.keys().any(|k| k != "args" && k != "kwargs") {
        return payload;
    }
    match map.remove("kwargs") {
        Some(kwargs @ Json::Object(_)) => Payload::Json(kwargs),
        _ => payload,
    }
}

#[cfg(test)]
mod tests {
    use crate::conventions::event::{EventKind, Payload};
    use crate::conventions::extract;
    use crate::conventions::test_support::*;
    use serde_json::json;

    #[test]
    fn tool_name_from_the_span_name_and_kwargs_unwrapped() {
        let sp = span(
            "read_file.__call__",
            vec![
                kvs("openinference.span.kind", "TOOL"),
                kvs("input.value", r#"{"kwargs": {"path": "a.py"}}"#),
                kvs("output.value", r#""def main(): pass""#),
            ],
        );
        let ev = extract(&sp).expect("tool call");
        assert_eq!(ev.convention, "dspy");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "read_file");
        assert_eq!(c.arguments, Some(Payload::Json(json!({"path": "a.py"}))));
        assert_eq!(
            c.result,
            Some(Payload::Text(r#""def main(): pass""#.into()))
        );
    }

    #[test]
    fn hidden_content_positional_arguments_and_named_tools() {
        let hidden = span(
            "grep.__call__",
            vec![
                kvs("openinference.span.kind", "TOOL"),
                kvs("input.value", "__REDACTED__"),
                kvs("output.value", "__REDACTED__"),
            ],
        );
        let EventKind::ToolCall(c) = extract(&hidden).expect("tool call").kind else {
            panic!("not a tool call")
        };
        assert_eq!((c.arguments, c.result), (None, None));
        let positional = span(
            "add.__call__",
            vec![
                kvs("openinference.span.kind", "TOOL"),
                kvs("input.value", r#"{"args": [1, 2], "kwargs": {}}"#),
            ],
        );
        let EventKind::ToolCall(c) = extract(&positional).expect("tool call").kind else {
            panic!("not a tool call")
        };
        assert_eq!(
            c.arguments,
            Some(Payload::Text(r#"{"args": [1, 2], "kwargs": {}}"#.into()))
        );
        let named = span(
            "x.__call__",
            vec![
                kvs("openinference.span.kind", "TOOL"),
                kvs("tool.name", "x"),
            ],
        );
        assert_eq!(
            extract(&named).expect("tool call").convention,
            "openinference"
        );
    }
}
