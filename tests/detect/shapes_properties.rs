//! Properties of the trace-shape rules over every corpus run (DESIGN §2 "One call, one
//! event"): recording each call twice (an outer framework span with an MCP span nested
//! inside, in either arrival order), re-exporting every span (an unfinished snapshot first,
//! identical re-sends), spelling OTLP/JSON with proto field names and enum names, and
//! writing doubles in OTLP/JSON as strings (`"NaN"`, `"Infinity"`, `"1.5"`) never
//! change the detections; nor does protobuf with `scope_spans` under the pre-1.0
//! `instrumentation_library_spans` (field 1000), through `scan`, the wire path and the gRPC
//! receiver.

use crate::support;

use crate::support::spans::*;
use loopwatch::config::Config;
use loopwatch::conventions::event::{CallStatus, EventKind, Payload};
use loopwatch::engine::Engine;
use loopwatch::registry::RunDetection;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{Span, Status};
use prost::Message;
use serde_json::Value as Json;

fn final_detections(requests: &[ExportTraceServiceRequest]) -> Vec<RunDetection> {
    let engine = Engine::from_config(&Config::default()).expect("default config builds");
    let now = std::time::Instant::now();
    for request in requests {
        engine.process(&mut request.clone(), now);
    }
    let mut all: Vec<RunDetection> = engine
        .registry
        .runs()
        .into_iter()
        .flat_map(|r| r.detections)
        .collect();
    all.sort_by_key(|d| d.profile_index);
    all
}

fn check(run: &str, expected: &Json, requests: &[ExportTraceServiceRequest], how: &str) {
    let detections = final_detections(requests);
    for profile in ["nudge", "stop"] {
        assert_eq!(
            keys_of(&detections, profile),
            expected_keys(expected, profile),
            "{run} ({how}), profile {profile}"
        );
    }
}

fn requests_of(run: &str) -> Vec<ExportTraceServiceRequest> {
    corpus_files(run, "pb").iter().map(|p| read_pb(p)).collect()
}

fn spans_mut(request: &mut ExportTraceServiceRequest) -> impl Iterator<Item = &mut Span> {
    request
        .resource_spans
        .iter_mut()
        .flat_map(|rs| rs.scope_spans.iter_mut())
        .flat_map(|ss| ss.spans.iter_mut())
}

fn text(payload: &Payload) -> Json {
    match payload {
        Payload::Text(t) => Json::String(t.clone()),
        Payload::Json(j) => j.clone(),
        Payload::Bytes(b) => Json::String(String::from_utf8_lossy(b).into_owned()),
    }
}

/// An MCP server span (MCP semantic conventions) for the call `outer` records, nested in
/// it: same tool, the arguments as JSON text, the result as a `CallToolResult`.
fn inner_mcp_span(outer: &Span) -> Option<Span> {
    let extracted = loopwatch::conventions::extract(outer)?;
    let EventKind::ToolCall(call) = extracted.kind else {
        return None;
    };
    let mut attributes = vec![
        kv("gen_ai.operation.name", s("execute_tool")),
        kv("gen_ai.tool.name", s(&call.tool_name)),
        kv("mcp.method.name", s("tools/call")),
    ];
    if let Some(arguments) = &call.arguments {
        let a = match text(arguments) {
            Json::String(t) => t,
            other => other.to_string(),
        };
        attributes.push(kv("gen_ai.tool.call.arguments", s(&a)));
    }
    if let Some(result) = &call.result {
        let result_text = match text(result) {
            Json::String(t) => t,
            other => other.to_string(),
        };
        let wrapped = serde_json::json!({
            "content": [{"type": "text", "text": result_text}],
            "isError": matches!(call.status, CallStatus::Error { .. }),
        });
        attributes.push(kv("gen_ai.tool.call.result", s(&wrapped.to_string())));
    }
    let mut span_id = outer.span_id.clone();
    if let Some(first) = span_id.first_mut() {
        *first ^= 0xA5;
    }
    Some(Span {
        trace_id: outer.trace_id.clone(),
        span_id,
        parent_span_id: outer.span_id.clone(),
        name: format!("tools/call {}", call.tool_name),
        kind: 2,
        start_time_unix_nano: outer.start_time_unix_nano + 1,
        end_time_unix_nano: outer.end_time_unix_nano.saturating_sub(1),
        attributes,
        status: outer.status.clone(),
        ..Default::default()
    })
}

