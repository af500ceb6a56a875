use crate::conventions::event::{EventKind, ModelResponse};
use crate::conventions::extract;
use crate::conventions::test_support::*;
use opentelemetry_proto::tonic::common::v1::KeyValue;

fn logfire_span(template: &str, attributes: Vec<KeyValue>) -> Option<(EventKind, &'static str)> {
    let mut all = vec![
        kvs("logfire.msg_template", template),
        kvs("logfire.span_type", "span"),
        kvs("gen_ai.system", "openai"),
    ];
    all.extend(attributes);
    extract(&span(template, all)).map(|e| (e.kind, e.convention))
}

fn text(t: &str) -> Option<(EventKind, &'static str)> {
    Some((
        EventKind::ModelResponse(ModelResponse::Text(t.into())),
        "logfire",
    ))
}

fn tool_calls() -> Option<(EventKind, &'static str)> {
    Some((
        EventKind::ModelResponse(ModelResponse::ToolCalls),
        "logfire",
    ))
}

const CHAT: &str = "Chat Completion with {request_data[model]!r}";

#[test]
fn chat_completion_response_data() {
    // `on_response`, version 1: `{'message': response.choices[0].message, 'usage': …}`.
    let message = |m: &str| {
        logfire_span(
            CHAT,
            vec![
                kvs(
                    "request_data",
                    r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}]}"#,
                ),
                kvs(
                    "response_data",
                    &format!(r#"{{"message":{m},"usage":{{"total_tokens":3}}}}"#),
                ),
            ],
        )
    };
    assert_eq!(
        message(
            r#"{"content":"Done.","refusal":null,"role":"assistant","audio":null,"function_call":null,"tool_calls":null}"#
        ),
        text("Done.")
    );
    assert_eq!(
        message(
            r#"{"content":null,"role":"assistant","tool_calls":[{"id":"c1","function":{"arguments":"{}","name":"f"},"type":"function"}]}"#
        ),
        tool_calls()
    );
    // The streamed form belongs on the stream's log, not the request span.
    assert_eq!(
        logfire_span(
            CHAT,
            vec![kvs(
                "response_data",
                r#"{"combined_chunk_content":"","chunk_count":0}"#
            )]
        ),
        None
    );
    // version='latest' as well: left to the GenAI reader.
    let latest = logfire_span(
        CHAT,
        vec![
            kvs("gen_ai.operation.name", "chat"),
            kvs(
                "response_data",
                r#"{"message":{"content":"x","role":"assistant"}}"#,
            ),
            kvs(
                "gen_ai.output.messages",
                r#"[{"role":"assistant","parts":[{"type":"text","content":"y"}]}]"#,
            ),
        ],
    );
    assert_eq!(
        latest,
        Some((
            EventKind::ModelResponse(ModelResponse::Text("y".into())),
            "genai"
        ))
    );
}

const STREAM: &str = "streaming response from {request_data[model]!r} took {duration:.2f}s";

/// `record_streaming`'s log: `response_data` by the stream state, beside the request's
/// `request_data`.
fn stream_log(request: &str, response_data: &str) -> Option<(EventKind, &'static str)> {
    logfire_span(
        STREAM,
        vec![
            kvs("logfire.span_type", "log"),
            kvs("request_data", request),
            kvs("response_data", response_data),
            kvs("duration", "0.5"),
        ],
    )
}

const NO_TOOLS: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"hi"}],"stream":true}"#;
const TOOLS: &str = r#"{"model":"claude-sonnet-4-5","max_tokens":1024,"messages":[{"role":"user","content":"hi"}],"tools":[{"name":"f","input_schema":{"type":"object"}}],"stream":true}"#;

