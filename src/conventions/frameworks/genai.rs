//! GenAI semantic conventions: `execute_tool` spans, and the GenAI output sources of
//! inference spans ([`RESPONSE_READER`]; google-adk 1.x's [`ADK_RESPONSE_READER`]).
//!
//! A tool span is one with `gen_ai.operation.name` = `execute_tool`, or (attribute absent)
//! a span named `execute_tool` / `execute_tool {gen_ai.tool.name}`. Spans named
//! `running tool` never reach this module: [`crate::conventions::extract`] hands them to
//! `pydantic_legacy` first (pydantic-ai v2 sets `gen_ai.operation.name=execute_tool` on
//! them too, and they must count once).
//!
//! Fields, first found wins (new names before legacy names):
//! - tool name: `gen_ai.tool.name`, else the span-name suffix after `execute_tool `;
//! - arguments: `gen_ai.tool.call.arguments`, `tool_arguments` (pydantic-ai ≤ v2),
//!   `gcp.vertex.agent.tool_call_args` (google-adk 1.x), `gen_ai.tool.input` (the name
//!   before `gen_ai.tool.call.arguments`); else span events ([`super::tool_events`]:
//!   `gen_ai.tool.message` `content` (strands default mode), `gen_ai.tool.input`
//!   (`openai-agents-opentelemetry`), an operation-details event's own
//!   `gen_ai.tool.call.arguments`, or a `tool_call` part in its `gen_ai.input.messages`);
//! - result: `gen_ai.tool.call.result`, `tool_response`, `gcp.vertex.agent.tool_response`,
//!   `gen_ai.tool.output`; else events: `gen_ai.choice` `message`, `gen_ai.tool.output`,
//!   an operation-details event's `gen_ai.tool.call.result`, or a `tool_call_response`
//!   part in its `gen_ai.output.messages`;
//! - call id: `gen_ai.tool.call.id`, else the `id` / `gen_ai.tool.call.id` of those events;
//! - status: the span's ([`crate::conventions::call_status`], which also reads the
//!   `gen_ai.execute_tool.exception` event); a `gen_ai.tool.call.decision` event whose
//!   outcome is `deny` makes a call without result a failed one.
//!
//! google-adk 1.x placeholders mean "not captured": `{}` in both
//! `gcp.vertex.agent.tool_call_args` and `gcp.vertex.agent.tool_response` (content capture
//! off), `<not specified>` as call id or response.
//!
//! A no-argument tool that returns `{}` with capture on is written exactly so too:
//! adk-python `telemetry.py` `trace_tool_call` writes `_safe_json_serialize(args)` =
//! `json.dumps({})` = `{}` and the dict response as is (`{}`), and with
//! `ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false` the literal `'{}'` for both, with every
//! other attribute of the span the same. The pair is read as not captured: taking it as
//! content would make every capture-off call of a tool identical (a false
//! `repeated_result` on any healthy run), while the cost is that such a tool's own loop
//! is not seen from ADK's attributes alone.
//!
//! OpenInference's google-adk instrumentor marks ADK's `execute_tool` span as its `TOOL`
//! span and writes `input.value` (the arguments) and `output.value` (ADK's
//! `FunctionResponse` as JSON) on it, whatever ADK's own capture switch says. When the
//! keys above hold no content, those are read; the `FunctionResponse` is its `response`
//! (what ADK records as `gcp.vertex.agent.tool_response`), so its per-call `id` does not
//! make identical results differ.
//!
//! google-adk's `execute_tool (merged)` span (`gen_ai.tool.name` = `(merged tools)`) sums
//! up a batch of parallel calls that have their own spans: it is claimed and yields `None`.

use serde_json::Value as Json;

