//! google-adk 0.1.0–1.1.x tool spans: one call traced as two sibling spans (from 1.2.0 ADK
//! writes one `execute_tool {name}` span, read by [`crate::conventions::frameworks::genai`]).
//!
//! `flows/llm_flows/functions.py` (tracer `gcp.vertex.agent`, `telemetry.py`):
//! - `__call_tool_async` (and `__call_tool_live`) runs the tool inside a span
//!   `tool_call [{tool.name}]`; `trace_tool_call` sets `gen_ai.system` =
//!   `gcp.vertex.agent` and `gcp.vertex.agent.tool_call_args` = `json.dumps(args)`. No call
//!   id, no result; a tool that raises ends it with status ERROR.
//! - then `__build_response_event`, in a span `tool_response [{tool.name}]` opened after the
//!   first one ended, under the same parent: the result (a non-dict result wrapped as
//!   `{"result": value}`) becomes the `FunctionResponse` part of an `Event`, and
//!   `trace_tool_response` sets `gen_ai.system`, `gcp.vertex.agent.invocation_id`,
//!   `gcp.vertex.agent.event_id`, `gcp.vertex.agent.tool_response` = the Event's
//!   `model_dump_json(exclude_none=True)` (field names, not aliases:
//!   `{"content":{"parts":[{"function_response":{"id":…,"name":…,"response":{…}}}],
//!   "role":"user"},"invocation_id":…,"author":…,"actions":{…},"id":…,"timestamp":…}`), and
//!   `gcp.vertex.agent.llm_request` / `.llm_response` = `{}`.
//! - With several function calls in one model response, each still gets its pair, and one
//!   more span named `tool_response` (no tool name) carries the merged Event: not a call.
//! - A `before_tool_callback` that answers for the tool skips `__call_tool_async`: a
//!   `tool_response [name]` with no `tool_call [name]` before it, whose call cannot be
//!   found by id: the `call_llm` span's `gcp.vertex.agent.llm_response` is written before
//!   ADK gives the function calls their `adk-` ids (`base_llm_flow.py` `_call_llm_async`,
//!   `_finalize_model_response_event`) and the next `llm_request` has them stripped
//!   (`contents.py` `remove_client_function_call_id`), so with Gemini (no model call ids)
//!   the response's `function_response.id` is the id's only copy. Live mode
//!   (`__call_tool_live`) writes `tool_call [name]` alone.
//!
//! `tool_call [name]` is a tool call with arguments and no result ([`SplitSpan::Call`]).
//! `tool_response [name]` is its result alone ([`SplitSpan::Result`]): the `response` of
//! its `function_response` part, as [`crate::conventions::frameworks::genai`] reads the `FunctionResponse` of ADK
//! 1.x, so the per-call id, event id and timestamp never make identical results differ.
//! The registry gives a `tool_call` the result of the next span of the same tool under the
//! same parent when that is a `tool_response` (DESIGN §2 "One call, one event"); a result
//! without such a call is no call.
//!
//! Source: google/adk-python `src/google/adk/flows/llm_flows/functions.py` and
//! `src/google/adk/telemetry.py`, tags v0.1.0 – v1.1.1.

use serde_json::Value as Json;

