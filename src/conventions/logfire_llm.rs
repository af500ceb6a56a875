//! Logfire's LLM-provider instrumentations (`logfire.instrument_openai()`,
//! `instrument_anthropic()`) with their default semantic-convention `version=1`, and the
//! `Responses API` spans of `instrument_openai_agents()`: model responses only.
//!
//! These spans are told by `logfire.msg_template` (Logfire's span name), one exact string
//! per endpoint; before 2026 they carried no `gen_ai.operation.name`, so the
//! inference-span readers never see them. Output sources:
//! - `Chat Completion with {request_data[model]!r}` (OpenAI), `Message with
//!   {request_data[model]!r}` (Anthropic), `Completion with {request_data[model]!r}`
//!   (OpenAI legacy completions): `response_data` = `{"message": …, "usage": …}` (the
//!   `ChatCompletionMessage` with `content` / `tool_calls`, or the Anthropic `Message`
//!   with `text` / `tool_use` content blocks), or `{"text": …}` for a completion. A streamed
//!   response whose instrumentation kept only `combined_chunk_content` (the text chunks,
//!   tool calls dropped) is not read: a tool-calling response would read as its text.
//! - `Responses API with {gen_ai.request.model!r}` (and the Agents SDK's `Responses API`):
//!   the agents integration's `response` (the whole OpenAI `Response`: its `output` items,
//!   `message` with `output_text` parts, `function_call`, `reasoning` neither); else the
//!   response's events at the end of `events` ([`responses_output`]).
//!
//! A span that also carries `gen_ai.output.messages` (Logfire `version='latest'`) is left
//! to [`super::genai`]. Sources: pydantic/logfire
//! `logfire/_internal/integrations/llm_providers/openai.py` (`get_endpoint_config`,
//! `on_response`, the stream states' `get_response_data`, `inputs_to_events`,
//! `responses_output_events`), `…/anthropic.py`, `…/integrations/openai_agents.py`
//! (`attributes_from_span_data`, `get_basic_response_attributes`), v3.0 to v4.41.

use serde_json::Value as Json;

