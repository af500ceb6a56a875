use super::*;
use crate::conventions::test_support::*;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::json;

/// OpenInference's `input.value` / `output.value` of a `ToolInvoker.run` span over
/// `calls` (name, arguments repr, id) with `results` (result repr, error).
fn openinference_span(calls: &[(&str, &str, &str)], results: &[(&str, bool)]) -> Span {
    let call_repr = |(name, args, id): &(&str, &str, &str)| {
        format!("ToolCall(tool_name='{name}', arguments={args}, id='{id}', extra=None)")
    };
    let assistant = format!(
        "ChatMessage(_role=<ChatRole.ASSISTANT: 'assistant'>, _content=[{}], _name=None, _meta={{'model': 'gpt-4o-mini', 'note': \"ToolCall(tool_name='x')\"}})",
        calls.iter().map(call_repr).collect::<Vec<_>>().join(", ")
    );
    let tool_messages: Vec<String> = calls
        .iter()
        .zip(results)
        .map(|(call, (result, error))| {
            let error = if *error { "True" } else { "False" };
            format!(
                "ChatMessage(_role=<ChatRole.TOOL: 'tool'>, _content=[ToolCallResult(result={result}, origin={}, error={error})], _name=None, _meta={{}})",
                call_repr(call)
            )
        })
        .collect();
    let input = json!({"messages": [assistant], "state": null, "streaming_callback": null});
    // Python's `json.dumps` keeps the dict's order: `tool_messages` first.
    let output = format!(
        r#"{{"tool_messages": {}, "state": "<State object at 0x7f>"}}"#,
        json!(tool_messages)
    );
    span(
        "ToolInvoker.run",
        vec![
            kvs("openinference.span.kind", "CHAIN"),
            kvs("input.value", &input.to_string()),
            kvs("output.value", &output),
        ],
    )
}

fn calls(span: &Span) -> Vec<ToolCall> {
    extract_calls(&SpanView::from(span))
        .expect("a ToolInvoker span")
        .into_iter()
        .map(|e| match e.kind {
            EventKind::ToolCall(call) => call,
            other => panic!("not a call: {other:?}"),
        })
        .collect()
}

