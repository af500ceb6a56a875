//! Property: a tool with `ignore = true` (`[[tools]]`), inserted anywhere into any corpus
//! run, never changes its detections — same completing spans, patterns, counts,
//! severities, call ordinals and occurrences.

use std::time::Instant;

use crate::support::spans::{corpus_expected, corpus_files, read_pb};
use loopwatch::config::Config;
use loopwatch::engine::Engine;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;
use proptest::prelude::*;

const CONFIG: &str = "[[tools]]\nmatch = \"wait_*\"\nignore = true\n";

/// (trace_id, span_id, profile, pattern, count, severity, call, response, occurrence)
type Key = (
    String,
    String,
    String,
    &'static str,
    usize,
    &'static str,
    Option<usize>,
    Option<usize>,
    u32,
);

fn detections(requests: &[ExportTraceServiceRequest]) -> Vec<Key> {
    let engine = Engine::from_config(&Config::from_toml(CONFIG).unwrap()).unwrap();
    let now = Instant::now();
    for request in requests {
        engine.process(&mut request.clone(), now);
    }
    let mut keys: Vec<Key> = engine
        .registry
        .runs()
        .into_iter()
        .flat_map(|run| run.detections)
        .map(|d| {
            (
                hex::encode(&d.trace_id),
                hex::encode(&d.span_id),
                d.profile.name.clone(),
                d.detection.pattern.as_str(),
                d.detection.count,
                d.detection.severity.as_str(),
                d.detection.call,
                d.detection.response,
                d.occurrence,
            )
        })
        .collect();
    keys.sort();
    keys
}

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.into())),
        }),
        ..KeyValue::default()
    }
}

/// A GenAI `execute_tool` span of `wait_for_job`, next to `sibling` (same trace and
/// parent), starting at `start`.
fn wait_span(sibling: &Span, start: u64, id: u64, same_args: bool) -> Span {
    let args = if same_args {
        "{\"job\":1}".to_string()
    } else {
        format!("{{\"job\":{id}}}")
    };
    Span {
        trace_id: sibling.trace_id.clone(),
        span_id: (0xabcd_0000_0000_0000u64 | id).to_be_bytes().to_vec(),
        parent_span_id: sibling.parent_span_id.clone(),
        name: "execute_tool wait_for_job".into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 1,
        attributes: vec![
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "wait_for_job"),
            kv("gen_ai.tool.call.arguments", &args),
            kv("gen_ai.tool.call.result", "{\"status\":\"pending\"}"),
        ],
        ..Span::default()
    }
}

fn runs() -> Vec<Vec<ExportTraceServiceRequest>> {
    corpus_expected()
        .into_iter()
        .map(|(run, _)| {
            corpus_files(&run, "pb")
                .iter()
                .map(|f| read_pb(f))
                .collect()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]

    #[test]
    fn an_ignored_tool_inserted_anywhere_never_changes_detections(
        run in any::<prop::sample::Index>(),
        inserts in prop::collection::vec(
            (any::<prop::sample::Index>(), any::<prop::sample::Index>(), 0u64..3, any::<bool>()),
            1..12,
        ),
    ) {
        let all = runs();
        let requests = &all[run.index(all.len())];
        let before = detections(requests);
        let mut changed = requests.clone();
        for (n, (request, sibling, offset, same_args)) in inserts.iter().enumerate() {
            let r = request.index(changed.len());
            let spans: Vec<Span> = changed[r]
                .resource_spans
                .iter()
                .flat_map(|rs| rs.scope_spans.iter())
                .flat_map(|ss| ss.spans.iter().cloned())
                .collect();
            if spans.is_empty() {
                continue;
            }
            let sibling = &spans[sibling.index(spans.len())];
            // just before, at, or just after a real span's start
            let start = (sibling.start_time_unix_nano + offset).saturating_sub(1);
            let span = wait_span(sibling, start, n as u64, *same_args);
            changed[r].resource_spans[0].scope_spans[0].spans.push(span);
        }
        prop_assert_eq!(detections(&changed), before);
    }
}

#[test]
fn without_the_rule_the_inserted_calls_do_count() {
    // guards the property against a wait span that is never read as a tool call
    let requests = runs().remove(0);
    let sibling = requests[0].resource_spans[0].scope_spans[0].spans[0].clone();
    let mut changed = requests.clone();
    for n in 0..5 {
        let span = wait_span(&sibling, sibling.start_time_unix_nano + n, n, true);
        changed[0].resource_spans[0].scope_spans[0].spans.push(span);
    }
    let engine = Engine::from_config(&Config::default()).unwrap();
    for request in &changed {
        engine.process(&mut request.clone(), Instant::now());
    }
    let waits: usize = engine
        .registry
        .runs()
        .iter()
        .flat_map(|r| r.detections.iter())
        .filter(|d| {
            d.detection
                .tool_names
                .iter()
                .any(|t| &**t == "wait_for_job")
        })
        .count();
    assert!(
        waits >= 1,
        "five identical wait_for_job calls are a loop without the rule"
    );
}
