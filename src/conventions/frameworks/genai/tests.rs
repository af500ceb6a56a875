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
                &format!(r#"{{"id": "{call}", "name": "get_weather", "response": {response}}}"#),
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
