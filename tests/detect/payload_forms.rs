//! Tool-payload forms (issue 29 item 7; the table in `docs/conventions-forms.md`): every
//! form pinned by a fixture of `tests/fixtures/shapes/` built from a real export shape
//! (recorded by `openai_agents_otel_record.py`, or written from the cited source by
//! `payload_shapes.py`). Each file holds trace `a1…` (the same call three times, the same
//! outcome: `nudge` warns `repeated_result` at call 3) and trace `b2…` (three distinct
//! calls: nothing). Events and attributes are read through both span paths: the OTLP/JSON
//! decoder's view of a decoded span and the protobuf wire reader's view of its bytes.

use crate::support;

use crate::support::spans::{fixtures, Key};
use loopwatch::conventions;
use loopwatch::conventions::event::{CallStatus, EventKind, ExtractedEvent, Payload, ToolCall};
use loopwatch::otlp::view::SpanView;
use loopwatch::otlp::wire::WireRequest;
use prost::Message;

const TRACE_A: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";

/// How a fixture's tool spans must read.
struct Form {
    file: &'static str,
    convention: &'static str,
    /// Trace A's outcome: `Ok(result)` or `Err(error message)`.
    outcome_a: Result<&'static str, &'static str>,
}

const ARGS: &str = r#"{"city": "Paris", "units": "metric"}"#;
const RESULT: &str = r#"{"temp_c": 18, "conditions": "cloudy"}"#;

const FORMS: &[Form] = &[
    // openai-agents-opentelemetry ≥ 0.2: arguments only in the `gen_ai.tool.input` event.
    Form {
        file: "openai_agents_otel_tool_events.json",
        convention: "genai",
        outcome_a: Ok(RESULT),
    },
    Form {
        file: "genai_operation_details_tool_attributes.json",
        convention: "genai",
        outcome_a: Ok(RESULT),
    },
    Form {
        file: "genai_execute_tool_exception_event.json",
        convention: "genai",
        outcome_a: Err("PermissionError: weather service refused the API key"),
    },
    Form {
        file: "genai_tool_call_decision_deny.json",
        convention: "genai",
        outcome_a: Err("tool call denied (gen_ai.tool.call.decision: deny)"),
    },
    Form {
        file: "genai_legacy_tool_input_output.json",
        convention: "genai",
        outcome_a: Ok(RESULT),
    },
    Form {
        file: "mlflow_tool_span.json",
        convention: "mlflow",
        outcome_a: Ok(RESULT),
    },
];

fn path(file: &str) -> std::path::PathBuf {
    fixtures().join("shapes").join(file)
}

