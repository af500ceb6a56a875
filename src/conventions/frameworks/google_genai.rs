//! The google-genai SDK instrumentation (`opentelemetry-instrumentation-google-genai`):
//! automatic function calling wraps each Python tool function in a GenAI `execute_tool
//! {fn}` span (`gen_ai.operation.name` = `execute_tool`, `gen_ai.tool.name`,
//! `code.function.name`, `code.args.positional.count` / `code.args.keyword.count`) whose
//! content is not in `gen_ai.tool.call.arguments` / `.result` but in one attribute per
//! parameter: `code.function.parameters.<p>.type` (Python type name, always) and, with
//! content capture on, `code.function.parameters.<p>.value`; the result is
//! `code.function.return.type` / `.value`. Positional arguments are named after the
//! signature (`args[i]` past it). A value is an attribute of its own type when it is a
//! `str` / `int` / `float` / `bool` or a list of one of those, else `json.dumps` of it
//! (models via `model_dump()`, other objects `repr()`); `None` is dropped by the SDK
//! (only its `.type` = `NoneType` remains).
//!
//! The arguments read are the object of the parameters (a `str` parameter's text stays a
//! string even when it looks like JSON; a JSON-encoded value is parsed), so one call reads
//! the same whatever the parameter order; a call with no parameters has arguments `{}`;
//! a parameter with a type but no value (content capture off) leaves the arguments not
//! captured. The rest (tool name, call id, status) is read as [`crate::conventions::frameworks::genai`] reads it.
//! Source: open-telemetry/opentelemetry-python-contrib
//! `instrumentation-genai/opentelemetry-instrumentation-google-genai/src/opentelemetry/
//! instrumentation/google_genai/tool_call_wrapper.py` (`_record_function_call_arguments`,
//! `_to_otel_attribute`, `_record_function_call_result`).

use serde_json::{Map, Value as Json};

use crate::conventions::event::{EventKind, ExtractedEvent, Payload};
use crate::conventions::{frameworks::genai, payload_attr};
use crate::otlp::view::{any_value_to_json, attr, attr_str, AnyValueView, SpanView, ValueView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "google-genai";

const PARAMETERS: &str = "code.function.parameters.";

/// True for a GenAI tool span ([`genai::is_tool_span`], which the caller has checked)
/// written by the google-genai instrumentation: it has `code.function.name` and the
/// argument counts.
pub fn has_function_parameters(span: &SpanView) -> bool {
    let attrs = &span.attributes;
    attr_str(attrs, "code.function.name").is_some()
        && attr(attrs, "code.args.positional.count").is_some()
        && attr(attrs, "code.args.keyword.count").is_some()
}

/// The tool call of a GenAI tool span [`has_function_parameters`] claims: [`genai::extract_tool`], with the
/// arguments and result it lacks taken from the `code.function.*` attributes.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let mut event = genai::extract_tool(span)?;
    if let EventKind::ToolCall(call) = &mut event.kind {
        if call.arguments.is_none() {
            call.arguments = arguments(span).map(Payload::Json);
        }
        if call.result.is_none() {
            call.result = payload_attr(&span.attributes, &["code.function.return.value"]);
        }
    }
    event.convention = CONVENTION;
    Some(event)
}

/// The object of the recorded parameters; `None` when a parameter's value was not recorded.
fn arguments(span: &SpanView) -> Option<Json> {
    let attrs = &span.attributes;
    let mut arguments = Map::new();
    for kv in attrs.iter() {
        let Some(param) = kv
            .key
            .strip_prefix(PARAMETERS)
            .and_then(|rest| rest.strip_suffix(".type"))
        else {
            continue;
        };
        let python_type = attr_str(attrs, &kv.key);
        let value = match attr(attrs, &format!("{PARAMETERS}{param}.value")) {
            Some(value) => parameter_value(value, python_type)?,
            None if python_type == Some("NoneType") => Json::Null,
            None => return None,
        };
        arguments.insert(param.to_owned(), value);
    }
    Some(Json::Object(arguments))
}

/// A parameter value as JSON: a `str` parameter's text as a string, other text parsed as
/// the JSON `_to_otel_attribute` wrote (kept as a string if it does not parse).
fn parameter_value(value: &AnyValueView, python_type: Option<&str>) -> Option<Json> {
    match value.value.as_ref()? {
        ValueView::StringValue(text) if python_type == Some("str") => {
            Some(Json::String(text.as_ref().to_owned()))
        }
        ValueView::StringValue(text) => {
            Some(serde_json::from_str(text).unwrap_or_else(|_| Json::String(text.as_ref().into())))
        }
        _ => Some(any_value_to_json(value)),
    }
}

