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
//!   with `text` / `tool_use` content blocks), or `{"text": …}` for a completion.
//! - `streaming response from {request_data[model]!r} took {duration:.2f}s`: a streamed call
//!   ends its request span without output and writes this log (a span, `logfire.span_type`
//!   = `log`) with the request's attributes and the streamed response ([`streamed`]).
//! - `Responses API with {gen_ai.request.model!r}` (and the Agents SDK's `Responses API`):
//!   the agents integration's `response` (the whole OpenAI `Response`: its `output` items,
//!   `message` with `output_text` parts, `function_call`, `reasoning` neither); else the
//!   response's events at the end of `events` ([`responses_output`]).
//!
//! A span that also carries `gen_ai.output.messages` (Logfire `version='latest'`) is left
//! to [`crate::conventions::frameworks::genai`]. Sources: pydantic/logfire
//! `logfire/_internal/integrations/llm_providers/openai.py` (`get_endpoint_config`,
//! `on_response`, the stream states' `get_response_data` / `get_attributes`,
//! `inputs_to_events`, `responses_output_events`), `…/anthropic.py`
//! (`AnthropicMessageStreamState`), `…/llm_provider.py` (`record_streaming`),
//! `…/integrations/openai_agents.py` (`attributes_from_span_data`,
//! `get_basic_response_attributes`), v0.27 to v4.41.

use serde_json::Value as Json;

use crate::conventions::event::{EventKind, ExtractedEvent, ModelResponse};
use crate::conventions::messages::model_response::summarize;
use crate::conventions::{agent_name, json_from_any_value};
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

/// Template of the log a streamed call writes when its stream ends (`record_streaming`;
/// the same string from v0.27 to v4.41).
const STREAM_TEMPLATE: &str =
    "streaming response from {request_data[model]!r} took {duration:.2f}s";

