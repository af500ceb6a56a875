//! Trace shapes from real reports (`tests/fixtures/cases/`, copied from the shared cases):
//! every case gives exactly its `expected.json`, for both profiles, through `scan`, and
//! through the running server over OTLP/gRPC and OTLP/HTTP JSON.

use crate::support;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::spans::{key_of, keys_of, Key};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use serde_json::Value as Json;

const PROFILES: [&str; 2] = ["nudge", "stop"];

fn cases_dir() -> PathBuf {
    support::spans::fixtures().join("cases")
}

/// Case names with their expected answers.
fn cases() -> Vec<(String, Json)> {
    let text = std::fs::read_to_string(cases_dir().join("expected.json")).unwrap();
    let map: serde_json::Map<String, Json> = serde_json::from_str(&text).unwrap();
    assert_eq!(map.len(), 9, "every shared case is copied");
    map.into_iter().collect()
}

/// The request files of a case: its `.pb` files, else (C06 is JSON only) its `.json` files.
fn files(case: &str, ext: &str) -> Vec<PathBuf> {
    let dir = cases_dir().join(case);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some(ext))
        .collect();
    files.sort();
    files
}

fn requests(case: &str) -> Vec<ExportTraceServiceRequest> {
    let pb = files(case, "pb");
    let chosen = if pb.is_empty() {
        files(case, "json")
    } else {
        pb
    };
    assert!(!chosen.is_empty(), "{case}: no requests");
    chosen
        .iter()
        .map(|p| loopwatch::cli::scan::read_request(p).unwrap_or_else(|e| panic!("{e}")))
        .collect()
}

/// Expected detections of one profile as a sorted multiset (a case may hold several
/// traces; their order in the output is not part of the answer).
fn expected(expected: &Json, profile: &str) -> Vec<Key> {
    let mut keys: Vec<Key> = expected[profile]
        .as_array()
        .unwrap()
        .iter()
        .map(key_of)
        .collect();
    keys.sort();
    keys
}

