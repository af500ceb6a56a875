//! Tool-span shapes of framework versions and settings the recorded corpus does not cover
//! (`tests/fixtures/shapes/`, OTLP/JSON built from each framework's source: see that
//! folder's README and the convention's module docs). Every file holds two traces: trace
//! `a1…` makes the same call three times with the same result, and the default `nudge`
//! profile must warn `repeated_result` at call 3 (`stop` says nothing); trace `b2…` makes
//! three distinct calls and must give nothing. Detections are read through `loopwatch scan`.

mod common;

use common::{fixtures, key_of, Key};
use loopwatch::conventions;
use loopwatch::event::EventKind;
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
];

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
    let mut found: Vec<_> = common::scan_json("", &fixtures().join("shapes").join(file))
        .iter()
        .map(|d| {
            (
                d["trace_id"].as_str().unwrap().to_owned(),
                d["profile"].as_str().unwrap().to_owned(),
                key_of(d),
            )
        })
        .collect();
    found.sort();
    found
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