use crate::conventions::event::{EventKind, ExtractedEvent, Payload, SplitSpan, ToolCall};
use crate::conventions::{agent_name, call_status, payload_attr};
use crate::otlp::view::{attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "adk-legacy";

/// `gen_ai.system` ADK writes on both spans.
const ADK_SYSTEM: &str = "gcp.vertex.agent";

/// The call (`tool_call [name]`) or the result (`tool_response [name]`) of a google-adk
/// 0.1.0–1.1.x tool span; `None` for any other span, ADK's merged `tool_response` span
/// included.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    // The name first: one compare of its first byte for almost every span.
    if !span.name.starts_with("tool_") {
        return None;
    }
    let (tool_name, split) = match span_tool_name(&span.name, "tool_call [") {
        Some(name) => (name, SplitSpan::Call),
        None => (
            span_tool_name(&span.name, "tool_response [")?,
            SplitSpan::Result,
        ),
    };
    let attrs = &span.attributes;
    if attr_str(attrs, "gen_ai.system") != Some(ADK_SYSTEM) {
        return None;
    }
    let call = if split == SplitSpan::Result {
        ToolCall {
            tool_name: tool_name.to_owned(),
            call_id: None,
            arguments: None,
            result: Some(function_response(
                payload_attr(attrs, &["gcp.vertex.agent.tool_response"])?,
                tool_name,
            )),
            status: call_status(span),
            split,
        }
    } else {
        ToolCall {
            tool_name: tool_name.to_owned(),
            call_id: None,
            arguments: payload_attr(attrs, &["gcp.vertex.agent.tool_call_args"]),
            result: None,
            status: call_status(span),
            split,
        }
    };
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(call),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

/// `name` of a span named `{prefix}{name}]` (a non-empty name).
fn span_tool_name<'a>(span_name: &'a str, prefix: &str) -> Option<&'a str> {
    span_name
        .strip_prefix(prefix)?
        .strip_suffix(']')
        .filter(|name| !name.is_empty())
}

/// The tool's result in ADK's response Event: the `response` of the `function_response`
/// part named `tool_name` (the first one when none is); the recorded value when it is no
/// such Event (its ids and timestamp then make every result differ: no false loop).
fn function_response(recorded: Payload, tool_name: &str) -> Payload {
    let event = match &recorded {
        Payload::Json(value) => Some(value.clone()),
        Payload::Text(text) => serde_json::from_str::<Json>(text).ok(),
        Payload::Bytes(bytes) => serde_json::from_slice::<Json>(bytes).ok(),
    };
    let parts = event
        .as_ref()
        .and_then(|e| e.get("content")?.get("parts")?.as_array());
    let responses = || {
        parts
            .into_iter()
            .flatten()
            .filter_map(|part| part.get("function_response"))
    };
    let found = responses()
        .find(|r| r.get("name").and_then(Json::as_str) == Some(tool_name))
        .or_else(|| responses().next());
    match found {
        Some(response) => crate::conventions::frameworks::genai::adk_function_response(
            Payload::Json(response.clone()),
        ),
        None => recorded,
    }
}

#[cfg(test)]
mod tests {
    use crate::conventions::event::{CallStatus, EventKind, Payload, SplitSpan, ToolCall};
    use crate::conventions::extract;
    use crate::conventions::test_support::*;
    use serde_json::json;

    /// `tool_call [get_weather]` as `__call_tool_async` and `trace_tool_call` write it.
    fn call_span(args: &str) -> opentelemetry_proto::tonic::trace::v1::Span {
        span(
            "tool_call [get_weather]",
            vec![
                kvs("gen_ai.system", "gcp.vertex.agent"),
                kvs("gcp.vertex.agent.tool_call_args", args),
            ],
        )
    }

    /// `tool_response [{name}]` as `__build_response_event` and `trace_tool_response` write
    /// it: the Event's `model_dump_json(exclude_none=True)`.
    fn response_span(name: &str, event: &str) -> opentelemetry_proto::tonic::trace::v1::Span {
        span(
            name,
            vec![
                kvs("gen_ai.system", "gcp.vertex.agent"),
                kvs("gcp.vertex.agent.invocation_id", "e-6a9c1f2e-3d4b"),
                kvs("gcp.vertex.agent.event_id", "Xk2pQ9aB"),
                kvs("gcp.vertex.agent.tool_response", event),
                kvs("gcp.vertex.agent.llm_request", "{}"),
                kvs("gcp.vertex.agent.llm_response", "{}"),
            ],
        )
    }

    fn event_json(call_id: &str, event_id: &str, response: &str) -> String {
        format!(
            concat!(
                r#"{{"content":{{"parts":[{{"function_response":{{"id":"{}","name":"get_weather","#,
                r#""response":{}}}}}],"role":"user"}},"invocation_id":"e-6a9c1f2e-3d4b","#,
                r#""author":"weather_agent","actions":{{"state_delta":{{}},"artifact_delta":{{}},"#,
                r#""requested_auth_configs":{{}}}},"id":"{}","timestamp":1760000000.25}}"#
            ),
            call_id, response, event_id
        )
    }

