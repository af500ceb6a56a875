//! smolagents tool calls as `openinference-instrumentation-smolagents` records them (seen
//! in `tests/fixtures/corpus/smolagents/`, smolagents 1.26).
//!
//! An OpenInference `TOOL` span (named after the tool class, e.g. `SimpleTool`) with
//! `tool.name`; `input.value` is the bound call of `Tool.__call__`:
//! `{"args": [], "sanitize_inputs_outputs": true, "kwargs": {<arguments>}}`, so the
//! arguments read are `kwargs` (when there are no positional `args`); the result is
//! `output.value` as found. No call id. The `sanitize_inputs_outputs` key tells this shape
//! apart; any other OpenInference tool span is left to [`crate::conventions::frameworks::openinference`], which
//! also reads this span's result and hidden (`__REDACTED__`) content.

use serde_json::Value as Json;

use crate::conventions::event::{EventKind, ExtractedEvent, Payload};
use crate::conventions::frameworks::openinference;
use crate::otlp::view::{attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "smolagents";

/// The tool call of a smolagents tool span; `None` for other spans.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    if attr_str(&span.attributes, "openinference.span.kind") != Some("TOOL") {
        return None;
    }
    let kwargs = call_kwargs(attr_str(&span.attributes, "input.value")?)?;
    let mut event = openinference::extract(span)?;
    if let EventKind::ToolCall(call) = &mut event.kind {
        call.arguments = Some(Payload::Json(kwargs));
    }
    event.convention = CONVENTION;
    Some(event)
}

/// `kwargs` of `{"args": [], "sanitize_inputs_outputs": …, "kwargs": {…}}`; `None` for any
/// other input (including positional arguments, kept as found by OpenInference).
fn call_kwargs(input: &str) -> Option<Json> {
    let Json::Object(mut map) = serde_json::from_str(input).ok()? else {
        return None;
    };
    map.get("sanitize_inputs_outputs")?;
    if !map
        .get("args")
        .is_none_or(|a| a.as_array().is_some_and(Vec::is_empty))
    {
        return None;
    }
    match map.remove("kwargs")? {
        kwargs @ Json::Object(_) => Some(kwargs),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use crate::conventions::event::{EventKind, Payload};
    use crate::conventions::extract;
    use crate::conventions::test_support::*;
    use serde_json::json;

    fn tool_span(input: &str) -> opentelemetry_proto::tonic::trace::v1::Span {
        span(
            "SimpleTool",
            vec![
                kvs("openinference.span.kind", "TOOL"),
                kvs("tool.name", "fetch_url"),
                kvs("input.value", input),
                kvs("output.value", "Error: connection refused"),
            ],
        )
    }

    #[test]
    fn call_wrapper_is_unwrapped_to_the_keyword_arguments() {
        let ev = extract(&tool_span(
            r#"{"args": [], "sanitize_inputs_outputs": true, "kwargs": {"url": "https://example.com/a", "limit": 1}}"#,
        ))
        .expect("tool call");
        assert_eq!(ev.convention, "smolagents");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "fetch_url");
        assert_eq!(
            c.arguments,
            Some(Payload::Json(
                json!({"url": "https://example.com/a", "limit": 1})
            ))
        );
        assert_eq!(
            c.result,
            Some(Payload::Text("Error: connection refused".into()))
        );
    }

    #[test]
    fn positional_arguments_and_other_shapes_stay_openinference() {
        for input in [
            r#"{"args": ["https://example.com/a"], "sanitize_inputs_outputs": true, "kwargs": {}}"#,
            r#"{"args": [], "kwargs": {"url": "x"}}"#,
            "__REDACTED__",
        ] {
            let ev = extract(&tool_span(input)).expect("tool call");
            assert_eq!(ev.convention, "openinference", "{input}");
        }
    }
}
