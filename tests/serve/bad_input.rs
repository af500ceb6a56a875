//! Bad input through the whole server (receivers → engine → forwarder → a real downstream):
//! malformed bodies are refused with the OTLP status and nothing reaches downstream; an
//! oversize request is refused and the next one is still served *and forwarded*; odd
//! arguments and ids in OTLP/JSON are hashed or left out of detection, never a panic,
//! and the spans are forwarded. (tests/serve/e2e.rs covers the same arguments over gRPC and
//! invalid trace ids over gRPC; tests/receiver_*.rs the receivers alone.)

use crate::support;

use std::time::Duration;

use crate::support::downstream::Downstream;
use crate::support::spans::*;
use loopwatch::config::Config;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;
use rand::{RngCore, SeedableRng};
use serde_json::json;

const WAIT: Duration = Duration::from_secs(20);

/// Every listener on port 0, forwarding to `downstream`.
fn config(downstream: std::net::SocketAddr) -> Config {
    crate::support::server::test_config(Some(downstream))
}

fn span_count(request: &ExportTraceServiceRequest) -> usize {
    request
        .resource_spans
        .iter()
        .flat_map(|rs| rs.scope_spans.iter())
        .map(|ss| ss.spans.len())
        .sum()
}

/// A small valid request: one healthy tool call in trace `id`.
fn small(id: u8) -> ExportTraceServiceRequest {
    let scenario =
        json!({"responses": [{"calls": [{"tool": "t", "args": {"a": 1}, "result": "r"}]}]});
    scenario_request(&scenario, [id; 16], false)
}

/// One span carrying a `size`-byte argument string.
fn huge(size: usize) -> ExportTraceServiceRequest {
    let mut request = small(0x20);
    let span = &mut request.resource_spans[0].scope_spans[0].spans[1];
    span.attributes
        .push(kv("gen_ai.tool.call.arguments", s(&"x".repeat(size))));
    request
}

