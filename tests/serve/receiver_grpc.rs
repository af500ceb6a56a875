//! OTLP/gRPC receiver against real tonic clients on a real port.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::support::receiver::{big_request, corpus, decode_pb, read, RecordingSink};
use bytes::Bytes;
use http::uri::PathAndQuery;
use loopwatch::forward::{ExportBody, RawBytesCodec};
use loopwatch::receiver::grpc::{GrpcReceiver, EXPORT_PATH, TRACE_SERVICE_NAME};
use loopwatch::receiver::rpc_status::retry_delay;
use loopwatch::receiver::{ReceiverOptions, ReceiverStats, RejectReason};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use prost::Message;
use rand::{RngCore, SeedableRng};
use tokio::sync::oneshot;
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;
use tonic::Code;

struct Server {
    addr: SocketAddr,
    sink: Arc<RecordingSink>,
    stats: Arc<ReceiverStats>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), tonic::transport::Error>>,
}

/// A do-nothing extra service, to show callers can add their own.
#[derive(Clone)]
struct Echo;

impl tonic::server::NamedService for Echo {
    const NAME: &'static str = "test.Echo";
}

impl tonic::codegen::Service<http::Request<tonic::body::Body>> for Echo {
    type Response = http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = std::future::Ready<Result<Self::Response, Infallible>>;
    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        std::task::Poll::Ready(Ok(()))
    }
    fn call(&mut self, _: http::Request<tonic::body::Body>) -> Self::Future {
        std::future::ready(Ok(
            tonic::Status::aborted("echo service reached").into_http()
        ))
    }
}

async fn start() -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let sink = RecordingSink::new();
    let stats = Arc::new(ReceiverStats::default());
    let (stop, stopped) = oneshot::channel::<()>();
    let receiver = GrpcReceiver::new(sink.clone(), ReceiverOptions::default(), Arc::clone(&stats))
        .add_service(Echo);
    let task = tokio::spawn(receiver.serve(listener, async {
        let _ = stopped.await;
    }));
    Server {
        addr,
        sink,
        stats,
        stop: Some(stop),
        task,
    }
}

async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap_or_else(|e| panic!("{e}"))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

/// Sends `bytes` untouched as the Export request body.
async fn send_raw(
    ch: &Channel,
    bytes: Bytes,
    compression: Option<CompressionEncoding>,
    grpc_encoding: Option<&'static str>,
) -> Result<(), tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(ch.clone());
    if let Some(c) = compression {
        grpc = grpc.send_compressed(c);
    }
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let mut req = tonic::Request::new(ExportBody::from(bytes));
    if let Some(enc) = grpc_encoding {
        req.metadata_mut().insert(
            "grpc-encoding",
            tonic::metadata::MetadataValue::from_static(enc),
        );
    }
    grpc.unary(req, PathAndQuery::from_static(EXPORT_PATH), RawBytesCodec)
        .await
        .map(|_| ())
}

#[tokio::test]
async fn corpus_accepted_with_every_compression_and_raw_bytes_kept() {
    let server = start().await;
    let ch = channel(server.addr).await;
    let files = corpus("pb");
    let compressions = [
        None,
        Some(CompressionEncoding::Gzip),
        Some(CompressionEncoding::Zstd),
        Some(CompressionEncoding::Deflate),
    ];
    let mut sent = 0u64;
    for file in &files {
        let original = read(file);
        let expected = decode_pb(&original);
        for compression in compressions {
            // raw client: the receiver must keep the exact bytes
            send_raw(&ch, Bytes::from(original.clone()), compression, None)
                .await
                .unwrap_or_else(|s| panic!("{} {compression:?}: {s}", file.display()));
            // generated client
            let mut client = TraceServiceClient::new(ch.clone());
            if let Some(c) = compression {
                client = client.send_compressed(c);
            }
            client
                .export(expected.clone())
                .await
                .unwrap_or_else(|s| panic!("{} {compression:?}: {s}", file.display()));
            let got = server.sink.take();
            assert_eq!(got.len(), 2);
            for incoming in &got {
                assert_eq!(
                    incoming.to_decoded().unwrap(),
                    expected,
                    "{}",
                    file.display()
                );
            }
            assert_eq!(
                got[0].raw_protobuf().map(|b| b.as_ref()),
                Some(original.as_slice()),
                "{} {compression:?}: raw bytes differ",
                file.display()
            );
            sent += 2;
        }
    }
    assert_eq!(server.stats.accepted_requests(), sent);
    assert!(server.stats.accepted_spans() > sent);
}

