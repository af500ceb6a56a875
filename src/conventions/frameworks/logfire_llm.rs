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
mod tests;
