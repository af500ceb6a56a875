//! Semantic Kernel Python 1.4–1.18 chat spans: the model's response and the tool calls it
//! asked for, read from the span's content events (DESIGN §2 "Several calls on one span").
//!
//! Source: microsoft/semantic-kernel `python/semantic_kernel/utils/telemetry/decorators.py`
//! (python-1.4.0 – 1.8.0), then `…/utils/telemetry/model_diagnostics/decorators.py`
//! (python-1.8.1 – 1.18.x): `_start_completion_activity` / `_set_completion_response` with
//! sensitive events on (`SEMANTICKERNEL_EXPERIMENTAL_GENAI_ENABLE_OTEL_DIAGNOSTICS_SENSITIVE`).
//! Span `chat.completions {model}`, `gen_ai.operation.name` = `chat.completions`; event
//! `gen_ai.content.prompt` with `gen_ai.prompt` = `json.dumps` of the chat history's
//! `ChatMessageContent.to_dict()` list, event `gen_ai.content.completion` with
//! `gen_ai.completion` = the same of the response messages. A `to_dict()` message is
//! OpenAI-style (`contents/chat_message_content.py`): an assistant message with function
//! calls holds `tool_calls` = `[{"id", "type": "function", "function": {"name",
//! "arguments"}}]` (`FunctionCallContent.to_dict`: `name` is `{plugin}-{function}`,
//! `arguments` a JSON string), a tool message `{"role": "tool", "content": str(result),
//! "tool_call_id": id}`.
//!
//! Those versions trace the function itself as a span named `{plugin}-{function}` with no
//! attributes (`functions/kernel_function.py`, python-1.7.0 on; none before), so the calls
//! are read from the chat span: its events are the response first ([`ModelResponse`], from
//! the completion), then one tool call per `tool_calls` entry in order (call id `id`, tool
//! name `function.name`, arguments `function.arguments`, no result). A call's result is the
//! `tool` message with its id in a later chat span's prompt, joined by call id
//! ([`prompt_parts`], DESIGN §2 "Joins"). From python-1.19 the content is in log records,
//! not on the span (`_set_completion_input`), and from python-1.32 the function span is an
//! `execute_tool {plugin}-{function}` GenAI tool span read by [`crate::conventions::frameworks::genai`].

use serde_json::Value as Json;

