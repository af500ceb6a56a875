//! A GenAI tool span's payload carried in span events, read by [`super::genai`] when the
//! span's attributes lack it (so a span whose attributes hold the payload never has its
//! events looked at). Every form and its source is a row of `docs/conventions-forms.md`.
//!
//! Events, by name (attributes of each in brackets):
//! - `gen_ai.tool.message` [`content`, `id`] and `gen_ai.choice` [`message`, `id`]: the
//!   arguments and result of strands-agents' tool spans in its default mode (strands
//!   `telemetry/tracer.py`, `start_tool_call_span` / `end_tool_call_span`);
//! - `gen_ai.tool.input` [`gen_ai.tool.call.arguments`] and `gen_ai.tool.output`
//!   [`gen_ai.tool.call.result`]: the `openai-agents-opentelemetry` processor (≥ 0.2),
//!   whose function spans get their arguments only here (the OpenAI Agents SDK sets a
//!   function span's input after the span started, when the processor has already mapped
//!   its attributes: `_map_function_span` / `_add_function_events`);
//! - `gen_ai.client.inference.operation.details`: its own `gen_ai.tool.call.arguments` /
//!   `gen_ai.tool.call.result` / `gen_ai.tool.call.id` (the event carries the attributes of
//!   the span it details), else the `tool_call` part of its `gen_ai.input.messages` and the
//!   `tool_call_response` part of its `gen_ai.output.messages` (strands with
//!   `gen_ai_latest_experimental`);
//! - `gen_ai.tool.call.decision` [`gen_ai.tool.call.decision.outcome`,
//!   `gen_ai.tool.call.id`]: a decision taken before the tool ran (the GenAI conventions'
//!   tool-call decision event: `allow`, `deny`, `require_approval`); `deny` means the tool
//!   did not run ([`denied`]); the same decision as the span attribute
//!   `gen_ai.tool.call.decision`, which loopwatch's own clients write, counts too.
//!
//! A message part or a decision with an `id` is taken only when it is the call's id (when
//! both are known).

use serde_json::Value as Json;

use crate::conventions::event::{CallStatus, Payload};
use crate::conventions::{call_id as id_attr, json_from_any_value, payload_attr};
use crate::otlp::view::{attr, attr_str, KeyValueView, SpanView};

/// Event name of the operation-details event of the newer GenAI conventions.
pub const OPERATION_DETAILS_EVENT: &str = "gen_ai.client.inference.operation.details";

/// `openai-agents-opentelemetry`'s event holding a function span's arguments.
pub const TOOL_INPUT_EVENT: &str = "gen_ai.tool.input";

/// `openai-agents-opentelemetry`'s event holding a function span's result.
pub const TOOL_OUTPUT_EVENT: &str = "gen_ai.tool.output";

/// The GenAI conventions' event of a decision about a tool call before it runs.
pub const DECISION_EVENT: &str = "gen_ai.tool.call.decision";

/// The span attribute holding a pre-execution decision (`allow`, `warn`, `deny`,
/// `require_approval`) on the tool's own span, as loopwatch's clients record it.
pub const DECISION_ATTRIBUTE: &str = "gen_ai.tool.call.decision";

/// The message of a call a [`DECISION_EVENT`] or [`DECISION_ATTRIBUTE`] denied.
pub const DENIED: &str = "tool call denied (gen_ai.tool.call.decision: deny)";

/// The attributes of the span's events named `name`, in order.
pub fn events_named<'a>(
    span: &'a SpanView<'a>,
    name: &'a str,
) -> impl Iterator<Item = &'a [KeyValueView<'a>]> {
    span.events
        .iter()
        .filter(move |e| e.name == name)
        .map(|e| &*e.attributes)
}

/// The call id the span's events give: `id` of a `gen_ai.tool.message` / `gen_ai.choice`
/// event (strands), else `gen_ai.tool.call.id` of a tool input/output, operation-details
/// or decision event.
pub fn call_id(span: &SpanView) -> Option<String> {
    if span.events.is_empty() {
        return None;
    }
    events_named(span, "gen_ai.tool.message")
        .chain(events_named(span, "gen_ai.choice"))
        .find_map(|attrs| id_attr(attrs, "id"))
        .or_else(|| {
            span.events
                .iter()
                .filter(|e| {
                    matches!(
                        &*e.name,
                        TOOL_INPUT_EVENT
                            | TOOL_OUTPUT_EVENT
                            | OPERATION_DETAILS_EVENT
                            | DECISION_EVENT
                    )
                })
                .find_map(|e| id_attr(&e.attributes, "gen_ai.tool.call.id"))
        })
}

