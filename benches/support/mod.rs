//! Inputs shared by the benchmarks: the encoded corpus requests and a bench config.

use std::path::{Path, PathBuf};

use loopwatch::config::Config;

#[allow(
    dead_code,
    reason = "each bench binary compiles this module; one uses it"
)]
mod synthetic;

/// The encoded corpus requests (`tests/fixtures/corpus/**/req-*.pb`), runs in name order,
/// requests of a run in arrival order.
pub fn corpus_bytes() -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus");
    let files: Vec<PathBuf> = loopwatch::cli::scan::request_files(&[root])
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

/// The load generator's synthetic GenAI `execute_tool` requests (`cargo xtask loadgen bench`
/// tool-call traffic): `requests` requests of `spans` spans, in traces of 10 calls.
/// `loop_heavy`: each trace repeats one call; otherwise every call has its own arguments
/// and result.
#[allow(
    dead_code,
    reason = "each bench binary compiles this module; one uses this"
)]
pub fn tool_call_requests(requests: usize, spans: usize, loop_heavy: bool) -> Vec<Vec<u8>> {
    use prost::Message;
    (0..requests)
        .map(|variant| synthetic::request(spans, 10, loop_heavy, variant).encode_to_vec())
        .collect()
}

/// `runs` one-call traces (`execute_tool` spans as [`tool_call_requests`]) in requests of
/// 1000: the load generator's idle-runs memory traffic.
#[allow(
    dead_code,
    reason = "each bench binary compiles this module; one uses this"
)]
pub fn one_call_runs(runs: usize) -> Vec<Vec<u8>> {
    use prost::Message;
    (0..runs.div_ceil(1000))
        .map(|variant| {
            let spans = (runs - variant * 1000).min(1000);
            synthetic::request(spans, 1, false, variant).encode_to_vec()
        })
        .collect()
}

/// The arguments and the result text of one synthetic tool call of the load generator's
/// traffic (a ~90-byte object, keys out of order; a ~180-byte object holding an array of
/// two hit objects, their keys out of order).
#[allow(
    dead_code,
    reason = "each bench binary compiles this module; one uses this"
)]
pub fn tool_call_texts() -> (String, String) {
    use opentelemetry_proto::tonic::common::v1::any_value::Value;
    let request = synthetic::request(1, 10, false, 0);
    let span = &request.resource_spans[0].scope_spans[0].spans[0];
    let text = |key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
                Value::StringValue(s) => Some(s.clone()),
                _ => None,
            })
            .expect("the synthetic span has the attribute")
    };
    (
        text("gen_ai.tool.call.arguments"),
        text("gen_ai.tool.call.result"),
    )
}

/// A tool-call argument object of about 100 bytes, keys out of canonical order.
pub fn small_json() -> String {
    r#"{"path":"src/main.rs","start_line":120,"end_line":180,"pattern":"fn main","case_sensitive":false}"#
        .to_string()
}
