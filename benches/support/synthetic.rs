//! Synthetic GenAI `execute_tool` requests: the benchmarks' (`benches/support`) and the
//! load generator's tool-call traffic (this file is also the library of `xtask/`,
//! `synthetic_traffic`), so the instruction counts use the same spans.

use loopwatch::otlp::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// One synthetic request: `spans` GenAI `execute_tool` spans of `search_docs`, in traces of
/// `calls_per_trace` calls (trace ids from the span index and `variant`), ~430 bytes each.
/// Arguments and results name their trace and `variant`, so no two traces (of one request
/// or of two variants) share a call: `loop_heavy`: every call of a trace has the same
/// arguments and result; otherwise every call of every trace is distinct.
pub fn request(
    spans: usize,
    calls_per_trace: usize,
    loop_heavy: bool,
    variant: usize,
) -> ExportTraceServiceRequest {
    let start: u64 = 1_767_225_600_000_000_000; // 2026-01-01T00:00:00Z
    let spans = (0..spans)
        .map(|i| {
            let trace = i / calls_per_trace;
            let call = i % calls_per_trace;
            // Loop-heavy: the same call in every position of the trace.
            let key = if loop_heavy { 0 } else { call };
            let mut trace_id = [0u8; 16];
            trace_id[..8].copy_from_slice(&(trace as u64 + 1).to_be_bytes());
            trace_id[8..].copy_from_slice(&(variant as u64 + 1).to_be_bytes());
            let t = start + (call as u64) * 1_000_000_000;
            Span {
                trace_id: trace_id.to_vec(),
                span_id: (i as u64 + 1).to_be_bytes().to_vec(),
                name: "execute_tool search_docs".into(),
                kind: 1,
                start_time_unix_nano: t,
                end_time_unix_nano: t + 250_000_000,
                attributes: vec![
                    kv("gen_ai.operation.name", "execute_tool"),
                    kv("gen_ai.tool.name", "search_docs"),
                    kv("gen_ai.tool.call.id", &format!("call_{variant}_{i}")),
                    kv(
                        "gen_ai.tool.call.arguments",
                        &format!(r#"{{"query":"quarterly revenue by region, run {variant}.{trace}, variant {key}","page":{key},"limit":20}}"#),
                    ),
                    kv(
                        "gen_ai.tool.call.result",
                        &format!(
                            r#"{{"hits":[{{"id":"doc-{variant}.{trace}-{key}-1","title":"Revenue report {key}","score":0.93}},{{"id":"doc-{variant}.{trace}-{key}-2","title":"Regional breakdown {key}","score":0.88}}],"total":{}}}"#,
                            key + 2
                        ),
                    ),
                ],
                ..Default::default()
            }
        })
        .collect();
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", "bench-agent")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "loopwatch-loadgen".into(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}