#[tokio::test]
async fn malformed_protobuf_is_invalid_argument() {
    let server = start().await;
    let ch = channel(server.addr).await;
    let original = read(&corpus("pb")[0]);
    let truncated = &original[..original.len() / 2];
    assert!(
        opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(
            truncated
        )
        .is_err()
    );
    let status = send_raw(&ch, Bytes::copy_from_slice(truncated), None, None)
        .await
        .err()
        .unwrap_or_else(|| panic!("truncated request accepted"));
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        status.message().contains("invalid OTLP protobuf"),
        "{}",
        status.message()
    );

    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut noise = vec![0u8; 4096];
    rng.fill_bytes(&mut noise);
    let status = send_raw(
        &ch,
        Bytes::from(noise),
        Some(CompressionEncoding::Gzip),
        None,
    )
    .await
    .err()
    .unwrap_or_else(|| panic!("random bytes accepted"));
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(server.sink.take().is_empty());
    assert_eq!(
        server.stats.rejected_requests(RejectReason::InvalidPayload),
        2
    );
}

#[tokio::test]
async fn over_limit_is_resource_exhausted_and_server_keeps_serving() {
    let server = start().await;
    let ch = channel(server.addr).await;
    let big = big_request(20 * 1024 * 1024);
    for compression in [None, Some(CompressionEncoding::Gzip)] {
        let mut client = TraceServiceClient::new(ch.clone()).max_encoding_message_size(64 << 20);
        if let Some(c) = compression {
            client = client.send_compressed(c);
        }
        let status = client
            .export(big.clone())
            .await
            .err()
            .unwrap_or_else(|| panic!("20 MiB request accepted ({compression:?})"));
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(
            status.message().contains("16777216"),
            "{}",
            status.message()
        );
    }
    assert_eq!(server.stats.rejected_requests(RejectReason::TooLarge), 2);
    // still serving, on a fresh and on the same connection
    let small = decode_pb(&read(&corpus("pb")[0]));
    TraceServiceClient::new(ch.clone())
        .export(small.clone())
        .await
        .unwrap_or_else(|s| panic!("after oversize: {s}"));
    TraceServiceClient::new(channel(server.addr).await)
        .export(small)
        .await
        .unwrap_or_else(|s| panic!("after oversize, new connection: {s}"));
    assert_eq!(server.sink.take().len(), 2);
}

#[tokio::test]
async fn unsupported_compression_is_unimplemented_listing_accepted() {
    let server = start().await;
    let ch = channel(server.addr).await;
    let original = Bytes::from(read(&corpus("pb")[0]));
    let status = send_raw(&ch, original, None, Some("br"))
        .await
        .err()
        .unwrap_or_else(|| panic!("br accepted"));
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    assert_eq!(
        status.message(),
        "unsupported compression `br`; accepted encodings: identity, gzip, zstd, deflate"
    );
    assert_eq!(
        status
            .metadata()
            .get("grpc-accept-encoding")
            .and_then(|v| v.to_str().ok()),
        Some("gzip,zstd,deflate,identity")
    );
    assert_eq!(
        server
            .stats
            .rejected_requests(RejectReason::UnsupportedEncoding),
        1
    );
}

#[tokio::test]
async fn refused_requests_are_unavailable_with_retry_info() {
    let server = start().await;
    let ch = channel(server.addr).await;
    let request = decode_pb(&read(&corpus("pb")[0]));
    let spans: u64 = request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len() as u64)
        .sum();
    server.sink.refuse_queue_full();
    let status = TraceServiceClient::new(ch.clone())
        .export(request.clone())
        .await
        .err()
        .unwrap_or_else(|| panic!("accepted while full"));
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(status.message(), "forward queue is full; retry later");
    assert_eq!(retry_delay(status.details()), Some(Duration::from_secs(1)));
    server.sink.refuse_shutting_down();
    let status = TraceServiceClient::new(ch.clone())
        .export(request.clone())
        .await
        .err()
        .unwrap_or_else(|| panic!("accepted while shutting down"));
    assert_eq!(status.code(), Code::Unavailable);
    assert_eq!(server.stats.rejected_requests(RejectReason::QueueFull), 1);
    assert_eq!(server.stats.rejected_spans(RejectReason::QueueFull), spans);
    assert_eq!(
        server.stats.rejected_requests(RejectReason::ShuttingDown),
        1
    );
    server.sink.accept_all();
    TraceServiceClient::new(ch)
        .export(request)
        .await
        .unwrap_or_else(|s| panic!("after refusal: {s}"));
    assert_eq!(server.stats.accepted_requests(), 1);
}

