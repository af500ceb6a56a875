//! Admission before decoding, readiness from local state, and `loopwatch_exporter_up`,
//! through the running server with a real downstream on loopback (issues 8, 9, 10).

use std::time::{Duration, Instant};

use crate::support::downstream::Downstream;
use crate::support::server::*;
use bytes::Bytes;
use http::uri::PathAndQuery;
use loopwatch::forward::{ExportBody, RawBytesCodec};
use loopwatch::receiver::rpc_status::retry_delay;
use loopwatch::receiver::RejectReason;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use tonic::Code;

/// A request with one (non-tool) span `n`.
fn one_span(n: u8) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![7; 16],
                    span_id: vec![n; 8],
                    name: format!("step {n}"),
                    ..Span::default()
                }],
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
}

/// Posts `body` as OTLP/HTTP protobuf; asserts 503 with `Retry-After: 2`.
async fn http_refused_with_retry_after_2s(
    server: &loopwatch::server::RunningServer,
    body: Vec<u8>,
) {
    let http = reqwest::Client::new()
        .post(format!("http://{}/v1/traces", server.http_addr))
        .header("content-type", "application/x-protobuf")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(http.status().as_u16(), 503);
    assert_eq!(
        http.headers().get("retry-after").map(|v| v.as_bytes()),
        Some(&b"2"[..])
    );
}