#[cfg(test)]
mod tests {
    use crate::conventions::event::{CallStatus, EventKind, Payload};
    use crate::conventions::extract;
    use crate::conventions::test_support::*;
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
    use serde_json::json;

    fn int(v: i64) -> AnyValue {
        AnyValue {
            value: Some(Value::IntValue(v)),
        }
    }

    fn tool_span(
        params: Vec<KeyValue>,
        capture: bool,
    ) -> opentelemetry_proto::tonic::trace::v1::Span {
        let mut attributes = vec![
            kvs("gen_ai.operation.name", "execute_tool"),
            kvs("gen_ai.tool.name", "get_current_weather"),
            kvs(
                "gen_ai.tool.description",
                "Gets the current weather for a location.",
            ),
            kvs("code.function.name", "get_current_weather"),
            kvs("code.module", "__main__"),
            kv("code.args.positional.count", int(0)),
            kv("code.args.keyword.count", int(2)),
        ];
        for p in params {
            let is_value = p.key.ends_with(".value");
            if capture || !is_value {
                attributes.push(p);
            }
        }
        attributes.push(kvs("code.function.return.type", "str"));
        if capture {
            attributes.push(kvs("code.function.return.value", "rainy, 57°F"));
        }
        span("execute_tool get_current_weather", attributes)
    }

    fn weather_params(order_reversed: bool) -> Vec<KeyValue> {
        let mut params = vec![
            kvs("code.function.parameters.location.type", "str"),
            kvs("code.function.parameters.location.value", "Boston, MA"),
            kvs("code.function.parameters.days.type", "int"),
            kv("code.function.parameters.days.value", int(3)),
            kvs("code.function.parameters.options.type", "dict"),
            kvs(
                "code.function.parameters.options.value",
                r#"{"units": "imperial"}"#,
            ),
            kvs("code.function.parameters.note.type", "str"),
            kvs(
                "code.function.parameters.note.value",
                r#"{"not": "parsed"}"#,
            ),
            kvs("code.function.parameters.since.type", "NoneType"),
        ];
        if order_reversed {
            params.reverse();
        }
        params
    }

    #[test]
    fn parameters_are_the_arguments_object() {
        let ev = extract(&tool_span(weather_params(false), true)).expect("a tool call");
        assert_eq!(ev.convention, "google-genai");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "get_current_weather");
        assert_eq!(
            c.arguments,
            Some(Payload::Json(json!({
                "location": "Boston, MA",
                "days": 3,
                "options": {"units": "imperial"},
                "note": "{\"not\": \"parsed\"}",
                "since": null,
            })))
        );
        assert_eq!(c.result, Some(Payload::Text("rainy, 57°F".into())));
        assert_eq!(c.status, CallStatus::Ok);
        // The same call with the attributes in another order reads the same.
        let again = extract(&tool_span(weather_params(true), true)).expect("a tool call");
        let EventKind::ToolCall(d) = again.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.arguments, d.arguments);
    }

    #[test]
    fn content_capture_off_is_not_captured_and_no_parameters_is_empty() {
        let ev = extract(&tool_span(weather_params(false), false)).expect("a tool call");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!((c.arguments, c.result), (None, None));
        let ev = extract(&tool_span(vec![], true)).expect("a tool call");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.arguments, Some(Payload::Json(json!({}))));
    }

    #[test]
    fn gen_ai_content_on_the_span_wins_and_plain_genai_is_untouched() {
        let mut sp = tool_span(weather_params(false), true);
        sp.attributes.push(kvs(
            "gen_ai.tool.call.arguments",
            r#"{"location":"Boston, MA"}"#,
        ));
        let EventKind::ToolCall(c) = extract(&sp).expect("a tool call").kind else {
            panic!("not a tool call")
        };
        assert_eq!(
            c.arguments,
            Some(Payload::Text(r#"{"location":"Boston, MA"}"#.into()))
        );
        let plain = span(
            "execute_tool get_current_weather",
            vec![
                kvs("gen_ai.operation.name", "execute_tool"),
                kvs("gen_ai.tool.name", "get_current_weather"),
            ],
        );
        assert_eq!(extract(&plain).expect("a tool call").convention, "genai");
    }
}
