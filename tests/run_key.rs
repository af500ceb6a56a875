//! `detection.run_key_attribute`: spans of several traces that share a session form one run
//! (DESIGN §2 "Run key"), and the admin API still finds the run by any of its trace ids.

mod common;

use common::*;
use loopwatch::config::Config;
use loopwatch::engine::Engine;
use opentelemetry_proto::tonic::common::v1::any_value::Value;

/// s05 (12 identical calls, same result) with its spans spread over two traces that share
/// `session.id` (on every span, as frameworks put `gen_ai.conversation.id` on all of a run's
/// spans).
fn split_over_two_traces(
) -> opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest {
    let scenario =
        read_json(&fixtures().join("oracle/scenarios/s05_same_call_same_result_x12.json"));
    let mut request = scenario_request(&scenario, [0xa1; 16], false);
    let spans = &mut request.resource_spans[0].scope_spans[0].spans;
    for (i, span) in spans.iter_mut().enumerate() {
        if i % 4 >= 2 {
            span.trace_id = vec![0xb2; 16];
        }
        span.attributes
            .push(kv("session.id", Value::StringValue("session-17".into())));
    }
    request
}

fn calls(detections: &[loopwatch::registry::RunDetection], profile: &str) -> Vec<Option<usize>> {
    detections
        .iter()
        .filter(|d| d.profile.name == profile)
        .map(|d| d.detection.call)
        .collect()
}

#[test]
fn one_session_over_two_traces_is_one_run() {
    let expected =
        read_json(&fixtures().join("oracle/expected/s05_same_call_same_result_x12.json"));
    let mut config = Config::default();
    config.detection.run_key_attribute = "session.id".into();
    let engine = Engine::from_config(&config).unwrap();
    engine.process(&mut split_over_two_traces(), std::time::Instant::now());
    let detections = engine
        .registry
        .detections("session-17")
        .expect("the session is a run");
    for profile in ["nudge", "stop"] {
        assert_eq!(
            keys_of(&detections, profile),
            expected_keys(&expected, profile),
            "{profile}"
        );
    }
    // Both traces lead to the session's run.
    for trace in [[0xa1u8; 16], [0xb2; 16]] {
        assert_eq!(
            engine
                .registry
                .run_key_for_trace(&hex::encode(trace))
                .as_deref(),
            Some("session-17")
        );
    }
    assert_eq!(
        engine
            .registry
            .run_key_for_trace(&hex::encode([0xc3u8; 16])),
        None
    );
}

#[test]
fn without_the_attribute_each_trace_is_its_own_run() {
    let engine = Engine::from_config(&Config::default()).unwrap();
    engine.process(&mut split_over_two_traces(), std::time::Instant::now());
    // six identical calls per trace: nudge fires at its 3rd and 6th call in each trace
    for trace in [[0xa1u8; 16], [0xb2; 16]] {
        let detections = engine.registry.detections(&hex::encode(trace)).unwrap();
        assert_eq!(calls(&detections, "nudge"), vec![Some(3), Some(6)]);
        assert_eq!(calls(&detections, "stop"), vec![Some(6)]);
    }
    assert!(engine.registry.detections("session-17").is_none());
}
