//! Ids of the wrong length over protobuf, through the whole server (issue D5): a trace id
//! that is neither empty nor 16 bytes, or a span id neither empty nor 8 (the span's, its
//! parent's, a link's), leaves its span out alone, as over OTLP/JSON (`bad_input.rs`,
//! `receiver::partial`). prost reads such a span; the Collector refuses the whole request
//! holding one ("unmarshal: invalid TraceID length"), and the forwarder merges queued
//! requests into one export, so forwarding it would cost other clients their spans.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::support::downstream::{serve_trace_service, Downstream};
use crate::support::spans::request_of;
use loopwatch::config::Config;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::span::Link;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

const WAIT: Duration = Duration::from_secs(20);

/// Every listener on port 0, forwarding to `downstream`.
fn config(downstream: std::net::SocketAddr) -> Config {
    crate::support::server::test_config(Some(downstream))
}

fn span(trace: u8, id: u8, name: &str) -> Span {
    Span {
        trace_id: vec![trace; 16],
        span_id: vec![id; 8],
        name: name.into(),
        ..Default::default()
    }
}

/// Three good spans around two bad ones: a 17-byte trace id and a link's 7-byte span id.
fn mixed() -> ExportTraceServiceRequest {
    let bad_trace = Span {
        trace_id: vec![3; 17],
        ..span(3, 2, "bad trace id")
    };
    let bad_link = Span {
        links: vec![Link {
            trace_id: vec![3; 16],
            span_id: vec![4; 7],
            ..Default::default()
        }],
        ..span(3, 4, "bad link")
    };
    let root = Span {
        parent_span_id: Vec::new(),
        ..span(3, 1, "good 1")
    };
    let child = Span {
        parent_span_id: vec![1; 8],
        ..span(3, 3, "good 2")
    };
    request_of(vec![root, bad_trace, child, bad_link, span(3, 5, "good 3")])
}

/// `request` without the spans named "bad …", as prost encodes it (the bytes sent).
fn without_bad(request: &ExportTraceServiceRequest) -> Vec<u8> {
    let mut good = request.clone();
    for rs in &mut good.resource_spans {
        for ss in &mut rs.scope_spans {
            ss.spans.retain(|s| !s.name.starts_with("bad"));
        }
    }
    good.encode_to_vec()
}

/// A downstream that answers as the Collector does (pdata's `TraceID` / `SpanID`
/// unmarshalling): an export holding an id of the wrong length is refused whole with
/// `INVALID_ARGUMENT`; others are recorded by a [`Downstream`].
#[derive(Clone, Default)]
struct CollectorLike {
    accepted: Downstream,
    refused: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl TraceService for CollectorLike {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let wrong = |id: &[u8], len: usize| !id.is_empty() && id.len() != len;
        let bad = request
            .get_ref()
            .resource_spans
            .iter()
            .flat_map(|rs| &rs.scope_spans)
            .flat_map(|ss| &ss.spans)
            .any(|s| {
                wrong(&s.trace_id, 16)
                    || wrong(&s.span_id, 8)
                    || wrong(&s.parent_span_id, 8)
                    || s.links
                        .iter()
                        .any(|l| wrong(&l.trace_id, 16) || wrong(&l.span_id, 8))
            });
        if bad {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(tonic::Status::invalid_argument(
                "unmarshal: invalid TraceID length",
            ));
        }
        self.accepted.export(request).await
    }
}

async fn collector_like() -> (CollectorLike, std::net::SocketAddr) {
    let downstream = CollectorLike::default();
    let addr = serve_trace_service(downstream.clone()).await;
    (downstream, addr)
}

