//! Inputs shared by the benchmarks: the encoded corpus requests and a bench config.

use std::path::{Path, PathBuf};

use loopwatch::config::Config;

/// The encoded corpus requests (`tests/fixtures/corpus/**/req-*.pb`), runs in name order,
/// requests of a run in arrival order.
pub fn corpus_bytes() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus");
    let files: Vec<PathBuf> = loopwatch::scan::request_files(&[root])
        .expect("corpus folder")
        .into_iter()
        .filter(|p| {
            p.extension().is_some_and(|e| e == "pb")
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("req-"))
        })
        .collect();
    assert!(!files.is_empty(), "no corpus requests found");
    files
        .iter()
        .map(|f| std::fs::read(f).expect("read corpus request"))
        .collect()
}

/// The default config with a fixed fingerprint key.
pub fn config() -> Config {
    let mut config = Config::default();
    config.detection.fingerprint_key = Some("bench".into());
    config
}

/// A JSON object of about `size` bytes: a list of search hits, as a tool result.
pub fn large_json(size: usize) -> String {
    let mut hits = Vec::new();
    let mut i = 0;
    while serde_json::to_string(&hits).map_or(0, |s| s.len()) < size {
        hits.push(serde_json::json!({
            "rank": i,
            "title": format!("Result number {i} about loop detection in agent traces"),
            "url": format!("https://example.com/docs/page-{i}"),
            "score": 1.0 / f64::from(i + 1),
        }));
        i += 1;
    }
    serde_json::json!({"query": "loop detection", "hits": hits}).to_string()
}

/// Synthetic GenAI `execute_tool` requests like the load generator's: `requests` requests of
/// `spans` spans, in traces of 10 calls (every trace its own trace id). `loop_heavy`: each
/// trace repeats one call; otherwise every call has its own arguments and result.
#[allow(
    dead_code,
    reason = "each bench binary compiles this module; one uses this"
)]
pub fn tool_call_requests(requests: usize, spans: usize, loop_heavy: bool) -> Vec<Vec<u8>> {
    use loopwatch::otlp::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;

    let kv = |key: &str, value: String| KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value)),
        }),
        ..Default::default()
    };
    (0..requests)
        .map(|request| {
            let spans = (0..spans)
                .map(|i| {
                    let (trace, call) = (i / 10, i % 10);
                    let key = if loop_heavy { 0 } else { call };
                    let mut trace_id = [0u8; 16];
                    trace_id[..8].copy_from_slice(&(trace as u64 + 1).to_be_bytes());
                    trace_id[8..].copy_from_slice(&(request as u64 + 1).to_be_bytes());
                    let t = 1_767_225_600_000_000_000 + call as u64 * 1_000_000_000;
                    Span {
                        trace_id: trace_id.to_vec(),
                        span_id: (i as u64 + 1).to_be_bytes().to_vec(),
                        name: "execute_tool search_docs".into(),
                        kind: 1,
                        start_time_unix_nano: t,
                        end_time_unix_nano: t + 250_000_000,
                        attributes: vec![
                            kv("gen_ai.operation.name", "execute_tool".into()),
                            kv("gen_ai.tool.name", "search_docs".into()),
                            kv("gen_ai.tool.call.id", format!("call_{request}_{i}")),
                            kv(
                                "gen_ai.tool.call.arguments",
                                format!(r#"{{"query":"quarterly revenue by region, variant {key}","page":{key},"limit":20}}"#),
                            ),
                            kv(
                                "gen_ai.tool.call.result",
                                format!(
                                    r#"{{"hits":[{{"id":"doc-{key}-1","title":"Revenue report {key}","score":0.93}},{{"id":"doc-{key}-2","title":"Regional breakdown {key}","score":0.88}}],"total":{}}}"#,
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
                        attributes: vec![kv("service.name", "bench-agent".into())],
                        ..Default::default()
                    }),
                    scope_spans: vec![ScopeSpans {
                        spans,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
            }
            .encode_to_vec()
        })
        .collect()
}

/// A tool-call argument object of about 100 bytes, keys out of canonical order.
pub fn small_json() -> String {
    r#"{"path":"src/main.rs","start_line":120,"end_line":180,"pattern":"fn main","case_sensitive":false}"#
        .to_string()
}