#[tokio::test]
async fn health_extra_services_and_graceful_shutdown() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let mut server = start().await;
    let ch = channel(server.addr).await;
    let mut health = HealthClient::new(ch.clone());
    for service in ["", TRACE_SERVICE_NAME] {
        let resp = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap_or_else(|s| panic!("health {service:?}: {s}"));
        assert_eq!(resp.into_inner().status, ServingStatus::Serving as i32);
    }
    // the caller-added service is routed on the same port
    let mut grpc = tonic::client::Grpc::new(ch.clone());
    grpc.ready().await.unwrap_or_else(|e| panic!("{e}"));
    let status = grpc
        .unary(
            tonic::Request::new(ExportBody::default()),
            PathAndQuery::from_static("/test.Echo/Ping"),
            RawBytesCodec,
        )
        .await
        .err()
        .unwrap_or_else(|| panic!("echo returned OK"));
    assert_eq!(status.code(), Code::Aborted);
    assert_eq!(status.message(), "echo service reached");

    if let Some(stop) = server.stop.take() {
        let _ = stop.send(());
    }
    drop((health, grpc, ch));
    let result = tokio::time::timeout(Duration::from_secs(5), &mut server.task)
        .await
        .unwrap_or_else(|_| panic!("server did not stop within 5s"));
    assert!(matches!(result, Ok(Ok(()))), "{result:?}");
    assert!(tokio::net::TcpStream::connect(server.addr).await.is_err());
}

/// A request of two spans whose second carries a string attribute that is not valid
/// UTF-8, encoded by hand (prost cannot encode it) from a valid request.
fn request_with_invalid_utf8() -> (Vec<u8>, usize) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    let span = |id: u8, text: &str| Span {
        trace_id: vec![1; 16],
        span_id: vec![id; 8],
        name: "execute_tool search".into(),
        attributes: vec![KeyValue {
            key: "gen_ai.tool.call.arguments".into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(text.into())),
            }),
            ..Default::default()
        }],
        ..Default::default()
    };
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![span(1, "{\"q\":\"ok\"}"), span(2, "{\"q\":\"BAD\"}")],
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let mut bytes = request.encode_to_vec();
    let at = bytes
        .windows(3)
        .position(|w| w == b"BAD")
        .unwrap_or_else(|| panic!("marker not found"));
    bytes[at] = 0xff;
    assert!(ExportTraceServiceRequest::decode(bytes.as_slice()).is_err());
    (bytes, 2)
}

#[tokio::test]
async fn invalid_utf8_costs_no_span_and_is_kept_byte_for_byte() {
    let server = start().await;
    let ch = channel(server.addr).await;
    let (bytes, spans) = request_with_invalid_utf8();
    send_raw(&ch, Bytes::from(bytes.clone()), None, None)
        .await
        .unwrap_or_else(|s| panic!("a request with a bad string was refused: {s}"));
    let got = server.sink.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].span_count(), spans as u64);
    assert_eq!(
        got[0].raw_protobuf().map(|b| b.as_ref()),
        Some(bytes.as_slice())
    );
    assert_eq!(server.stats.accepted_spans(), spans as u64);
}

/// issue D7: a unary Export call whose body holds two length-prefixed messages (a
/// client-streaming call on the unary method) is refused whole with INVALID_ARGUMENT,
/// nothing of it taken; tonic's unary server alone answered OK and dropped the second.
#[tokio::test]
async fn a_unary_export_of_two_messages_is_invalid_argument_and_nothing_is_taken() {
    use loopwatch::receiver::grpc::MORE_THAN_ONE_MESSAGE;
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    let server = start().await;
    let ch = channel(server.addr).await;
    let request = decode_pb(&read(&corpus("pb")[0]));
    let codec =
        tonic_prost::ProstCodec::<ExportTraceServiceRequest, ExportTraceServiceResponse>::default;
    let mut grpc = tonic::client::Grpc::new(ch.clone());
    for compression in [None, Some(CompressionEncoding::Gzip)] {
        if let Some(c) = compression {
            grpc = grpc.send_compressed(c);
        }
        grpc.ready().await.unwrap();
        let two = futures::stream::iter([request.clone(), request.clone()]);
        let status = grpc
            .client_streaming(
                tonic::Request::new(two),
                PathAndQuery::from_static(EXPORT_PATH),
                codec(),
            )
            .await
            .err()
            .unwrap_or_else(|| panic!("two messages accepted ({compression:?})"));
        assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
        assert_eq!(status.message(), MORE_THAN_ONE_MESSAGE);
    }
    assert!(server.sink.take().is_empty(), "nothing taken");
    assert_eq!(
        server.stats.rejected_requests(RejectReason::InvalidPayload),
        2
    );
    // One message on the same method, as a stream of one: accepted whole.
    grpc.ready().await.unwrap();
    let one = futures::stream::iter([request.clone()]);
    grpc.client_streaming(
        tonic::Request::new(one),
        PathAndQuery::from_static(EXPORT_PATH),
        codec(),
    )
    .await
    .unwrap_or_else(|s| panic!("one message refused: {s}"));
    let got = server.sink.take();
    assert_eq!(got.len(), 1);
    assert_eq!(
        got[0].raw_protobuf().map(|b| b.to_vec()),
        Some(request.encode_to_vec())
    );
}