const EXPECTED_MESSAGE: &str = "2 span(s) could not be read and were left out; the rest of the \
     request was accepted: resourceSpans[0].scopeSpans[0].spans[1].traceId: id has 17 bytes, \
     expected 16; resourceSpans[0].scopeSpans[0].spans[3].links[0].spanId: id has 7 bytes, \
     expected 8";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_span_with_an_id_of_the_wrong_length_is_left_out_alone_over_grpc_and_http() {
    let (downstream, addr) = collector_like().await;
    let server = loopwatch::server::start(config(addr)).await.unwrap();
    let request = mixed();
    let expected = without_bad(&request);

    // gRPC: accepted, the two spans counted and named in partial_success, the rest
    // forwarded as sent.
    let mut client = TraceServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let response = client.export(request.clone()).await.unwrap().into_inner();
    let partial = response.partial_success.expect("partial_success");
    assert_eq!(partial.rejected_spans, 2);
    assert_eq!(partial.error_message, EXPECTED_MESSAGE);
    assert_eq!(downstream.accepted.wait_for_spans(3, WAIT).await, 3);

    // OTLP/HTTP protobuf: the same.
    let response = reqwest::Client::new()
        .post(format!("http://{}/v1/traces", server.http_addr))
        .header("content-type", "application/x-protobuf")
        .body(request.encode_to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let response = ExportTraceServiceResponse::decode(response.bytes().await.unwrap()).unwrap();
    let partial = response.partial_success.expect("partial_success");
    assert_eq!(partial.rejected_spans, 2);
    assert_eq!(partial.error_message, EXPECTED_MESSAGE);
    assert_eq!(downstream.accepted.wait_for_spans(6, WAIT).await, 6);

    // Only bad spans: refused as a request of no readable span, nothing forwarded.
    let only_bad = request_of(vec![Span {
        span_id: vec![1; 9],
        ..span(3, 1, "bad span id")
    }]);
    let status = client.export(only_bad).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        status.message(),
        "invalid OTLP request: no span could be read: \
         resourceSpans[0].scopeSpans[0].spans[0].spanId: id has 9 bytes, expected 8"
    );
    server.shutdown().await.unwrap();
    let received = downstream.accepted.received.lock().unwrap().clone();
    let forwarded: Vec<Vec<u8>> = received.iter().map(Message::encode_to_vec).collect();
    assert_eq!(forwarded, [expected.clone(), expected]);
    assert_eq!(downstream.refused.load(Ordering::SeqCst), 0);
}

/// Requests queued together go out as one export: the bad client's span is not in it, so
/// a downstream that refuses a whole export holding a bad id (the Collector) takes the
/// good client's spans.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_id_never_costs_other_requests_merged_into_its_export() {
    let (downstream, addr) = collector_like().await;
    let mut config = config(addr);
    // Requests arriving within 300 ms go out together.
    config.exporter.batch_timeout = Duration::from_millis(300);
    let server = loopwatch::server::start(config).await.unwrap();
    let mut client = TraceServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let bad = request_of(vec![Span {
        trace_id: vec![1; 17],
        ..span(1, 1, "bad client")
    }]);
    let good = request_of(vec![span(2, 2, "good client"), span(2, 3, "good client")]);
    let bad_and_good = request_of(vec![
        Span {
            parent_span_id: vec![9; 16],
            ..span(4, 4, "bad client")
        },
        span(4, 5, "good client"),
    ]);
    let (mut first, mut second) = (client.clone(), client.clone());
    let (bad, good, bad_and_good) = tokio::join!(
        first.export(bad),
        second.export(good),
        client.export(bad_and_good),
    );
    assert_eq!(bad.unwrap_err().code(), tonic::Code::InvalidArgument);
    assert!(good.unwrap().into_inner().partial_success.is_none());
    let partial = bad_and_good.unwrap().into_inner().partial_success;
    assert_eq!(partial.map(|p| p.rejected_spans), Some(1));
    assert_eq!(downstream.accepted.wait_for_spans(3, WAIT).await, 3);
    server.shutdown().await.unwrap();
    let names: Vec<String> = downstream
        .accepted
        .spans()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(names, ["good client"; 3]);
    assert_eq!(downstream.refused.load(Ordering::SeqCst), 0);
}
