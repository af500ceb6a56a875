//! Cost of the pre-execution check (`POST /v1/check`, `Guard/Check`) without its
//! transport: `guard::check` on a run that has made 19 calls (a full `stop` window but
//! one), for a call that would fire (`deny`: its sixth repeat) and one that would not (`allow`), and for an
//! unknown run. The issue's target: well under a millisecond.
//!
//! Run with `cargo bench --bench guard`; the current figures are in BENCHMARKS.md.

use std::hint::black_box;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use loopwatch::config::Config;
use loopwatch::engine::Engine;
use loopwatch::guard::{check, CheckRequest, Decision};
use loopwatch::otlp::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// 19 calls of one run: 5 repeats of one failing read, between 14 distinct searches.
fn engine() -> Engine {
    let mut config = Config::default();
    config.detection.fingerprint_key = Some("bench".into());
    let engine = Engine::from_config(&config).expect("default config");
    let spans = (0..19u8)
        .map(|i| {
            let (tool, arguments, result) = if i % 4 == 0 {
                (
                    "read_file",
                    r#"{"path":"src/main.rs","lines":[1,200]}"#.to_owned(),
                    "No such file".to_owned(),
                )
            } else {
                (
                    "search",
                    format!(r#"{{"query":"loop detection {i}","limit":10}}"#),
                    format!("{i} results"),
                )
            };
            Span {
                trace_id: vec![3; 16],
                span_id: vec![i + 1; 8],
                start_time_unix_nano: 1_000 + u64::from(i) * 1_000,
                end_time_unix_nano: 1_500 + u64::from(i) * 1_000,
                attributes: vec![
                    kv("gen_ai.operation.name", "execute_tool"),
                    kv("gen_ai.tool.name", tool),
                    kv("gen_ai.tool.call.arguments", &arguments),
                    kv("gen_ai.tool.call.result", &result),
                ],
                ..Default::default()
            }
        })
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

fn request(trace: &str, tool: &str, arguments: &str) -> CheckRequest {
    CheckRequest {
        trace_id: Some(trace.into()),
        run_key: None,
        tool_name: tool.into(),
        arguments: Some(serde_json::Value::String(arguments.into())),
    }
}

fn benches(c: &mut Criterion) {
    let engine = engine();
    let run = "03030303030303030303030303030303";
    let firing = request(
        run,
        "read_file",
        r#"{"lines":[1,200],"path":"src/main.rs"}"#,
    );
    let quiet = request(run, "search", r#"{"query":"something new","limit":10}"#);
    let unknown = request("04040404040404040404040404040404", "search", "{}");
    assert_eq!(check(&engine, &firing).unwrap().decision, Decision::Deny);
    assert_eq!(check(&engine, &quiet).unwrap().decision, Decision::Allow);
    let mut group = c.benchmark_group("guard");
    group.bench_function("check_deny", |b| {
        b.iter(|| check(&engine, black_box(&firing)))
    });
    group.bench_function("check_allow", |b| {
        b.iter(|| check(&engine, black_box(&quiet)))
    });
    group.bench_function("check_unknown_run", |b| {
        b.iter(|| check(&engine, black_box(&unknown)))
    });
    group.finish();
}

criterion_group!(guard, benches);
criterion_main!(guard);