#[test]
fn calls_traced_twice_count_once_whatever_arrives_first() {
    let mut doubled = 0;
    for (run, expected) in corpus_expected() {
        let requests = requests_of(&run);
        let inners: Vec<Span> = requests
            .iter()
            .flat_map(|r| r.resource_spans.iter())
            .flat_map(|rs| rs.scope_spans.iter())
            .flat_map(|ss| ss.spans.iter())
            .filter_map(inner_mcp_span)
            .collect();
        doubled += inners.len();
        // Inner spans after their outer spans (one request at the end)...
        let mut after = requests.clone();
        after.push(support::spans::request_of(inners.clone()));
        check(&run, &expected, &after, "inner MCP spans after");
        // ...before them (the outer span arrives late)...
        let mut before = vec![support::spans::request_of(inners.clone())];
        before.extend(requests.clone());
        check(&run, &expected, &before, "inner MCP spans first");
        // ...and inside the same request.
        let mut same = requests.clone();
        if let Some(first) = same.first_mut() {
            first.resource_spans[0].scope_spans[0]
                .spans
                .extend(inners.iter().cloned());
        }
        check(&run, &expected, &same, "inner MCP spans in one request");
    }
    assert!(doubled > 100, "only {doubled} calls doubled");
}

#[test]
fn re_exported_spans_count_once_the_finished_copy_wins() {
    for (run, expected) in corpus_expected() {
        let requests = requests_of(&run);
        // Every request twice (exporter retries).
        let twice: Vec<_> = requests
            .iter()
            .flat_map(|r| [r.clone(), r.clone()])
            .collect();
        check(&run, &expected, &twice, "identical re-sends");
        // An unfinished snapshot of every span first, then the finished spans.
        let mut snapshots: Vec<ExportTraceServiceRequest> = requests.clone();
        for request in &mut snapshots {
            for span in spans_mut(request) {
                span.end_time_unix_nano = 0;
                span.status = Some(Status::default());
            }
        }
        let mut all = snapshots;
        all.extend(requests.clone());
        check(&run, &expected, &all, "unfinished snapshots first");
    }
}

/// OTLP/JSON with proto field names (`resource_spans`) and enum names (`SPAN_KIND_SERVER`).
fn proto_spelling(value: &mut Json) {
    const KINDS: [&str; 6] = [
        "SPAN_KIND_UNSPECIFIED",
        "SPAN_KIND_INTERNAL",
        "SPAN_KIND_SERVER",
        "SPAN_KIND_CLIENT",
        "SPAN_KIND_PRODUCER",
        "SPAN_KIND_CONSUMER",
    ];
    const CODES: [&str; 3] = ["STATUS_CODE_UNSET", "STATUS_CODE_OK", "STATUS_CODE_ERROR"];
    match value {
        Json::Object(object) => {
            let entries = std::mem::take(object);
            for (key, mut v) in entries {
                proto_spelling(&mut v);
                let names: Option<&[&str]> = match key.as_str() {
                    "kind" => Some(&KINDS),
                    "code" => Some(&CODES),
                    _ => None,
                };
                if let Some(name) = names.zip(v.as_u64()).and_then(|(n, i)| n.get(i as usize)) {
                    v = Json::String((*name).to_owned());
                }
                let mut snake = String::new();
                for c in key.chars() {
                    if c.is_ascii_uppercase() {
                        snake.push('_');
                        snake.push(c.to_ascii_lowercase());
                    } else {
                        snake.push(c);
                    }
                }
                object.insert(snake, v);
            }
        }
        Json::Array(items) => items.iter_mut().for_each(proto_spelling),
        _ => {}
    }
}

#[test]
fn otlp_json_spellings_give_identical_detections() {
    let dir = tempfile::tempdir().unwrap();
    for (run, expected) in corpus_expected() {
        let mut camel = Vec::new();
        let mut proto = Vec::new();
        for (i, file) in corpus_files(&run, "json").iter().enumerate() {
            camel.push(loopwatch::cli::scan::read_request(file).unwrap());
            let mut value: Json = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
            proto_spelling(&mut value);
            let text = value.to_string();
            assert!(text.contains("\"resource_spans\"") && !text.contains("resourceSpans"));
            let path = dir.path().join(format!("{i}.json"));
            std::fs::write(&path, text).unwrap();
            proto.push(
                loopwatch::cli::scan::read_request(&path).unwrap_or_else(|e| panic!("{run}: {e}")),
            );
        }
        assert_eq!(camel, proto, "{run}: both spellings decode to one request");
        check(&run, &expected, &proto, "proto field names, enum names");
    }
}

