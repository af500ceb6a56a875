//! Tool-span shapes of framework versions and settings the recorded corpus does not cover
//! (`tests/fixtures/shapes/`, OTLP/JSON built from each framework's source: see that
//! folder's README and the convention's module docs). Every file holds two traces: trace
//! `a1…` makes the same call three times with the same result, and the default `nudge`
//! profile must warn `repeated_result` at call 3 (`stop` says nothing); trace `b2…` makes
//! three distinct calls and must give nothing. Detections are read through `loopwatch scan`.

mod common;

use common::{fixtures, Key};
use loopwatch::conventions;
use loopwatch::event::{EventKind, SplitSpan};
use loopwatch::otlp::view::SpanView;

/// Fixture file and the convention label its tool spans must be read by.
const SHAPES: &[(&str, &str)] = &[
    (
        "logfire_openai_agents_function_span.json",
        "logfire-openai-agents",
    ),
    ("strands_0_1_tool_span.json", "strands-legacy"),
    ("google_genai_code_function_parameters.json", "google-genai"),
    (
        "google_genai_code_function_parameters_reordered.json",
        "google-genai",
    ),
    ("mastra_old_exporter_tool_execute.json", "mastra-legacy"),
];

/// Files whose looping trace must warn at call 3: [`SHAPES`] and shapes read by existing
/// conventions with new rules (OpenInference over ADK with ADK's capture off or on, AG2's
/// failure marked by `error.type` alone, OpenInference's CrewAI `_use` spans whose agent
/// text differs call to call).
const LOOPS_AT_CALL_3: &[&str] = &[
    "logfire_openai_agents_function_span.json",
    "strands_0_1_tool_span.json",
    "google_genai_code_function_parameters.json",
    "google_genai_code_function_parameters_reordered.json",
    "mastra_old_exporter_tool_execute.json",
    "openinference_adk_capture_off.json",
    "openinference_adk_content_on.json",
    "ag2_failure_error_type_only.json",
    "openinference_crewai_tool_use_varying_thought.json",
    ADK_SPLIT,
    ADK_SPLIT_PARALLEL,
];

/// google-adk 0.1.0–1.1.x: each call is a `tool_call [get_weather]` span (arguments) and a
/// `tool_response [get_weather]` span after it under the same parent (result); the
/// parallel variant makes the three calls in one model response, so ADK adds its merged
/// `tool_response` span.
const ADK_SPLIT: &str = "adk_0_1_tool_call_tool_response_spans.json";
const ADK_SPLIT_PARALLEL: &str = "adk_0_1_parallel_merged_tool_response.json";

const TRACE_A: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";

fn request(file: &str) -> loopwatch::otlp::ExportTraceServiceRequest {
    let path = fixtures().join("shapes").join(file);
    loopwatch::scan::read_request(&path).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn every_tool_span_is_one_call_with_arguments_and_result() {
    for (file, convention) in SHAPES {
        let request = request(file);
        let mut calls = 0;
        for rs in &request.resource_spans {
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    let event = conventions::extract_with(&[], &SpanView::from(span))
                        .unwrap_or_else(|| panic!("{file}: span {} not read", span.name));
                    assert_eq!(event.convention, *convention, "{file}");
                    let EventKind::ToolCall(call) = event.kind else {
                        panic!("{file}: not a tool call")
                    };
                    assert_eq!(call.tool_name, "get_weather", "{file}");
                    assert!(call.arguments.is_some(), "{file}: arguments");
                    assert!(call.result.is_some(), "{file}: result");
                    calls += 1;
                }
            }
        }
        assert_eq!(calls, 6, "{file}: tool calls");
    }
}

/// (trace_id, profile, detection) of every detection `loopwatch scan` prints for `file`
/// with the default configuration (both built-in profiles), sorted.
fn scan(file: &str) -> Vec<(String, String, Key)> {
    common::scan_keys("", &fixtures().join("shapes").join(file))
}

/// `nudge` warns `repeated_result` at call 3 of trace A; `stop` finds nothing; trace B
/// gives nothing in either profile.
fn assert_loop_at_call_3(file: &str, tool: &str) {
    let warn: Key = (
        Some(3),
        None,
        "repeated_result".into(),
        vec![tool.into()],
        3,
        "warn".into(),
    );
    assert_eq!(
        scan(file),
        vec![(TRACE_A.to_owned(), "nudge".to_owned(), warn)],
        "{file}"
    );
}

#[test]
fn looping_traces_warn_at_call_3_and_healthy_traces_give_nothing() {
    for file in LOOPS_AT_CALL_3 {
        assert_loop_at_call_3(file, "get_weather");
    }
}

/// Known limit (`src/conventions/genai.rs` module docs): ADK writes a no-argument tool
/// returning `{}` exactly as its capture-off placeholders, so it reads as not captured.
#[test]
fn adk_no_argument_tool_returning_empty_dict_reads_as_not_captured() {
    assert_eq!(scan("adk_noarg_empty_dict_result.json"), vec![]);
}

