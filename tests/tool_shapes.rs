//! Framework tool-call shapes (`tests/fixtures/shapes/`, see its README for the source of
//! each): the exact detections of both profiles through `scan`. Trace A (`a1a1…`) is three
//! identical calls with the same result, trace B (`b2b2…`) three distinct calls.

use std::process::Command;

use serde_json::Value as Json;

mod common;

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

const TRACE_A: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";

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
fn openinference_over_adk_with_adk_capture_off_reads_openinference_content() {
    assert_loop_at_call_3("openinference_adk_capture_off.json", "get_weather");
}

#[test]
fn openinference_over_adk_with_capture_on_is_unchanged() {
    assert_loop_at_call_3("openinference_adk_content_on.json", "get_weather");
}

#[test]
fn ag2_failure_marked_by_error_type_only_is_the_same_error() {
    assert_loop_at_call_3("ag2_failure_error_type_only.json", "get_weather");
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