/// Renames `scopeSpans` → `instrumentationLibrarySpans` and `scope` →
/// `instrumentationLibrary`: OTLP/JSON as OTLP ≤ 0.18 wrote it.
fn pre_scope_spelling(value: &mut Json) {
    for resource_spans in value["resourceSpans"].as_array_mut().into_iter().flatten() {
        let Some(object) = resource_spans.as_object_mut() else {
            continue;
        };
        let Some(mut scope_spans) = object.remove("scopeSpans") else {
            continue;
        };
        for scope_span in scope_spans.as_array_mut().into_iter().flatten() {
            if let Some(scope) = scope_span.as_object_mut().and_then(|o| o.remove("scope")) {
                scope_span["instrumentationLibrary"] = scope;
            }
        }
        object.insert("instrumentationLibrarySpans".into(), scope_spans);
    }
}

#[test]
fn otlp_json_before_scope_spans_gives_identical_detections() {
    let dir = tempfile::tempdir().unwrap();
    for (run, expected) in corpus_expected() {
        let mut current = Vec::new();
        let mut old = Vec::new();
        for (i, file) in corpus_files(&run, "json").iter().enumerate() {
            current.push(loopwatch::cli::scan::read_request(file).unwrap());
            let mut value: Json = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
            pre_scope_spelling(&mut value);
            let text = value.to_string();
            assert!(
                text.contains("\"instrumentationLibrarySpans\"") && !text.contains("scopeSpans")
            );
            let path = dir.path().join(format!("{i}.json"));
            std::fs::write(&path, text).unwrap();
            old.push(
                loopwatch::cli::scan::read_request(&path).unwrap_or_else(|e| panic!("{run}: {e}")),
            );
        }
        assert_eq!(current, old, "{run}: both names decode to one request");
        check(&run, &expected, &old, "instrumentationLibrarySpans");
    }
}

#[test]
fn otlp_json_with_doubles_in_strings_gives_identical_detections() {
    // NaN, ±Infinity and numbers in strings (ProtoJSON) on every span: the requests decode
    // (an HTTP 400 for the whole request before) and detection is unchanged.
    let dir = tempfile::tempdir().unwrap();
    for (run, expected) in corpus_expected() {
        let mut files = Vec::new();
        for (i, file) in corpus_files(&run, "json").iter().enumerate() {
            let mut value: Json = serde_json::from_slice(&std::fs::read(file).unwrap()).unwrap();
            assert!(support::spans::add_string_doubles(&mut value) > 0);
            let path = dir.path().join(format!("{i}.json"));
            std::fs::write(&path, value.to_string()).unwrap();
            let request =
                loopwatch::cli::scan::read_request(&path).unwrap_or_else(|e| panic!("{run}: {e}"));
            let spans = request
                .resource_spans
                .iter()
                .flat_map(|rs| &rs.scope_spans)
                .flat_map(|ss| &ss.spans);
            for span in spans {
                assert!(
                    support::spans::has_string_doubles(span),
                    "{run}: {}",
                    span.name
                );
            }
            files.push(path);
        }
        assert_scan_detections(
            &files,
            &expected,
            &format!("{run} (scan, doubles in strings)"),
        );
    }
}

/// `scan` of `files` with the default config gives each profile the `expected` detections
/// (`context` names the case in the failure message).
fn assert_scan_detections(
    files: &[std::path::PathBuf],
    expected: &serde_json::Value,
    context: &str,
) {
    let engine = Engine::from_config(&Config::default()).unwrap();
    let outcome = loopwatch::cli::scan::scan(&engine, files).unwrap_or_else(|e| panic!("{e}"));
    for profile in ["nudge", "stop"] {
        assert_eq!(
            keys_of(&outcome.detections, profile),
            expected_keys(expected, profile),
            "{context}, profile {profile}"
        );
    }
}

/// The corpus requests of `run` encoded as OTLP ≤ 0.18 protobuf (`scope_spans` under
/// `instrumentation_library_spans`, field 1000), with the current requests.
fn legacy_requests_of(run: &str) -> Vec<(ExportTraceServiceRequest, Vec<u8>)> {
    requests_of(run)
        .into_iter()
        .map(|request| {
            let legacy = support::legacy::to_legacy_bytes(&request);
            let decoded = ExportTraceServiceRequest::decode(legacy.as_slice()).unwrap();
            assert_eq!(
                loopwatch::otlp::span_count(&decoded),
                0,
                "{run}: no span left where current readers look"
            );
            (request, legacy)
        })
        .collect()
}