/// After span 1 was accepted (held by the stalled `downstream`) and the others refused:
/// asserts only span 1 reached detection, opens the downstream, and retries span 2 every
/// 20 ms until it is accepted; both spans then arrive.
async fn refused_unprocessed_then_retry_lands(
    server: &loopwatch::server::RunningServer,
    downstream: &Downstream,
    client: &mut TraceServiceClient<tonic::transport::Channel>,
) {
    assert_eq!(
        server
            .engine
            .stats
            .spans_seen
            .load(std::sync::atomic::Ordering::Relaxed),
        1,
        "refused requests never reached detection"
    );
    downstream.open();
    assert_eq!(
        downstream.wait_for_spans(1, Duration::from_secs(10)).await,
        1
    );
    let mut retried = false;
    for _ in 0..100 {
        if client.export(one_span(2)).await.is_ok() {
            retried = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(retried, "the retry was never accepted");
    assert_eq!(
        downstream.wait_for_spans(2, Duration::from_secs(10)).await,
        2
    );
}

/// Sends `body` as-is as a `TraceService/Export` request (no client-side encoding).
async fn export_raw(grpc: std::net::SocketAddr, body: &'static [u8]) -> Result<(), tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{grpc}"))
        .map_err(|e| tonic::Status::internal(e.to_string()))?
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    grpc.unary(
        tonic::Request::new(ExportBody::from(Bytes::from_static(body))),
        PathAndQuery::from_static(loopwatch::otlp::EXPORT_PATH),
        RawBytesCodec,
    )
    .await
    .map(|_| ())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_span_path_refuses_before_decoding_and_a_retry_is_accepted_later() {
    let (downstream, downstream_addr) = Downstream::start(true).await; // stalled
    let mut config = test_config(Some(downstream_addr));
    config.exporter.queue_capacity = 1;
    config.exporter.concurrency = 1;
    config.receiver.admission_wait = Duration::from_millis(50);
    config.receiver.retry_after = Duration::from_secs(2);
    let server = loopwatch::server::start(config).await.unwrap();
    let mut client = TraceServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();

    // The only slot: accepted, forwarded, stuck in the stalled downstream.
    client.export(one_span(1)).await.unwrap();

    // Full: refused after the bounded admission wait, with RetryInfo.
    let started = Instant::now();
    let refused = client.export(one_span(2)).await.unwrap_err();
    let waited = started.elapsed();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(refused.message(), "forward queue is full; retry later");
    assert_eq!(retry_delay(refused.details()), Some(Duration::from_secs(2)));
    assert!(waited >= Duration::from_millis(50), "{waited:?}");
    assert!(waited < Duration::from_secs(2), "{waited:?}");

    // A body that is not protobuf at all is refused the same way: it was never decoded.
    let garbage = export_raw(server.grpc_addr, b"\xff\xff\xff\xff not protobuf")
        .await
        .unwrap_err();
    assert_eq!(garbage.code(), Code::Unavailable, "{garbage:?}");
    // OTLP/HTTP: 503 + Retry-After, before the body is read.
    http_refused_with_retry_after_2s(&server, b"\xff\xff not protobuf either".to_vec()).await;
    let stats = &server.receiver_stats;
    assert_eq!(stats.rejected_requests(RejectReason::QueueFull), 3);
    assert_eq!(stats.rejected_requests(RejectReason::InvalidPayload), 0);
    assert_eq!(
        stats.rejected_spans(RejectReason::QueueFull),
        0,
        "refused unread"
    );
    // The downstream recovers: the client's retry is accepted and everything arrives once.
    refused_unprocessed_then_retry_lands(&server, &downstream, &mut client).await;
    let mut ids: Vec<u8> = downstream.spans().iter().map(|s| s.span_id[0]).collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2]);
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_stays_ready_while_the_downstream_is_down_and_exporter_up_is_zero() {
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let mut config = test_config(Some(closed));
    config.exporter.initial_backoff = Duration::from_millis(200);
    config.exporter.max_backoff = Duration::from_millis(200);
    let server = loopwatch::server::start(config).await.unwrap();
    let admin = server.admin_addr.unwrap();
    let mut client = TraceServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    client.export(one_span(1)).await.unwrap();
    assert!(
        eventually(Duration::from_secs(10), || async {
            scrape(admin).await.value("loopwatch_exporter_up", &[]) == 0.0
        })
        .await,
        "exporter_up never went to 0"
    );
    let (status, body) = get(admin, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    let scraped = scrape(admin).await;
    assert_eq!(scraped.value("loopwatch_forward_pending_spans", &[]), 1.0);
    assert_eq!(
        scraped.value("loopwatch_forward_in_backoff", &[])
            + scraped.value("loopwatch_forward_in_flight", &[])
            + scraped.value("loopwatch_forward_queue_depth", &[]),
        1.0
    );

    // The downstream comes up on that port: the span is delivered and the gauge goes to 1.
    let listener = tokio::net::TcpListener::bind(closed).await.unwrap();
    let downstream = Downstream::default();
    let service = opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer::new(downstream.clone());
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    assert_eq!(
        downstream.wait_for_spans(1, Duration::from_secs(10)).await,
        1
    );
    assert!(
        eventually(Duration::from_secs(5), || async {
            scrape(admin).await.value("loopwatch_exporter_up", &[]) == 1.0
        })
        .await
    );
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn byte_bound_refuses_with_retry_info_before_detection() {
    let (downstream, downstream_addr) = Downstream::start(true).await; // stalled
    let mut config = test_config(Some(downstream_addr));
    config.exporter.queue_capacity = 100;
    config.exporter.concurrency = 1;
    // Smaller than any request: the first fits alone, nothing fits beside it.
    config.exporter.queue.max_bytes = 1;
    config.receiver.retry_after = Duration::from_secs(2);
    let server = loopwatch::server::start(config).await.unwrap();
    let mut client = TraceServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    client.export(one_span(1)).await.unwrap();

    let refused = client.export(one_span(2)).await.unwrap_err();
    assert_eq!(refused.code(), Code::Unavailable, "{refused:?}");
    assert_eq!(refused.message(), "forward queue is full; retry later");
    assert_eq!(retry_delay(refused.details()), Some(Duration::from_secs(2)));
    http_refused_with_retry_after_2s(&server, prost::Message::encode_to_vec(&one_span(3))).await;
    assert_eq!(
        server
            .receiver_stats
            .rejected_requests(RejectReason::QueueFull),
        2
    );
    refused_unprocessed_then_retry_lands(&server, &downstream, &mut client).await;
    server.shutdown().await.unwrap();
}
