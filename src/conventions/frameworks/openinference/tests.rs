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