#[test]
fn openinference_tool_invoker_span_is_one_call_per_tool_call_in_order() {
    let sp = openinference_span(
        &[
            (
                "get_weather",
                "{'city': 'Paris', 'units': 'metric'}",
                "call_1",
            ),
            ("get_time", "{'tz': \"Europe/Paris\", 'ok': True}", "call_2"),
        ],
        &[(r#"'{"temp_c": 18}'"#, false), ("'no such zone'", true)],
    );
    let got = calls(&sp);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].tool_name, "get_weather");
    assert_eq!(got[0].call_id.as_deref(), Some("call_1"));
    assert_eq!(
        got[0].arguments,
        Some(Payload::Json(json!({"city": "Paris", "units": "metric"})))
    );
    assert_eq!(
        got[0].result,
        Some(Payload::Text(r#"{"temp_c": 18}"#.into()))
    );
    assert_eq!(got[0].status, CallStatus::Ok);
    assert_eq!(got[1].tool_name, "get_time");
    assert_eq!(
        got[1].arguments,
        Some(Payload::Json(json!({"tz": "Europe/Paris", "ok": true})))
    );
    assert_eq!(
        got[1].status,
        CallStatus::Error {
            message: "no such zone".into()
        }
    );
}

#[test]
fn results_are_matched_by_origin_not_position() {
    // Newer ToolInvokers put error messages first: results out of call order.
    let mut sp = openinference_span(
        &[("a", "{'n': 1}", "c1"), ("b", "{'n': 2}", "c2")],
        &[("'ra'", false), ("'rb'", false)],
    );
    let output = attr_str(&SpanView::from(&sp).attributes, "output.value")
        .unwrap()
        .to_owned();
    let mut value: Json = serde_json::from_str(&output).unwrap();
    value["tool_messages"].as_array_mut().unwrap().reverse();
    let reordered = format!(r#"{{"tool_messages": {}}}"#, value["tool_messages"]);
    sp.attributes[2] = kvs("output.value", &reordered);
    let got = calls(&sp);
    let names: Vec<_> = got.iter().map(|c| c.tool_name.as_str()).collect();
    assert_eq!(names, ["a", "b"]);
    assert_eq!(got[0].result, Some(Payload::Text("ra".into())));
    assert_eq!(got[1].result, Some(Payload::Text("rb".into())));
}

#[test]
fn haystack_tracer_to_dict_messages_old_and_new_keys() {
    for (role, content) in [("role", "content"), ("_role", "_content")] {
        let call = json!({"tool_name": "get_weather", "arguments": {"city": "Paris"}, "id": null});
        let input = json!({"messages": [{role: "assistant", content: [{"tool_call": call}]}]});
        let output = json!({"tool_messages": [{role: "tool", content: [
            {"tool_call_result": {"result": "sunny", "origin": call, "error": false}}
        ]}]});
        let sp = span(
            COMPONENT_SPAN,
            vec![
                kvs("haystack.component.type", "ToolInvoker"),
                kvs("haystack.component.input", &input.to_string()),
                kvs("haystack.component.output", &output.to_string()),
            ],
        );
        let got = calls(&sp);
        assert_eq!(got.len(), 1, "{role}");
        assert_eq!(got[0].call_id, None);
        assert_eq!(
            got[0].arguments,
            Some(Payload::Json(json!({"city": "Paris"})))
        );
        assert_eq!(got[0].result, Some(Payload::Text("sunny".into())));
    }
}

#[test]
fn repr_fallback_and_output_alone() {
    // `coerce_tag_value` fell back to `str()` of the dict; no input captured.
    let output = "{'tool_messages': [ChatMessage(_role=<ChatRole.TOOL: 'tool'>, _content=[ToolCallResult(result='it\\'s 18', origin=ToolCall(tool_name='get_weather', arguments={'city': 'Paris'}, id='c9'), error=False)], _name=None, _meta={})], 'state': <State object at 0x1>}";
    let sp = span(
        COMPONENT_SPAN,
        vec![kvs("haystack.component.output", output)],
    );
    let got = calls(&sp);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].call_id.as_deref(), Some("c9"));
    assert_eq!(got[0].result, Some(Payload::Text("it's 18".into())));
}

#[test]
fn haystack_3_step_tool_span_is_one_call() {
    let sp = span(
        STEP_TOOL_SPAN,
        vec![
            kvs("haystack.tool.name", "get_weather"),
            kvs("haystack.tool.description", "Weather by city"),
            kvs("haystack.agent.step.tool.input", r#"{"city": "Paris"}"#),
            kvs("haystack.agent.step.tool.output", "cloudy, 18 °C"),
        ],
    );
    let event = extract_step_tool(&SpanView::from(&sp)).expect("a tool span");
    let EventKind::ToolCall(call) = event.kind else {
        panic!("not a call")
    };
    assert_eq!(call.tool_name, "get_weather");
    assert_eq!(
        call.arguments,
        Some(Payload::Text(r#"{"city": "Paris"}"#.into()))
    );
    assert_eq!(call.result, Some(Payload::Text("cloudy, 18 °C".into())));
    let mut nameless = sp.clone();
    nameless.attributes.remove(0);
    assert_eq!(extract_step_tool(&SpanView::from(&nameless)), None);
    let mut other = sp;
    other.name = "haystack.agent.step.llm".into();
    assert_eq!(extract_step_tool(&SpanView::from(&other)), None);
}

#[test]
fn other_spans_are_not_claimed_and_broken_text_never_panics() {
    let chain = span(
        "Agent.run",
        vec![
            kvs("openinference.span.kind", "CHAIN"),
            kvs("output.value", r#"{"messages": []}"#),
        ],
    );
    assert_eq!(extract_calls(&SpanView::from(&chain)), None);
    for text in [
        "ToolCall(",
        "ToolCall(tool_name='a', arguments={'x': [1, 2}, id='c')",
        "ToolCallResult(result='x', origin=ToolCall(tool_name='a'",
        "tool_messages ToolCall(tool_name=",
        "'unclosed",
        "ToolCall(tool_name='a', arguments={'x': 1}, id='c') ToolCall(=1)",
    ] {
        let sp = span(
            COMPONENT_SPAN,
            vec![kvs(
                "haystack.component.output",
                &format!("{{'tool_messages': [{text}]}}"),
            )],
        );
        let _ = extract_calls(&SpanView::from(&sp));
    }
    // Many unclosed or deeply nested constructors: read in one pass, no recursion.
    for text in [
        "ToolCall(a=[".repeat(50_000),
        "ToolCallResult(origin=ToolCall(tool_name=".repeat(50_000),
        "ToolCall(a=ToolCall(a=".repeat(50_000),
    ] {
        assert_eq!(repr::contents(&text).0, vec![]);
    }
    // The agent's output holds every message too, but is no ToolInvoker's.
    let agent = span(
        COMPONENT_SPAN,
        vec![kvs(
            "haystack.component.output",
            r#"{"messages": [], "tool_messages": []}"#,
        )],
    );
    assert_eq!(extract_calls(&SpanView::from(&agent)), None);
}
