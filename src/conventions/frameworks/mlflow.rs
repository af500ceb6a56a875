//! MLflow Tracing exported over OTLP (MLflow sends its spans to an OTLP endpoint when
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` is set).
//!
//! MLflow stores every span attribute as JSON text (`_SpanAttributesRegistry.set`:
//! `json.dumps(value)`), so a tool span reads: `mlflow.spanType` = `"TOOL"` (the JSON
//! string, quotes included), `mlflow.spanInputs` = the JSON of the inputs (for a function
//! traced with `@mlflow.trace(span_type=SpanType.TOOL)`, its bound arguments as an object),
//! `mlflow.spanOutputs` = the JSON of the return value, `mlflow.spanFunctionName` = the
//! JSON of the function's name. The span is named after the function, but MLflow may give
//! spans of the same name numeric suffixes (`_1`, `_2`) when a trace ends, so the tool
//! name is `mlflow.spanFunctionName` where present, else the span name. A failed tool is
//! span status `ERROR` (`{type}: {message}`) with an `exception` event. A result that is a
//! JSON string (a tool returning text) is read as that text.
//!
//! Sources: mlflow/mlflow `mlflow/entities/span.py` (`LiveSpan`, `_SpanAttributesRegistry`,
//! `SpanType`), `mlflow/tracing/constant.py` (`SpanAttributeKey`),
//! `mlflow/tracing/fluent.py` (`trace`: inputs, outputs, function name).

use crate::conventions::event::{EventKind, ExtractedEvent, Payload, SplitSpan, ToolCall};
use crate::conventions::{agent_name, call_status, payload_attr};
use crate::otlp::view::{attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "mlflow";

/// `mlflow.spanType` of a tool span, as MLflow writes it (JSON text of `"TOOL"`).
const TOOL_TYPE: &str = "\"TOOL\"";

/// The tool call of an MLflow `TOOL` span; `None` for every other span.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let attrs = &span.attributes;
    let kind = attr_str(attrs, "mlflow.spanType")?;
    if kind != TOOL_TYPE && kind != "TOOL" {
        return None;
    }
    let name = attr_str(attrs, "mlflow.spanFunctionName")
        .map(json_text)
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| span.name.to_string());
    if name.is_empty() {
        return None;
    }
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(ToolCall {
            tool_name: name,
            call_id: None,
            arguments: payload_attr(attrs, &["mlflow.spanInputs"]),
            result: payload_attr(attrs, &["mlflow.spanOutputs"]).map(unquote),
            status: call_status(span),
            split: SplitSpan::Whole,
        }),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

/// The text of a JSON string (`"get_weather"` → `get_weather`); other text as it is.
fn json_text(text: &str) -> String {
    match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::String(s)) => s,
        _ => text.to_owned(),
    }
}

/// A result that is the JSON of a string is that string.
fn unquote(payload: Payload) -> Payload {
    match payload {
        Payload::Text(text) if text.starts_with('"') => Payload::Text(json_text(&text)),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conventions::test_support::{kvs, span};

    fn call(s: &crate::otlp::Span) -> ToolCall {
        match extract(&SpanView::from(s)).expect("read").kind {
            EventKind::ToolCall(call) => call,
            other => panic!("not a call: {other:?}"),
        }
    }

    #[test]
    fn tool_span_reads_json_encoded_attributes() {
        let tool = span(
            "get_weather_1",
            vec![
                kvs("mlflow.traceRequestId", "\"tr-1\""),
                kvs("mlflow.spanType", "\"TOOL\""),
                kvs("mlflow.spanFunctionName", "\"get_weather\""),
                kvs("mlflow.spanInputs", r#"{"city": "Paris"}"#),
                kvs("mlflow.spanOutputs", r#""cloudy, 18 C""#),
            ],
        );
        let c = call(&tool);
        assert_eq!(c.tool_name, "get_weather");
        assert_eq!(
            c.arguments,
            Some(Payload::Text(r#"{"city": "Paris"}"#.into()))
        );
        assert_eq!(c.result, Some(Payload::Text("cloudy, 18 C".into())));
        // Without the function name: the span name.
        let mut bare = tool.clone();
        bare.attributes.remove(2);
        assert_eq!(call(&bare).tool_name, "get_weather_1");
        // Other span types are no calls.
        let mut chain = tool.clone();
        chain.attributes[1] = kvs("mlflow.spanType", "\"CHAIN\"");
        assert_eq!(extract(&SpanView::from(&chain)), None);
    }
}
