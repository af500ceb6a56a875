//! OpenInference (Arize) spans: `openinference.span.kind` = `TOOL` (tool calls) and
//! `LLM` (model responses).
//!
//! Tool spans: name `tool.name` (else the span name), arguments `input.value` (not
//! `tool.parameters`, which is the JSON schema), result `output.value`. OpenInference has
//! no call id on the tool span; openinference-instrumentation-langchain records the result
//! as a serialised `ToolMessage` (`{"type":"tool","data":{…,"tool_call_id":…}}`), and its
//! `tool_call_id` is used as the call id when present. Hidden content (`__REDACTED__`,
//! OpenInference's `OPENINFERENCE_HIDE_INPUTS/OUTPUTS`) reads as not captured. For one-parameter LangChain tools
//! `input.value` is the bare value (`42`, `Paris`), kept as found.
//!
//! LLM spans: `llm.output_messages.N.message.tool_calls.M.…` → [`ModelResponse::ToolCalls`];
//! otherwise each message's text, in index order, joined with `\n`: its
//! `llm.output_messages.N.message.content`, else its `…message.contents.M.message_content.text`
//! parts whose `message_content.type` is `text` (or unset). A message's `contents` are not
//! read beside its `content`: openinference-instrumentation-openai-agents writes both, the
//! flat `content` being the parts joined (`_get_attributes_from_message`), and a
//! `reasoning` part (its `_get_attributes_from_reasoning_item`: the reasoning summary) is
//! not the answer, so a repeated answer after varying reasoning still repeats. Text hidden
//! by `OPENINFERENCE_HIDE_OUTPUT_TEXT` (the instrumentation's `TraceConfig.mask` writes
//! `__REDACTED__` in its place, `openinference-instrumentation` `config.py`) is not
//! captured: every hidden response would otherwise read as the same text; only hidden
//! text → `None`.
//!
//! No output message at all (`OPENINFERENCE_HIDE_OUTPUT_MESSAGES`, whose `TraceConfig.mask`
//! drops every `llm.output_messages.*` key but keeps `output.value`; or an instrumentation
//! that writes none) → the response from `output.value` ([`output_value_response`]).
//! `OPENINFERENCE_HIDE_OUTPUTS` drops the messages too and writes `__REDACTED__` as
//! `output.value` (and no `output.mime_type`): not captured.

use std::collections::BTreeMap;

use serde_json::Value as Json;

