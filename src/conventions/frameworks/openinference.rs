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
mod tests;
