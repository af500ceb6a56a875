//! Attack suite, partial acceptance (issue 31 items 5 and 6): against the real binary, a
//! span that cannot be read (an attribute nested 48 levels deep, a lone `\ud800` escape,
//! a double that is no number) is left out or read with U+FFFD on its own, reported in
//! OTLP `partial_success`, and the other spans of its request reach a real downstream
//! unchanged; a payload that does not decode is `INVALID_ARGUMENT` (never `INTERNAL`), an
//! unknown compression `UNIMPLEMENTED`; a downstream that refuses every export is counted
//! and logged at WARN at most once per 10 s.

use std::time::Duration;

use crate::support::downstream::Downstream;
use crate::support::serve_process::{scrape, serve_command, spawn_until_listening};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

fn span(id: u8) -> Span {
    Span {
        trace_id: vec![0xa0; 16],
        span_id: vec![id; 8],
        name: format!("span-{id}"),
        attributes: vec![crate::support::spans::kv(
            "gen_ai.tool.name",
            crate::support::spans::s("search"),
        )],
        ..Span::default()
    }
}

/// A span whose one attribute is nested 48 levels deep: past the protobuf recursion limit
/// of 100 that prost (and the Collector) decode with.
fn deep_span(id: u8) -> Span {
    Span {
        attributes: vec![crate::support::hostile::deep_attribute("deep", 48)],
        ..span(id)
    }
}

/// The metric line `name` (labels included) of `/metrics`, as a number.
async fn metric(admin: &str, name: &str) -> f64 {
    let body = scrape(admin).await;
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_span_is_left_out_alone_and_the_rest_forwarded_unchanged() {
    let (downstream, addr) = Downstream::start(false).await;
    let (mut child, listening, _lines) = spawn_until_listening(serve_command(Some(addr)));
    let grpc = listening["grpc"].as_str().unwrap().to_owned();
    let http = listening["http"].as_str().unwrap().to_owned();
    let admin = listening["admin"].as_str().unwrap().to_owned();

    // gRPC: five spans, the third nested too deep.
    let spans = vec![span(1), span(2), deep_span(3), span(4), span(5)];
    let request = crate::support::spans::request_of(spans.clone());
    assert!(
        ExportTraceServiceRequest::decode(request.encode_to_vec().as_slice()).is_err(),
        "prost refuses the whole request"
    );
    let mut client = TraceServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let response = client.export(request).await.expect("accepted").into_inner();
    let partial = response.partial_success.expect("partial_success");
    assert_eq!(partial.rejected_spans, 1, "{partial:?}");
    assert!(
        partial
            .error_message
            .contains("resourceSpans[0].scopeSpans[0].spans[2]")
            && partial.error_message.contains("recursion limit"),
        "{partial:?}"
    );

    // OTLP/HTTP protobuf: the same.
    let request = crate::support::spans::request_of(vec![span(11), deep_span(12), span(13)]);
    let http_client = reqwest::Client::new();
    let answer = http_client
        .post(format!("http://{http}/v1/traces"))
        .header("content-type", "application/x-protobuf")
        .body(request.encode_to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let response = ExportTraceServiceResponse::decode(answer.bytes().await.unwrap()).unwrap();
    assert_eq!(response.partial_success.map(|p| p.rejected_spans), Some(1));

    // OTLP/JSON: a lone surrogate is read as U+FFFD (accepted, warned); a double that is
    // no number leaves its span out.
    let trace = "a0".repeat(16);
    let json = format!(
        r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[
            {{"traceId":"{trace}","spanId":"1500000000000000","name":"lone \ud800 surrogate"}},
            {{"traceId":"{trace}","spanId":"1600000000000000","name":"json-ok"}},
            {{"traceId":"{trace}","spanId":"1700000000000000","name":"bad-double","attributes":[{{"key":"x","value":{{"doubleValue":"twelve"}}}}]}}
        ]}}]}}]}}"#
    );
    let answer = http_client
        .post(format!("http://{http}/v1/traces"))
        .header("content-type", "application/json")
        .body(json)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let body: serde_json::Value = answer.json().await.unwrap();
    let partial = &body["partialSuccess"];
    assert_eq!(
        partial["rejectedSpans"]
            .as_i64()
            .or_else(|| partial["rejectedSpans"].as_str()?.parse().ok()),
        Some(1),
        "{body}"
    );
    let message = partial["errorMessage"].as_str().unwrap_or_default();
    assert!(
        message.contains("spans[2]") && message.contains("U+FFFD"),
        "{body}"
    );

    // Downstream: 4 + 2 + 2 spans, the good ones exactly as sent.
    assert_eq!(
        downstream.wait_for_spans(8, Duration::from_secs(10)).await,
        8
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let got = downstream.spans();
    assert_eq!(got.len(), 8, "nothing else arrives");
    for sent in [&spans[0], &spans[1], &spans[3], &spans[4]] {
        let arrived = got
            .iter()
            .find(|s| s.span_id == sent.span_id)
            .unwrap_or_else(|| panic!("{} did not arrive", sent.name));
        // Forwarded unchanged, bar the loop.* annotation a detection would add (none here).
        assert_eq!(arrived, sent);
    }
    let names: Vec<&str> = got.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"lone \u{FFFD} surrogate"), "{names:?}");
    assert!(
        names.contains(&"json-ok") && !names.contains(&"bad-double"),
        "{names:?}"
    );
    assert!(
        !names.contains(&"span-3") && !names.contains(&"span-12"),
        "{names:?}"
    );

    assert_eq!(
        metric(
            &admin,
            "loopwatch_spans_rejected_total{reason=\"unreadable_span\"}"
        )
        .await,
        3.0
    );
    assert_eq!(
        metric(&admin, "loopwatch_otlp_strings_replaced_total").await,
        1.0
    );
    assert_eq!(metric(&admin, "loopwatch_spans_received_total").await, 8.0);
    let _ = child.kill();
    let _ = child.wait();
}

