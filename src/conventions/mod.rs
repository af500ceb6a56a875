//! Extraction of tool-call and model-response events from spans, one module per
//! convention (DESIGN §2). Conventions are tried in order; the first that claims a span wins,
//! so a span carrying both old and new attribute names yields exactly one event.
//!
//! Order: spans that record several tool calls ([`haystack`] `ToolInvoker` component spans,
//! [`semantic_kernel_legacy`] chat spans with content events), then [`openllmetry`] tool spans (OpenLLMetry 0.6x also writes `gen_ai.*` tool
//! attributes holding its whole callback context), [`langsmith`] tool-run spans (`execute_tool`
//! with content in `gen_ai.prompt` / `gen_ai.completion`), [`google_genai`] tool spans (GenAI tool
//! spans with `code.function.*` content), [`genai`] tool spans, [`llamaindex`],
//! [`smolagents`], [`dspy`], [`openinference`], [`openllmetry`], [`pydantic_legacy`],
//! [`vercel_ai`], [`langfuse`], [`logfire_openai_agents`], [`logfire_llm`],
//! [`strands_legacy`], [`mastra_legacy`], [`adk_legacy`], Haystack 3's per-call spans
//! ([`frameworks::haystack::extract_step_tool`]), LiveKit's `function_tool` spans ([`livekit`]), then inference spans: each convention's response reader
//! (`RESPONSE_READERS`: [`genai`], [`openllmetry`], google-adk in [`genai`],
//! [`pydantic_legacy`], [`mastra_legacy`]; shared rules in [`model_response`]). Before any of them, Logfire pending spans
//! (`logfire.span_type` = `pending_span`) are dropped: they are placeholders for a span that
//! has not ended, not calls.

pub mod agents;
pub mod event;
pub mod run_key;

pub mod custom;
pub mod frameworks;
pub mod json;
pub mod legacy;
pub mod messages;
pub mod wrappers;

mod attributes;

pub use attributes::{
    agent_name, call_id, call_status, first_str, json_from_any_value, payload_attr,
    payload_from_any_value, TOOL_EXCEPTION_EVENT,
};

use crate::conventions::event::{EventKind, ExtractedEvent};
use crate::otlp::view::{attr, attr_str, SpanView};
use crate::otlp::Span;

/// Reads one span. Returns `None` for spans that are neither a tool call nor an
/// inference span (and for pseudo tool spans such as ADK's `execute_tool (merged)`,
/// Logfire pending spans, and inference spans whose output was not captured).
/// Framework wrappers around arguments and results are removed ([`wrappers`]).
/// Reads a decoded `Span` through its borrowed [`SpanView`] ([`extract_with`] takes the view).
pub fn extract(span: &Span) -> Option<ExtractedEvent> {
    extract_with(&[], &SpanView::from(span))
}

/// [`extract`] of a [`SpanView`], with the user's `[[conventions.custom]]` mappings tried
/// first.
pub fn extract_with(
    custom: &[custom::CustomConvention],
    span: &SpanView,
) -> Option<ExtractedEvent> {
    let mut event = extract_with_recorded_arguments(custom, span)?;
    if let EventKind::ToolCall(call) = &mut event.kind {
        call.arguments = call.arguments.take().map(wrappers::normalize_arguments);
    }
    Some(event)
}

/// [`extract_with`], with a tool call's arguments as the span recorded them (results are
/// unwrapped all the same): for the engine, which fingerprints them with
/// `Fingerprinter::call_fingerprint_normalized` and
/// [`wrappers::python_literal_arguments`], the same fingerprint as of [`extract_with`]'s
/// arguments without checking JSON arguments twice. For a span that records several calls
/// ([`extract_all_with_recorded_arguments`]), its first event.
pub fn extract_with_recorded_arguments(
    custom: &[custom::CustomConvention],
    span: &SpanView,
) -> Option<ExtractedEvent> {
    extract_all_with_recorded_arguments(custom, span)
        .into_iter()
        .next()
}

/// Every event of a span, in the span's order (DESIGN §2 "Several calls on one span"): one
/// for most spans, none for a span no convention reads, and for a span that records
/// several calls ([`MULTI_READERS`]) each call (and, for a model span, its response first),
/// at most [`crate::conventions::event::MAX_SPAN_CALLS`]. Arguments as recorded, results unwrapped, as
/// [`extract_with_recorded_arguments`].
pub fn extract_all_with_recorded_arguments(
    custom: &[custom::CustomConvention],
    span: &SpanView,
) -> SpanEvents {
    let mut events = SpanEvents::new();
    if is_pending(span) {
        return events;
    }
    if let Some(event) = custom::extract(custom, span) {
        events.push(unwrap_result(event));
    } else if let Some(found) = MULTI_READERS.iter().find_map(|read| read(span)) {
        let found = found
            .into_iter()
            .take(crate::conventions::event::MAX_SPAN_CALLS);
        events.extend(found.map(unwrap_result));
    } else if let Some(event) = extract_raw(span) {
        events.push(unwrap_result(event));
    }
    events
}