#[test]
fn streamed_chat_message_snapshot_with_and_without_tool_calls() {
    // `OpenaiChatCompletionStreamState` (openai >= 1.40): the accumulated message.
    assert_eq!(
        stream_log(
            TOOLS,
            r#"{"message":{"content":"Done.","refusal":null,"role":"assistant","tool_calls":null,"parsed":null},"usage":null}"#
        ),
        text("Done.")
    );
    assert_eq!(
        stream_log(
            TOOLS,
            r#"{"message":{"content":null,"role":"assistant","tool_calls":[{"id":"c1","function":{"arguments":"{}","name":"f","parsed_arguments":null},"type":"function","index":0}]},"usage":null}"#
        ),
        tool_calls()
    );
    // No choices: `message` null, nothing.
    assert_eq!(stream_log(TOOLS, r#"{"message":null,"usage":null}"#), None);
}

#[test]
fn streamed_combined_chunk_content_is_the_text_only_without_tools_offered() {
    let combined = |request: &str, content: &str, count: u32| {
        stream_log(
            request,
            &format!(r#"{{"combined_chunk_content":"{content}","chunk_count":{count}}}"#),
        )
    };
    assert_eq!(combined(NO_TOOLS, "No.", 2), text("No."));
    assert_eq!(combined(NO_TOOLS, "", 0), None);
    // Tools offered: the `tool_use` blocks were left out of the text.
    assert_eq!(combined(TOOLS, "Let me look.", 3), None);
    assert_eq!(combined(TOOLS, "", 0), tool_calls());
    // `tool_choice` none (Anthropic, OpenAI): no tool call can be in the response.
    let anthropic_none = TOOLS.replace(r#""stream""#, r#""tool_choice":{"type":"none"},"stream""#);
    assert_eq!(combined(&anthropic_none, "No.", 1), text("No."));
    let openai_none = r#"{"model":"gpt-4o","messages":[],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"}"#;
    assert_eq!(combined(openai_none, "No.", 1), text("No."));
    let legacy_functions = r#"{"model":"gpt-4","messages":[],"functions":[{"name":"f"}]}"#;
    assert_eq!(combined(legacy_functions, "x", 1), None);
    // `latest` semantic conventions as well: left to GenAI.
    assert_eq!(
        logfire_span(
            STREAM,
            vec![
                kvs("gen_ai.operation.name", "chat"),
                kvs("request_data", NO_TOOLS),
                kvs(
                    "response_data",
                    r#"{"combined_chunk_content":"x","chunk_count":1}"#
                ),
                kvs(
                    "gen_ai.output.messages",
                    r#"[{"role":"assistant","parts":[{"type":"text","content":"y"}]}]"#,
                ),
            ],
        ),
        Some((
            EventKind::ModelResponse(ModelResponse::Text("y".into())),
            "genai"
        ))
    );
}

#[test]
fn streamed_responses_api_events_and_whole_response() {
    let request = r#"{"model":"gpt-4.1","stream":true}"#;
    let with = |attribute: (&str, &str)| {
        logfire_span(
            STREAM,
            vec![kvs("request_data", request), kvs(attribute.0, attribute.1)],
        )
    };
    assert_eq!(
        with((
            "events",
            r#"[{"event.name":"gen_ai.user.message","content":"hi","role":"user"},{"event.name":"gen_ai.assistant.message","content":"Done.","role":"assistant"}]"#
        )),
        text("Done.")
    );
    assert_eq!(
        with((
            "events",
            r#"[{"event.name":"gen_ai.user.message","content":"hi","role":"user"},{"event.name":"gen_ai.assistant.message","role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}]"#
        )),
        tool_calls()
    );
    // v4.12: the whole `Response` as `response_data`.
    assert_eq!(
        with((
            "response_data",
            r#"{"id":"resp_1","object":"response","output":[{"id":"fc","type":"function_call","name":"f","arguments":"{}","call_id":"c1"}]}"#
        )),
        tool_calls()
    );
    assert_eq!(
        with((
            "response_data",
            r#"{"id":"resp_1","object":"response","output":[{"id":"m","type":"message","role":"assistant","content":[{"type":"output_text","text":"Done.","annotations":[]}]}]}"#
        )),
        text("Done.")
    );
}

#[test]
fn anthropic_message_and_completion() {
    let message = "Message with {request_data[model]!r}";
    assert_eq!(
        logfire_span(
            message,
            vec![kvs(
                "response_data",
                r#"{"message":{"id":"m","content":[{"citations":null,"text":"No.","type":"text"}],"role":"assistant","type":"message"},"usage":{}}"#,
            )]
        ),
        text("No.")
    );
    assert_eq!(
        logfire_span(
            message,
            vec![kvs(
                "response_data",
                r#"{"message":{"content":[{"text":"Let me look.","type":"text"},{"id":"t","input":{},"name":"f","type":"tool_use"}],"role":"assistant","type":"message"}}"#,
            )]
        ),
        tool_calls()
    );
    assert_eq!(
        logfire_span(
            "Completion with {request_data[model]!r}",
            vec![kvs(
                "response_data",
                r#"{"finish_reason":"stop","text":"42","usage":null}"#
            )]
        ),
        text("42")
    );
}

#[test]
fn responses_api_response_then_events() {
    let template = "Responses API with {gen_ai.request.model!r}";
    // The agents integration's `response`: reasoning, then the message.
    assert_eq!(
        logfire_span(
            template,
            vec![kvs(
                "response",
                r#"{"id":"resp_1","output":[{"id":"rs","summary":[{"text":"thinking","type":"summary_text"}],"type":"reasoning"},{"id":"msg","content":[{"annotations":[],"text":"Done.","type":"output_text"}],"role":"assistant","status":"completed","type":"message"}]}"#,
            )]
        ),
        text("Done.")
    );
    // `events` only: the input's events, then the response's.
    let events = |output: &str| {
        logfire_span(
            template,
            vec![kvs(
                "events",
                &format!(
                    r#"[{{"event.name":"gen_ai.user.message","content":"hi","role":"user"}},{{"event.name":"gen_ai.assistant.message","content":"earlier answer","role":"assistant"}},{{"event.name":"gen_ai.tool.message","role":"tool","id":"c0","content":"42","name":"f"}},{output}]"#
                ),
            )],
        )
    };
    assert_eq!(
        events(
            r#"{"event.name":"gen_ai.unknown","role":"assistant","content":"reasoning\n\nSee JSON for details","data":{}},{"event.name":"gen_ai.assistant.message","content":"Done.","role":"assistant"}"#
        ),
        text("Done.")
    );
    assert_eq!(
        events(
            r#"{"event.name":"gen_ai.assistant.message","role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]}"#
        ),
        tool_calls()
    );
    // No output events (the response is not there): nothing.
    assert_eq!(
        logfire_span(
            template,
            vec![kvs(
                "events",
                r#"[{"event.name":"gen_ai.user.message","content":"hi","role":"user"}]"#
            )]
        ),
        None
    );
}

#[test]
fn other_logfire_spans_are_not_read() {
    assert_eq!(
        logfire_span(
            "Embedding Creation with {request_data[model]!r}",
            vec![kvs("response_data", r#"{"usage":{}}"#)]
        ),
        None
    );
}
