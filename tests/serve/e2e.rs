//! End to end: loopwatch on port 0 between real OTLP clients and a real downstream OTLP
//! server. Every span arrives downstream, the completing spans carry loop.*, and nothing
//! else in the requests changed.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::support::downstream::Downstream;
use crate::support::spans::*;
use loopwatch::config::Config;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

pub fn test_config(downstream: Option<std::net::SocketAddr>) -> Config {
    let mut config = Config::default();
    config.receiver.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.receiver.http_listen = "127.0.0.1:0".parse().unwrap();
    config.admin.listen = "127.0.0.1:0".into();
    config.exporter.endpoint = downstream.map(|a| format!("http://{a}"));
    config.shutdown.drain_timeout = Duration::from_secs(5);
    config
}

/// A recording downstream, loopwatch forwarding to it, and a gRPC client of loopwatch.
async fn start_with_downstream() -> (
    Downstream,
    loopwatch::server::RunningServer,
    TraceServiceClient<tonic::transport::Channel>,
) {
    let (downstream, addr) = Downstream::start(false).await;
    let server = loopwatch::server::start(test_config(Some(addr)))
        .await
        .unwrap();
    let client = TraceServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    (downstream, server, client)
}

/// The request as sent: `loop.*` attributes and the `loop.detected` event removed.
fn strip_loop_attributes(request: &ExportTraceServiceRequest) -> ExportTraceServiceRequest {
    let mut r = request.clone();
    for rs in &mut r.resource_spans {
        for ss in &mut rs.scope_spans {
            for span in &mut ss.spans {
                span.attributes.retain(|kv| !kv.key.starts_with("loop."));
                span.events.retain(|e| e.name != "loop.detected");
            }
        }
    }
    r
}

fn spans_of(request: &ExportTraceServiceRequest) -> Vec<Span> {
    request
        .resource_spans
        .iter()
        .flat_map(|rs| rs.scope_spans.iter())
        .flat_map(|ss| ss.spans.iter().cloned())
        .collect()
}

fn attr(span: &Span, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone())
        .and_then(|v| v.value)
}

#[derive(Clone, Copy, Debug)]
enum Transport {
    Grpc,
    HttpProtobuf,
    HttpJson,
}

async fn send_corpus(
    transport: Transport,
    grpc: std::net::SocketAddr,
    http: std::net::SocketAddr,
) -> Vec<ExportTraceServiceRequest> {
    let mut sent = Vec::new();
    let mut client = TraceServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let http_client = reqwest::Client::new();
    for (run, _) in corpus_expected() {
        for file in corpus_files(&run, "pb") {
            let request = read_pb(&file);
            match transport {
                Transport::Grpc => {
                    client
                        .export(request.clone())
                        .await
                        .unwrap_or_else(|e| panic!("{}: {e}", file.display()));
                }
                Transport::HttpProtobuf => {
                    let response = http_client
                        .post(format!("http://{http}/v1/traces"))
                        .header("content-type", "application/x-protobuf")
                        .body(std::fs::read(&file).unwrap())
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), 200, "{}", file.display());
                }
                Transport::HttpJson => {
                    let json_file = file.with_extension("json");
                    let response = http_client
                        .post(format!("http://{http}/v1/traces"))
                        .header("content-type", "application/json")
                        .body(std::fs::read(&json_file).unwrap())
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), 200, "{}", json_file.display());
                }
            }
            sent.push(request);
        }
    }
    sent
}

