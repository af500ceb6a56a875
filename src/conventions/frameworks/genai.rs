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
mod tests {
    use super::*;
    use crate::conventions::event::CallStatus;
    use crate::conventions::extract;
    use crate::conventions::test_support::*;
    use opentelemetry_proto::tonic::common::v1::{
        any_value::Value, AnyValue, ArrayValue, KeyValueList,
    };
    use opentelemetry_proto::tonic::trace::v1::Span;
    use serde_json::json;

    fn tool(ev: ExtractedEvent) -> ToolCall {
        match ev.kind {
            EventKind::ToolCall(c) => c,
            other => panic!("expected a tool call, got {other:?}"),
        }
    }

    #[test]
    fn reads_attributes() {
        let sp = span(
            "execute_tool fetch_url",
            vec![
                kvs("gen_ai.operation.name", "execute_tool"),
                kvs("gen_ai.tool.name", "fetch_url"),
                kvs("gen_ai.tool.call.id", "call_1"),
                kvs("gen_ai.tool.call.arguments", r#"{"url":"a"}"#),
                kvs("gen_ai.tool.call.result", "boom"),
                kvs("gen_ai.agent.name", "corpus_agent"),
            ],
        );
        let ev = extract(&sp).expect("tool call");
        assert_eq!(ev.convention, "genai");
        assert_eq!(ev.agent_name.as_deref(), Some("corpus_agent"));
        let c = tool(ev);
        assert_eq!(c.tool_name, "fetch_url");
        assert_eq!(c.call_id.as_deref(), Some("call_1"));
        assert_eq!(c.arguments, Some(Payload::Text(r#"{"url":"a"}"#.into())));
        assert_eq!(c.result, Some(Payload::Text("boom".into())));
        assert_eq!(c.status, CallStatus::Ok);
    }

    #[test]
    fn old_and_new_names_on_one_span_count_once_new_wins() {
        let sp = span(
            "execute_tool fetch_url",
            vec![
                kvs("gen_ai.operation.name", "execute_tool"),
                kvs("gen_ai.tool.name", "fetch_url"),
                kvs("tool_arguments", r#"{"old":1}"#),
                kvs("gen_ai.tool.call.arguments", r#"{"new":1}"#),
                kvs("tool_response", "old"),
                kvs("gen_ai.tool.call.result", "new"),
            ],
        );
        let c = tool(extract(&sp).expect("one event"));
        assert_eq!(c.arguments, Some(Payload::Text(r#"{"new":1}"#.into())));
        assert_eq!(c.result, Some(Payload::Text("new".into())));
        // Only legacy names: they are read.
        let legacy = span(
            "execute_tool fetch_url",
            vec![
                kvs("tool_arguments", r#"{"old":1}"#),
                kvs("tool_response", "old"),
            ],
        );
        let c = tool(extract(&legacy).expect("one event"));
        assert_eq!(c.arguments, Some(Payload::Text(r#"{"old":1}"#.into())));
        assert_eq!(c.result, Some(Payload::Text("old".into())));
    }

    #[test]
    fn structured_and_bytes_arguments() {
        let kvlist = AnyValue {
            value: Some(Value::KvlistValue(KeyValueList {
                values: vec![
                    kvs("url", "https://example.com/a"),
                    kv(
                        "limit",
                        AnyValue {
                            value: Some(Value::IntValue(1)),
                        },
                    ),
                    kv(
                        "tags",
                        AnyValue {
                            value: Some(Value::ArrayValue(ArrayValue {
                                values: vec![s("x")],
                            })),
                        },
                    ),
                ],
            })),
        };
        let sp = span(
            "execute_tool fetch_url",
            vec![kv("gen_ai.tool.call.arguments", kvlist)],
        );
        let c = tool(extract(&sp).expect("tool call"));
        assert_eq!(
            c.arguments,
            Some(Payload::Json(
                json!({"url": "https://example.com/a", "limit": 1, "tags": ["x"]})
            ))
        );

        let bytes = AnyValue {
            value: Some(Value::BytesValue(br#"{"a":1}"#.to_vec())),
        };
        let sp = span(
            "execute_tool f",
            vec![
                kvs("gen_ai.operation.name", "execute_tool"),
                kv("gen_ai.tool.call.arguments", bytes),
            ],
        );
        let c = tool(extract(&sp).expect("tool call"));
        assert_eq!(c.tool_name, "f");
        assert_eq!(c.arguments, Some(Payload::Bytes(br#"{"a":1}"#.to_vec())));
    }

    #[test]
    fn span_name_only() {
        let c = tool(extract(&span("execute_tool foo", vec![])).expect("tool call"));
        assert_eq!(c.tool_name, "foo");
        assert_eq!((c.arguments, c.result, c.call_id), (None, None, None));
        // Bare `execute_tool` without any name is claimed but has no tool name.
        assert_eq!(extract(&span("execute_tool", vec![])), None);
        // Not a prefix match on other words.
        assert_eq!(extract(&span("execute_toolbox", vec![])), None);
        // Another operation on a span named like a tool span is not a tool call.
        let chat = span(
            "execute_tool foo",
            vec![kvs("gen_ai.operation.name", "chat")],
        );
        assert!(!is_tool_span(&SpanView::from(&chat)));
    }

    #[test]
    fn error_status_is_error() {
        let mut sp = span(
            "execute_tool fetch_url",
            vec![kvs("gen_ai.tool.name", "fetch_url")],
        );
        sp.status = error_status("connection refused");
        let c = tool(extract(&sp).expect("tool call"));
        assert_eq!(
            c.status,
            CallStatus::Error {
                message: "connection refused".into()
            }
        );
    }

    #[test]
    fn adk_merged_span_is_skipped() {
        let sp = span(
            "execute_tool (merged)",
            vec![
                kvs("gen_ai.operation.name", "execute_tool"),
                kvs("gen_ai.tool.name", "(merged tools)"),
                kvs("gen_ai.tool.call.id", "random-id"),
                kvs("gen_ai.tool.call.arguments", "N/A"),
            ],
        );
        assert_eq!(extract(&sp), None);
    }

    #[test]
    fn strands_default_events() {
        let mut sp = span(
            "execute_tool fetch_url",
            vec![
                kvs("gen_ai.operation.name", "execute_tool"),
                kvs("gen_ai.tool.name", "fetch_url"),
                kvs("gen_ai.tool.call.id", "call_s1_1"),
            ],
        );
        sp.events = vec![
            event(
                "gen_ai.tool.message",
                vec![
                    kvs("role", "tool"),
                    kvs("content", r#"{"url": "https://example.com/a", "limit": 1}"#),
                    kvs("id", "call_s1_1"),
                ],
            ),
            event(
                "gen_ai.choice",
                vec![
                    kvs("message", r#"[{"text": "Error"}]"#),
                    kvs("id", "call_s1_1"),
                ],
            ),
        ];
        let c = tool(extract(&sp).expect("tool call"));
        assert_eq!(
            c.arguments,
            Some(Payload::Text(
                r#"{"url": "https://example.com/a", "limit": 1}"#.into()
            ))
        );
        assert_eq!(
            c.result,
            Some(Payload::Text(r#"[{"text": "Error"}]"#.into()))
        );
        assert_eq!(c.call_id.as_deref(), Some("call_s1_1"));

        // Call id only on the events.
        sp.attributes.truncate(2);
        assert_eq!(
            tool(extract(&sp).expect("tool call")).call_id.as_deref(),
            Some("call_s1_1")
        );
    }

    #[test]
    fn operation_details_events() {
        let mut sp = span("execute_tool grep", vec![kvs("gen_ai.tool.call.id", "c2")]);
        sp.events = vec![
            event(
                OPERATION_DETAILS_EVENT,
                vec![kvs(
                    "gen_ai.input.messages",
                    r#"[{"role":"tool","parts":[{"type":"tool_call","name":"grep","id":"c1","arguments":{"pattern":"A"}},{"type":"tool_call","name":"grep","id":"c2","arguments":{"pattern":"B"}}]}]"#,
                )],
            ),
            event(
                OPERATION_DETAILS_EVENT,
                vec![kvs(
                    "gen_ai.output.messages",
                    r#"[{"role":"tool","parts":[{"type":"tool_call_response","id":"c2","response":[{"text":"hit"}]}]}]"#,
                )],
            ),
        ];
        let c = tool(extract(&sp).expect("tool call"));
        assert_eq!(c.arguments, Some(Payload::Json(json!({"pattern": "B"}))));
        assert_eq!(c.result, Some(Payload::Json(json!([{"text": "hit"}]))));
    }

    #[test]
    fn adk_legacy_attributes_and_placeholders() {
        let on = span(
            "execute_tool lookup",
            vec![
                kvs("gen_ai.operation.name", "execute_tool"),
                kvs("gen_ai.tool.name", "lookup"),
                kvs("gcp.vertex.agent.tool_call_args", r#"{"query": "weather"}"#),
                kvs("gcp.vertex.agent.tool_response", r#"{"result": "sunny"}"#),
            ],
        );
        let c = tool(extract(&on).expect("tool call"));
        assert_eq!(
            c.arguments,
            Some(Payload::Text(r#"{"query": "weather"}"#.into()))
        );
        assert_eq!(
            c.result,
            Some(Payload::Text(r#"{"result": "sunny"}"#.into()))
        );
        let off = span(
            "execute_tool lookup",
            vec![
                kvs("gen_ai.tool.name", "lookup"),
                kvs("gcp.vertex.agent.tool_call_args", "{}"),
                kvs("gcp.vertex.agent.tool_response", "{}"),
            ],
        );
        let c = tool(extract(&off).expect("tool call"));
        assert_eq!((c.arguments, c.result), (None, None));
    }

    /// OpenInference google-adk on ADK with `ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS=false`
    /// (`_wrappers.py` `_TraceToolCall` on adk-python's `trace_tool_call` span).
    fn openinference_over_adk(args: &str, response: &str, call: &str) -> Span {
        span(
            "execute_tool get_weather",
            vec![
                kvs("gen_ai.operation.name", "execute_tool"),
                kvs("gen_ai.tool.name", "get_weather"),
                kvs("gen_ai.tool.call.id", call),
                kvs("gcp.vertex.agent.tool_call_args", "{}"),
                kvs("gcp.vertex.agent.tool_response", "{}"),
                kvs("openinference.span.kind", "TOOL"),
                kvs("tool.name", "get_weather"),
                kvs("input.value", args),
                kvs(
                    "output.value",
                    &format!(
                        r#"{{"id": "{call}", "name": "get_weather", "response": {response}}}"#
                    ),
                ),
            ],
        )
    }

    #[test]
    fn openinference_content_on_adk_span_with_adk_capture_off() {
        let args = r#"{"city": "Paris", "units": "metric"}"#;
        let timeout = r#"{"result": "Error: upstream timeout"}"#;
        let first = tool(extract(&openinference_over_adk(args, timeout, "adk-1")).unwrap());
        assert_eq!(first.arguments, Some(Payload::Text(args.into())));
        assert_eq!(
            first.result,
            Some(Payload::Json(json!({"result": "Error: upstream timeout"})))
        );
        assert_eq!(first.call_id.as_deref(), Some("adk-1"));
        // The per-call FunctionResponse id is not part of the result.
        let second = tool(extract(&openinference_over_adk(args, timeout, "adk-2")).unwrap());
        assert_eq!(second.result, first.result);
        // ADK's capture on: its own attributes win, and read the same result.
        let mut on = openinference_over_adk(args, timeout, "adk-3");
        on.attributes[3] = kvs("gcp.vertex.agent.tool_call_args", args);
        on.attributes[4] = kvs("gcp.vertex.agent.tool_response", timeout);
        let on = tool(extract(&on).unwrap());
        assert_eq!(on.result, Some(Payload::Text(timeout.into())));
        // ADK versions that set a dict (dropped by the SDK) leave no ADK keys at all.
        let mut dropped = openinference_over_adk(args, timeout, "adk-4");
        dropped.attributes.drain(3..5);
        assert_eq!(tool(extract(&dropped).unwrap()).result, first.result);
        // Hidden OpenInference content stays not captured.
        let mut hidden = openinference_over_adk(args, timeout, "adk-5");
        hidden.attributes[7] = kvs("input.value", "__REDACTED__");
        hidden.attributes[8] = kvs("output.value", "__REDACTED__");
        let hidden = tool(extract(&hidden).unwrap());
        assert_eq!((hidden.arguments, hidden.result), (None, None));
        // Without OpenInference's TOOL kind the values are not read.
        let mut other = openinference_over_adk(args, timeout, "adk-6");
        other.attributes.remove(5);
        let other = tool(extract(&other).unwrap());
        assert_eq!((other.arguments, other.result), (None, None));
    }

    #[test]
    fn function_response_unwrap_only_for_its_shape() {
        let unwrapped = adk_function_response(Payload::Text(
            r#"{"id":"c1","name":"f","response":{"result":1},"will_continue":false}"#.into(),
        ));
        assert_eq!(unwrapped, Payload::Json(json!({"result": 1})));
        for kept in [
            r#"{"id":"c1","name":"f","response":{"result":1},"extra":2}"#,
            r#"{"id":"c1","response":{"result":1}}"#,
            r#"{"id":"c1","name":"f","response":"text"}"#,
            "plain text",
        ] {
            let payload = Payload::Text(kept.into());
            assert_eq!(adk_function_response(payload.clone()), payload, "{kept}");
        }
    }

    #[test]
    fn adk_no_argument_tool_returning_empty_dict_reads_as_not_captured() {
        // Capture on, `ping()` returning `{}`: the same attributes as capture off (see
        // the module docs), so not captured; a non-empty result is read.
        let empty = span(
            "execute_tool ping",
            vec![
                kvs("gen_ai.operation.name", "execute_tool"),
                kvs("gen_ai.tool.name", "ping"),
                kvs("gen_ai.tool.call.id", "adk-1"),
                kvs("gcp.vertex.agent.tool_call_args", "{}"),
                kvs("gcp.vertex.agent.tool_response", "{}"),
            ],
        );
        let c = tool(extract(&empty).unwrap());
        assert_eq!((c.arguments, c.result), (None, None));
        let mut ticked = empty.clone();
        ticked.attributes[4] = kvs("gcp.vertex.agent.tool_response", r#"{"tick": 0}"#);
        let c = tool(extract(&ticked).unwrap());
        assert_eq!(c.arguments, Some(Payload::Text("{}".into())));
        assert_eq!(c.result, Some(Payload::Text(r#"{"tick": 0}"#.into())));
    }

    #[test]
    fn adk_placeholder_call_id_is_none() {
        let sp = span(
            "execute_tool f",
            vec![kvs("gen_ai.tool.call.id", "<not specified>")],
        );
        assert_eq!(tool(extract(&sp).expect("tool call")).call_id, None);
    }
}