fn scan_cli(args: &[&Path], profile: &str) -> Vec<Key> {
    let output = Command::new(env!("CARGO_BIN_EXE_loopwatch"))
        .args(["scan", "--format", "json", "--profile", profile])
        .args(args)
        .output()
        .expect("run loopwatch scan");
    assert!(
        output.status.success(),
        "scan {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let detections: Json = serde_json::from_slice(&output.stdout).expect("scan prints JSON");
    let mut keys: Vec<Key> = detections
        .as_array()
        .unwrap()
        .iter()
        .inspect(|d| assert_eq!(d["profile"], profile))
        .map(key_of)
        .collect();
    keys.sort();
    keys
}

#[test]
fn every_case_through_scan_for_both_profiles() {
    for (case, want) in cases() {
        for profile in PROFILES {
            let dir = cases_dir().join(&case);
            assert_eq!(
                scan_cli(&[&dir], profile),
                expected(&want, profile),
                "{case} --profile {profile}"
            );
        }
    }
}

#[test]
fn every_case_json_twin_through_scan_gives_the_same_answer() {
    for (case, want) in cases() {
        let json = files(&case, "json");
        let paths: Vec<&Path> = json.iter().map(PathBuf::as_path).collect();
        for profile in PROFILES {
            assert_eq!(
                scan_cli(&paths, profile),
                expected(&want, profile),
                "{case} (OTLP/JSON) --profile {profile}"
            );
        }
    }
}

/// C06 re-encoded with lowerCamelCase names and numeric enums (opentelemetry-proto's
/// serializer) gives the same answers as the proto-name form.
#[test]
fn c06_in_lower_camel_case_gives_identical_answers() {
    let dir = tempfile::tempdir().unwrap();
    let source = files("C06_json_snake_case", "json");
    let original = std::fs::read_to_string(&source[0]).unwrap();
    assert!(original.contains("resource_spans") && !original.contains("resourceSpans"));
    let request = loopwatch::cli::scan::read_request(&source[0]).unwrap();
    let camel = serde_json::to_string(&request).unwrap();
    assert!(camel.contains("resourceSpans") && !camel.contains("resource_spans"));
    let path = dir.path().join("req-0001.json");
    std::fs::write(&path, camel).unwrap();
    let want = &cases()
        .into_iter()
        .find(|(c, _)| c == "C06_json_snake_case")
        .unwrap()
        .1;
    for profile in PROFILES {
        let snake = scan_cli(&[&source[0]], profile);
        assert_eq!(snake, expected(want, profile), "snake_case {profile}");
        assert_eq!(
            scan_cli(&[&path], profile),
            snake,
            "lowerCamelCase {profile}"
        );
    }
}

fn trace_ids(requests: &[ExportTraceServiceRequest]) -> BTreeSet<String> {
    requests
        .iter()
        .flat_map(|r| r.resource_spans.iter())
        .flat_map(|rs| rs.scope_spans.iter())
        .flat_map(|ss| ss.spans.iter())
        .map(|s| hex::encode(&s.trace_id))
        .collect()
}

fn server_keys(server: &loopwatch::server::RunningServer, case: &str, profile: &str) -> Vec<Key> {
    let mut keys: Vec<Key> = trace_ids(&requests(case))
        .iter()
        .flat_map(|t| {
            let detections = server.engine.registry.detections(t).unwrap_or_default();
            keys_of(&detections, profile)
        })
        .collect();
    keys.sort();
    keys
}

fn config() -> loopwatch::config::Config {
    let mut config = loopwatch::config::Config::default();
    config.receiver.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.receiver.http_listen = "127.0.0.1:0".parse().unwrap();
    config.admin.listen = "127.0.0.1:0".into();
    config.shutdown.drain_timeout = std::time::Duration::from_secs(5);
    config
}

/// Waits until the server has processed `spans` spans (the sink runs asynchronously).
async fn wait_processed(server: &loopwatch::server::RunningServer, spans: u64) {
    use std::sync::atomic::Ordering;
    for _ in 0..400 {
        if server.engine.stats.spans_seen.load(Ordering::Relaxed) >= spans {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(25)).await;
    }
    panic!("server did not process {spans} spans");
}

fn span_total(requests: &[ExportTraceServiceRequest]) -> u64 {
    requests
        .iter()
        .map(loopwatch::receiver::decode::span_count)
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_through_the_server_over_grpc() {
    let server = loopwatch::server::start(config()).await.unwrap();
    let mut client = TraceServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let mut total = 0;
    for (case, _) in cases() {
        for request in requests(&case) {
            total += loopwatch::receiver::decode::span_count(&request);
            client
                .export(request)
                .await
                .unwrap_or_else(|e| panic!("{case}: {e}"));
        }
    }
    wait_processed(&server, total).await;
    for (case, want) in cases() {
        for profile in PROFILES {
            assert_eq!(
                server_keys(&server, &case, profile),
                expected(&want, profile),
                "{case} over gRPC, {profile}"
            );
        }
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_case_through_the_server_over_http_json() {
    let server = loopwatch::server::start(config()).await.unwrap();
    let http = reqwest::Client::new();
    let mut total = 0;
    for (case, _) in cases() {
        total += span_total(&requests(&case));
        for file in files(&case, "json") {
            let response = http
                .post(format!("http://{}/v1/traces", server.http_addr))
                .header("content-type", "application/json")
                .body(std::fs::read(&file).unwrap())
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{}", file.display());
        }
    }
    wait_processed(&server, total).await;
    for (case, want) in cases() {
        for profile in PROFILES {
            assert_eq!(
                server_keys(&server, &case, profile),
                expected(&want, profile),
                "{case} over OTLP/HTTP JSON, {profile}"
            );
        }
    }
    // Not an OTLP object: 400 with a message.
    for body in [r#"{"foo":1}"#, "[1,2]"] {
        let response = http
            .post(format!("http://{}/v1/traces", server.http_addr))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{body}");
        let text = response.text().await.unwrap();
        assert!(text.contains("OTLP"), "{body}: {text}");
    }
    // Unknown fields are ignored, counted and the request accepted.
    let body = r#"{"resourceSpans":[{"scopeSpans":[{"spans":[],"spanz":[]}]}],"foo":1}"#;
    let response = http
        .post(format!("http://{}/v1/traces", server.http_addr))
        .header("content-type", "application/json")
        .header("user-agent", "misconfigured-sender/1.0")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let admin = server.admin_addr.expect("admin listener");
    let metrics = support::serve_process::scrape(&admin.to_string()).await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "loopwatch_otlp_json_unknown_fields_total 2"),
        "{metrics}"
    );
    server.shutdown().await.unwrap();
}