/// `event` with its tool call's result unwrapped ([`wrappers::normalize_result`]).
fn unwrap_result(mut event: ExtractedEvent) -> ExtractedEvent {
    if let EventKind::ToolCall(call) = &mut event.kind {
        call.result = call.result.take().map(wrappers::normalize_result);
    }
    event
}

/// A reader of spans that record several calls: the span's events in order, or `None`.
type MultiReader = fn(&SpanView) -> Option<Vec<ExtractedEvent>>;

/// The events of one span: inline when there is one (the usual case).
pub type SpanEvents = smallvec::SmallVec<[ExtractedEvent; 1]>;

/// Readers of spans that record several tool calls, tried after the user's mappings and
/// before every other reader (no other reader claims these spans); each gives the span's
/// events in order, or `None` when the span is not its shape. A new one is one line here.
const MULTI_READERS: &[MultiReader] = &[
    frameworks::haystack::extract_calls,
    legacy::semantic_kernel::extract_events,
];

/// The readers tried after the GenAI tool-span claim, in order; the first that reads the
/// span wins. A new convention is one file and one line here.
const READERS: &[fn(&SpanView) -> Option<ExtractedEvent>] = &[
    frameworks::llamaindex::extract,
    frameworks::smolagents::extract,
    frameworks::dspy::extract,
    frameworks::openinference::extract,
    frameworks::openllmetry::extract,
    legacy::pydantic::extract,
    frameworks::vercel_ai::extract,
    frameworks::langfuse::extract,
    frameworks::logfire_openai_agents::extract,
    frameworks::logfire_llm::extract,
    legacy::strands::extract,
    legacy::mastra::extract,
    legacy::adk::extract,
    frameworks::haystack::extract_step_tool,
    frameworks::livekit::extract,
    frameworks::openai_agents_otel::extract,
    frameworks::mlflow::extract,
];

/// The readers of an inference span's output ([`model_response`]), tried after every tool
/// reader, in order; the first whose source is on the span decides. A convention that
/// records responses adds its reader here, from its own file.
const RESPONSE_READERS: &[messages::model_response::ResponseReader] = &[
    frameworks::genai::RESPONSE_READER,
    frameworks::openllmetry::RESPONSE_READER,
    frameworks::genai::ADK_RESPONSE_READER,
    legacy::pydantic::RESPONSE_READER,
    legacy::mastra::RESPONSE_READER,
];

fn extract_raw(span: &SpanView) -> Option<ExtractedEvent> {
    if is_pending(span) {
        return None;
    }
    if span.name == legacy::pydantic::SPAN_NAME {
        // pydantic-ai ≤ v2 `running tool` spans (v2 also marks them `execute_tool`).
        return legacy::pydantic::extract(span);
    }
    if frameworks::openllmetry::is_tool_span(span) {
        // OpenLLMetry's own attributes win over the gen_ai.* copies it also writes.
        return frameworks::openllmetry::extract(span);
    }
    if frameworks::langsmith::is_tool_span(span) {
        // LangSmith's tool runs also say `execute_tool`, with content in `gen_ai.prompt` /
        // `gen_ai.completion` and (Python) no `gen_ai.tool.name`.
        return frameworks::langsmith::extract(span);
    }
    if frameworks::genai::is_tool_span(span) {
        if frameworks::google_genai::has_function_parameters(span) {
            // Content in per-parameter `code.function.*` attributes.
            return frameworks::google_genai::extract(span);
        }
        // Claimed even when it yields nothing (ADK merged pseudo span): no fall-through.
        return frameworks::genai::extract_tool(span);
    }
    READERS
        .iter()
        .find_map(|read| read(span))
        .or_else(|| messages::model_response::extract(span, RESPONSE_READERS))
}