/// Arguments from the span's events (module docs), first form found.
pub fn arguments(span: &SpanView, id: Option<&str>) -> Option<Payload> {
    if span.events.is_empty() {
        return None;
    }
    events_named(span, "gen_ai.tool.message")
        .find_map(|attrs| payload_attr(attrs, &["content", "gen_ai.tool.call.arguments"]))
        .or_else(|| {
            events_named(span, TOOL_INPUT_EVENT)
                .find_map(|attrs| payload_attr(attrs, &["gen_ai.tool.call.arguments"]))
        })
        .or_else(|| {
            events_named(span, OPERATION_DETAILS_EVENT)
                .filter(|attrs| same_call(attrs, id))
                .find_map(|attrs| payload_attr(attrs, &["gen_ai.tool.call.arguments"]))
        })
        .or_else(|| message_part(span, "gen_ai.input.messages", "tool_call", "arguments", id))
}

/// Result from the span's events (module docs), first form found.
pub fn result(span: &SpanView, id: Option<&str>) -> Option<Payload> {
    if span.events.is_empty() {
        return None;
    }
    events_named(span, "gen_ai.choice")
        .find_map(|attrs| payload_attr(attrs, &["message", "gen_ai.tool.call.result"]))
        .or_else(|| {
            events_named(span, TOOL_OUTPUT_EVENT)
                .find_map(|attrs| payload_attr(attrs, &["gen_ai.tool.call.result"]))
        })
        .or_else(|| {
            events_named(span, OPERATION_DETAILS_EVENT)
                .filter(|attrs| same_call(attrs, id))
                .find_map(|attrs| payload_attr(attrs, &["gen_ai.tool.call.result"]))
        })
        .or_else(|| {
            message_part(
                span,
                "gen_ai.output.messages",
                "tool_call_response",
                "response",
                id,
            )
        })
}

/// A failed call's status when a [`DECISION_EVENT`] of this call (its `gen_ai.tool.call.id`
/// is the call's, or either is unknown) says `deny`, or the span's own attribute
/// [`DECISION_ATTRIBUTE`] does (the form loopwatch's Python and TypeScript clients write on
/// the `execute_tool` span): the tool did not run, so the same denied call asked again is
/// the same outcome.
pub fn denied(span: &SpanView, id: Option<&str>) -> Option<CallStatus> {
    let by_event = || {
        events_named(span, DECISION_EVENT)
            .filter(|attrs| same_call(attrs, id))
            .any(|attrs| attr_str(attrs, "gen_ai.tool.call.decision.outcome") == Some("deny"))
    };
    (attr_str(&span.attributes, DECISION_ATTRIBUTE) == Some("deny") || by_event()).then(|| {
        CallStatus::Error {
            message: DENIED.to_owned(),
        }
    })
}

/// True when an event's `gen_ai.tool.call.id` is `id`, or either is unknown.
fn same_call(attrs: &[KeyValueView], id: Option<&str>) -> bool {
    match (id, attr_str(attrs, "gen_ai.tool.call.id")) {
        (Some(want), Some(have)) if !have.is_empty() => want == have,
        _ => true,
    }
}

/// Field `field` of the first message part of type `part_type` (with matching `id` when
/// both sides have one) in attribute `key` of any operation-details event.
fn message_part(
    span: &SpanView,
    key: &str,
    part_type: &str,
    field: &str,
    id: Option<&str>,
) -> Option<Payload> {
    events_named(span, OPERATION_DETAILS_EVENT)
        .filter_map(|attrs| attr(attrs, key).and_then(json_from_any_value))
        .find_map(|messages| find_part(&messages, part_type, field, id))
}

