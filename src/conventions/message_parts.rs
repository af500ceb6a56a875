//! Tool-call message parts of an inference span (GenAI semantic conventions), for joining
//! a tool span that carries no arguments or result with its call (DESIGN §2 "Joins").
//!
//! Read from `gen_ai.output.messages` (parts of `type` `tool_call`: `id`, `name`,
//! `arguments`) and `gen_ai.input.messages` (parts of `type` `tool_call_response`: `id`,
//! `response`), as span attributes or, when the attribute is absent, on a
//! `gen_ai.client.inference.operation.details` span event. Messages may be a JSON string
//! or a structured AnyValue. Parts without an `id` cannot be joined and are skipped.

use serde_json::Value as Json;

use super::json_from_any_value;
use super::message_parts_text::{parts_in_bytes, parts_in_text, parts_in_value, TextPart};
use crate::event::Payload;
use crate::otlp::view::{attr, AnyValueView, SpanView, ValueView};

const OPERATION_DETAILS_EVENT: &str = "gen_ai.client.inference.operation.details";

/// One message part naming a tool call.
#[derive(Clone, Debug, PartialEq)]
pub enum MessagePart {
    /// A `tool_call` part: the model asked for this call.
    Call {
        id: String,
        name: Option<String>,
        arguments: Option<Payload>,
    },
    /// A `tool_call_response` part: what the call returned.
    Response { id: String, response: Payload },
}

/// `gen_ai.output.messages`: `tool_call` parts and their `arguments`.
const OUTPUT: Source = ("gen_ai.output.messages", "tool_call", "arguments");
/// `gen_ai.input.messages`: `tool_call_response` parts and their `response`.
const INPUT: Source = ("gen_ai.input.messages", "tool_call_response", "response");

/// A messages attribute, the part type wanted in it, and the field of that part.
type Source = (&'static str, &'static str, &'static str);

/// The tool-call parts of a span's input and output messages, in message order
/// ([`output_parts`], then [`input_parts`]).
pub fn tool_call_parts(span: &SpanView) -> Vec<MessagePart> {
    let mut parts = output_parts(span);
    parts.extend(input_parts(span));
    parts
}

/// The `tool_call` parts of the span's output messages.
pub fn output_parts(span: &SpanView) -> Vec<MessagePart> {
    messages(span, OUTPUT).map_or_else(Vec::new, |found| message_parts(found, OUTPUT))
}

/// The `tool_call_response` parts of the span's input messages.
pub fn input_parts(span: &SpanView) -> Vec<MessagePart> {
    messages(span, INPUT).map_or_else(Vec::new, |found| message_parts(found, INPUT))
}

/// The span's `gen_ai.input.messages` attribute when it holds text (JSON, normally the
/// whole conversation so far); `None` when absent or not a string.
pub fn input_messages_text<'s>(span: &'s SpanView) -> Option<&'s str> {
    match attr(&span.attributes, INPUT.0)?.value.as_ref()? {
        ValueView::StringValue(s) => Some(s.as_ref()),
        _ => None,
    }
}

/// The `tool_call_response` parts of input-messages JSON `text`; `None` when `text` is
/// not JSON. For text from [`input_messages_text`], `Some` is exactly what
/// [`input_parts`] reads (an attribute that is not JSON falls back to the span's events).
pub fn input_parts_in_text(text: &str) -> Option<Vec<MessagePart>> {
    let (_, wanted, field) = INPUT;
    parts_in_text(text, wanted, field).map(|found| message_parts(found, INPUT))
}

/// The parts of `found` that can be joined: with an `id`, and for a response its value.
fn message_parts(found: Vec<TextPart>, (_, wanted, _): Source) -> Vec<MessagePart> {
    let mut parts = Vec::new();
    for part in found {
        let Some(id) = part.id.filter(|s| !s.is_empty()) else {
            continue;
        };
        if wanted == "tool_call" {
            parts.push(MessagePart::Call {
                id,
                name: part.name,
                arguments: part.field.map(payload),
            });
        } else if let Some(response) = part.field {
            parts.push(MessagePart::Response {
                id,
                response: payload(response),
            });
        }
    }
    parts
}

/// The `wanted` parts of messages attribute `key`, on the span or, when absent or not
/// JSON there, on an operation-details event.
fn messages(span: &SpanView, (key, wanted, field): Source) -> Option<Vec<TextPart>> {
    let read = |value: &AnyValueView| match value.value.as_ref()? {
        // JSON text is read without building the conversation ([`message_parts_text`]).
        ValueView::StringValue(s) => parts_in_text(s, wanted, field),
        ValueView::BytesValue(b) => parts_in_bytes(b, wanted, field),
        _ => json_from_any_value(value).map(|json| parts_in_value(&json, wanted, field)),
    };
    attr(&span.attributes, key).and_then(read).or_else(|| {
        span.events
            .iter()
            .filter(|e| e.name == OPERATION_DETAILS_EVENT)
            .find_map(|e| attr(&e.attributes, key).and_then(read))
    })
}

fn payload(value: Json) -> Payload {
    match value {
        Json::String(s) => Payload::Text(s),
        other => Payload::Json(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conventions::test_support::*;
    use serde_json::json;

    #[test]
    fn parts_from_attributes_and_events() {
        let sp = span(
            "chat m",
            vec![kvs(
                "gen_ai.output.messages",
                r#"[{"role":"assistant","parts":[{"type":"text","content":"x"},{"type":"tool_call","id":"c1","name":"f","arguments":{"a":1}},{"type":"tool_call","name":"no_id"}]}]"#,
            )],
        );
        assert_eq!(
            tool_call_parts(&SpanView::from(&sp)),
            vec![MessagePart::Call {
                id: "c1".into(),
                name: Some("f".into()),
                arguments: Some(Payload::Json(json!({"a": 1}))),
            }]
        );
        let mut sp = span("chat m", vec![]);
        sp.events = vec![event(
            OPERATION_DETAILS_EVENT,
            vec![kvs(
                "gen_ai.input.messages",
                r#"[{"role":"tool","parts":[{"type":"tool_call_response","id":"c1","response":"boom"}]}]"#,
            )],
        )];
        assert_eq!(
            tool_call_parts(&SpanView::from(&sp)),
            vec![MessagePart::Response {
                id: "c1".into(),
                response: Payload::Text("boom".into()),
            }]
        );
    }
}
