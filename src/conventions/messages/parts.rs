//! Tool-call message parts of an inference span (GenAI semantic conventions), for joining
//! a tool span that carries no arguments or result with its call (DESIGN §2 "Joins").
//!
//! Read from `gen_ai.output.messages` (parts of `type` `tool_call`: `id`, `name`,
//! `arguments`) and `gen_ai.input.messages` (parts of `type` `tool_call_response`: `id`,
//! `response`), as span attributes or, when the attribute is absent, on a
//! `gen_ai.client.inference.operation.details` span event. Messages may be a JSON string
//! or a structured AnyValue. Parts without an `id` cannot be joined and are skipped.

use serde_json::Value as Json;

use crate::conventions::event::Payload;
use crate::conventions::json_from_any_value;
use crate::conventions::messages::parts_text::{
    parts_in_bytes, parts_in_text, parts_in_value, TextPart,
};
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

/// The `tool_call` parts of the span's output messages.
pub fn output_parts(span: &SpanView) -> Vec<MessagePart> {
    messages(span, OUTPUT).map_or_else(Vec::new, |found| message_parts(found, OUTPUT))
}

/// The `tool_call_response` parts of the span's input messages.
pub fn input_parts(span: &SpanView) -> Vec<MessagePart> {
    messages(span, INPUT).map_or_else(Vec::new, |found| message_parts(found, INPUT))
}

/// The `gen_ai.input.messages` values of a span in the order [`input_parts`] reads them:
/// the span's attribute, then the attribute on each operation-details event; the first
/// that holds JSON gives the parts.
pub fn input_message_values<'s, 'a>(
    span: &'s SpanView<'a>,
) -> impl Iterator<Item = &'s AnyValueView<'a>> + 's {
    message_values(span, INPUT.0)
}

/// The `tool_call_response` parts of one input-messages value; `None` when it holds no
/// JSON (then [`input_parts`] reads the next of [`input_message_values`]).
pub fn input_parts_in_value(value: &AnyValueView) -> Option<Vec<MessagePart>> {
    read_value(value, INPUT).map(|found| message_parts(found, INPUT))
}

/// The `tool_call_response` parts of input-messages JSON `text`; `None` when `text` is
/// not JSON (as [`input_parts_in_value`] of a string value).
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
fn messages(span: &SpanView, source: Source) -> Option<Vec<TextPart>> {
    message_values(span, source.0).find_map(|value| read_value(value, source))
}

/// The values of messages attribute `key`: the span's, then each operation-details
/// event's.
fn message_values<'s, 'a>(
    span: &'s SpanView<'a>,
    key: &'static str,
) -> impl Iterator<Item = &'s AnyValueView<'a>> + 's {
    let on_events = span
        .events
        .iter()
        .filter(|e| e.name == OPERATION_DETAILS_EVENT)
        .filter_map(move |e| attr(&e.attributes, key));
    attr(&span.attributes, key).into_iter().chain(on_events)
}

/// The `wanted` parts of one messages value; `None` when it holds no JSON.
fn read_value(value: &AnyValueView, (_, wanted, field): Source) -> Option<Vec<TextPart>> {
    match value.value.as_ref()? {
        // JSON text is read without building the conversation ([`message_parts_text`]).
        ValueView::StringValue(s) => parts_in_text(s, wanted, field),
        ValueView::BytesValue(b) => parts_in_bytes(b, wanted, field),
        _ => json_from_any_value(value).map(|json| parts_in_value(&json, wanted, field)),
    }
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
        let view = SpanView::from(&sp);
        assert_eq!(
            output_parts(&view),
            vec![MessagePart::Call {
                id: "c1".into(),
                name: Some("f".into()),
                arguments: Some(Payload::Json(json!({"a": 1}))),
            }]
        );
        assert_eq!(input_parts(&view), vec![]);
        let mut sp = span("chat m", vec![]);
        sp.events = vec![event(
            OPERATION_DETAILS_EVENT,
            vec![kvs(
                "gen_ai.input.messages",
                r#"[{"role":"tool","parts":[{"type":"tool_call_response","id":"c1","response":"boom"}]}]"#,
            )],
        )];
        let view = SpanView::from(&sp);
        assert_eq!(output_parts(&view), vec![]);
        assert_eq!(
            input_parts(&view),
            vec![MessagePart::Response {
                id: "c1".into(),
                response: Payload::Text("boom".into()),
            }]
        );
    }
}