fn find_part(messages: &Json, part_type: &str, field: &str, id: Option<&str>) -> Option<Payload> {
    let messages = match messages {
        Json::Array(list) => list.as_slice(),
        one => std::slice::from_ref(one),
    };
    messages
        .iter()
        .filter_map(|m| m.get("parts").and_then(Json::as_array))
        .flatten()
        .filter(|p| p.get("type").and_then(Json::as_str) == Some(part_type))
        .filter(|p| match (id, p.get("id").and_then(Json::as_str)) {
            (Some(want), Some(have)) => want == have,
            _ => true,
        })
        .find_map(|p| p.get(field))
        .map(|v| match v {
            Json::String(s) => Payload::Text(s.clone()),
            other => Payload::Json(other.clone()),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conventions::event::{EventKind, ToolCall};
    use crate::conventions::extract;
    use crate::conventions::test_support::{event, kvs, span};

    fn tool(sp: &crate::otlp::Span) -> ToolCall {
        match extract(sp).expect("a call").kind {
            EventKind::ToolCall(call) => call,
            other => panic!("not a call: {other:?}"),
        }
    }

    #[test]
    fn tool_input_and_output_events() {
        let mut sp = span("execute_tool grep", vec![kvs("gen_ai.tool.call.id", "c1")]);
        sp.events = vec![
            event(
                TOOL_INPUT_EVENT,
                vec![kvs("gen_ai.tool.call.arguments", "{\"q\":1}")],
            ),
            event(
                TOOL_OUTPUT_EVENT,
                vec![kvs("gen_ai.tool.call.result", "hit")],
            ),
        ];
        let c = tool(&sp);
        assert_eq!(c.arguments, Some(Payload::Text("{\"q\":1}".into())));
        assert_eq!(c.result, Some(Payload::Text("hit".into())));
    }

    #[test]
    fn operation_details_of_another_call_are_not_read() {
        let mut sp = span("execute_tool grep", vec![kvs("gen_ai.tool.call.id", "c2")]);
        sp.events = vec![
            event(
                OPERATION_DETAILS_EVENT,
                vec![
                    kvs("gen_ai.tool.call.id", "c1"),
                    kvs("gen_ai.tool.call.arguments", "{\"q\":1}"),
                ],
            ),
            event(
                OPERATION_DETAILS_EVENT,
                vec![
                    kvs("gen_ai.tool.call.id", "c2"),
                    kvs("gen_ai.tool.call.arguments", "{\"q\":2}"),
                    kvs("gen_ai.tool.call.result", "two"),
                ],
            ),
        ];
        let c = tool(&sp);
        assert_eq!(c.arguments, Some(Payload::Text("{\"q\":2}".into())));
        assert_eq!(c.result, Some(Payload::Text("two".into())));
        // The call id comes from the events when the span has none.
        sp.attributes.clear();
        assert_eq!(tool(&sp).call_id.as_deref(), Some("c1"));
    }

    #[test]
    fn a_denied_call_fails_and_an_allowed_one_does_not() {
        let decision = |outcome: &str, id: &str| {
            event(
                DECISION_EVENT,
                vec![
                    kvs("gen_ai.tool.call.decision.outcome", outcome),
                    kvs("gen_ai.tool.call.id", id),
                ],
            )
        };
        let mut sp = span("execute_tool rm", vec![kvs("gen_ai.tool.call.id", "c1")]);
        sp.events = vec![decision("deny", "c1")];
        assert_eq!(
            tool(&sp).status,
            CallStatus::Error {
                message: DENIED.into()
            }
        );
        // Another call's decision, an allow, or a call that returned: no denial.
        sp.events = vec![decision("deny", "c9")];
        assert_eq!(tool(&sp).status, CallStatus::Ok);
        sp.events = vec![decision("allow", "c1")];
        assert_eq!(tool(&sp).status, CallStatus::Ok);
        sp.events = vec![decision("deny", "c1")];
        sp.attributes.push(kvs("gen_ai.tool.call.result", "done"));
        assert_eq!(tool(&sp).status, CallStatus::Ok);
        // The clients' form: the decision as an attribute of the tool's span.
        let mut sp = span("execute_tool rm", vec![kvs(DECISION_ATTRIBUTE, "deny")]);
        assert_eq!(
            tool(&sp).status,
            CallStatus::Error {
                message: DENIED.into()
            }
        );
        sp.attributes = vec![kvs(DECISION_ATTRIBUTE, "warn")];
        assert_eq!(tool(&sp).status, CallStatus::Ok);
    }

    #[test]
    fn execute_tool_exception_event_fails_an_unset_span() {
        let mut sp = span("execute_tool fetch", vec![]);
        sp.events = vec![event(
            crate::conventions::TOOL_EXCEPTION_EVENT,
            vec![
                kvs("exception.type", "TimeoutError"),
                kvs("exception.message", "upstream timed out"),
            ],
        )];
        let failed = CallStatus::Error {
            message: "TimeoutError: upstream timed out".into(),
        };
        assert_eq!(tool(&sp).status, failed);
        // An ERROR status without message takes it too; an explicit OK is final.
        sp.status = crate::conventions::test_support::error_status("");
        assert_eq!(tool(&sp).status, failed);
        sp.status.as_mut().unwrap().code = 1;
        assert_eq!(tool(&sp).status, CallStatus::Ok);
    }
}