#[test]
fn protobuf_before_scope_spans_scans_and_annotates_identically() {
    let dir = tempfile::tempdir().unwrap();
    let mut annotated_spans = 0;
    for (n, (run, expected)) in corpus_expected().into_iter().enumerate() {
        let requests = legacy_requests_of(&run);
        // `scan` of the files an old exporter would have written.
        let mut files = Vec::new();
        for (i, (_, legacy)) in requests.iter().enumerate() {
            let path = dir.path().join(format!("{n:03}-{i:04}.pb"));
            std::fs::write(&path, legacy).unwrap();
            files.push(path);
        }
        assert_scan_detections(
            &files,
            &expected,
            &format!("{run} (scan of instrumentation_library_spans)"),
        );
        // The wire path annotates the old field in place: the forwarded bytes, read with
        // field 1000, are the request the prost path annotates, its spans still there.
        // One fingerprint key for both (unset, each engine draws its own).
        let mut config = Config::default();
        config.detection.fingerprint_key = Some("shapes".into());
        let now = std::time::Instant::now();
        let by_prost = Engine::from_config(&config).unwrap();
        let by_wire = Engine::from_config(&config).unwrap();
        for (request, legacy) in requests {
            let mut annotated = request.clone();
            let prost_processed = by_prost.process(&mut annotated, now);
            let wire = loopwatch::otlp::wire::WireRequest::read(legacy.into()).unwrap();
            let wire_processed = by_wire.process_wire(wire, now).unwrap();
            assert_eq!(
                wire_processed.processed.detections, prost_processed.detections,
                "{run}"
            );
            let (forwarded, under_field_1000) =
                support::legacy::decode_migrated(&wire_processed.bytes());
            assert!(under_field_1000, "{run}: spans stay in the old field");
            assert_eq!(forwarded, annotated, "{run}: forwarded request");
            annotated_spans += wire_processed.processed.annotated_spans;
        }
    }
    assert!(annotated_spans > 20, "annotated spans: {annotated_spans}");
}

/// loopwatch in-process on loopback port 0, detect-only.
async fn start_server() -> loopwatch::server::RunningServer {
    let mut config = Config::default();
    config.receiver.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.receiver.http_listen = "127.0.0.1:0".parse().unwrap();
    config.admin.listen = String::new();
    loopwatch::server::start(config).await.unwrap()
}

/// Every corpus run's final detections in `server` are the expected ones.
fn assert_server_detections(server: &loopwatch::server::RunningServer, how: &str) {
    for (run, expected) in corpus_expected() {
        assert_corpus_run_detections(server, &run, &expected, how);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_before_scope_spans_through_the_grpc_receiver() {
    use loopwatch::forward::{ExportBody, RawBytesCodec};
    let server = start_server().await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    for (run, _) in corpus_expected() {
        for (_, legacy) in legacy_requests_of(&run) {
            grpc.ready().await.unwrap();
            grpc.unary(
                tonic::Request::new(ExportBody::from(bytes::Bytes::from(legacy))),
                http::uri::PathAndQuery::from_static(loopwatch::otlp::EXPORT_PATH),
                RawBytesCodec,
            )
            .await
            .unwrap_or_else(|status| panic!("{run}: {status}"));
        }
    }
    assert_server_detections(&server, "gRPC, instrumentation_library_spans");
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_before_scope_spans_is_replayed_as_recorded() {
    // `replay` sends the file's bytes: decoded by prost and encoded again, field 1000 and
    // every span in it would be gone.
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (n, (run, _)) in corpus_expected().into_iter().enumerate() {
        for (i, (_, legacy)) in legacy_requests_of(&run).into_iter().enumerate() {
            let path = dir.path().join(format!("{n:03}-{i:04}.pb"));
            std::fs::write(&path, legacy).unwrap();
            files.push(path);
        }
    }
    let server = start_server().await;
    let endpoint = format!("http://{}", server.grpc_addr);
    let sent = loopwatch::cli::replay::replay(&endpoint, &files, std::time::Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(sent, files.len());
    assert_server_detections(&server, "replay, instrumentation_library_spans");
    server.shutdown().await.unwrap();
}