async fn corpus_end_to_end(transport: Transport) {
    let (downstream, downstream_addr) = Downstream::start(false).await;
    let server = loopwatch::server::start(test_config(Some(downstream_addr)))
        .await
        .unwrap();
    let sent = send_corpus(transport, server.grpc_addr, server.http_addr).await;
    let sent_spans: usize = sent.iter().map(|r| spans_of(r).len()).sum();
    let got = downstream
        .wait_for_spans(sent_spans, Duration::from_secs(20))
        .await;
    assert_eq!(got, sent_spans, "{transport:?}: every span forwarded");

    // Same span ids, each once.
    let received = downstream.spans();
    let sent_ids: HashSet<Vec<u8>> = sent.iter().flat_map(spans_of).map(|s| s.span_id).collect();
    let received_ids: HashSet<Vec<u8>> = received.iter().map(|s| s.span_id.clone()).collect();
    assert_eq!(sent_ids, received_ids);
    assert_eq!(received.len(), sent_ids.len());

    // Nothing but loop.* changed: every received resource_spans entry, loop.* removed, is a
    // sent one (the forwarder may batch several sent requests into one export, so entries
    // are compared rather than whole requests), and there are as many as were sent.
    let entries = |r: &ExportTraceServiceRequest| -> Vec<Vec<u8>> {
        r.resource_spans
            .iter()
            .map(|rs| {
                ExportTraceServiceRequest {
                    resource_spans: vec![rs.clone()],
                }
                .encode_to_vec()
            })
            .collect()
    };
    let sent_encoded: HashSet<Vec<u8>> = sent.iter().flat_map(entries).collect();
    let mut received_entries = 0;
    for request in downstream.received.lock().unwrap().iter() {
        for entry in entries(&strip_loop_attributes(request)) {
            received_entries += 1;
            assert!(
                sent_encoded.contains(&entry),
                "{transport:?}: a forwarded resource_spans differs from what was sent beyond loop.*"
            );
        }
    }
    let sent_entries: usize = sent.iter().map(|r| r.resource_spans.len()).sum();
    assert_eq!(received_entries, sent_entries, "{transport:?}");

    // Final detections per run = expected.json; the completing spans carry loop.*.
    let by_id: HashMap<Vec<u8>, Span> = received
        .into_iter()
        .map(|s| (s.span_id.clone(), s))
        .collect();
    let mut annotated_expected = HashSet::new();
    for (run, expected) in corpus_expected() {
        let detections =
            assert_corpus_run_detections(&server, &run, &expected, &format!("{transport:?}"));
        for d in &detections {
            let span = &by_id[d.span_id.as_slice()];
            assert_eq!(
                attr(span, "loop.detected"),
                Some(Value::BoolValue(true)),
                "{run}: completing span annotated"
            );
            let events: Vec<_> = span
                .events
                .iter()
                .filter(|e| e.name == "loop.detected")
                .collect();
            assert_eq!(events.len(), 1, "{run}: one loop.detected event");
            assert_eq!(events[0].time_unix_nano, span.end_time_unix_nano);
            let written: Vec<_> = span
                .attributes
                .iter()
                .filter(|kv| kv.key.starts_with("loop."))
                .collect();
            assert_eq!(events[0].attributes.iter().collect::<Vec<_>>(), written);
            annotated_expected.insert(d.span_id.to_vec());
            let profiles = match attr(span, "loop.profiles") {
                Some(Value::ArrayValue(a)) => a
                    .values
                    .iter()
                    .filter_map(|v| match &v.value {
                        Some(Value::StringValue(s)) => Some(s.clone()),
                        _ => None,
                    })
                    .collect::<Vec<_>>(),
                other => panic!("loop.profiles {other:?}"),
            };
            assert!(
                profiles.contains(&d.profile.name),
                "{run}: {profiles:?} lists {}",
                d.profile.name
            );
        }
    }
    // And no other span was annotated.
    let annotated: HashSet<Vec<u8>> = by_id
        .values()
        .filter(|s| attr(s, "loop.detected").is_some())
        .map(|s| s.span_id.clone())
        .collect();
    assert_eq!(annotated, annotated_expected);
    assert!(!annotated.is_empty());
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_through_grpc() {
    corpus_end_to_end(Transport::Grpc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_through_http_protobuf() {
    corpus_end_to_end(Transport::HttpProtobuf).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_through_http_json() {
    corpus_end_to_end(Transport::HttpJson).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unannotated_requests_are_forwarded_byte_for_byte() {
    // s4_healthy has no detection: what the downstream decodes equals what was sent.
    let (downstream, server, client) = start_with_downstream().await;
    let mut client = client;
    let files = corpus_files("pydantic-ai/v5-default/s4_healthy", "pb");
    for file in &files {
        client.export(read_pb(file)).await.unwrap();
    }
    let n: usize = files.iter().map(|f| spans_of(&read_pb(f)).len()).sum();
    assert_eq!(
        downstream.wait_for_spans(n, Duration::from_secs(10)).await,
        n
    );
    let received = downstream.received.lock().unwrap().clone();
    for (file, got) in files.iter().zip(received.iter()) {
        assert_eq!(
            got.encode_to_vec(),
            std::fs::read(file).unwrap(),
            "{}",
            file.display()
        );
    }
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_arguments_are_hashed_and_forwarded() {
    let (downstream, server, client) = start_with_downstream().await;
    let mut client = client.max_encoding_message_size(64 << 20);
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let big = format!("{{\"blob\":\"{}\"}}", "x".repeat(2 << 20));
    let arguments = ["not json at all {", big.as_str(), deep.as_str()];
    let mut scenario = serde_json::json!({"responses": []});
    for a in arguments {
        for _ in 0..3 {
            scenario["responses"]
                .as_array_mut()
                .unwrap()
                .push(serde_json::json!({"calls": [{"tool": "t", "args": a, "result": "same"}]}));
        }
    }
    let request = scenario_request(&scenario, [9; 16], false);
    let n = spans_of(&request).len();
    client.export(request).await.unwrap();
    assert_eq!(
        downstream.wait_for_spans(n, Duration::from_secs(10)).await,
        n
    );
    // each argument kind repeated 3 times with the same result → nudge repeated_result each time
    let detections = server
        .engine
        .registry
        .detections(&hex::encode([9u8; 16]))
        .unwrap();
    let nudge: Vec<_> = detections
        .iter()
        .filter(|d| d.profile.name == "nudge")
        .map(|d| d.detection.call)
        .collect();
    assert_eq!(nudge, vec![Some(3), Some(6), Some(9)]);
    server.shutdown().await.unwrap();
}

/// Empty and all-zero trace ids are OTLP's "no trace": forwarded, never merged into a run.
/// An id of the wrong length is refused, as over OTLP/JSON (`bad_input.rs`): the Collector
/// refuses a whole export holding one (issue D5), so a request of only such spans is
/// `INVALID_ARGUMENT` naming the field, and nothing of it reaches the downstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_trace_ids_are_forwarded_and_never_merged() {
    let (downstream, server, client) = start_with_downstream().await;
    let mut client = client;
    let scenario =
        read_json(&fixtures().join("oracle/scenarios/s05_same_call_same_result_x12.json"));
    let with_trace_id = |trace_id: &Vec<u8>| {
        let mut request = scenario_request(&scenario, [0; 16], false);
        for rs in &mut request.resource_spans {
            for ss in &mut rs.scope_spans {
                for span in &mut ss.spans {
                    span.trace_id = trace_id.clone();
                }
            }
        }
        request
    };
    let mut total = 0;
    for trace_id in [vec![], vec![0u8; 16]] {
        let request = with_trace_id(&trace_id);
        total += spans_of(&request).len();
        client.export(request).await.unwrap();
    }
    for trace_id in [vec![1u8; 8], vec![2u8; 17]] {
        let status = client.export(with_trace_id(&trace_id)).await.unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(
            status.message().contains(&format!(
                "resourceSpans[0].scopeSpans[0].spans[0].traceId: id has {} bytes, expected 16",
                trace_id.len()
            )),
            "{}",
            status.message()
        );
    }
    assert_eq!(
        downstream
            .wait_for_spans(total, Duration::from_secs(10))
            .await,
        total
    );
    assert_eq!(
        server.engine.registry.run_count(),
        0,
        "invalid trace ids never form a run"
    );
    server.shutdown().await.unwrap();
    assert_eq!(downstream.spans().len(), total, "nothing more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_downstream_backpressures_then_delivers_everything() {
    let (downstream, addr) = Downstream::start(true).await;
    let mut config = test_config(Some(addr));
    config.exporter.queue_capacity = 2;
    config.exporter.timeout = Duration::from_secs(30);
    let server = loopwatch::server::start(config).await.unwrap();
    let mut client = TraceServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let files = corpus_files("langchain/openinference/s4_healthy", "pb");
    let request = read_pb(&files[0]);
    let per_request = spans_of(&request).len();
    let mut accepted = 0;
    let mut refused = None;
    for i in 0..20u8 {
        // a distinct trace per request so each is new to the detectors
        let mut r = request.clone();
        for rs in &mut r.resource_spans {
            for ss in &mut rs.scope_spans {
                for span in &mut ss.spans {
                    span.trace_id[0] = i;
                }
            }
        }
        match client.export(r).await {
            Ok(_) => accepted += 1,
            Err(status) => {
                refused = Some(status.code());
                break;
            }
        }
    }
    assert_eq!(
        refused,
        Some(tonic::Code::Unavailable),
        "a full queue refuses with UNAVAILABLE"
    );
    assert!(accepted >= 2, "accepted {accepted}");
    downstream.open();
    let expected = accepted * per_request;
    assert_eq!(
        downstream
            .wait_for_spans(expected, Duration::from_secs(20))
            .await,
        expected
    );
    server.shutdown().await.unwrap();
    assert_eq!(
        downstream.spans().len(),
        expected,
        "nothing more, nothing less"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_stalled_mid_request_does_not_block_shutdown() {
    use tokio::io::AsyncWriteExt;
    let (_downstream, addr) = Downstream::start(false).await;
    let mut config = test_config(Some(addr));
    config.shutdown.drain_timeout = Duration::from_secs(1);
    let server = loopwatch::server::start(config).await.unwrap();
    let mut stalled = tokio::net::TcpStream::connect(server.http_addr)
        .await
        .unwrap();
    stalled
        .write_all(
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\nContent-Length: 100\r\n\r\nabcde",
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(15), server.shutdown())
        .await
        .expect("shutdown finishes despite the stalled client")
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    drop(stalled);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_json_doubles_in_strings_arrive_downstream_and_loops_are_detected() {
    // `"NaN"`, `"Infinity"`, `"1.5"` as ProtoJSON writes doubles (an HTTP 400 for the whole
    // request before, every span lost): decoded, forwarded as doubles, detection unchanged.
    let (downstream, server, _client) = start_with_downstream().await;
    let http = reqwest::Client::new();
    let runs: Vec<_> = corpus_expected()
        .into_iter()
        .filter(|(_, expected)| !expected_keys(expected, "nudge").is_empty())
        .take(4)
        .collect();
    assert_eq!(runs.len(), 4);
    let mut sent = 0;
    for (run, _) in &runs {
        for file in corpus_files(run, "json") {
            let mut value: serde_json::Value =
                serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
            sent += add_string_doubles(&mut value);
            let response = http
                .post(format!("http://{}/v1/traces", server.http_addr))
                .header("content-type", "application/json")
                .body(value.to_string())
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 200, "{}", file.display());
        }
    }
    assert_eq!(
        downstream
            .wait_for_spans(sent, Duration::from_secs(20))
            .await,
        sent
    );
    let received = downstream.spans();
    assert_eq!(received.len(), sent);
    for span in &received {
        assert!(has_string_doubles(span), "{}: doubles forwarded", span.name);
    }
    let by_id: HashMap<Vec<u8>, Span> = received
        .into_iter()
        .map(|s| (s.span_id.clone(), s))
        .collect();
    for (run, expected) in &runs {
        let detections = assert_corpus_run_detections(&server, run, expected, "e2e");
        for d in &detections {
            let span = &by_id[d.span_id.as_slice()];
            assert_eq!(attr(span, "loop.detected"), Some(Value::BoolValue(true)));
            assert!(has_string_doubles(span));
        }
    }
    server.shutdown().await.unwrap();
}
