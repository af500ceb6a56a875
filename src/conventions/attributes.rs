//! The attribute and status readers every convention shares: an attribute value as a
//! [`Payload`] or as JSON, the first present of several attribute names, call ids, the agent
//! name, and a span's status (with its exception events) as a [`CallStatus`]. Re-exported
//! at `crate::conventions`.

use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

use crate::conventions::event::{CallStatus, Payload};
use crate::otlp::view::{attr, attr_str, AnyValueView, KeyValueView, SpanView, ValueView};

/// Maps an attribute value to a [`Payload`]: `stringValue` → `Text`, `bytesValue` →
/// `Bytes`, kvlist/array/bool/int/double → `Json` (via [`crate::otlp::view::any_value_to_json`]).
/// An empty AnyValue (no value set) is `None`, i.e. not captured.
pub fn payload_from_any_value(value: &AnyValueView) -> Option<Payload> {
    match value.value.as_ref()? {
        ValueView::StringValue(s) => Some(Payload::Text(s.as_ref().to_owned())),
        ValueView::BytesValue(b) => Some(Payload::Bytes(b.to_vec())),
        ValueView::StringValueStrindex(_) => None,
        _ => Some(Payload::Json(crate::otlp::view::any_value_to_json(value))),
    }
}

/// The [`Payload`] of the first of `keys` present in `attributes` (so new names win over
/// legacy names when a span carries both).
pub fn payload_attr(attributes: &[KeyValueView], keys: &[&str]) -> Option<Payload> {
    keys.iter()
        .find_map(|key| attr(attributes, key).and_then(payload_from_any_value))
}

/// The first of `keys` present as a non-empty string attribute.
pub fn first_str<'a>(attributes: &'a [KeyValueView], keys: &[&str]) -> Option<&'a str> {
    keys.iter()
        .find_map(|key| attr_str(attributes, key).filter(|s| !s.is_empty()))
}

/// A call id, unless empty or a known placeholder (google-adk 1.x writes `<not specified>`).
pub fn call_id(attributes: &[KeyValueView], key: &str) -> Option<String> {
    attr_str(attributes, key)
        .filter(|s| !s.is_empty() && *s != "<not specified>")
        .map(str::to_owned)
}

/// Span status → [`CallStatus`]: OTLP `STATUS_CODE_ERROR` (2) → `Error` with the status
/// message (or, when that is empty, the `exception.type: exception.message` of the span's
/// OTel semconv `exception` event, or of the GenAI conventions' `gen_ai.execute_tool.exception`
/// event); `OK` → `Ok`; `UNSET` → `Error` with the `error.type` attribute as message when
/// the span has one (OTel semconv: `error.type` is set only when the operation failed; AG2
/// marks a failed tool with it alone), else with the message of a
/// `gen_ai.execute_tool.exception` event (an exception the tool execution ended with),
/// else `Ok`.
pub fn call_status(span: &SpanView) -> CallStatus {
    match span.status.as_ref() {
        Some(status) if status.code == StatusCode::Error as i32 => CallStatus::Error {
            message: if status.message.is_empty() {
                exception_message(span).unwrap_or_default()
            } else {
                status.message.as_ref().to_owned()
            },
        },
        Some(status) if status.code == StatusCode::Ok as i32 => CallStatus::Ok,
        _ => match first_str(&span.attributes, &["error.type"]) {
            Some(kind) => CallStatus::Error {
                message: kind.to_owned(),
            },
            None => match exception_event_message(span, TOOL_EXCEPTION_EVENT) {
                Some(message) => CallStatus::Error { message },
                None => CallStatus::Ok,
            },
        },
    }
}

/// The GenAI conventions' event of an exception a tool execution ended with
/// (`exception.type`, `exception.message`, as the `exception` event).
pub const TOOL_EXCEPTION_EVENT: &str = "gen_ai.execute_tool.exception";

/// `exception.type: exception.message` of the first `exception` span event (OTel
/// semantic conventions for exceptions), else of the first `gen_ai.execute_tool.exception`
/// event, if any.
fn exception_message(span: &SpanView) -> Option<String> {
    exception_event_message(span, "exception")
        .or_else(|| exception_event_message(span, TOOL_EXCEPTION_EVENT))
}