/// The spans of an ADK 0.1–1.1 fixture in file order, with what each is read as.
fn adk_split_spans(file: &str) -> Vec<(opentelemetry_proto::tonic::trace::v1::Span, String)> {
    let request = request(file);
    let mut out = Vec::new();
    for rs in &request.resource_spans {
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                let read = match conventions::extract_with(&[], &SpanView::from(span)) {
                    None => "-".to_owned(),
                    Some(event) => {
                        assert_eq!(event.convention, "adk-legacy", "{file}: {}", span.name);
                        let EventKind::ToolCall(call) = event.kind else {
                            panic!("{file}: {} not a tool call", span.name)
                        };
                        assert_eq!(call.tool_name, "get_weather");
                        match call.split {
                            SplitSpan::Call => {
                                assert!(call.arguments.is_some() && call.result.is_none());
                                "call".to_owned()
                            }
                            SplitSpan::Result => {
                                assert!(call.arguments.is_none());
                                let result = call.result.expect("result");
                                format!(
                                    "result {}",
                                    serde_json::to_string(&json_of(&result)).unwrap()
                                )
                            }
                            SplitSpan::Whole => panic!("{file}: {} read whole", span.name),
                        }
                    }
                };
                out.push((span.clone(), read));
            }
        }
    }
    out
}

fn json_of(payload: &loopwatch::event::Payload) -> serde_json::Value {
    match payload {
        loopwatch::event::Payload::Json(value) => value.clone(),
        other => panic!("not JSON: {other:?}"),
    }
}

#[test]
fn adk_0_1_tool_call_and_tool_response_spans_are_read_apart() {
    let paris = r#"result {"conditions":"cloudy","temp_c":18}"#;
    for (file, merged) in [(ADK_SPLIT, 0), (ADK_SPLIT_PARALLEL, 1)] {
        let spans = adk_split_spans(file);
        let reads: Vec<(&str, &str)> = spans
            .iter()
            .filter(|(span, _)| span.trace_id[0] == 0xa1)
            .map(|(span, read)| (span.name.as_str(), read.as_str()))
            .collect();
        let mut want = [
            ("tool_call [get_weather]", "call"),
            ("tool_response [get_weather]", paris),
        ]
        .repeat(3);
        // ADK's merged response of parallel calls, then the agent and invocation spans.
        want.extend(vec![("tool_response", "-"); merged]);
        want.extend([("agent_run [weather_agent]", "-"), ("invocation", "-")]);
        assert_eq!(reads, want, "{file}");
    }
}

/// An order of a fixture's spans, from their (name, in trace A) in file order.
type Order = fn(&[(String, bool)]) -> Vec<usize>;

/// The fixture's spans sent one span per request (`scan` reads a folder's files in name
/// order as requests) in the order `order` gives, and scanned.
fn scan_one_span_per_request(file: &str, order: Order) -> Vec<(String, String, Key)> {
    use prost::Message;
    let request = request(file);
    let rs = &request.resource_spans[0];
    let spans = &rs.scope_spans[0].spans;
    let names: Vec<(String, bool)> = spans
        .iter()
        .map(|s| (s.name.clone(), s.trace_id[0] == 0xa1))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    for (n, i) in order(&names).into_iter().enumerate() {
        let mut one = request.clone();
        one.resource_spans[0].scope_spans[0].spans = vec![spans[i].clone()];
        std::fs::write(
            dir.path().join(format!("req-{n:03}.pb")),
            one.encode_to_vec(),
        )
        .unwrap();
    }
    common::scan_keys("", dir.path())
}

#[test]
fn adk_0_1_pairs_hold_in_any_arrival_order() {
    let warn: Key = (
        Some(3),
        None,
        "repeated_result".into(),
        vec!["get_weather".into()],
        3,
        "warn".into(),
    );
    let want = vec![(TRACE_A.to_owned(), "nudge".to_owned(), warn)];
    let orders: [(&str, Order); 3] = [
        ("reversed", |spans| (0..spans.len()).rev().collect()),
        ("responses first", |spans| {
            let (responses, rest): (Vec<usize>, Vec<usize>) =
                (0..spans.len()).partition(|&i| spans[i].0.starts_with("tool_response"));
            responses.into_iter().chain(rest).collect()
        }),
        ("interleaved traces, calls last", |spans| {
            let mut order: Vec<usize> = (0..spans.len()).collect();
            order.sort_by_key(|&i| (spans[i].0.starts_with("tool_call"), !spans[i].1, i));
            order
        }),
    ];
    for file in [ADK_SPLIT, ADK_SPLIT_PARALLEL] {
        for (label, order) in orders {
            assert_eq!(
                scan_one_span_per_request(file, order),
                want,
                "{file}: {label}"
            );
        }
    }
}

#[test]
fn adk_0_1_result_spans_are_no_calls_for_budgets() {
    // Three calls per trace, six tool spans: `max_tool_calls = 3` holds, 2 is passed.
    let budget = |limit: u32| -> Vec<(String, u64)> {
        let config = format!("[budgets]\nmax_tool_calls = {limit}\n");
        common::scan_json(&config, &fixtures().join("shapes").join(ADK_SPLIT_PARALLEL))
            .iter()
            .filter(|d| d["pattern"] == "budget_exceeded")
            .map(|d| {
                (
                    d["trace_id"].as_str().unwrap()[..4].to_owned(),
                    d["count"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(budget(3), vec![]);
    let mut passed = budget(2);
    passed.sort();
    assert_eq!(passed, vec![("a1a1".into(), 3), ("b2b2".into(), 3)]);
}