use super::model_response::summarize;
use super::{agent_name, json_from_any_value};
use crate::event::{EventKind, ExtractedEvent, ModelResponse};
use crate::otlp::view::{attr, attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "logfire";

/// Templates of spans whose output is `response_data`.
const RESPONSE_DATA_TEMPLATES: [&str; 3] = [
    "Chat Completion with {request_data[model]!r}",
    "Message with {request_data[model]!r}",
    "Completion with {request_data[model]!r}",
];

/// Templates of Responses API spans (the OpenAI instrumentation's; the Agents SDK's).
const RESPONSES_TEMPLATES: [&str; 2] = [
    "Responses API with {gen_ai.request.model!r}",
    "Responses API",
];

/// The model response of a Logfire LLM span; `None` for other spans, for spans with
/// `gen_ai.output.messages`, and when the output was not captured.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let attrs = &span.attributes;
    let template = attr_str(attrs, "logfire.msg_template")?;
    let response = if RESPONSE_DATA_TEMPLATES.contains(&template) {
        if attr(attrs, "gen_ai.output.messages").is_some() {
            return None;
        }
        response_data(&attr(attrs, "response_data").and_then(json_from_any_value)?)?
    } else if RESPONSES_TEMPLATES.contains(&template) {
        if attr(attrs, "gen_ai.output.messages").is_some() {
            return None;
        }
        responses_api(span)?
    } else {
        return None;
    };
    Some(ExtractedEvent {
        kind: EventKind::ModelResponse(response),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

/// `response_data`: its `message`, or a completion's `text`; nothing for the streamed
/// `combined_chunk_content` form.
fn response_data(data: &Json) -> Option<ModelResponse> {
    if let Some(message) = data.get("message") {
        return summarize(message);
    }
    data.get("text")
        .and_then(Json::as_str)
        .map(|text| ModelResponse::Text(text.to_owned()))
}

fn responses_api(span: &SpanView) -> Option<ModelResponse> {
    let attrs = &span.attributes;
    if let Some(response) = attr(attrs, "response").and_then(json_from_any_value) {
        if let Some(output) = response.get("output").filter(|o| !o.is_null()) {
            return summarize(output);
        }
    }
    let events = attr(attrs, "events").and_then(json_from_any_value)?;
    summarize(&Json::Array(responses_output(events.as_array()?)))
}

/// The response's own events in a Responses API span's `events`: Logfire appends them
/// after the input's (`responses_output_events`, each with `role` `assistant`), and an
/// input ends with the user's message or a tool's output, so they are the trailing
/// `assistant` events. An output item Logfire does not map (`reasoning`) is a
/// `gen_ai.unknown` event, skipped.
pub fn responses_output(events: &[Json]) -> Vec<Json> {
    let mut output: Vec<Json> = events
        .iter()
        .rev()
        .take_while(|e| e.get("role").and_then(Json::as_str) == Some("assistant"))
        .filter(|e| e.get("event.name").and_then(Json::as_str) != Some("gen_ai.unknown"))
        .cloned()
        .collect();
    output.reverse();
    output
}

#[cfg(test)]
mod tests {
    use crate::conventions::extract;
    use crate::conventions::test_support::*;
    use crate::event::{EventKind, ModelResponse};
    use opentelemetry_proto::tonic::common::v1::KeyValue;

    fn logfire_span(
        template: &str,
        attributes: Vec<KeyValue>,
    ) -> Option<(EventKind, &'static str)> {
        let mut all = vec![
            kvs("logfire.msg_template", template),
            kvs("logfire.span_type", "span"),
            kvs("gen_ai.system", "openai"),
        ];
        all.extend(attributes);
        extract(&span(template, all)).map(|e| (e.kind, e.convention))
    }

    fn text(t: &str) -> Option<(EventKind, &'static str)> {
        Some((
            EventKind::ModelResponse(ModelResponse::Text(t.into())),
            "logfire",
        ))
    }

    fn tool_calls() -> Option<(EventKind, &'static str)> {
        Some((
            EventKind::ModelResponse(ModelResponse::ToolCalls),
            "logfire",
        ))
    }

    const CHAT: &str = "Chat Completion with {request_data[model]!r}";

    #[test]
    fn chat_completion_response_data() {
        // `on_response`, version 1: `{'message': response.choices[0].message, 'usage': …}`.
        let message = |m: &str| {
            logfire_span(
                CHAT,
                vec![
                    kvs(
                        "request_data",
                        r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#,
                    ),
                    kvs(
                        "response_data",
                        &format!(r#"{{"message":{m},"usage":{{"total_tokens":3}}}}"#),
                    ),
                ],
            )
        };
        assert_eq!(
            message(
                r#"{"content":"Done.","refusal":null,"role":"assistant","audio":null,"function_call":null,"tool_calls":null}"#
            ),
            text("Done.")
        );
        assert_eq!(
            message(
                r#"{"content":null,"role":"assistant","tool_calls":[{"id":"c1","function":{"arguments":"{}","name":"f"},"type":"function"}]}"#
            ),
            tool_calls()
        );
        // Streamed: text chunks only (tool calls dropped), not read.
        assert_eq!(
            logfire_span(
                CHAT,
                vec![kvs(
                    "response_data",
                    r#"{"combined_chunk_content":"","chunk_count":0}"#
                )]
            ),
            None
        );
        // version='latest' as well: left to the GenAI reader.
        let latest = logfire_span(
            CHAT,
            vec![
                kvs("gen_ai.operation.name", "chat"),
                kvs(
                    "response_data",
                    r#"{"message":{"content":"x","role":"assistant"}}"#,
                ),
                kvs(
                    "gen_ai.output.messages",
                    r#"[{"role":"assistant","parts":[{"type":"text","content":"y"}]}]"#,
                ),
            ],
        );
        assert_eq!(
            latest,
            Some((
                EventKind::ModelResponse(ModelResponse::Text("y".into())),
                "genai"
            ))
        );
    }

    #[test]
    fn anthropic_message_and_completion() {
        let message = "Message with {request_data[model]!r}";
        assert_eq!(
            logfire_span(
                message,
                vec![kvs(
                    "response_data",
                    r#"{"message":{"id":"m","content":[{"citations":null,"text":"No.","type":"text"}],"role":"assistant","type":"message"},"usage":{}}"#,
                )]
            ),
            text("No.")
        );
        assert_eq!(
            logfire_span(
                message,
                vec![kvs(
                    "response_data",
                    r#"{"message":{"content":[{"text":"Let me look.","type":"text"},{"id":"t","input":{},"name":"f","type":"tool_use"}],"role":"assistant","type":"message"}}"#,
                )]
            ),
            tool_calls()
        );
        assert_eq!(
            logfire_span(
                "Completion with {request_data[model]!r}",
                vec![kvs(
                    "response_data",
                    r#"{"finish_reason":"stop","text":"42","usage":null}"#
                )]
            ),
            text("42")
        );
    }

    #[test]
    fn responses_api_response_then_events() {
        let template = "Responses API with {gen_ai.request.model!r}";
        // The agents integration's `response`: reasoning, then the message.
        assert_eq!(
            logfire_span(
                template,
                vec![kvs(
                    "response",
                    r#"{"id":"resp_1","output":[{"id":"rs","summary":[{"text":"thinking","type":"summary_text"}],"type":"reasoning"},{"id":"msg","content":[{"annotations":[],"text":"Done.","type":"output_text"}],"role":"assistant","status":"completed","type":"message"}]}"#,
                )]
            ),
            text("Done.")
        );
        // `events` only: the input's events, then the response's.
        let events = |output: &str| {
            logfire_span(
                template,
                vec![kvs(
                    "events",
                    &format!(
                        r#"[{{"event.name":"gen_ai.user.message","content":"hi","role":"user"}},{{"event.name":"gen_ai.assistant.message","content":"earlier answer","role":"assistant"}},{{"event.name":"gen_ai.tool.message","role":"tool","id":"c0","content":"42","name":"f"}},{output}]"#
                    ),
                )],
            )
        };
        assert_eq!(
            events(
                r#"{"event.name":"gen_ai.unknown","role":"assistant","content":"reasoning\n\nSee JSON for details","data":{}},{"event.name":"gen_ai.assistant.message","content":"Done.","role":"assistant"}"#
            ),
            text("Done.")
        );
        assert_eq!(
            events(
                r#"{"event.name":"gen_ai.assistant.message","role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}"#
            ),
            tool_calls()
        );
        // No output events (the response is not there): nothing.
        assert_eq!(
            logfire_span(
                template,
                vec![kvs(
                    "events",
                    r#"[{"event.name":"gen_ai.user.message","content":"hi","role":"user"}]"#
                )]
            ),
            None
        );
    }

    #[test]
    fn other_logfire_spans_are_not_read() {
        assert_eq!(
            logfire_span(
                "Embedding Creation with {request_data[model]!r}",
                vec![kvs("response_data", r#"{"usage":{}}"#)]
            ),
            None
        );
    }
}