use crate::conventions::event::{
    EventKind, ExtractedEvent, ModelResponse, Payload, SplitSpan, ToolCall,
};
use crate::conventions::messages::model_response::summarize;
use crate::conventions::{agent_name, call_status, first_str, payload_attr};
use crate::otlp::view::{attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "openinference";

const SPAN_KIND: &str = "openinference.span.kind";
const OUTPUT_MESSAGES: &str = "llm.output_messages.";

/// A tool call for a `TOOL` span, a model response for an `LLM` span with captured
/// output; `None` otherwise.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let kind = match attr_str(&span.attributes, SPAN_KIND)? {
        "TOOL" => EventKind::ToolCall(tool_call(span)?),
        "LLM" => EventKind::ModelResponse(model_response(span)?),
        _ => return None,
    };
    Some(ExtractedEvent {
        kind,
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

fn tool_call(span: &SpanView) -> Option<ToolCall> {
    let attrs = &span.attributes;
    let name =
        first_str(attrs, &["tool.name"]).or(Some(span.name.as_ref()).filter(|s| !s.is_empty()))?;
    Some(ToolCall {
        tool_name: name.to_owned(),
        call_id: attr_str(attrs, "output.value").and_then(tool_message_call_id),
        arguments: payload_attr(attrs, &["input.value"])
            .filter(|p| !is_redacted(p))
            .map(|p| crewai_tool_use_arguments(span, &p).unwrap_or(p)),
        result: payload_attr(attrs, &["output.value"]).filter(|p| !is_redacted(p)),
        status: call_status(span),
        split: SplitSpan::Whole,
    })
}

/// The arguments of CrewAI's `ToolUsage._use(tool_string, tool, calling)` as
/// openinference-instrumentation-crewai traces it (`_ToolUseWrapper`: span `{tool}._use`,
/// `input.value` the JSON of the bound arguments, `_get_input_value`): `tool_string` is the
/// agent's raw text ("Thought: … Action Input: …", different whenever the thought is) and
/// `tool` the tool's repr, so the call's arguments are `calling.arguments` (the parsed
/// `ToolCalling`, JSON through its `dict()`). `None` for any other span or shape, which
/// keeps `input.value` as recorded. Source: Arize-ai/openinference
/// `python/instrumentation/openinference-instrumentation-crewai/src/openinference/
/// instrumentation/crewai/_wrappers.py`; crewAIInc/crewAI `tools/tool_usage.py`.
fn crewai_tool_use_arguments(span: &SpanView, input: &Payload) -> Option<Payload> {
    if !span.name.ends_with("._use") {
        return None;
    }
    let Payload::Text(text) = input else {
        return None;
    };
    let Json::Object(mut bound) = serde_json::from_str::<Json>(text).ok()? else {
        return None;
    };
    if !bound.contains_key("tool_string") {
        return None;
    }
    let Json::Object(mut calling) = bound.remove("calling")? else {
        return None;
    };
    calling.remove("arguments").map(Payload::Json)
}

/// OpenInference's placeholder for hidden inputs/outputs (`OPENINFERENCE_HIDE_INPUTS` /
/// `OPENINFERENCE_HIDE_OUTPUTS`): not captured, not content.
pub fn is_redacted(payload: &Payload) -> bool {
    matches!(payload, Payload::Text(t) if t == "__REDACTED__")
}

/// `tool_call_id` of a LangChain `ToolMessage` serialised as
/// `{"type":"tool","data":{…}}` (or its flat form `{"type":"tool","tool_call_id":…}`).
fn tool_message_call_id(output: &str) -> Option<String> {
    if !output.trim_start().starts_with('{') {
        return None;
    }
    let value: Json = serde_json::from_str(output).ok()?;
    if value.get("type").and_then(Json::as_str) != Some("tool") {
        return None;
    }
    value
        .get("data")
        .unwrap_or(&value)
        .get("tool_call_id")
        .and_then(Json::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// The text of one output message: its flat `content`, and its `contents` parts (by part
/// index) with each part's `message_content.type` where recorded.
#[derive(Default)]
struct MessageText<'a> {
    content: Option<&'a str>,
    parts: BTreeMap<u64, (Option<&'a str>, Option<&'a str>)>,
}

impl<'a> MessageText<'a> {
    /// The message's answer text: `content`, else its `text` parts (type `text` or unset)
    /// joined with `\n`; `None` when neither holds captured text.
    fn text(self) -> Option<String> {
        if let Some(content) = self.content {
            return (!is_redacted_text(content)).then(|| content.to_owned());
        }
        let texts: Vec<&str> = self
            .parts
            .into_values()
            .filter(|(kind, _)| kind.is_none_or(|k| k == "text"))
            .filter_map(|(_, text)| text.filter(|t| !is_redacted_text(t)))
            .collect();
        (!texts.is_empty()).then(|| texts.join("\n"))
    }
}

fn is_redacted_text(text: &str) -> bool {
    text == "__REDACTED__"
}

fn model_response(span: &SpanView) -> Option<ModelResponse> {
    // message index → its text fields; BTreeMap keeps index order.
    let mut messages: BTreeMap<u64, MessageText> = BTreeMap::new();
    let mut tool_calls = false;
    let mut any_message = false;
    for kv in &span.attributes {
        let Some(rest) = kv.key.strip_prefix(OUTPUT_MESSAGES) else {
            continue;
        };
        any_message = true;
        let Some((index, field)) = rest.split_once(".message.") else {
            continue;
        };
        let Ok(index) = index.parse::<u64>() else {
            continue;
        };
        if field.starts_with("tool_calls.") || field.starts_with("function_call_") {
            tool_calls = true;
            continue;
        }
        let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            Some(crate::otlp::view::ValueView::StringValue(s)) => s.as_ref(),
            _ => continue,
        };
        if field == "content" {
            messages.entry(index).or_default().content = Some(value);
        } else if let Some((sub, part_field)) = field
            .strip_prefix("contents.")
            .and_then(|r| r.split_once(".message_content."))
        {
            let Ok(sub) = sub.parse::<u64>() else {
                continue;
            };
            let part = messages
                .entry(index)
                .or_default()
                .parts
                .entry(sub)
                .or_default();
            match part_field {
                "text" => part.1 = Some(value),
                "type" => part.0 = Some(value),
                _ => {}
            }
        }
    }
    if !any_message {
        return output_value_response(span);
    }
    if tool_calls {
        return Some(ModelResponse::ToolCalls);
    }
    let texts: Vec<String> = messages
        .into_values()
        .filter_map(MessageText::text)
        .collect();
    if texts.is_empty() {
        return None;
    }
    Some(ModelResponse::Text(texts.join("\n")))
}

/// `output.mime_type` of JSON and of text (OpenInference `OpenInferenceMimeTypeValues`).
const JSON_MIME: &str = "application/json";
const TEXT_MIME: &str = "text/plain";

/// The response in an LLM span's `output.value`, for a span without output messages:
/// - `application/json`: the provider's response as the instrumentation dumped it
///   ([`provider_response`]);
/// - `text/plain`, or no `output.mime_type` (OpenInference leaves it out for text,
///   `_as_output_attributes`): the text, unless it is JSON (then read as above), empty or
///   `__REDACTED__`.
///
/// Sources: Arize-ai/openinference `python/instrumentation/openinference-instrumentation-openai/
/// …/openai/_utils.py` (`_io_value_and_type`: the response's `model_dump_json`) and
/// `_response_accumulator.py` (a stream's accumulated `choices[].message`),
/// `…-anthropic/…/anthropic/_wrappers.py` (`_get_outputs`: the `Message` dump) and
/// `_stream.py` (`_MessageExtractor`: the snapshot; the legacy completion's accumulated
/// `completion`).
fn output_value_response(span: &SpanView) -> Option<ModelResponse> {
    let attrs = &span.attributes;
    let text = attr_str(attrs, "output.value").filter(|t| !is_redacted_text(t))?;
    match attr_str(attrs, "output.mime_type") {
        Some(JSON_MIME) => provider_response(&serde_json::from_str(text).ok()?),
        Some(TEXT_MIME) | None => {
            let trimmed = text.trim_start();
            if trimmed.starts_with('{') || trimmed.starts_with('[') {
                if let Ok(json) = serde_json::from_str::<Json>(text) {
                    return provider_response(&json);
                }
            }
            (!text.trim().is_empty()).then(|| ModelResponse::Text(text.to_owned()))
        }
        Some(_) => None,
    }
}

/// A provider's response JSON read through [`summarize`]; `None` for any other shape:
/// - OpenAI chat completion: the first of `choices`, its `message` (`content`,
///   `tool_calls`, `function_call`), or a completion choice's `text`;
/// - OpenAI Responses API: the `output` items;
/// - Anthropic `Message`: its `content` blocks (`text`, `tool_use`; `thinking` neither);
///   a legacy completion's `completion`;
/// - Google GenAI `GenerateContentResponse`: the first candidate's `content.parts`.
fn provider_response(json: &Json) -> Option<ModelResponse> {
    if let Some(choice) = json.get("choices").and_then(|c| c.get(0)) {
        if let Some(message) = choice.get("message") {
            return summarize(message);
        }
        return choice
            .get("text")
            .and_then(Json::as_str)
            .map(|t| ModelResponse::Text(t.to_owned()));
    }
    if let Some(output) = json.get("output").filter(|o| o.is_array()) {
        return summarize(output);
    }
    let message = json.get("type").and_then(Json::as_str) == Some("message")
        || json.get("role").and_then(Json::as_str) == Some("assistant");
    if message && json.get("content").is_some_and(Json::is_array) {
        return summarize(json);
    }
    if let Some(completion) = json.get("completion").and_then(Json::as_str) {
        return Some(ModelResponse::Text(completion.to_owned()));
    }
    let candidate = json.get("candidates").and_then(|c| c.get(0));
    summarize(candidate?.get("content")?)
}

#[cfg(test)]
mod tests {
    use crate::conventions::event::{CallStatus, EventKind, ModelResponse, Payload};
    use crate::conventions::extract;
    use crate::conventions::test_support::*;

    #[test]
    fn tool_span_reads_input_not_schema() {
        let sp = span(
            "fetch_url",
            vec![
                kvs("tool.name", "fetch_url"),
                kvs(
                    "input.value",
                    r#"{"url": "https://example.com/a", "limit": 1}"#,
                ),
                kvs("output.value", "Error: connection refused"),
                kvs("tool.parameters", r#"{"properties":{}}"#),
                kvs("openinference.span.kind", "TOOL"),
            ],
        );
        let ev = extract(&sp).expect("tool call");
        assert_eq!(ev.convention, "openinference");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "fetch_url");
        assert_eq!(
            c.arguments,
            Some(Payload::Text(
                r#"{"url": "https://example.com/a", "limit": 1}"#.into()
            ))
        );
        assert_eq!(
            c.result,
            Some(Payload::Text("Error: connection refused".into()))
        );
        assert_eq!(c.call_id, None);
        assert_eq!(c.status, CallStatus::Ok);
    }

    #[test]
    fn langchain_tool_message_call_id_and_bare_value() {
        let mut sp = span(
            "check_status",
            vec![
                kvs("input.value", "42"),
                kvs(
                    "output.value",
                    r#"{"type": "tool", "data": {"content": "queued", "tool_call_id": "call_s2_1"}}"#,
                ),
                kvs("openinference.span.kind", "TOOL"),
            ],
        );
        sp.status = error_status("ToolException");
        let EventKind::ToolCall(c) = extract(&sp).expect("tool call").kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "check_status", "falls back to the span name");
        assert_eq!(c.arguments, Some(Payload::Text("42".into())));
        assert_eq!(c.call_id.as_deref(), Some("call_s2_1"));
        assert_eq!(
            c.status,
            CallStatus::Error {
                message: "ToolException".into()
            }
        );
    }

    #[test]
    fn llm_span_tool_calls_and_text() {
        let calls = span(
            "generation",
            vec![
                kvs("openinference.span.kind", "LLM"),
                kvs("llm.output_messages.0.message.role", "assistant"),
                kvs(
                    "llm.output_messages.0.message.tool_calls.0.tool_call.id",
                    "c1",
                ),
                kvs(
                    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
                    "f",
                ),
            ],
        );
        assert_eq!(
            extract(&calls).expect("response").kind,
            EventKind::ModelResponse(ModelResponse::ToolCalls)
        );
        let text = span(
            "generation",
            vec![
                kvs("openinference.span.kind", "LLM"),
                kvs("llm.output_messages.1.message.content", "second"),
                kvs("llm.output_messages.0.message.content", "first"),
                kvs("llm.input_messages.0.message.content", "prompt, not output"),
            ],
        );
        assert_eq!(
            extract(&text).expect("response").kind,
            EventKind::ModelResponse(ModelResponse::Text("first\nsecond".into()))
        );
        let hidden = span("generation", vec![kvs("openinference.span.kind", "LLM")]);
        assert_eq!(extract(&hidden), None);
        // an out-of-range content index is skipped, never an overflow
        let huge = span(
            "generation",
            vec![
                kvs("openinference.span.kind", "LLM"),
                kvs("llm.output_messages.0.message.content", "kept"),
                kvs(
                    "llm.output_messages.0.message.contents.18446744073709551615.message_content.text",
                    "skipped",
                ),
            ],
        );
        assert_eq!(
            extract(&huge).expect("response").kind,
            EventKind::ModelResponse(ModelResponse::Text("kept".into()))
        );
    }

    fn llm(attributes: &[(&str, &str)]) -> Option<EventKind> {
        let mut all = vec![kvs("openinference.span.kind", "LLM")];
        all.extend(attributes.iter().map(|(k, v)| kvs(k, v)));
        extract(&span("response", all)).map(|e| e.kind)
    }

    fn text(t: &str) -> Option<EventKind> {
        Some(EventKind::ModelResponse(ModelResponse::Text(t.into())))
    }

    /// openinference-instrumentation-openai-agents `_get_attributes_from_response_output`:
    /// a reasoning item is message 0 with one `reasoning` part; the answer message has
    /// `output_text` parts and their join as flat `content`.
    #[test]
    fn openai_agents_response_reads_the_answer_not_the_reasoning_nor_twice() {
        let with_reasoning = |summary: &str| {
            llm(&[
                ("llm.output_messages.0.message.role", "assistant"),
                (
                    "llm.output_messages.0.message.contents.0.message_content.type",
                    "reasoning",
                ),
                (
                    "llm.output_messages.0.message.contents.0.message_content.text",
                    summary,
                ),
                ("llm.output_messages.1.message.role", "assistant"),
                (
                    "llm.output_messages.1.message.contents.0.message_content.type",
                    "text",
                ),
                (
                    "llm.output_messages.1.message.contents.0.message_content.text",
                    "I cannot find it.",
                ),
                ("llm.output_messages.1.message.content", "I cannot find it."),
            ])
        };
        assert_eq!(
            with_reasoning("Thinking about A"),
            text("I cannot find it.")
        );
        assert_eq!(
            with_reasoning("Thinking about B"),
            text("I cannot find it.")
        );
        // Parts without a flat content: the text parts in order.
        assert_eq!(
            llm(&[
                (
                    "llm.output_messages.0.message.contents.1.message_content.text",
                    "b"
                ),
                (
                    "llm.output_messages.0.message.contents.0.message_content.text",
                    "a"
                ),
            ]),
            text("a\nb")
        );
        // Reasoning alone is no answer.
        assert_eq!(
            llm(&[
                (
                    "llm.output_messages.0.message.contents.0.message_content.type",
                    "reasoning",
                ),
                (
                    "llm.output_messages.0.message.contents.0.message_content.text",
                    "hmm",
                ),
            ]),
            None
        );
    }

    /// `OPENINFERENCE_HIDE_OUTPUT_TEXT`: `TraceConfig.mask` writes `__REDACTED__` for the
    /// output messages' `message.content` and `message_content.text`.
    #[test]
    fn hidden_output_text_is_not_captured() {
        assert_eq!(
            llm(&[
                ("llm.output_messages.0.message.role", "assistant"),
                ("llm.output_messages.0.message.content", "__REDACTED__"),
            ]),
            None
        );
        assert_eq!(
            llm(&[(
                "llm.output_messages.0.message.contents.0.message_content.text",
                "__REDACTED__",
            )]),
            None
        );
        // Tool calls are still seen with the text hidden.
        assert_eq!(
            llm(&[
                ("llm.output_messages.0.message.content", "__REDACTED__"),
                (
                    "llm.output_messages.0.message.tool_calls.0.tool_call.function.name",
                    "f",
                ),
            ]),
            Some(EventKind::ModelResponse(ModelResponse::ToolCalls))
        );
    }

    /// `OPENINFERENCE_HIDE_OUTPUT_MESSAGES`: no `llm.output_messages.*`, the response in
    /// `output.value`.
    #[test]
    fn hidden_output_messages_read_from_output_value() {
        let json = |value: &str| {
            llm(&[
                ("output.value", value),
                ("output.mime_type", "application/json"),
            ])
        };
        // OpenAI chat completion (`model_dump_json`), and a stream's accumulated choices.
        assert_eq!(
            json(
                r#"{"id":"chatcmpl-1","choices":[{"finish_reason":"stop","index":0,"message":{"content":"No.","role":"assistant","tool_calls":null}}],"object":"chat.completion"}"#
            ),
            text("No.")
        );
        assert_eq!(
            json(
                r#"{"choices":[{"index":0,"message":{"role":"assistant","tool_calls":[{"index":0,"id":"c1","function":{"name":"f","arguments":"{}"},"type":"function"}]}}]}"#
            ),
            Some(EventKind::ModelResponse(ModelResponse::ToolCalls))
        );
        assert_eq!(
            json(r#"{"choices":[{"index":0,"text":"42","finish_reason":"stop"}]}"#),
            text("42")
        );
        // Anthropic `Message`: text and thinking blocks; a `tool_use` block.
        assert_eq!(
            json(
                r#"{"id":"msg_1","content":[{"type":"thinking","thinking":"hmm","signature":"s"},{"type":"text","text":"No."}],"role":"assistant","type":"message","stop_reason":"end_turn"}"#
            ),
            text("No.")
        );
        assert_eq!(
            json(
                r#"{"id":"msg_1","content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"t","name":"f","input":{}}],"role":"assistant","type":"message"}"#
            ),
            Some(EventKind::ModelResponse(ModelResponse::ToolCalls))
        );
        assert_eq!(
            json(r#"{"completion":" No.","stop_reason":"stop_sequence"}"#),
            text(" No.")
        );
        // Responses API `output`, Google GenAI candidates.
        assert_eq!(
            json(
                r#"{"id":"resp","output":[{"type":"reasoning","summary":[]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"No."}]}]}"#
            ),
            text("No.")
        );
        assert_eq!(
            json(
                r#"{"candidates":[{"content":{"parts":[{"function_call":{"name":"f","args":{}}}],"role":"model"}}]}"#
            ),
            Some(EventKind::ModelResponse(ModelResponse::ToolCalls))
        );
        // Another shape is not read; nor is JSON that does not parse.
        assert_eq!(json(r#"{"result":"No."}"#), None);
        assert_eq!(json("{"), None);
        // Text: by mime type or none.
        assert_eq!(
            llm(&[("output.value", "No."), ("output.mime_type", "text/plain")]),
            text("No.")
        );
        assert_eq!(llm(&[("output.value", "No.")]), text("No."));
        assert_eq!(llm(&[("output.value", "  ")]), None);
        // `OPENINFERENCE_HIDE_OUTPUTS`: redacted value, no mime type.
        assert_eq!(llm(&[("output.value", "__REDACTED__")]), None);
        // Output messages present (hidden text only): `output.value` is not read.
        assert_eq!(
            llm(&[
                ("llm.output_messages.0.message.content", "__REDACTED__"),
                ("output.value", "No."),
            ]),
            None
        );
    }

    #[test]
    fn crewai_tool_use_reads_the_calling_arguments_not_the_agent_text() {
        let span_with = |thought: &str| {
            let input = serde_json::json!({
                "tool_string": format!("Thought: {thought}\nAction: get_weather\nAction Input: {{\"city\": \"Paris\"}}"),
                "tool": "CrewStructuredTool(name='get_weather', description='Tool Name: get_weather')",
                "calling": {"tool_name": "get_weather", "arguments": {"city": "Paris"}},
            });
            span(
                "get_weather._use",
                vec![
                    kvs("openinference.span.kind", "TOOL"),
                    kvs("tool.name", "get_weather"),
                    kvs("input.value", &input.to_string()),
                    kvs("output.value", "Error: upstream timeout"),
                ],
            )
        };
        let arguments = |thought: &str| {
            let EventKind::ToolCall(call) = extract(&span_with(thought)).expect("a tool call").kind
            else {
                panic!("not a tool call")
            };
            call.arguments
        };
        let expected = Some(Payload::Json(serde_json::json!({"city": "Paris"})));
        assert_eq!(arguments("I need the weather"), expected);
        assert_eq!(arguments("Let me try again"), expected);

        // The same input on a span not named `{tool}._use` is kept as recorded.
        let mut other = span_with("x");
        other.name = "get_weather".into();
        let EventKind::ToolCall(call) = extract(&other).unwrap().kind else {
            panic!("not a tool call")
        };
        assert!(matches!(call.arguments, Some(Payload::Text(t)) if t.contains("tool_string")));
    }

    #[test]
    fn other_kinds_ignored() {
        let chain = span("turn", vec![kvs("openinference.span.kind", "CHAIN")]);
        assert_eq!(extract(&chain), None);
    }
}