/// The model response of a Logfire LLM span; `None` for other spans, for spans with
/// `gen_ai.output.messages`, and when the output was not captured.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let attrs = &span.attributes;
    let template = attr_str(attrs, "logfire.msg_template")?;
    let response = if template == STREAM_TEMPLATE {
        if attr(attrs, "gen_ai.output.messages").is_some() {
            return None;
        }
        streamed(span)?
    } else if RESPONSE_DATA_TEMPLATES.contains(&template) {
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

/// The response of a streamed call's log, by what the stream state recorded:
/// - `response_data.message`: OpenAI chat since v2.2 with openai ≥ 1.40
///   (`OpenaiChatCompletionStreamState`, the accumulated `ChatCompletionMessage`, its
///   `tool_calls` included);
/// - `response_data.output`: the Responses API's whole `Response` (v4.12, before its
///   output moved to `events`);
/// - `events` (no `response_data`): the Responses API since then, the input's events with
///   the response's appended ([`responses_output`]);
/// - `response_data.combined_chunk_content` (with `chunk_count`): the text alone. Anthropic
///   (`AnthropicMessageStreamState`: its `text` blocks, `tool_use` blocks left out), OpenAI
///   chat before v2.2 (`delta.content` chunks, tool calls left out), OpenAI completions
///   (no tool calls) and a stream without a snapshot (`''`, 0). The text is the whole
///   response only when the request offered no tools ([`offers_tools`]): then it is read
///   (empty: nothing). With tools offered, empty text means the response held tool calls
///   alone (or nothing: a reset either way), and other text cannot be told from text said
///   beside tool calls, so it is not captured.
fn streamed(span: &SpanView) -> Option<ModelResponse> {
    let attrs = &span.attributes;
    let Some(data) = attr(attrs, "response_data").and_then(json_from_any_value) else {
        let events = attr(attrs, "events").and_then(json_from_any_value)?;
        return summarize(&Json::Array(responses_output(events.as_array()?)));
    };
    if let Some(message) = data.get("message") {
        return summarize(message);
    }
    if let Some(output) = data.get("output").filter(|o| o.is_array()) {
        return summarize(output);
    }
    let text = data.get("combined_chunk_content")?.as_str()?;
    let tools = attr(attrs, "request_data")
        .and_then(json_from_any_value)
        .is_some_and(|request| offers_tools(&request));
    match (tools, text.is_empty()) {
        (true, true) => Some(ModelResponse::ToolCalls),
        (false, false) => Some(ModelResponse::Text(text.to_owned())),
        _ => None,
    }
}

/// True when a request (`request_data`: the OpenAI or Anthropic request body) lets the
/// model call tools: a non-empty `tools` (or OpenAI's legacy `functions`) list, and
/// `tool_choice` not `none` (OpenAI `"none"`, Anthropic `{"type": "none"}`).
fn offers_tools(request: &Json) -> bool {
    let listed = |key: &str| {
        request
            .get(key)
            .and_then(Json::as_array)
            .is_some_and(|a| !a.is_empty())
    };
    let choice = request.get("tool_choice");
    let none = choice.and_then(Json::as_str) == Some("none")
        || choice.and_then(|c| c.get("type")).and_then(Json::as_str) == Some("none");
    (listed("tools") || listed("functions")) && !none
}

/// `response_data`: its `message`, or a completion's `text`.
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
    use crate::conventions::event::{EventKind, ModelResponse};
    use crate::conventions::extract;
    use crate::conventions::test_support::*;
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
        // The streamed form belongs on the stream's log, not the request span.
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

    const STREAM: &str = "streaming response from {request_data[model]!r} took {duration:.2f}s";

    /// `record_streaming`'s log: `response_data` by the stream state, beside the request's
    /// `request_data`.
    fn stream_log(request: &str, response_data: &str) -> Option<(EventKind, &'static str)> {
        logfire_span(
            STREAM,
            vec![
                kvs("logfire.span_type", "log"),
                kvs("request_data", request),
                kvs("response_data", response_data),
                kvs("duration", "0.5"),
            ],
        )
    }

    const NO_TOOLS: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"hi"}],"stream":true}"#;
    const TOOLS: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"stream":true}"#;

    #[test]
    fn streamed_chat_message_snapshot_with_and_without_tool_calls() {
        // `OpenaiChatCompletionStreamState` (openai >= 1.40): the accumulated message.
        assert_eq!(
            stream_log(
                TOOLS,
                r#"{"message":{"content":"Done.","refusal":null,"role":"assistant","tool_calls":null,"parsed":null},"usage":null}"#
            ),
            text("Done.")
        );
        assert_eq!(
            stream_log(
                TOOLS,
                r#"{"message":{"content":null,"role":"assistant","tool_calls":[{"id":"c1","function":{"arguments":"{}","name":"f","parsed_arguments":null},"type":"function","index":0}]},"usage":null}"#
            ),
            tool_calls()
        );
        // No choices: `message` null, nothing.
        assert_eq!(stream_log(TOOLS, r#"{"message":null,"usage":null}"#), None);
    }

    #[test]
    fn streamed_combined_chunk_content_is_the_text_only_without_tools_offered() {
        let combined = |request: &str, content: &str, count: u32| {
            stream_log(
                request,
                &format!(r#"{{"combined_chunk_content":"{content}","chunk_count":{count}}}"#),
            )
        };
        assert_eq!(combined(NO_TOOLS, "No.", 2), text("No."));
        assert_eq!(combined(NO_TOOLS, "", 0), None);
        // Tools offered: the `tool_use` blocks were left out of the text.
        assert_eq!(combined(TOOLS, "Let me look.", 3), None);
        assert_eq!(combined(TOOLS, "", 0), tool_calls());
        // `tool_choice` none (Anthropic, OpenAI): no tool call can be in the response.
        let anthropic_none =
            TOOLS.replace(r#""stream""#, r#""tool_choice":{"type":"none"},"stream""#);
        assert_eq!(combined(&anthropic_none, "No.", 1), text("No."));
        let openai_none = r#"{"model":"gpt-4o","messages":[],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"}"#;
        assert_eq!(combined(openai_none, "No.", 1), text("No."));
        let legacy_functions = r#"{"model":"gpt-4","messages":[],"functions":[{"name":"f"}]}"#;
        assert_eq!(combined(legacy_functions, "x", 1), None);
        // `latest` semantic conventions as well: left to GenAI.
        assert_eq!(
            logfire_span(
                STREAM,
                vec![
                    kvs("gen_ai.operation.name", "chat"),
                    kvs("request_data", NO_TOOLS),
                    kvs(
                        "response_data",
                        r#"{"combined_chunk_content":"x","chunk_count":1}"#
                    ),
                    kvs(
                        "gen_ai.output.messages",
                        r#"[{"role":"assistant","parts":[{"type":"text","content":"y"}]}]"#,
                    ),
                ],
            ),
            Some((
                EventKind::ModelResponse(ModelResponse::Text("y".into())),
                "genai"
            ))
        );
    }

    #[test]
    fn streamed_responses_api_events_and_whole_response() {
        let request = r#"{"model":"gpt-4.1","stream":true}"#;
        let with = |attribute: (&str, &str)| {
            logfire_span(
                STREAM,
                vec![kvs("request_data", request), kvs(attribute.0, attribute.1)],
            )
        };
        assert_eq!(
            with((
                "events",
                r#"[{"event.name":"gen_ai.user.message","content":"hi","role":"user"},{"event.name":"gen_ai.assistant.message","content":"Done.","role":"assistant"}]"#
            )),
            text("Done.")
        );
        assert_eq!(
            with((
                "events",
                r#"[{"event.name":"gen_ai.user.message","content":"hi","role":"user"},{"event.name":"gen_ai.assistant.message","role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}]"#
            )),
            tool_calls()
        );
        // v4.12: the whole `Response` as `response_data`.
        assert_eq!(
            with((
                "response_data",
                r#"{"id":"resp_1","object":"response","output":[{"id":"fc","type":"function_call","name":"f","arguments":"{}","call_id":"c1"}]}"#
            )),
            tool_calls()
        );
        assert_eq!(
            with((
                "response_data",
                r#"{"id":"resp_1","object":"response","output":[{"id":"m","type":"message","role":"assistant","content":[{"type":"output_text","text":"Done.","annotations":[]}]}]}"#
            )),
            text("Done.")
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