use super::tool_events::{self, events_named, OPERATION_DETAILS_EVENT};
use crate::conventions::event::{
    CallStatus, EventKind, ExtractedEvent, Payload, SplitSpan, ToolCall,
};
use crate::conventions::messages::model_response::{summarize, Found, ResponseReader};
use crate::conventions::{
    agent_name, call_id, call_status, first_str, json_from_any_value, payload_attr,
};
use crate::otlp::view::{attr, attr_str, KeyValueView, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "genai";

/// `gen_ai.operation.name` of a tool execution.
pub const EXECUTE_TOOL: &str = "execute_tool";

/// `gen_ai.tool.name` google-adk gives its merged pseudo span.
pub const ADK_MERGED_TOOL_NAME: &str = "(merged tools)";

/// Attribute names holding arguments, in preference order. `gen_ai.tool.input` is the
/// name instrumentations wrote before `gen_ai.tool.call.arguments` (the OpenAI Agents
/// processors list it as the deprecated name of that key).
pub const ARGUMENT_KEYS: &[&str] = &[
    "gen_ai.tool.call.arguments",
    "tool_arguments",
    "gcp.vertex.agent.tool_call_args",
    "gen_ai.tool.input",
];

/// Attribute names holding results, in preference order (`gen_ai.tool.output`: the name
/// before `gen_ai.tool.call.result`).
pub const RESULT_KEYS: &[&str] = &[
    "gen_ai.tool.call.result",
    "tool_response",
    "gcp.vertex.agent.tool_response",
    "gen_ai.tool.output",
];

/// The keys of [`ARGUMENT_KEYS`] / [`RESULT_KEYS`] without google-adk's, whose `{}` means
/// "not captured" when both hold it.
const ARGUMENT_KEYS_NOT_ADK: &[&str] = &[
    "gen_ai.tool.call.arguments",
    "tool_arguments",
    "gen_ai.tool.input",
];
const RESULT_KEYS_NOT_ADK: &[&str] = &[
    "gen_ai.tool.call.result",
    "tool_response",
    "gen_ai.tool.output",
];

/// True when this convention claims the span as a tool span (see module docs).
pub fn is_tool_span(span: &SpanView) -> bool {
    match attr_str(&span.attributes, "gen_ai.operation.name") {
        Some(op) => op == EXECUTE_TOOL,
        None => span_name_suffix(&span.name).is_some(),
    }
}

/// True for google-adk's `execute_tool (merged)` pseudo span.
pub fn is_merged_pseudo_span(span: &SpanView) -> bool {
    attr_str(&span.attributes, "gen_ai.tool.name") == Some(ADK_MERGED_TOOL_NAME)
        || span.name == "execute_tool (merged)"
}

/// `Some(suffix)` for span names `execute_tool` (empty suffix) and `execute_tool {suffix}`.
fn span_name_suffix(name: &str) -> Option<&str> {
    let rest = name.strip_prefix(EXECUTE_TOOL)?;
    if rest.is_empty() {
        return Some("");
    }
    rest.strip_prefix(' ').map(str::trim)
}

/// The tool call of a span [`is_tool_span`] claims; `None` for the ADK merged pseudo span
/// and when no tool name can be found (neither attribute nor span-name suffix).
pub fn extract_tool(span: &SpanView) -> Option<ExtractedEvent> {
    if is_merged_pseudo_span(span) {
        return None;
    }
    let suffix = span_name_suffix(&span.name).filter(|s| !s.is_empty());
    let name = first_str(&span.attributes, &["gen_ai.tool.name"]).or(suffix)?;
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(read_tool_call(span, name)),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

/// Reads arguments, result, call id and status of a tool span whose tool name is known
/// (shared with [`crate::conventions::legacy::pydantic`]).
pub(crate) fn read_tool_call(span: &SpanView, tool_name: &str) -> ToolCall {
    let attrs = &span.attributes;
    let id = call_id(attrs, "gen_ai.tool.call.id").or_else(|| tool_events::call_id(span));
    // google-adk 1.x with content capture off writes `{}` for both legacy attributes.
    let adk_off = attr_str(attrs, "gcp.vertex.agent.tool_call_args") == Some("{}")
        && attr_str(attrs, "gcp.vertex.agent.tool_response") == Some("{}");
    let (arg_keys, result_keys) = if adk_off {
        (ARGUMENT_KEYS_NOT_ADK, RESULT_KEYS_NOT_ADK)
    } else {
        (ARGUMENT_KEYS, RESULT_KEYS)
    };
    let openinference = attr_str(attrs, "openinference.span.kind") == Some("TOOL");
    let arguments = payload_attr(attrs, arg_keys)
        .or_else(|| tool_events::arguments(span, id.as_deref()))
        .or_else(|| openinference.then(|| openinference_value(span, "input.value"))?);
    let result = payload_attr(attrs, result_keys)
        .filter(|r| !matches!(r, Payload::Text(t) if t == "<not specified>"))
        .or_else(|| tool_events::result(span, id.as_deref()))
        .or_else(|| {
            openinference
                .then(|| openinference_value(span, "output.value"))?
                .map(adk_function_response)
        });
    let mut status = call_status(span);
    if status == CallStatus::Ok && result.is_none() {
        if let Some(denied) = tool_events::denied(span, id.as_deref()) {
            status = denied;
        }
    }
    ToolCall {
        tool_name: tool_name.to_owned(),
        call_id: id,
        arguments,
        result,
        status,
        split: SplitSpan::Whole,
    }
}

/// `input.value` / `output.value` that OpenInference's google-adk instrumentor writes on
/// ADK's own `execute_tool` span (`openinference.span.kind` = `TOOL`), read when the GenAI
/// and ADK keys hold no content (ADK's capture switched off); `__REDACTED__` is not
/// captured.
fn openinference_value(span: &SpanView, key: &str) -> Option<Payload> {
    payload_attr(&span.attributes, &[key])
        .filter(|p| !crate::conventions::frameworks::openinference::is_redacted(p))
}

/// The fields of google-genai's `FunctionResponse` (`model_dump_json(exclude_none=True)`).
const FUNCTION_RESPONSE_FIELDS: &[&str] = &[
    "id",
    "name",
    "response",
    "will_continue",
    "scheduling",
    "parts",
];

/// OpenInference's google-adk `output.value` is ADK's `FunctionResponse` as JSON
/// (`{"id": <call id>, "name": <tool>, "response": {…}}`): its `response`, the value ADK
/// itself records as `gcp.vertex.agent.tool_response` with capture on. The per-call `id`
/// must not make identical results differ. Anything else is returned unchanged.
pub(crate) fn adk_function_response(payload: Payload) -> Payload {
    let json = match &payload {
        Payload::Json(value) => Some(value.clone()),
        Payload::Text(text) if text.trim_start().starts_with('{') => {
            serde_json::from_str::<Json>(text).ok()
        }
        _ => None,
    };
    let Some(Json::Object(mut object)) = json else {
        return payload;
    };
    let is_function_response = object.contains_key("name")
        && object.get("response").is_some_and(Json::is_object)
        && object
            .keys()
            .all(|k| FUNCTION_RESPONSE_FIELDS.contains(&k.as_str()));
    match object.remove("response") {
        Some(response) if is_function_response => Payload::Json(response),
        _ => payload,
    }
}

/// The GenAI response sources of an inference span ([`crate::conventions::messages::model_response`]).
pub const RESPONSE_READER: ResponseReader = ResponseReader {
    convention: CONVENTION,
    read: read_response,
};

/// google-adk 1.x's response source, `gcp.vertex.agent.llm_response` (`content.parts`
/// with `text` / `function_call`), tried after OpenLLMetry's.
pub const ADK_RESPONSE_READER: ResponseReader = ResponseReader {
    convention: CONVENTION,
    read: read_adk_response,
};

/// First source found: attribute `gen_ai.output.messages` (JSON string or structured:
/// messages with `parts`); the same inside a `gen_ai.client.inference.operation.details`
/// span event (strands with `gen_ai_latest_experimental`); `gen_ai.choice` span events,
/// attribute `message` (strands default: a JSON list of content blocks; older shapes: an
/// object with `content` / `tool_calls`) and `tool_calls`.
fn read_response(span: &SpanView) -> Found {
    let attrs = &span.attributes;
    if let Some(messages) = attr(attrs, "gen_ai.output.messages").and_then(json_from_any_value) {
        return Some(summarize(&messages));
    }
    let details = events_named(span, OPERATION_DETAILS_EVENT)
        .find_map(|attrs| attr(attrs, "gen_ai.output.messages").and_then(json_from_any_value));
    if let Some(messages) = details {
        return Some(summarize(&messages));
    }
    let choices: Vec<Json> = events_named(span, "gen_ai.choice")
        .map(choice_event_json)
        .collect();
    (!choices.is_empty()).then(|| summarize(&Json::Array(choices)))
}

fn read_adk_response(span: &SpanView) -> Found {
    let response =
        attr(&span.attributes, "gcp.vertex.agent.llm_response").and_then(json_from_any_value)?;
    Some(summarize(&response))
}

/// A `gen_ai.choice` span event as a JSON object: string attributes that hold JSON are
/// parsed (strands writes `message` as JSON text), other strings stay strings. Semantic
/// Kernel .NET writes the whole choice as JSON in one attribute, `gen_ai.event.content`
/// (`{"index", "message": {"role", "content", "tool_calls"}, "tool_calls", "finish_reason"}`,
/// or `"message": "…"` for a text completion; microsoft/semantic-kernel
/// `dotnet/src/InternalUtilities/src/Diagnostics/ModelDiagnostics.cs`,
/// `ToGenAIConventionsChoiceFormat`): that object is the choice.
fn choice_event_json(attributes: &[KeyValueView]) -> Json {
    if let Some(choice) = attr(attributes, "gen_ai.event.content")
        .and_then(json_from_any_value)
        .filter(Json::is_object)
    {
        return choice;
    }
    let mut object = serde_json::Map::new();
    for key in ["message", "tool_calls"] {
        let Some(value) = attr(attributes, key) else {
            continue;
        };
        let json = json_from_any_value(value)
            .unwrap_or_else(|| crate::otlp::view::any_value_to_json(value));
        object.insert(key.to_owned(), json);
    }
    Json::Object(object)
}

#[cfg(test)]
mod tests;