use crate::conventions::event::{
    CallStatus, EventKind, ExtractedEvent, ModelResponse, Payload, SplitSpan, ToolCall,
};
use crate::conventions::messages::model_response::summarize;
use crate::conventions::messages::parts::MessagePart;
use crate::otlp::view::{attr, attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "semantic-kernel-legacy";

/// `gen_ai.operation.name` of Semantic Kernel Python's chat spans before python-1.19.
const OPERATION: &str = "chat.completions";
const PROMPT_EVENT: &str = "gen_ai.content.prompt";
const PROMPT: &str = "gen_ai.prompt";
const COMPLETION_EVENT: &str = "gen_ai.content.completion";
const COMPLETION: &str = "gen_ai.completion";

/// The response and the tool calls of a Semantic Kernel chat span with a completion event;
/// `None` for any other span.
pub fn extract_events(span: &SpanView) -> Option<Vec<ExtractedEvent>> {
    // Most spans have no events: nothing else is looked at.
    if span.events.is_empty()
        || attr_str(&span.attributes, "gen_ai.operation.name") != Some(OPERATION)
    {
        return None;
    }
    let completion = event_json(span, COMPLETION_EVENT, COMPLETION)?;
    let event = |kind| ExtractedEvent {
        kind,
        agent_name: None,
        convention: CONVENTION,
    };
    let messages = match &completion {
        Json::Array(list) => list.as_slice(),
        one => std::slice::from_ref(one),
    };
    let tool_calls = messages
        .iter()
        .filter_map(|m| m.get("tool_calls")?.as_array())
        .flatten();
    let mut calls = Vec::new();
    for call in tool_calls {
        let function = call.get("function");
        let Some(name) = function.and_then(|f| f.get("name")?.as_str()) else {
            continue;
        };
        let arguments = match function.and_then(|f| f.get("arguments")) {
            Some(Json::String(text)) => Some(Payload::Text(text.clone())),
            None | Some(Json::Null) => None,
            Some(other) => Some(Payload::Json(other.clone())),
        };
        calls.push(event(EventKind::ToolCall(ToolCall {
            tool_name: name.to_owned(),
            call_id: call
                .get("id")
                .and_then(Json::as_str)
                .filter(|id| !id.is_empty())
                .map(str::to_owned),
            arguments,
            result: None,
            status: CallStatus::Ok,
            split: SplitSpan::Whole,
        })));
    }
    // A response that asked for calls is a tool-call response (any text beside them too).
    let response = if calls.is_empty() {
        summarize(&completion)
    } else {
        Some(ModelResponse::ToolCalls)
    };
    let response = response.map(|r| event(EventKind::ModelResponse(r)));
    Some(response.into_iter().chain(calls).collect())
}

/// The `tool` messages of a Semantic Kernel chat span's prompt event, as the results of the
/// calls with their `tool_call_id`s (empty for any other span).
pub fn prompt_parts(span: &SpanView) -> Vec<MessagePart> {
    if span.events.is_empty()
        || attr_str(&span.attributes, "gen_ai.operation.name") != Some(OPERATION)
    {
        return Vec::new();
    }
    let Some(Json::Array(messages)) = event_json(span, PROMPT_EVENT, PROMPT) else {
        return Vec::new();
    };
    messages
        .into_iter()
        .filter(|m| m.get("role").and_then(Json::as_str) == Some("tool"))
        .filter_map(|mut m| {
            let id = m
                .get("tool_call_id")?
                .as_str()
                .filter(|id| !id.is_empty())?;
            let id = id.to_owned();
            let response = match m.get_mut("content").map(Json::take)? {
                Json::String(text) => Payload::Text(text),
                Json::Null => return None,
                other => Payload::Json(other),
            };
            Some(MessagePart::Response { id, response })
        })
        .collect()
}

/// The JSON in attribute `key` of the first span event named `event`.
fn event_json(span: &SpanView, event: &str, key: &str) -> Option<Json> {
    let event = span.events.iter().find(|e| e.name == event)?;
    crate::conventions::json_from_any_value(attr(&event.attributes, key)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conventions::test_support::*;
    use opentelemetry_proto::tonic::trace::v1::Span;
    use serde_json::json;

    fn chat_span(prompt: Json, completion: Json) -> Span {
        let mut sp = span(
            "chat.completions gpt-4o-mini",
            vec![
                kvs("gen_ai.operation.name", "chat.completions"),
                kvs("gen_ai.system", "openai"),
            ],
        );
        sp.events = vec![
            event(PROMPT_EVENT, vec![kvs(PROMPT, &prompt.to_string())]),
            event(
                COMPLETION_EVENT,
                vec![kvs(COMPLETION, &completion.to_string())],
            ),
        ];
        sp
    }

    fn tool_call(id: &str, city: &str) -> Json {
        json!({"id": id, "type": "function", "function": {
            "name": "WeatherPlugin-get_weather",
            "arguments": format!("{{\"city\": \"{city}\"}}")
        }})
    }

    #[test]
    fn completion_with_calls_is_a_tool_call_response_then_each_call() {
        let sp = chat_span(
            json!([{"role": "user", "content": "weather?"}]),
            json!([{"role": "assistant", "tool_calls": [tool_call("c1", "Paris"), tool_call("c2", "Rome")]}]),
        );
        let events = extract_events(&SpanView::from(&sp)).unwrap();
        assert_eq!(events.len(), 3);
        assert_eq!(
            events[0].kind,
            EventKind::ModelResponse(ModelResponse::ToolCalls)
        );
        let EventKind::ToolCall(second) = &events[2].kind else {
            panic!("not a call")
        };
        assert_eq!(second.tool_name, "WeatherPlugin-get_weather");
        assert_eq!(second.call_id.as_deref(), Some("c2"));
        assert_eq!(
            second.arguments,
            Some(Payload::Text(r#"{"city": "Rome"}"#.into()))
        );
        assert_eq!(second.result, None);
    }

    #[test]
    fn text_completion_is_a_text_response_and_the_prompt_gives_results() {
        let sp = chat_span(
            json!([
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "tool_calls": [tool_call("c1", "Paris")]},
                {"role": "tool", "content": "{'temp_c': 18}", "tool_call_id": "c1"},
                {"role": "tool", "content": "x", "tool_call_id": ""}
            ]),
            json!([{"role": "assistant", "content": "It is 18 °C."}]),
        );
        let view = SpanView::from(&sp);
        let events = extract_events(&view).unwrap();
        assert_eq!(
            events.iter().map(|e| &e.kind).collect::<Vec<_>>(),
            vec![&EventKind::ModelResponse(ModelResponse::Text(
                "It is 18 °C.".into()
            ))]
        );
        assert_eq!(
            prompt_parts(&view),
            vec![MessagePart::Response {
                id: "c1".into(),
                response: Payload::Text("{'temp_c': 18}".into())
            }]
        );
    }

    #[test]
    fn other_spans_are_not_claimed() {
        let mut sp = chat_span(json!([]), json!([{"role": "assistant", "content": "hi"}]));
        sp.attributes[0] = kvs("gen_ai.operation.name", "chat");
        assert_eq!(extract_events(&SpanView::from(&sp)), None);
        assert_eq!(prompt_parts(&SpanView::from(&sp)), vec![]);
        // Sensitive events off: no events, not claimed.
        let mut off = chat_span(json!([]), json!([]));
        off.events.clear();
        assert_eq!(extract_events(&SpanView::from(&off)), None);
    }
}