/// `exception.type: exception.message` of the first span event named `name`.
fn exception_event_message(span: &SpanView, name: &str) -> Option<String> {
    if span.events.is_empty() {
        return None;
    }
    let event = span.events.iter().find(|e| e.name == name)?;
    let kind = attr_str(&event.attributes, "exception.type").unwrap_or("");
    let message = attr_str(&event.attributes, "exception.message").unwrap_or("");
    match (kind.is_empty(), message.is_empty()) {
        (true, true) => None,
        (false, true) => Some(kind.to_owned()),
        (true, false) => Some(message.to_owned()),
        (false, false) => Some(format!("{kind}: {message}")),
    }
}

/// The agent name: `gen_ai.agent.name`, else OpenInference's `agent.name`.
pub fn agent_name(span: &SpanView) -> Option<String> {
    first_str(&span.attributes, &["gen_ai.agent.name", "agent.name"]).map(str::to_owned)
}

/// JSON from an attribute value: a string is parsed as JSON text (`None` if it does not
/// parse), a structured value is mapped. Used for message lists, never for arguments
/// (arguments keep their exact form in a [`Payload`]).
pub fn json_from_any_value(value: &AnyValueView) -> Option<serde_json::Value> {
    match value.value.as_ref()? {
        ValueView::StringValue(s) => serde_json::from_str(s).ok(),
        ValueView::BytesValue(b) => serde_json::from_slice(b).ok(),
        ValueView::StringValueStrindex(_) => None,
        _ => Some(crate::otlp::view::any_value_to_json(value)),
    }
}

#[cfg(test)]
mod status_tests {
    use super::*;
    use crate::otlp::Span;
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::trace::v1::{span::Event, Status};

    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(value.into())),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn error_status_message_falls_back_to_the_exception_event() {
        let mut span = Span {
            status: Some(Status {
                code: StatusCode::Error as i32,
                message: String::new(),
            }),
            events: vec![Event {
                name: "exception".into(),
                attributes: vec![
                    kv("exception.type", "TimeoutError"),
                    kv("exception.message", "upstream timed out"),
                ],
                ..Default::default()
            }],
            ..Default::default()
        };
        assert_eq!(
            call_status(&SpanView::from(&span)),
            CallStatus::Error {
                message: "TimeoutError: upstream timed out".into()
            }
        );
        span.status.as_mut().unwrap().message = "boom".into();
        assert_eq!(
            call_status(&SpanView::from(&span)),
            CallStatus::Error {
                message: "boom".into()
            }
        );
        span.status = None;
        assert_eq!(call_status(&SpanView::from(&span)), CallStatus::Ok);
    }

    #[test]
    fn error_type_without_error_status_is_an_error() {
        // AG2 (`agent_instrumentators/tool.py`): a failed tool has `error.type` and an
        // UNSET status.
        let mut span = Span {
            attributes: vec![kv("error.type", "ExecutionError")],
            ..Default::default()
        };
        let failed = CallStatus::Error {
            message: "ExecutionError".into(),
        };
        assert_eq!(call_status(&SpanView::from(&span)), failed);
        span.status = Some(Status {
            code: StatusCode::Unset as i32,
            message: String::new(),
        });
        assert_eq!(call_status(&SpanView::from(&span)), failed);
        // An explicit OK status is final (OTel trace API).
        span.status.as_mut().unwrap().code = StatusCode::Ok as i32;
        assert_eq!(call_status(&SpanView::from(&span)), CallStatus::Ok);
        // An ERROR status keeps its own message.
        span.status = Some(Status {
            code: StatusCode::Error as i32,
            message: "429 Too Many Requests".into(),
        });
        assert_eq!(
            call_status(&SpanView::from(&span)),
            CallStatus::Error {
                message: "429 Too Many Requests".into()
            }
        );
        // An empty `error.type` is no error.
        span.status = None;
        span.attributes = vec![kv("error.type", "")];
        assert_eq!(call_status(&SpanView::from(&span)), CallStatus::Ok);
    }
}