fn request(file: &str) -> loopwatch::otlp::ExportTraceServiceRequest {
    loopwatch::cli::scan::read_request(&path(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// The tool calls of `file` read through the decoded span's view and through the wire
/// reader's view of the same request's protobuf bytes; both must be equal.
fn calls_both_paths(file: &str) -> Vec<(String, ExtractedEvent)> {
    let request = request(file);
    let mut decoded = Vec::new();
    for rs in &request.resource_spans {
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                if let Some(event) = conventions::extract_with(&[], &SpanView::from(span)) {
                    decoded.push((hex(&span.trace_id), event));
                }
            }
        }
    }
    let wire = WireRequest::read(request.encode_to_vec().into()).expect("wire read");
    let from_wire: Vec<(String, ExtractedEvent)> = wire
        .spans()
        .iter()
        .filter_map(|w| conventions::extract_with(&[], &w.span).map(|e| (hex(w.span.trace_id), e)))
        .collect();
    assert_eq!(
        decoded, from_wire,
        "{file}: decoded and wire views read alike"
    );
    decoded
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn tool_call(event: &ExtractedEvent) -> &ToolCall {
    match &event.kind {
        EventKind::ToolCall(call) => call,
        other => panic!("not a tool call: {other:?}"),
    }
}

fn json(payload: &Payload) -> serde_json::Value {
    match payload {
        Payload::Text(text) => serde_json::from_str(text).expect("JSON text"),
        Payload::Json(value) => value.clone(),
        Payload::Bytes(bytes) => serde_json::from_slice(bytes).expect("JSON bytes"),
    }
}

#[test]
fn every_form_reads_name_arguments_and_outcome_on_both_span_paths() {
    for form in FORMS {
        let calls = calls_both_paths(form.file);
        let tool_calls: Vec<&(String, ExtractedEvent)> = calls
            .iter()
            .filter(|(_, e)| matches!(e.kind, EventKind::ToolCall(_)))
            .collect();
        assert_eq!(tool_calls.len(), 6, "{}: tool calls", form.file);
        for (trace, event) in tool_calls {
            assert_eq!(event.convention, form.convention, "{}", form.file);
            let call = tool_call(event);
            assert_eq!(call.tool_name, "get_weather", "{}", form.file);
            let args = json(call.arguments.as_ref().expect("arguments"));
            assert_eq!(args["units"], "metric", "{}", form.file);
            if trace != TRACE_A {
                assert!(call.result.is_some(), "{}: B result", form.file);
                assert_eq!(call.status, CallStatus::Ok, "{}", form.file);
                continue;
            }
            assert_eq!(args, json(&Payload::Text(ARGS.into())), "{}", form.file);
            match form.outcome_a {
                Ok(result) => {
                    let got = json(call.result.as_ref().expect("result"));
                    assert_eq!(got, json(&Payload::Text(result.into())), "{}", form.file);
                    assert_eq!(call.status, CallStatus::Ok, "{}", form.file);
                }
                Err(message) => {
                    assert_eq!(call.result, None, "{}", form.file);
                    assert_eq!(
                        call.status,
                        CallStatus::Error {
                            message: message.into()
                        },
                        "{}",
                        form.file
                    );
                }
            }
        }
    }
}

/// `nudge` warns `repeated_result` at call 3 of trace A and nothing else.
fn loop_at_call_3() -> Vec<(String, String, Key)> {
    let warn: Key = (
        Some(3),
        None,
        "repeated_result".into(),
        vec!["get_weather".into()],
        3,
        "warn".into(),
    );
    vec![(TRACE_A.to_owned(), "nudge".to_owned(), warn)]
}

#[test]
fn looping_traces_warn_at_call_3_as_json_and_as_protobuf() {
    for form in FORMS {
        assert_eq!(
            support::spans::scan_keys("", &path(form.file)),
            loop_at_call_3(),
            "{} (OTLP/JSON)",
            form.file
        );
        // The same request as protobuf: `scan` reads it with the wire reader.
        let dir = tempfile::tempdir().unwrap();
        let pb = dir.path().join("request.pb");
        std::fs::write(&pb, request(form.file).encode_to_vec()).unwrap();
        assert_eq!(
            support::spans::scan_keys("", &pb),
            loop_at_call_3(),
            "{} (protobuf)",
            form.file
        );
    }
}

#[test]
fn openai_agents_processor_puts_arguments_only_in_the_tool_input_event() {
    // The recorded shape itself: no arguments attribute on the span, the event holds them;
    // the result is both an attribute and the `gen_ai.tool.output` event.
    let request = request("openai_agents_otel_tool_events.json");
    let spans: Vec<_> = request.resource_spans[0].scope_spans[0]
        .spans
        .iter()
        .filter(|s| s.name == "execute_tool get_weather")
        .collect();
    assert_eq!(spans.len(), 6);
    for span in spans {
        let keys: Vec<&str> = span.attributes.iter().map(|kv| kv.key.as_str()).collect();
        assert!(!keys.contains(&"gen_ai.tool.call.arguments"), "{keys:?}");
        assert!(keys.contains(&"gen_ai.tool.call.result"));
        let events: Vec<&str> = span.events.iter().map(|e| e.name.as_str()).collect();
        assert_eq!(events, ["gen_ai.tool.input", "gen_ai.tool.output"]);
    }
}

#[test]
fn openai_agents_processor_0_1_tool_spans_are_calls_without_arguments() {
    // 0.1.x writes `tool.input` only when the SDK gave the input before the span started,
    // which its function tools never do: a call with its result, arguments not captured.
    let calls = calls_both_paths("openai_agents_otel_0_1_tool_span.json");
    let tools: Vec<&ToolCall> = calls
        .iter()
        .filter_map(|(_, e)| match &e.kind {
            EventKind::ToolCall(call) => {
                assert_eq!(e.convention, "openai-agents-otel");
                Some(call)
            }
            EventKind::ModelResponse(_) => None,
        })
        .collect();
    assert_eq!(tools.len(), 6);
    for call in &tools {
        assert_eq!(call.tool_name, "get_weather");
        assert_eq!(call.arguments, None);
        assert_eq!(json(call.result.as_ref().unwrap())["conditions"], "cloudy");
    }
    // Without arguments no pattern can form, but every call counts for budgets.
    assert_eq!(
        support::spans::scan_keys("", &path("openai_agents_otel_0_1_tool_span.json")),
        vec![]
    );
    let budget: Vec<u64> = support::spans::scan_json(
        "[budgets]\nmax_tool_calls = 2\n",
        &path("openai_agents_otel_0_1_tool_span.json"),
    )
    .iter()
    .filter(|d| d["pattern"] == "budget_exceeded")
    .map(|d| d["count"].as_u64().unwrap())
    .collect();
    assert_eq!(budget, vec![3, 3]);
}

#[test]
fn an_attribute_wins_over_the_same_payload_in_an_event() {
    // The recorded result is on the span (cut at 4096 characters) and in the event (cut at
    // 8192): the attribute is read, so a span's reading never depends on its events when
    // its attributes hold the payload.
    let mut request = request("openai_agents_otel_tool_events.json");
    let span = request.resource_spans[0].scope_spans[0]
        .spans
        .iter_mut()
        .find(|s| s.name == "execute_tool get_weather")
        .unwrap();
    for event in &mut span.events {
        for kv in &mut event.attributes {
            kv.value = Some(opentelemetry_proto::tonic::common::v1::AnyValue {
                value: Some(support::spans::s("from the event")),
            });
        }
    }
    let call = conventions::extract_with(&[], &SpanView::from(&*span)).unwrap();
    let call = tool_call(&call);
    assert_eq!(json(call.result.as_ref().unwrap())["temp_c"], 18);
    // The arguments exist only in the event, so they are the event's.
    assert_eq!(call.arguments, Some(Payload::Text("from the event".into())));
}