/// True for a span that sits between two tool spans of one call (DESIGN §2 "One call, one
/// event", call hops): an MCP server or session span, not a tool span itself. The tool span
/// under it is the same call as a tool span of the same name above it. Read from the span
/// alone, so it answers the same whatever request the span arrives in:
/// - OpenLLMetry's FastMCP `mcp.server` span (`traceloop.span.kind` = `server`,
///   [`frameworks::openllmetry::is_server_span`]);
/// - an MCP semantic-conventions span (`mcp.method.name` or `mcp.session.id` set) that is no
///   tool span (no `gen_ai.operation.name`, no `traceloop.span.kind`).
pub fn is_call_hop(span: &SpanView) -> bool {
    let attrs = &span.attributes;
    frameworks::openllmetry::is_server_span(span)
        || ((attr(attrs, "mcp.method.name").is_some() || attr(attrs, "mcp.session.id").is_some())
            && attr(attrs, "gen_ai.operation.name").is_none()
            && attr(attrs, "traceloop.span.kind").is_none())
}

/// True for a Logfire pending span (`logfire.span_type` = `pending_span`): a placeholder
/// Logfire exports when a span starts, re-sent in full when it ends.
pub fn is_pending(span: &SpanView) -> bool {
    attr_str(&span.attributes, "logfire.span_type") == Some("pending_span")
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Span builders and JSON generators for the convention unit tests.

    /// JSON values up to 5 levels deep built from `leaf`, whose objects have up to 4 keys
    /// taken from `keys` (repeats possible: the last is kept, as `serde_json::Map` does).
    pub fn json_value(
        leaf: impl proptest::strategy::Strategy<Value = serde_json::Value> + 'static,
        keys: Vec<&'static str>,
    ) -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
        use proptest::prelude::*;
        use serde_json::Value as Json;
        leaf.prop_recursive(5, 48, 6, move |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Json::Array),
                prop::collection::vec((prop::sample::select(keys.clone()), inner), 0..5).prop_map(
                    |entries| Json::Object(
                        entries
                            .into_iter()
                            .map(|(k, v)| (k.to_owned(), v))
                            .collect()
                    )
                ),
            ]
        })
    }

    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::trace::v1::{span::Event, Span, Status};

    pub fn s(v: &str) -> AnyValue {
        AnyValue {
            value: Some(Value::StringValue(v.to_owned())),
        }
    }

    pub fn kv(key: &str, value: AnyValue) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Some(value),
            ..Default::default()
        }
    }

    pub fn kvs(key: &str, value: &str) -> KeyValue {
        kv(key, s(value))
    }

    pub fn span(name: &str, attributes: Vec<KeyValue>) -> Span {
        Span {
            name: name.to_owned(),
            attributes,
            ..Default::default()
        }
    }

    pub fn event(name: &str, attributes: Vec<KeyValue>) -> Event {
        Event {
            name: name.to_owned(),
            attributes,
            ..Default::default()
        }
    }

    pub fn error_status(message: &str) -> Option<Status> {
        Some(Status {
            message: message.to_owned(),
            code: 2,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use crate::conventions::event::Payload;
    use crate::otlp::view::AnyValueView;
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue};

    #[test]
    fn pending_span_is_not_a_call() {
        let sp = span(
            "running tool",
            vec![
                kvs("logfire.span_type", "pending_span"),
                kvs("gen_ai.operation.name", "execute_tool"),
                kvs("gen_ai.tool.name", "fetch_url"),
            ],
        );
        assert_eq!(extract(&sp), None);
        // The same span once ended is a call.
        let mut ended = sp.clone();
        ended.attributes[0] = kvs("logfire.span_type", "span");
        let ev = extract(&ended).expect("ended span is a call");
        assert!(matches!(ev.kind, EventKind::ToolCall(ref c) if c.tool_name == "fetch_url"));
    }

    #[test]
    fn unrelated_span_yields_nothing() {
        let sp = span(
            "invoke_agent corpus_agent",
            vec![kvs("gen_ai.operation.name", "invoke_agent")],
        );
        assert_eq!(extract(&sp), None);
    }

    #[test]
    fn bytes_and_structured_payloads() {
        let bytes = AnyValue {
            value: Some(Value::BytesValue(b"{\"a\":1}".to_vec())),
        };
        assert_eq!(
            payload_from_any_value(&AnyValueView::from(&bytes)),
            Some(Payload::Bytes(b"{\"a\":1}".to_vec()))
        );
        let int = AnyValue {
            value: Some(Value::IntValue(7)),
        };
        assert_eq!(
            payload_from_any_value(&AnyValueView::from(&int)),
            Some(Payload::Json(serde_json::json!(7)))
        );
        assert_eq!(payload_from_any_value(&AnyValueView::default()), None);
    }
}