/// One raw gRPC Export over HTTP/2 with `headers` and the 5-byte-prefixed `message`
/// (`compressed` flag as given); the `grpc-status` answered (headers or trailers).
async fn raw_export(grpc: &str, headers: &[(&str, &str)], compressed: bool, message: &[u8]) -> i32 {
    let tcp = tokio::net::TcpStream::connect(grpc).await.unwrap();
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2");
    tokio::spawn(connection);
    let mut request = http::Request::post(format!(
        "http://{grpc}/opentelemetry.proto.collector.trace.v1.TraceService/Export"
    ))
    .header("content-type", "application/grpc")
    .header("te", "trailers");
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let (response, mut body) = client
        .ready()
        .await
        .expect("ready")
        .send_request(request.body(()).unwrap(), false)
        .expect("send");
    let mut frame = vec![u8::from(compressed)];
    frame.extend_from_slice(&(message.len() as u32).to_be_bytes());
    frame.extend_from_slice(message);
    // The server may answer (and close the stream) from the headers alone, before the
    // message is sent: then sending fails with an inactive stream and the answer is read.
    let _ = body.send_data(frame.into(), true);
    let response = response.await.expect("response");
    let status = |map: &http::HeaderMap| {
        map.get("grpc-status")
            .and_then(|v| v.to_str().ok()?.parse::<i32>().ok())
    };
    if let Some(code) = status(response.headers()) {
        return code;
    }
    let mut body = response.into_body();
    while body.data().await.is_some() {}
    let trailers = body
        .trailers()
        .await
        .expect("trailers")
        .expect("some trailers");
    status(&trailers).expect("grpc-status")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_that_do_not_decode_are_invalid_argument_never_internal() {
    let (mut child, listening, _lines) = spawn_until_listening(serve_command(None));
    let grpc = listening["grpc"].as_str().unwrap().to_owned();
    let good = crate::support::spans::request_of(vec![span(1)]).encode_to_vec();
    const OK: i32 = 0;
    const INVALID_ARGUMENT: i32 = 3;
    const UNIMPLEMENTED: i32 = 12;
    assert_eq!(raw_export(&grpc, &[], false, &good).await, OK);
    // Declared gzip, not gzip.
    assert_eq!(
        raw_export(
            &grpc,
            &[("grpc-encoding", "gzip")],
            true,
            b"not gzip at all"
        )
        .await,
        INVALID_ARGUMENT
    );
    // Flagged compressed with no encoding named.
    assert_eq!(raw_export(&grpc, &[], true, &good).await, INVALID_ARGUMENT);
    // Not protobuf.
    assert_eq!(
        raw_export(&grpc, &[], false, &[0x0a, 0xff, 0xff, 0x01]).await,
        INVALID_ARGUMENT
    );
    // A compression loopwatch does not decode.
    assert_eq!(
        raw_export(&grpc, &[("grpc-encoding", "br")], true, &good).await,
        UNIMPLEMENTED
    );
    let _ = child.kill();
    let _ = child.wait();
}

/// A downstream that refuses every export with `INVALID_ARGUMENT`.
#[derive(Clone, Default)]
struct Refusing;

#[tonic::async_trait]
impl TraceService for Refusing {
    async fn export(
        &self,
        _request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        Err(tonic::Status::invalid_argument(
            "refused by the test downstream",
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn downstream_rejections_are_counted_and_warned_about_at_most_once_per_interval() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Refusing))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let (mut child, listening, lines) = spawn_until_listening(serve_command(Some(addr)));
    let grpc = listening["grpc"].as_str().unwrap().to_owned();
    let admin = listening["admin"].as_str().unwrap().to_owned();
    let mut client = TraceServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    for i in 0..20u8 {
        client
            .export(crate::support::spans::request_of(vec![
                span(i),
                span(i.wrapping_add(100)),
            ]))
            .await
            .expect("accepted: the refusal comes later, downstream");
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let dropped = "loopwatch_spans_dropped_total{reason=\"non_retryable\"}";
    while metric(&admin, dropped).await < 40.0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(metric(&admin, dropped).await, 40.0);
    let _ = child.kill();
    let _ = child.wait();
    let warned: Vec<String> = lines
        .try_iter()
        .filter(|l| l.contains("dropped forwarded spans") && l.contains("\"WARN\""))
        .collect();
    assert_eq!(warned.len(), 1, "one WARN line for the burst: {warned:#?}");
}