    fn tool(span: &opentelemetry_proto::tonic::trace::v1::Span) -> ToolCall {
        let event = extract(span).expect("read");
        assert_eq!(event.convention, "adk-legacy");
        match event.kind {
            EventKind::ToolCall(call) => call,
            other => panic!("not a tool call: {other:?}"),
        }
    }

    #[test]
    fn tool_call_span_is_the_call_with_its_arguments() {
        let call = tool(&call_span(r#"{"city": "Paris", "units": "metric"}"#));
        assert_eq!(call.tool_name, "get_weather");
        // `json.dumps(args)`, as recorded.
        assert_eq!(
            call.arguments,
            Some(Payload::Text(
                r#"{"city": "Paris", "units": "metric"}"#.into()
            ))
        );
        assert_eq!((call.result, call.call_id), (None, None));
        assert_eq!(call.split, SplitSpan::Call);
        // A tool that raised: the span's ERROR status.
        let mut failed = call_span("{}");
        failed.status = error_status("ValueError: no such city");
        assert_eq!(
            tool(&failed).status,
            CallStatus::Error {
                message: "ValueError: no such city".into()
            }
        );
    }

    #[test]
    fn tool_response_span_is_the_response_alone() {
        let first = tool(&response_span(
            "tool_response [get_weather]",
            &event_json("adk-0f3c", "Xk2pQ9aB", r#"{"temp_c":18,"sky":"cloudy"}"#),
        ));
        assert_eq!(first.split, SplitSpan::Result);
        assert_eq!(first.tool_name, "get_weather");
        assert_eq!(first.arguments, None);
        assert_eq!(
            first.result,
            Some(Payload::Json(json!({"temp_c": 18, "sky": "cloudy"})))
        );
        // Another call's ids and timestamp: the same result.
        let second = tool(&response_span(
            "tool_response [get_weather]",
            &event_json("adk-77aa", "Pq0zLm3c", r#"{"temp_c":18,"sky":"cloudy"}"#),
        ));
        assert_eq!(second.result, first.result);
        // A non-dict result, wrapped by ADK.
        let wrapped = tool(&response_span(
            "tool_response [get_weather]",
            &event_json("adk-1", "e1", r#"{"result":"18 C, cloudy"}"#),
        ));
        assert_eq!(
            wrapped.result,
            Some(Payload::Json(json!({"result": "18 C, cloudy"})))
        );
    }

    #[test]
    fn merged_parallel_response_and_other_spans_are_no_call() {
        // `handle_function_calls_async`: the merged Event of parallel calls.
        let merged = format!(
            concat!(
                r#"{{"content":{{"parts":[{{"function_response":{{"id":"adk-1","name":"get_weather","#,
                r#""response":{{"t":1}}}}}},{{"function_response":{{"id":"adk-2","name":"get_time","#,
                r#""response":{{"t":2}}}}}}],"role":"user"}},"invocation_id":"{}","author":"a","#,
                r#""actions":{{}},"id":"m1","timestamp":1.5}}"#
            ),
            "e-1"
        );
        assert_eq!(extract(&response_span("tool_response", &merged)), None);
        // Not ADK's (no `gen_ai.system`), or not a tool span name.
        let foreign = span(
            "tool_call [get_weather]",
            vec![kvs("gcp.vertex.agent.tool_call_args", "{}")],
        );
        assert_eq!(extract(&foreign), None);
        let mut unnamed = call_span("{}");
        unnamed.name = "tool_call []".into();
        assert_eq!(extract(&unnamed), None);
        // A response span without its Event attribute has nothing to give.
        let mut empty = response_span("tool_response [get_weather]", "{}");
        empty
            .attributes
            .retain(|kv| kv.key != "gcp.vertex.agent.tool_response");
        assert_eq!(extract(&empty), None);
    }

    #[test]
    fn a_response_that_is_no_adk_event_is_kept_as_recorded() {
        let odd = tool(&response_span("tool_response [get_weather]", "not json"));
        assert_eq!(odd.result, Some(Payload::Text("not json".into())));
    }
}
