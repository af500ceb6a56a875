//! Tool-span shapes of framework versions and settings the recorded corpus does not cover
//! (`tests/fixtures/shapes/`, OTLP/JSON built from each framework's source: see that
//! folder's README and the convention's module docs). Every file holds two traces: trace
//! `a1…` makes the same call three times with the same result, and the default `nudge`
//! profile must warn `repeated_result` at call 3 (`stop` says nothing); trace `b2…` makes
//! three distinct calls and must give nothing. Detections are read through `loopwatch scan`.

use std::process::Command;

use serde_json::Value as Json;

mod common;

use common::fixtures;
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
/// failure marked by `error.type` alone).
const LOOPS_AT_CALL_3: &[&str] = &[
    "logfire_openai_agents_function_span.json",
    "strands_0_1_tool_span.json",
    "google_genai_code_function_parameters.json",
    "google_genai_code_function_parameters_reordered.json",
    "mastra_old_exporter_tool_execute.json",
    "openinference_adk_capture_off.json",
    "openinference_adk_content_on.json",
    "ag2_failure_error_type_only.json",
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

/// (trace_id, call ordinal, pattern, tools, count, severity) of one detection.
type Found = (String, u64, String, Vec<String>, u64, String);

fn scan(file: &str, profile: &str) -> Vec<Found> {
    let path = common::fixtures().join("shapes").join(file);
    let output = Command::new(env!("CARGO_BIN_EXE_loopwatch"))
        .args(["scan", "--format", "json", "--profile", profile])
        .arg(&path)
        .output()
        .expect("run loopwatch scan");
    assert!(
        output.status.success(),
        "scan {file}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let detections: Json = serde_json::from_slice(&output.stdout).expect("scan prints JSON");
    let mut found: Vec<Found> = detections
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["trace_id"].as_str().unwrap().to_owned(),
                d["call"].as_u64().unwrap(),
                d["pattern"].as_str().unwrap().to_owned(),
                d["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_owned())
                    .collect(),
                d["count"].as_u64().unwrap(),
                d["severity"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    found.sort();
    found
}

/// `nudge` warns at call 3 of trace A (`repeated_result`); `stop` finds nothing; trace B
/// gives nothing in either profile.
fn assert_loop_at_call_3(file: &str, tool: &str) {
    assert_eq!(
        scan(file, "nudge"),
        vec![(
            TRACE_A.to_owned(),
            3,
            "repeated_result".to_owned(),
            vec![tool.to_owned()],
            3,
            "warn".to_owned(),
        )],
        "{file} --profile nudge"
    );
    assert_eq!(scan(file, "stop"), vec![], "{file} --profile stop");
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
    for profile in ["nudge", "stop"] {
        assert_eq!(
            scan("adk_noarg_empty_dict_result.json", profile),
            vec![],
            "{profile}"
        );
    }
}
