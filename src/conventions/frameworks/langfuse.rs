//! Langfuse's OTel SDK (v3): observations are spans with `langfuse.observation.type`.
//!
//! A tool span has `langfuse.observation.type` = `tool`; the tool name is the span name
//! (the observation name), arguments `langfuse.observation.input` (the `@observe`
//! decorator records `{"args": [...], "kwargs": {...}}`: with no positional arguments the
//! keyword arguments are the arguments), result `langfuse.observation.output`, status from
//! the span status (Langfuse also writes `langfuse.observation.level` = `ERROR` with
//! `langfuse.observation.status_message`). Source: langfuse-python `langfuse/_client/
//! attributes.py` and `span.py` (observation types `span`, `generation`, `tool`, …).
//!
//! A model response is a `generation` observation (`langfuse.observation.type` =
//! `generation`; span names are the caller's, e.g. `OpenAI-generation`, `ChatOpenAI`, and no
//! `gen_ai.operation.name` is set) whose `langfuse.observation.output` (`json.dumps` of
//! the output) is read by [`summarize`]: the OpenAI integration records the choice's
//! message (`{"role": "assistant", "content": …, "tool_calls": …}`, `langfuse/openai.py`
//! `_extract_chat_response`), a list of them for several choices, a Responses API output
//! item (`{"type": "message" | "function_call", …}`) or the completion's text; the LangChain
//! handler the `AIMessage` as a dict (`content`, `tool_calls`; `langchain/
//! CallbackHandler.py` `_convert_message_to_dict`). No output (masked or not recorded) is
//! no event.

use crate::conventions::event::{
    CallStatus, EventKind, ExtractedEvent, ModelResponse, SplitSpan, ToolCall,
};
use crate::conventions::messages::model_response::summarize;
use crate::conventions::{
    agent_name, call_status, first_str, json_from_any_value, payload_attr, wrappers,
};
use crate::otlp::view::attr;
use crate::otlp::view::{attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "langfuse";

/// The tool call of a Langfuse `tool` observation, the model response of a `generation`
/// observation; `None` for other spans and output not recorded.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let attrs = &span.attributes;
    match attr_str(attrs, "langfuse.observation.type")? {
        "tool" => {}
        "generation" => {
            return Some(ExtractedEvent {
                kind: EventKind::ModelResponse(generation_output(span)?),
                agent_name: agent_name(span),
                convention: CONVENTION,
            })
        }
        _ => return None,
    }
    let name = Some(span.name.as_ref()).filter(|n| !n.is_empty())?;
    let mut status = call_status(span);
    if status == CallStatus::Ok && attr_str(attrs, "langfuse.observation.level") == Some("ERROR") {
        status = CallStatus::Error {
            message: first_str(attrs, &["langfuse.observation.status_message"])
                .unwrap_or_default()
                .to_owned(),
        };
    }
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(ToolCall {
            tool_name: name.to_owned(),
            call_id: None,
            arguments: payload_attr(attrs, &["langfuse.observation.input"])
                .map(wrappers::decorator_arguments),
            result: payload_attr(attrs, &["langfuse.observation.output"]),
            status,
            split: SplitSpan::Whole,
        }),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

/// A `generation`'s output: its JSON read by [`summarize`]; text that is not JSON is the
/// text itself.
fn generation_output(span: &SpanView) -> Option<ModelResponse> {
    let value = attr(&span.attributes, "langfuse.observation.output")?;
    match json_from_any_value(value) {
        Some(output) => summarize(&output),
        None => attr_str(&span.attributes, "langfuse.observation.output")
            .map(|text| ModelResponse::Text(text.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use crate::conventions::event::{CallStatus, EventKind, ModelResponse, Payload};
    use crate::conventions::extract;
    use crate::conventions::test_support::*;
    use serde_json::json;

    fn generation(output: &str) -> Option<EventKind> {
        let sp = span(
            "OpenAI-generation",
            vec![
                kvs("langfuse.observation.type", "generation"),
                kvs("langfuse.observation.model.name", "gpt-4o"),
                kvs("langfuse.observation.output", output),
            ],
        );
        extract(&sp).map(|e| {
            assert_eq!(e.convention, "langfuse");
            e.kind
        })
    }

    fn text(t: &str) -> Option<EventKind> {
        Some(EventKind::ModelResponse(ModelResponse::Text(t.into())))
    }

    const TOOL_CALLS: Option<EventKind> = Some(EventKind::ModelResponse(ModelResponse::ToolCalls));

    /// Outputs as langfuse-python records them (`openai.py` `_extract_chat_response`,
    /// `_extract_response_api_completion`; `CallbackHandler._convert_message_to_dict`).
    #[test]
    fn generation_observation_output() {
        assert_eq!(
            generation(r#"{"role": "assistant", "content": "I cannot find it."}"#),
            text("I cannot find it.")
        );
        assert_eq!(
            generation(
                r#"{"role": "assistant", "tool_calls": [{"id": "c1", "function": {"arguments": "{}", "name": "f"}, "type": "function"}], "content": null}"#
            ),
            TOOL_CALLS
        );
        // LangChain AIMessage with tool calls; and without.
        assert_eq!(
            generation(
                r#"{"role": "assistant", "content": "", "tool_calls": [{"name": "f", "args": {}, "id": "c1", "type": "tool_call"}]}"#
            ),
            TOOL_CALLS
        );
        assert_eq!(
            generation(
                r#"{"role": "assistant", "content": "Done.", "additional_kwargs": {"refusal": null}}"#
            ),
            text("Done.")
        );
        // Responses API output items; a completion's text.
        assert_eq!(
            generation(
                r#"{"id": "msg", "content": [{"annotations": [], "text": "Done.", "type": "output_text"}], "role": "assistant", "type": "message"}"#
            ),
            text("Done.")
        );
        assert_eq!(
            generation(
                r#"{"arguments": "{}", "call_id": "c1", "name": "f", "type": "function_call"}"#
            ),
            TOOL_CALLS
        );
        assert_eq!(generation(r#""42""#), text("42"));
    }

    #[test]
    fn tool_observation() {
        let sp = span(
            "lookup_order",
            vec![
                kvs("langfuse.observation.type", "tool"),
                kvs(
                    "langfuse.observation.input",
                    r#"{"args":[],"kwargs":{"order_id":"A-17"}}"#,
                ),
                kvs("langfuse.observation.output", r#""order not found""#),
            ],
        );
        let ev = extract(&sp).expect("a tool call");
        assert_eq!(ev.convention, "langfuse");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "lookup_order");
        assert_eq!(
            c.arguments,
            Some(Payload::Json(json!({"order_id": "A-17"})))
        );
        assert_eq!(c.result, Some(Payload::Text(r#""order not found""#.into())));
        assert_eq!(c.status, CallStatus::Ok);
    }

    #[test]
    fn error_level_and_other_types() {
        let sp = span(
            "lookup_order",
            vec![
                kvs("langfuse.observation.type", "tool"),
                kvs("langfuse.observation.level", "ERROR"),
                kvs("langfuse.observation.status_message", "timeout"),
            ],
        );
        let EventKind::ToolCall(c) = extract(&sp).expect("a tool call").kind else {
            panic!("not a tool call")
        };
        assert_eq!(
            c.status,
            CallStatus::Error {
                message: "timeout".into()
            }
        );
        let generation = span("llm", vec![kvs("langfuse.observation.type", "generation")]);
        assert_eq!(extract(&generation), None);
    }
}
