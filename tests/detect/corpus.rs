//! Every corpus run gives exactly `expected.json` for both profiles, whatever the order in
//! which its spans arrive (DESIGN §2 "Order").

use crate::support::spans::*;
use loopwatch::config::Config;
use loopwatch::engine::Engine;
use loopwatch::registry::RunDetection;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use rand::seq::SliceRandom;
use rand::SeedableRng;

fn engine() -> Engine {
    Engine::from_config(&Config::default()).expect("default config builds")
}

/// Feeds the requests in order through a fresh engine; returns the run's final detections.
fn final_detections(requests: Vec<ExportTraceServiceRequest>) -> Vec<RunDetection> {
    let engine = engine();
    let now = std::time::Instant::now();
    let mut trace = None;
    for mut request in requests {
        for rs in &request.resource_spans {
            for ss in &rs.scope_spans {
                if let Some(span) = ss.spans.first() {
                    trace.get_or_insert_with(|| hex::encode(&span.trace_id));
                }
            }
        }
        engine.process(&mut request, now);
    }
    let runs = engine.registry.runs();
    let mut all: Vec<RunDetection> = runs.into_iter().flat_map(|r| r.detections).collect();
    all.sort_by_key(|d| d.profile_index);
    all
}

fn check(run: &str, expected: &serde_json::Value, detections: &[RunDetection], how: &str) {
    for profile in ["nudge", "stop"] {
        assert_eq!(
            keys_of(detections, profile),
            expected_keys(expected, profile),
            "{run} ({how}), profile {profile}"
        );
    }
}

fn requests_of(run: &str) -> Vec<ExportTraceServiceRequest> {
    corpus_files(run, "pb").iter().map(|p| read_pb(p)).collect()
}

#[test]
fn corpus_in_arrival_order() {
    for (run, expected) in corpus_expected() {
        check(
            &run,
            &expected,
            &final_detections(requests_of(&run)),
            "arrival order",
        );
    }
}

#[test]
fn corpus_json_encoding_gives_the_same_answers() {
    for (run, expected) in corpus_expected() {
        let requests = corpus_files(&run, "json")
            .iter()
            .map(|p| loopwatch::cli::scan::read_request(p).unwrap())
            .collect();
        check(&run, &expected, &final_detections(requests), "OTLP/JSON");
    }
}

#[test]
fn corpus_in_reversed_request_and_span_order() {
    for (run, expected) in corpus_expected() {
        let mut spans: Vec<_> = requests_of(&run)
            .iter()
            .flat_map(one_span_per_request)
            .collect();
        spans.reverse();
        check(
            &run,
            &expected,
            &final_detections(spans),
            "reversed, one span per request",
        );
    }
}

#[test]
fn corpus_shuffled_one_span_per_request() {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for (run, expected) in corpus_expected() {
        for round in 0..3 {
            let mut spans: Vec<_> = requests_of(&run)
                .iter()
                .flat_map(one_span_per_request)
                .collect();
            spans.shuffle(&mut rng);
            check(
                &run,
                &expected,
                &final_detections(spans),
                &format!("shuffled #{round}"),
            );
        }
    }
}

#[test]
fn corpus_every_request_sent_twice() {
    for (run, expected) in corpus_expected() {
        let requests: Vec<_> = requests_of(&run)
            .into_iter()
            .flat_map(|r| [r.clone(), r])
            .collect();
        check(
            &run,
            &expected,
            &final_detections(requests),
            "every request twice",
        );
        // and the second copy of a whole run changes nothing either
        let mut twice = requests_of(&run);
        twice.extend(requests_of(&run));
        check(&run, &expected, &final_detections(twice), "whole run twice");
    }
}

#[test]
fn annotations_land_on_the_completing_spans_in_arrival_order() {
    // In arrival order every detection's completing span is in the request being processed,
    // so it is annotated there, with the loop.* attributes of DESIGN §5.
    let engine = engine();
    let now = std::time::Instant::now();
    let mut annotated = Vec::new();
    for mut request in requests_of("pydantic-ai/v5-default/s1_stuck_repeat") {
        let processed = engine.process(&mut request, now);
        assert_eq!(
            processed.annotated_spans,
            processed.detections.len().min(processed.annotated_spans)
        );
        for rs in &request.resource_spans {
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    if span.attributes.iter().any(|kv| kv.key == "loop.detected") {
                        annotated.push(span.clone());
                    }
                }
            }
        }
    }
    // nudge fires at calls 3 and 6, stop at call 6 (same span as nudge's second).
    assert_eq!(annotated.len(), 2);
    let attr = |span: &opentelemetry_proto::tonic::trace::v1::Span, key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone())
            .and_then(|v| v.value)
    };
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    assert_eq!(
        attr(&annotated[0], "loop.pattern"),
        Some(Value::StringValue("repeated_result".into()))
    );
    assert_eq!(
        attr(&annotated[0], "loop.severity"),
        Some(Value::StringValue("warn".into()))
    );
    assert_eq!(
        attr(&annotated[0], "loop.profile"),
        Some(Value::StringValue("nudge".into()))
    );
    assert_eq!(attr(&annotated[0], "loop.count"), Some(Value::IntValue(3)));
    assert_eq!(
        attr(&annotated[0], "loop.window"),
        Some(Value::IntValue(10))
    );
    assert_eq!(
        attr(&annotated[0], "loop.occurrence"),
        Some(Value::IntValue(1))
    );
    // the sixth call: stop (kill) is the most severe and writes; both profiles listed
    assert_eq!(
        attr(&annotated[1], "loop.severity"),
        Some(Value::StringValue("kill".into()))
    );
    assert_eq!(
        attr(&annotated[1], "loop.profile"),
        Some(Value::StringValue("stop".into()))
    );
    assert_eq!(attr(&annotated[1], "loop.count"), Some(Value::IntValue(6)));
    match attr(&annotated[1], "loop.profiles") {
        Some(Value::ArrayValue(a)) => assert_eq!(a.values.len(), 2),
        other => panic!("loop.profiles: {other:?}"),
    }
    match attr(&annotated[1], "loop.fingerprints") {
        Some(Value::ArrayValue(a)) => match &a.values[0].value {
            Some(Value::StringValue(f)) => assert_eq!(f.len(), 16),
            other => panic!("fingerprint: {other:?}"),
        },
        other => panic!("loop.fingerprints: {other:?}"),
    }
    match attr(&annotated[1], "loop.reason") {
        Some(Value::StringValue(r)) => assert!(r.contains("fetch_url"), "{r}"),
        other => panic!("loop.reason: {other:?}"),
    }
    // no argument or result content copied into attributes
    for span in &annotated {
        for kv in span
            .attributes
            .iter()
            .filter(|kv| kv.key.starts_with("loop."))
        {
            let text = format!("{:?}", kv.value);
            assert!(!text.contains("example.com"), "{}: {text}", kv.key);
        }
    }
}
