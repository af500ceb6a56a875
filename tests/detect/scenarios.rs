//! Every oracle scenario, turned into spans, gives exactly its `expected/` answer for both
//! profiles (`tests/fixtures/oracle`, from `shared/oracle/reference.py`).

use crate::support::spans::*;
use loopwatch::config::Config;
use loopwatch::engine::Engine;

fn run_scenario(name: &str, structured: bool, per_span: bool) {
    let scenario = read_json(&fixtures().join(format!("oracle/scenarios/{name}.json")));
    let expected = read_json(&fixtures().join(format!("oracle/expected/{name}.json")));
    let engine = Engine::from_config(&Config::default()).unwrap();
    let request = scenario_request(&scenario, [7; 16], structured);
    let now = std::time::Instant::now();
    if per_span {
        let mut parts = one_span_per_request(&request);
        parts.reverse();
        for mut part in parts {
            engine.process(&mut part, now);
        }
    } else {
        engine.process(&mut request.clone(), now);
    }
    let detections = engine
        .registry
        .detections(&hex::encode([7u8; 16]))
        .unwrap_or_default();
    for profile in ["nudge", "stop"] {
        assert_eq!(
            keys_of(&detections, profile),
            expected_keys(&expected, profile),
            "scenario {name}, profile {profile} (structured={structured}, per_span_reversed={per_span})"
        );
    }
}

#[test]
fn every_scenario_as_string_arguments() {
    let names = scenario_names();
    assert_eq!(names.len(), 29);
    for name in names {
        run_scenario(&name, false, false);
    }
}

#[test]
fn every_scenario_as_structured_arguments() {
    for name in scenario_names() {
        run_scenario(&name, true, false);
    }
}

#[test]
fn every_scenario_one_span_per_request_reversed() {
    for name in scenario_names() {
        run_scenario(&name, false, true);
    }
}
