//! The pre-execution check and approvals over a real engine fed real spans.

use std::time::Instant;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use super::approval::{ApprovalError, Approvals};
use super::*;
use crate::config::Config;
use crate::otlp::test_support::kv;

const TRACE: [u8; 16] = [7; 16];
const TRACE_HEX: &str = "07070707070707070707070707070707";

fn tool_span(i: u8, tool: &str, arguments: &str, result: &str) -> Span {
    let text = |s: &str| Value::StringValue(s.into());
    Span {
        trace_id: TRACE.to_vec(),
        span_id: vec![i + 1; 8],
        name: format!("execute_tool {tool}"),
        start_time_unix_nano: 1_000 + u64::from(i) * 1_000,
        end_time_unix_nano: 1_000 + u64::from(i) * 1_000 + 500,
        attributes: vec![
            kv("gen_ai.operation.name", text("execute_tool")),
            kv("gen_ai.tool.name", text(tool)),
            kv("gen_ai.tool.call.arguments", text(arguments)),
            kv("gen_ai.tool.call.result", text(result)),
        ],
        ..Default::default()
    }
}

/// An engine (config `toml` over the defaults) that has seen `calls` identical calls of
/// `read_file {"path":"a.txt"}` returning the same text.
fn engine_after(calls: u8, toml: &str) -> Engine {
    let mut config = Config::from_toml(toml).expect("config");
    config.detection.fingerprint_key = Some("test".into());
    let engine = Engine::from_config(&config).expect("engine");
    let spans = (0..calls)
        .map(|i| tool_span(i, "read_file", r#"{"path": "a.txt"}"#, "no such file"))
        .collect();
    let mut request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    engine.process(&mut request, Instant::now());
    engine
}

fn ask(tool: &str, arguments: serde_json::Value) -> CheckRequest {
    CheckRequest {
        trace_id: Some(TRACE_HEX.to_uppercase()),
        run_key: None,
        tool_name: tool.into(),
        arguments: Some(arguments),
    }
}

#[test]
fn an_unknown_run_is_allowed() {
    let engine = engine_after(0, "");
    let answer = check(&engine, &ask("read_file", serde_json::json!({}))).unwrap();
    assert_eq!(answer.decision, Decision::Allow);
    assert!(!answer.known_run);
    assert_eq!((answer.pattern.as_str(), answer.count), ("", 0));
}

#[test]
fn the_call_that_would_complete_a_nudge_is_a_warn_and_changes_nothing() {
    let engine = engine_after(2, "");
    let before = engine.registry.events(TRACE_HEX).unwrap().len();
    // JSON text and the object it encodes are the same call.
    for arguments in [
        serde_json::json!({"path": "a.txt"}),
        serde_json::json!(r#"{"path":"a.txt"}"#),
    ] {
        let answer = check(&engine, &ask("read_file", arguments)).unwrap();
        assert_eq!(answer.decision, Decision::Warn, "{answer:?}");
        assert_eq!(answer.pattern, "repeated_result");
        assert_eq!(answer.count, 3);
        assert_eq!(answer.profile, "nudge");
        assert!(answer.known_run);
        assert!(
            answer.message.starts_with(
                "You seem to be stuck in a loop: read_file returned the same result 3 times"
            ),
            "{}",
            answer.message
        );
    }
    // Asking twice changed no state: no event, no detection.
    assert_eq!(engine.registry.events(TRACE_HEX).unwrap().len(), before);
    assert!(engine.registry.detections(TRACE_HEX).unwrap().is_empty());
    // Another call is allowed.
    let other = check(
        &engine,
        &ask("read_file", serde_json::json!({"path": "b.txt"})),
    )
    .unwrap();
    assert_eq!(other.decision, Decision::Allow);
    assert!(other.known_run);
}

#[test]
fn the_call_that_would_complete_a_stop_is_denied() {
    // Five calls: the nudge fired at the third (its window restarted), the stop profile
    // counts five of six.
    let engine = engine_after(5, "");
    let answer = check(
        &engine,
        &ask("read_file", serde_json::json!({"path": "a.txt"})),
    )
    .unwrap();
    assert_eq!(answer.decision, Decision::Deny, "{answer:?}");
    assert_eq!(
        (answer.pattern.as_str(), answer.count),
        ("repeated_result", 6)
    );
    assert_eq!(answer.profile, "stop");
    assert!(answer.message.starts_with("loopwatch stopped this run: "));
}

#[test]
fn a_require_approval_profile_asks_for_approval_and_an_approval_resets_its_counters() {
    let toml = "[profiles.stop]\naction = \"require_approval\"\n";
    let engine = engine_after(5, toml);
    let call = ask("read_file", serde_json::json!({"path": "a.txt"}));
    let answer = check(&engine, &call).unwrap();
    assert_eq!(answer.decision, Decision::RequireApproval, "{answer:?}");
    assert!(answer.message.starts_with("loopwatch paused this run"));

    let approvals = Approvals {
        signals: None,
        metrics: Default::default(),
    };
    // Nothing awaits approval yet: the sixth call has not been made.
    assert_eq!(
        approvals.deny(&engine, TRACE_HEX),
        Err(ApprovalError::NothingToDeny(TRACE_HEX.into()))
    );
    let answered = approvals.approve(&engine, TRACE_HEX).unwrap();
    assert_eq!(answered.decision, "approve");
    assert_eq!(answered.profiles, ["nudge", "stop"]);
    assert_eq!(check(&engine, &call).unwrap().decision, Decision::Allow);
    assert_eq!(
        approvals.approve(&engine, "no-such-run"),
        Err(ApprovalError::UnknownRun("no-such-run".into()))
    );
}

#[test]
fn a_denial_answers_the_latest_detection_awaiting_approval() {
    let toml = "[profiles.stop]\naction = \"require_approval\"\n";
    let engine = engine_after(6, toml);
    let detections = engine.registry.detections(TRACE_HEX).unwrap();
    let last = detections.last().unwrap();
    assert_eq!(
        last.detection.severity.action_in(last.profile.action),
        Some(Action::RequireApproval)
    );
    let approvals = Approvals {
        signals: Some(crate::signals::SignalHub::without_sinks(16)),
        metrics: Default::default(),
    };
    let answered = approvals.deny(&engine, TRACE_HEX).unwrap();
    assert_eq!(answered.decision, "deny");
    assert_eq!(answered.profiles, ["stop"]);
    let hub = approvals.signals.as_ref().unwrap();
    let published = hub.recent(Some(TRACE_HEX), None, Some(Action::Kill));
    assert_eq!(published.len(), 1);
    assert_eq!(published[0].id.as_str(), answered.signal_id);
    assert!(published[0]
        .message
        .starts_with("loopwatch stopped this run: "));
}

#[test]
fn requests_without_a_run_or_a_tool_are_errors() {
    let engine = engine_after(0, "");
    let mut request = ask("read_file", serde_json::json!({}));
    request.tool_name.clear();
    assert_eq!(check(&engine, &request), Err(CheckError::NoToolName));
    let mut request = ask("read_file", serde_json::json!({}));
    request.trace_id = None;
    assert_eq!(check(&engine, &request), Err(CheckError::NoRun));
    request.trace_id = Some("xyz".into());
    assert_eq!(
        check(&engine, &request),
        Err(CheckError::BadTraceId("xyz".into()))
    );
}

#[test]
fn an_approval_survives_a_replay_for_a_late_span() {
    let toml = "[profiles.stop]\naction = \"require_approval\"\n";
    let engine = engine_after(5, toml);
    let approvals = Approvals {
        signals: None,
        metrics: Default::default(),
    };
    approvals.approve(&engine, TRACE_HEX).unwrap();
    // A span of another tool that started before the others arrives late: the run is
    // replayed from its first event.
    let mut late = tool_span(40, "list_dir", "{}", "[]");
    late.start_time_unix_nano = 10;
    late.end_time_unix_nano = 20;
    let mut request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![late],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    engine.process(&mut request, Instant::now());
    assert_eq!(engine.registry.events(TRACE_HEX).unwrap().len(), 6);
    let call = ask("read_file", serde_json::json!({"path": "a.txt"}));
    assert_eq!(check(&engine, &call).unwrap().decision, Decision::Allow);
}