async fn post(url: &str, content_type: &str, body: Vec<u8>) -> reqwest::Response {
    reqwest::Client::new()
        .post(url)
        .header("content-type", content_type)
        .body(body)
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_bodies_are_refused_and_never_forwarded() {
    let (downstream, addr) = Downstream::start(false).await;
    let server = loopwatch::server::start(config(addr)).await.unwrap();
    let url = format!("http://{}/v1/traces", server.http_addr);
    let mut client = TraceServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let valid = small(1).encode_to_vec();
    let mut noise = vec![0u8; 2048];
    rand::rngs::StdRng::seed_from_u64(11).fill_bytes(&mut noise);
    let truncated = valid[..valid.len() / 2].to_vec();
    // Random bytes can be valid protobuf (unknown fields are skipped): check these are not.
    for body in [&truncated, &noise] {
        assert!(ExportTraceServiceRequest::decode(body.as_slice()).is_err());
    }
    // Truncated protobuf and random bytes over HTTP.
    for body in [truncated.clone(), noise.clone()] {
        let resp = post(&url, "application/x-protobuf", body).await;
        assert_eq!(resp.status(), 400);
    }
    // The same bytes as OTLP/JSON, and JSON that is not OTLP.
    for body in [
        noise.clone(),
        b"{\"resourceSpans\":{}}".to_vec(),
        b"{\"resourceSpans\":[{\"scopeSpans\":[{\"spans\":[{\"startTimeUnixNano\":-1}]}]}]}"
            .to_vec(),
        b"{\"resourceSpans\":[]}trailing".to_vec(),
    ] {
        let resp = post(&url, "application/json", body.clone()).await;
        assert_eq!(
            resp.status(),
            400,
            "{}",
            String::from_utf8_lossy(&body[..body.len().min(80)])
        );
    }
    // A body nested far deeper than the JSON parser's recursion limit.
    let deep = format!(
        "{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{{\"attributes\":[{{\"key\":\"k\",\"value\":{}1{}}}]}}]}}]}}]}}",
        "{\"arrayValue\":{\"values\":[".repeat(10_000),
        "]}}".repeat(10_000)
    );
    assert_eq!(
        post(&url, "application/json", deep.into_bytes())
            .await
            .status(),
        400
    );
    // Protobuf nested past prost's recursion limit: a resource attribute whose AnyValue
    // holds arrays 10 000 deep, appended to a valid request (encoded by hand: building
    // it as a value would overflow this test's own stack).
    let field = |tag: u32, body: &[u8]| {
        let mut out = Vec::new();
        prost::encoding::encode_key(tag, prost::encoding::WireType::LengthDelimited, &mut out);
        prost::encoding::encode_varint(body.len() as u64, &mut out);
        out.extend_from_slice(body);
        out
    };
    let mut any = vec![0x18, 0x01]; // AnyValue { int_value: 1 }
    for _ in 0..10_000 {
        any = field(5, &field(1, &any)); // AnyValue { array_value: ArrayValue { values } }
    }
    let key_value = [field(1, b"k"), field(2, &any)].concat();
    let mut nested = small(2).encode_to_vec();
    nested.extend(field(1, &field(1, &field(1, &key_value))));
    assert!(ExportTraceServiceRequest::decode(nested.as_slice()).is_err());
    assert_eq!(
        post(&url, "application/x-protobuf", nested).await.status(),
        400
    );
    // A valid request over gRPC after all that is served.
    let status = client
        .export(tonic::Request::new(small(3)))
        .await
        .map(|_| ())
        .err();
    assert!(status.is_none(), "a valid request is accepted: {status:?}");
    // Everything refused reached nobody; the valid request did.
    assert_eq!(downstream.wait_for_spans(2, WAIT).await, 2);
    assert_eq!(downstream.spans().len(), 2);
    assert_eq!(server.engine.registry.run_count(), 1);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversize_is_refused_and_the_next_request_is_forwarded() {
    let (downstream, addr) = Downstream::start(false).await;
    let server = loopwatch::server::start(config(addr)).await.unwrap();
    let big = huge(20 << 20);
    let mut client = TraceServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap()
        .max_encoding_message_size(64 << 20);
    let status = client.export(big.clone()).await.err().map(|s| s.code());
    assert_eq!(status, Some(tonic::Code::ResourceExhausted));
    client.export(small(4)).await.unwrap();
    assert_eq!(downstream.wait_for_spans(2, WAIT).await, 2);

    let url = format!("http://{}/v1/traces", server.http_addr);
    match reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/x-protobuf")
        .body(big.encode_to_vec())
        .send()
        .await
    {
        Ok(resp) => assert_eq!(resp.status(), 413),
        // the server may close the connection before the client finished writing
        Err(e) => assert!(e.is_request() || e.is_body(), "{e}"),
    }
    let json = serde_json::to_vec(&small(5)).unwrap();
    assert_eq!(post(&url, "application/json", json).await.status(), 200);
    assert_eq!(downstream.wait_for_spans(4, WAIT).await, 4);
    let traces: Vec<u8> = downstream.spans().iter().map(|s| s.trace_id[0]).collect();
    assert_eq!(
        traces,
        vec![4, 4, 5, 5],
        "only the small requests were forwarded"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_arguments_in_otlp_json_are_hashed_and_forwarded() {
    let (downstream, addr) = Downstream::start(false).await;
    let server = loopwatch::server::start(config(addr)).await.unwrap();
    let url = format!("http://{}/v1/traces", server.http_addr);
    let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
    let big = format!("{{\"blob\":\"{}\"}}", "x".repeat(2 << 20));
    let unclosed = "{".repeat(10_000);
    let arguments = [
        "not json at all {",
        big.as_str(),
        deep.as_str(),
        unclosed.as_str(),
        "\u{0}\u{fffd}",
    ];
    let mut scenario = json!({"responses": []});
    for a in arguments {
        for _ in 0..3 {
            scenario["responses"]
                .as_array_mut()
                .unwrap()
                .push(json!({"calls": [{"tool": "t", "args": a, "result": "same"}]}));
        }
    }
    let request = scenario_request(&scenario, [0x31; 16], false);
    let n = span_count(&request);
    let body = serde_json::to_vec(&request).unwrap();
    let resp = post(&url, "application/json", body).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(downstream.wait_for_spans(n, WAIT).await, n);
    // Each argument kind three times with the same result: repeated_result each time,
    // so the five kinds hash to five distinct fingerprints.
    let detections = server
        .engine
        .registry
        .detections(&hex::encode([0x31u8; 16]))
        .unwrap();
    let nudge: Vec<_> = detections
        .iter()
        .filter(|d| d.profile.name == "nudge")
        .map(|d| (d.detection.call, d.detection.fingerprints.clone()))
        .collect();
    let calls: Vec<_> = nudge.iter().map(|(c, _)| *c).collect();
    assert_eq!(calls, vec![Some(3), Some(6), Some(9), Some(12), Some(15)]);
    let distinct: std::collections::HashSet<_> = nudge.iter().map(|(_, f)| f.clone()).collect();
    assert_eq!(distinct.len(), 5);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_ids_in_otlp_json() {
    let (downstream, addr) = Downstream::start(false).await;
    let server = loopwatch::server::start(config(addr)).await.unwrap();
    let url = format!("http://{}/v1/traces", server.http_addr);
    let scenario =
        read_json(&fixtures().join("oracle/scenarios/s05_same_call_same_result_x12.json"));
    let request = scenario_request(&scenario, [0; 16], false);
    let n = span_count(&request);
    let as_json = |trace_id: &str| {
        let mut v = serde_json::to_value(&request).unwrap();
        for span in v["resourceSpans"][0]["scopeSpans"][0]["spans"]
            .as_array_mut()
            .unwrap()
        {
            span["traceId"] = json!(trace_id);
        }
        serde_json::to_vec(&v).unwrap()
    };
    // Empty and all-zero trace ids: accepted, forwarded, never merged into a run.
    for id in ["", "00000000000000000000000000000000"] {
        assert_eq!(
            post(&url, "application/json", as_json(id)).await.status(),
            200,
            "{id:?}"
        );
    }
    assert_eq!(downstream.wait_for_spans(2 * n, WAIT).await, 2 * n);
    assert_eq!(server.engine.registry.run_count(), 0);
    // Wrong length, not hex, base64: 400 naming the field.
    for id in [
        "0102030405060708",
        "zz02030405060708090a0b0c0d0e0f10",
        "AAECAwQFBgcICQoLDA0ODw==",
    ] {
        let resp = post(&url, "application/json", as_json(id)).await;
        assert_eq!(resp.status(), 400, "{id:?}");
        let body: serde_json::Value = resp.json().await.unwrap();
        let message = body["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("resourceSpans[0].scopeSpans[0].spans[0].traceId"),
            "{id:?}: {message}"
        );
    }
    // A valid id after all that: a run, detections, forwarded.
    let id = "5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c5c";
    assert_eq!(
        post(&url, "application/json", as_json(id)).await.status(),
        200
    );
    assert_eq!(downstream.wait_for_spans(3 * n, WAIT).await, 3 * n);
    assert_eq!(server.engine.registry.run_count(), 1);
    assert!(!server
        .engine
        .registry
        .detections(id)
        .unwrap_or_default()
        .is_empty());
    server.shutdown().await.unwrap();
}

/// A downstream that keeps the raw protobuf of each Export (loopwatch's own gRPC receiver
/// with a recording sink): the prost-based [`Downstream`] would refuse a request carrying
/// a string that is not valid UTF-8.
async fn raw_downstream() -> (
    std::sync::Arc<support::receiver::RecordingSink>,
    std::net::SocketAddr,
) {
    use loopwatch::receiver::grpc::GrpcReceiver;
    use loopwatch::receiver::{ReceiverOptions, ReceiverStats};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let sink = support::receiver::RecordingSink::new();
    let receiver = GrpcReceiver::new(
        sink.clone(),
        ReceiverOptions::default(),
        std::sync::Arc::new(ReceiverStats::default()),
    );
    tokio::spawn(receiver.serve(listener, std::future::pending()));
    (sink, addr)
}

/// Five identical `read_file` calls (a loop) and, in the same request, a `search` span whose
/// arguments are patched to invalid UTF-8 after encoding.
fn looping_request_with_a_bad_string() -> Vec<u8> {
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::trace::v1::Span;
    let kv = |key: &str, value: &str| KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.into())),
        }),
        ..Default::default()
    };
    let span = |i: u8, tool: &str, arguments: &str| Span {
        trace_id: vec![0x41; 16],
        span_id: vec![i + 1; 8],
        name: format!("execute_tool {tool}"),
        start_time_unix_nano: 1_000 * u64::from(i + 1),
        end_time_unix_nano: 1_000 * u64::from(i + 1) + 500,
        attributes: vec![
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", tool),
            kv("gen_ai.tool.call.arguments", arguments),
            kv("gen_ai.tool.call.result", "same"),
        ],
        ..Default::default()
    };
    let mut spans: Vec<Span> = (0..5)
        .map(|i| span(i, "read_file", "{\"path\":\"a.txt\"}"))
        .collect();
    spans.insert(2, span(9, "search", "{\"q\":\"BAD\"}"));
    let request = support::spans::request_of(spans);
    let mut bytes = request.encode_to_vec();
    let at = bytes.windows(3).position(|w| w == b"BAD").unwrap();
    bytes[at] = 0xff;
    assert!(ExportTraceServiceRequest::decode(bytes.as_slice()).is_err());
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_utf8_in_one_span_costs_no_span_and_the_loop_is_still_found() {
    use loopwatch::otlp::wire::WireRequest;
    let (sink, addr) = raw_downstream().await;
    let server = loopwatch::server::start(config(addr)).await.unwrap();
    let bytes = looping_request_with_a_bad_string();
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.unwrap();
    grpc.unary(
        tonic::Request::new(loopwatch::forward::ExportBody::from(bytes::Bytes::from(
            bytes.clone(),
        ))),
        http::uri::PathAndQuery::from_static(loopwatch::receiver::grpc::EXPORT_PATH),
        loopwatch::forward::RawBytesCodec,
    )
    .await
    .unwrap_or_else(|s| panic!("a request with a bad string was refused: {s}"));

    let deadline = std::time::Instant::now() + WAIT;
    let forwarded = loop {
        if let Some(request) = sink.take().pop() {
            break request.raw_protobuf().unwrap().clone();
        }
        assert!(std::time::Instant::now() < deadline, "nothing forwarded");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let sent = WireRequest::read(bytes::Bytes::from(bytes.clone())).unwrap();
    let out = WireRequest::read(forwarded.clone()).unwrap();
    assert_eq!(out.span_count(), 6, "every span forwarded");
    let mut annotated = Vec::new();
    for (i, (before, after)) in sent.spans().iter().zip(out.spans()).enumerate() {
        let (original, now) = (
            &bytes[before.range.clone()],
            &forwarded[after.range.clone()],
        );
        if loopwatch::otlp::view::attr(&after.span.attributes, "loop.detected").is_some() {
            // the loop.* attributes appended after the span's own bytes
            assert!(now.starts_with(original), "span {i} changed");
            annotated.push(after.span.span_id[0]);
        } else {
            assert_eq!(now, original, "span {i} not byte-identical");
        }
    }
    // the bad span (id 10) is forwarded untouched; the loop among the valid ones is found
    assert!(
        !annotated.is_empty() && !annotated.contains(&10),
        "{annotated:?}"
    );
    let detections = server
        .engine
        .registry
        .detections(&hex::encode([0x41u8; 16]))
        .unwrap();
    assert!(
        detections
            .iter()
            .all(|d| d.detection.tool_names.iter().all(|t| &**t == "read_file")),
        "{detections:?}"
    );
    assert!(!detections.is_empty());
    server.shutdown().await.unwrap();
}

/// OTLP/JSON has the protobuf path's value cap and partial acceptance: one span of 1.2 M
/// empty attributes (a 25 KB gzip body of 13 MB) is refused with 413 naming
/// `limits.max_values_per_request`, before it is parsed, as the same span over protobuf
/// is; a span whose attribute nests arrays 40 deep (past serde_json's 128 levels) is read,
/// and one nested past prost's budget (48) or holding a number out of the f64 range is
/// left out alone while the rest of its request is forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_json_has_the_value_cap_and_leaves_a_bad_span_out_alone() {
    let (downstream, addr) = Downstream::start(false).await;
    let server = loopwatch::server::start(config(addr)).await.unwrap();
    let url = format!("http://{}/v1/traces", server.http_addr);
    let mut bomb =
        br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"x","attributes":["#.to_vec();
    bomb.extend(vec![&br#"{"key":""}"#[..]; 1_200_000].join(&b','));
    bomb.extend(br#"]}]}]}]}"#);
    let resp = reqwest::Client::new()
        .post(&url)
        .header("content-type", "application/json")
        .header("content-encoding", "gzip")
        .body(support::receiver::gzip(&bomb))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["code"], 8, "{body}");
    let message = body["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("more than 1000000 values")
            && message.contains("(limits.max_values_per_request)"),
        "{message}"
    );

    let span = |i: u32, name: &str, attributes: &str| {
        format!(
            r#"{{"traceId":"{:032x}","spanId":"{i:016x}","name":"{name}","attributes":[{attributes}]}}"#,
            0x77
        )
    };
    let deep = |depth: usize| {
        let mut value = r#"{"stringValue":"leaf"}"#.to_owned();
        for _ in 0..depth {
            value = format!(r#"{{"arrayValue":{{"values":[{value}]}}}}"#);
        }
        format!(r#"{{"key":"d","value":{value}}}"#)
    };
    let spans = [
        span(1, "good-1", ""),
        span(2, "deep-40", &deep(40)),
        span(3, "deep-48", &deep(48)),
        span(4, "huge", r#"{"key":"d","value":{"doubleValue":1e400}}"#),
        span(5, "good-2", ""),
    ];
    let body = format!(
        r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
        spans.join(",")
    );
    let resp = post(&url, "application/json", body.into_bytes()).await;
    assert_eq!(resp.status(), 200);
    let body: serde_json::Value = resp.json().await.unwrap();
    let partial = &body["partialSuccess"];
    assert_eq!(
        partial["rejectedSpans"]
            .as_i64()
            .or_else(|| partial["rejectedSpans"].as_str()?.parse().ok()),
        Some(2),
        "{body}"
    );
    let message = partial["errorMessage"].as_str().unwrap_or_default();
    assert!(
        message.contains("spans[2]: message nested deeper than the recursion limit of 100"),
        "{message}"
    );
    assert!(
        message.contains("spans[3].attributes[0].value.doubleValue: number out of range: 1e400"),
        "{message}"
    );
    assert_eq!(downstream.wait_for_spans(3, WAIT).await, 3);
    let mut names: Vec<String> = downstream.spans().iter().map(|s| s.name.clone()).collect();
    names.sort();
    assert_eq!(names, ["deep-40", "good-1", "good-2"]);
    server.shutdown().await.unwrap();
}
