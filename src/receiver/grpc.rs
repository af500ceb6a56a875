//! OTLP/gRPC receiver: `opentelemetry.proto.collector.trace.v1.TraceService/Export` plus the
//! standard gRPC health service, on one port, with room for more services.
//!
//! The service is hand-written over `tonic::server::Grpc` with [`ExportCodec`], whose
//! decoder keeps the request's (decompressed) protobuf bytes; the handler then takes their
//! size of the decoded-bytes budget, reads them with the wire reader (stopping at the span
//! cap, paying for the views it builds) and hands them over, so unannotated requests are
//! forwarded byte-for-byte.
//!
//! Before tonic sees the request, its body is read whole under the slow-client rules
//! ([`super::body`]: deadline, minimum rate, counted in the decoded-bytes budget) and only
//! then does the request take its forward-queue slot, so a stalled client holds no slot.
//! A span that cannot be read is left out alone and reported in `partial_success`; a body
//! of more than one message is refused whole ([`RawExportDecoder`]).

use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Buf;
use futures::future::BoxFuture;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use tonic::body::Body;
use tonic::codec::{BufferSettings, Codec, CompressionEncoding, DecodeBuf, Decoder};
use tonic::server::{Grpc, NamedService, UnaryService};
use tonic::service::Routes;
use tonic::{Code, Request, Response, Status};
use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use crate::ingest::limits::DecodedBytes;
use crate::ingest::{AcceptError, Admission, IncomingRequest, SpanSink};

use super::decode::{read_protobuf_budgeted, Compression};
use super::error::ReceiveError;
use super::partial::Partial;
use super::stats::{ReceiverStats, RejectReason};
use super::ReceiverOptions;
use crate::otlp::rpc_status::status_details_with_retry;
use crate::otlp::wire::WireRequest;

pub use crate::otlp::{EXPORT_PATH, TRACE_SERVICE_NAME};
/// `grpc-accept-encoding` advertised when a request's compression is refused.
const GRPC_ACCEPT_ENCODING: &str = "gzip,zstd,deflate,identity";

/// An `ExportTraceServiceRequest` as received (after gRPC decompression), not yet read.
#[derive(Clone, Debug)]
pub struct RawExport(pub bytes::Bytes);

/// Server codec: decodes to [`RawExport`], encodes `ExportTraceServiceResponse` with prost.
#[derive(Clone, Copy, Debug, Default)]
pub struct ExportCodec;

impl Codec for ExportCodec {
    type Encode = ExportTraceServiceResponse;
    type Decode = RawExport;
    type Encoder = tonic_prost::ProstEncoder<ExportTraceServiceResponse>;
    type Decoder = RawExportDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        tonic_prost::ProstEncoder::new(BufferSettings::default())
    }

    fn decoder(&mut self) -> Self::Decoder {
        RawExportDecoder::default()
    }
}

/// Decoder half of [`ExportCodec`]: keeps the bytes (the handler reads them). One decoder
/// serves one call of the unary `Export`: a second message in its body is refused with
/// `INVALID_ARGUMENT` ([`MORE_THAN_ONE_MESSAGE`]) before the handler runs, nothing taken
/// (issue D7; tonic's unary server drained the rest unread and answered OK). gRPC calls it
/// a cardinality violation (`doc/statuscodes.md`), grpc-go refuses it (`INTERNAL`), and
/// loopwatch answers a malformed payload `INVALID_ARGUMENT`, never `INTERNAL`.
#[derive(Clone, Copy, Debug, Default)]
pub struct RawExportDecoder {
    /// A message of this call was decoded already.
    decoded: bool,
}

/// The status message for a unary `Export` call whose body holds more than one message.
pub const MORE_THAN_ONE_MESSAGE: &str = "invalid request payload: the unary Export call \
     carried more than one gRPC message; send one ExportTraceServiceRequest per call";

impl Decoder for RawExportDecoder {
    type Item = RawExport;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<RawExport>, Status> {
        if std::mem::replace(&mut self.decoded, true) {
            return Err(Status::invalid_argument(MORE_THAN_ONE_MESSAGE));
        }
        Ok(Some(RawExport(src.copy_to_bytes(src.remaining()))))
    }
}

struct Shared {
    sink: Arc<dyn SpanSink>,
    options: ReceiverOptions,
    stats: Arc<ReceiverStats>,
}

/// The tonic status for a receive error; refusals carry a `google.rpc.RetryInfo`,
/// unsupported compression carries `grpc-accept-encoding`.
fn to_status(err: &ReceiveError, options: &ReceiverOptions) -> Status {
    let code = err.grpc_code();
    let message = err.to_string();
    match err {
        err if err.is_retryable() => Status::with_details(
            code,
            message.clone(),
            status_details_with_retry(code, &message, options.retry_after),
        ),
        ReceiveError::UnsupportedEncoding(_) => {
            let mut status = Status::new(code, message);
            status.metadata_mut().insert(
                "grpc-accept-encoding",
                tonic::metadata::MetadataValue::from_static(GRPC_ACCEPT_ENCODING),
            );
            status
        }
        _ => Status::new(code, message),
    }
}

/// The tower service behind [`TRACE_SERVICE_NAME`]; add it to any tonic server.
#[derive(Clone)]
pub struct OtlpTraceService {
    shared: Arc<Shared>,
}

impl OtlpTraceService {
    /// A service handing every decoded request to `sink`.
    pub fn new(
        sink: Arc<dyn SpanSink>,
        options: ReceiverOptions,
        stats: Arc<ReceiverStats>,
    ) -> Self {
        Self {
            shared: Arc::new(Shared {
                sink,
                options,
                stats,
            }),
        }
    }
}

impl NamedService for OtlpTraceService {
    const NAME: &'static str = TRACE_SERVICE_NAME;
}

impl tonic::codegen::Service<http::Request<Body>> for OtlpTraceService {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<'static, Result<http::Response<Body>, Infallible>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let shared = Arc::clone(&self.shared);
        Box::pin(async move { Ok(handle(shared, req).await) })
    }
}

async fn handle(shared: Arc<Shared>, req: http::Request<Body>) -> http::Response<Body> {
    if req.uri().path() != EXPORT_PATH {
        return Status::unimplemented(format!("method {} is not implemented", req.uri().path()))
            .into_http();
    }
    // tonic's own refusal does not list the accepted encodings in the message: check first.
    if let Some(value) = req.headers().get("grpc-encoding") {
        let name = String::from_utf8_lossy(value.as_bytes());
        if let Err(err) = Compression::parse(&name) {
            shared.stats.record_rejected(err.reason(), 0);
            return to_status(&err, &shared.options).into_http();
        }
    }
    let compressed = req
        .headers()
        .get("grpc-encoding")
        .is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"identity"));
    // One of `receiver.max_concurrent_requests`, without waiting.
    let _request_slot = match shared.options.requests.try_take() {
        Ok(slot) => slot,
        Err(err) => {
            shared.stats.record_rejected(err.reason(), 0);
            return to_status(&err, &shared.options).into_http();
        }
    };
    let limit = shared.options.max_recv_msg_size;
    // The body first, whole, under the slow-client rules; a compressed message may be a
    // little larger than the limit it decompresses within.
    let (parts, body) = req.into_parts();
    let mut decoded = match super::reserve_decoded(shared.sink.as_ref(), &shared.options, 0).await {
        Ok(decoded) => decoded,
        Err(refused) => {
            let err = ReceiveError::Refused(refused);
            shared.stats.record_rejected(err.reason(), 0);
            return to_status(&err, &shared.options).into_http();
        }
    };
    let raw_limit = limit.saturating_add(limit / 64).saturating_add(1024);
    let rules = shared.options.body_rules(raw_limit);
    let chunks = match super::body::read_body_chunks(body, &rules, &mut decoded).await {
        Ok(chunks) => chunks,
        Err(err) => {
            // The limit the client configured against is the decompressed one.
            let err = match err {
                ReceiveError::TooLarge { .. } => ReceiveError::TooLarge { limit },
                err => err,
            };
            shared.stats.record_rejected(err.reason(), 0);
            return to_status(&err, &shared.options).into_http();
        }
    };
    // Then a forward-queue slot: a refusal costs no decoding.
    let admission = match super::admit(shared.sink.as_ref(), &shared.options).await {
        Ok(admission) => admission,
        Err(refused) => {
            let err = ReceiveError::Refused(refused);
            shared.stats.record_rejected(err.reason(), 0);
            return to_status(&err, &shared.options).into_http();
        }
    };
    // The frames as received: tonic copies them once into a buffer of the message's size.
    let frames = futures::stream::iter(
        chunks
            .into_iter()
            .map(|chunk| Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(chunk))),
    );
    let req = http::Request::from_parts(parts, Body::new(http_body_util::StreamBody::new(frames)));
    let mut grpc = Grpc::new(ExportCodec)
        .accept_compressed(CompressionEncoding::Gzip)
        .accept_compressed(CompressionEncoding::Zstd)
        .accept_compressed(CompressionEncoding::Deflate)
        .max_decoding_message_size(limit);
    let handled = Arc::new(AtomicBool::new(false));
    let response = grpc
        .unary(
            ExportHandler {
                shared: Arc::clone(&shared),
                taken: Arc::new(std::sync::Mutex::new(Some((admission, decoded)))),
                compressed,
                handled: Arc::clone(&handled),
            },
            req,
        )
        .await;
    if handled.load(Ordering::Acquire) {
        // The handler counted its own outcome.
        return response;
    }
    // Errors raised by tonic while decoding (before our handler ran) are counted here.
    // tonic answers OUT_OF_RANGE for an uncompressed message over the limit; the OTLP
    // answer is RESOURCE_EXHAUSTED, as it already is for a compressed one. A message that
    // does not decompress (or is flagged compressed without an encoding, or is cut short)
    // is a malformed payload: INVALID_ARGUMENT, never tonic's INTERNAL; so is a second
    // message in the body ([`RawExportDecoder`]).
    match Status::from_header_map(response.headers()) {
        Some(status) if status.code() == Code::OutOfRange => {
            let err = ReceiveError::TooLarge { limit };
            shared.stats.record_rejected(err.reason(), 0);
            to_status(&err, &shared.options).into_http()
        }
        Some(status) if status.code() == Code::ResourceExhausted => {
            shared.stats.record_rejected(RejectReason::TooLarge, 0);
            response
        }
        Some(status) if status.code() == Code::InvalidArgument => {
            shared
                .stats
                .record_rejected(RejectReason::InvalidPayload, 0);
            response
        }
        Some(status) if status.code() == Code::Internal => {
            shared
                .stats
                .record_rejected(RejectReason::InvalidPayload, 0);
            Status::invalid_argument(format!("invalid request payload: {}", status.message()))
                .into_http()
        }
        _ => response,
    }
}

#[derive(Clone)]
struct ExportHandler {
    shared: Arc<Shared>,
    /// The admission taken before decoding and the request's decoded-bytes reservation
    /// (its body counted already); used by the one call of this handler.
    taken: Arc<std::sync::Mutex<Option<(Admission, DecodedBytes)>>>,
    /// The message was compressed: its decompressed bytes are counted anew.
    compressed: bool,
    /// Set when the handler ran (it counts its outcome itself).
    handled: Arc<AtomicBool>,
}

impl UnaryService<RawExport> for ExportHandler {
    type Response = ExportTraceServiceResponse;
    type Future = BoxFuture<'static, Result<Response<ExportTraceServiceResponse>, Status>>;

    fn call(&mut self, request: Request<RawExport>) -> Self::Future {
        self.handled.store(true, Ordering::Release);
        let RawExport(raw) = request.into_inner();
        let shared = Arc::clone(&self.shared);
        let compressed = self.compressed;
        let (admission, decoded) = self
            .taken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
            .unwrap_or_default();
        Box::pin(async move {
            let result = export(&shared, admission, decoded, raw, compressed).await;
            let stats = &shared.stats;
            match result {
                Ok((spans, partial)) => {
                    stats.record_accepted(spans);
                    let partial_success = partial.to_otlp();
                    if let Some(p) = &partial_success {
                        stats.record_partial(
                            partial.rejected.len() as u64,
                            partial.replaced_strings as u64,
                            &p.error_message,
                        );
                    }
                    Ok(Response::new(ExportTraceServiceResponse {
                        partial_success,
                    }))
                }
                Err((err, spans)) => {
                    stats.record_rejected(err.reason(), spans);
                    Err(to_status(&err, &shared.options))
                }
            }
        })
    }
}

/// Counts the decompressed request in its decoded-bytes reservation, reads it (stopping at
/// the span cap, paying for its views, leaving out spans that cannot be read) and hands it
/// over; the span count and what was left out on success, the error and the spans it held
/// (0 when unread) otherwise.
async fn export(
    shared: &Shared,
    admission: Admission,
    mut decoded: DecodedBytes,
    raw: bytes::Bytes,
    compressed: bool,
) -> Result<(u64, Partial), (ReceiveError, u64)> {
    let sink = shared.sink.as_ref();
    if compressed && !decoded.grow(raw.len(), shared.options.admission_wait).await {
        return Err((ReceiveError::Refused(AcceptError::InFlightLimit), 0));
    }
    let limits = sink.read_limits();
    super::heavy::run_request(raw.len(), move || {
        let request: WireRequest =
            read_protobuf_budgeted(raw, limits, &mut decoded).map_err(|e| (e, 0))?;
        super::partial::some_span_read(&request).map_err(|e| (e, 0))?;
        let spans = request.span_count();
        let partial = Partial {
            rejected: request.rejected().to_vec(),
            replaced_strings: 0,
        };
        sink.accept(admission, IncomingRequest::Protobuf(request))
            .map_err(|refused| (ReceiveError::Refused(refused), spans))?;
        drop(decoded);
        Ok((spans, partial))
    })
}

/// The OTLP/gRPC server: trace service + `grpc.health.v1.Health`, plus any services the
/// caller adds (e.g. `loopwatch.v1.Signals`).
pub struct GrpcReceiver {
    routes: Routes,
    health: HealthReporter,
}

impl GrpcReceiver {
    /// Trace service and health service, ready for [`GrpcReceiver::serve`].
    pub fn new(
        sink: Arc<dyn SpanSink>,
        options: ReceiverOptions,
        stats: Arc<ReceiverStats>,
    ) -> Self {
        let (health, health_service) = tonic_health::server::health_reporter();
        let routes =
            Routes::new(OtlpTraceService::new(sink, options, stats)).add_service(health_service);
        Self { routes, health }
    }

    /// Adds another tonic service on the same port.
    pub fn add_service<S>(mut self, service: S) -> Self
    where
        S: tonic::codegen::Service<http::Request<Body>, Error = Infallible>
            + NamedService
            + Clone
            + Send
            + Sync
            + 'static,
        S::Response: axum::response::IntoResponse,
        S::Future: Send + 'static,
    {
        self.routes = self.routes.add_service(service);
        self
    }

    /// The health reporter, to flip statuses of added services.
    pub fn health_reporter(&self) -> HealthReporter {
        self.health.clone()
    }

    /// Serves on `listener` until `shutdown` resolves, then reports `NOT_SERVING`, stops
    /// accepting and finishes in-flight requests.
    ///
    /// # Errors
    /// A transport error from the server (accepting or serving connections).
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), tonic::transport::Error> {
        let health = self.health.clone();
        let shutdown = self.health_then(shutdown);
        tonic::transport::Server::builder()
            .add_routes(self.routes)
            .serve_with_incoming_shutdown(
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                Self::serving(health, shutdown),
            )
            .await
    }

    /// As [`GrpcReceiver::serve`], on connections from a [`crate::net::listen`] accept loop (TLS,
    /// connection limit) with its HTTP/2 limits and the edge layer (content type, tokens).
    ///
    /// # Errors
    /// A transport error from the server.
    pub async fn serve_incoming(
        self,
        incoming: crate::net::listen::Incoming,
        limits: &crate::net::listen::ConnectionConfig,
        edge: crate::net::listen::grpc::GrpcEdgeLayer,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), tonic::transport::Error> {
        let health = self.health.clone();
        let shutdown = self.health_then(shutdown);
        crate::net::listen::grpc::server_builder(limits, edge)
            .add_routes(self.routes)
            .serve_with_incoming_shutdown(
                crate::net::listen::incoming_stream(incoming),
                Self::serving(health, shutdown),
            )
            .await
    }

    /// `shutdown`, then every service reported `NOT_SERVING`.
    fn health_then(
        &self,
        shutdown: impl Future<Output = ()> + Send,
    ) -> impl Future<Output = ()> + Send {
        let health = self.health.clone();
        async move {
            shutdown.await;
            health
                .set_service_status(TRACE_SERVICE_NAME, ServingStatus::NotServing)
                .await;
            health
                .set_service_status("", ServingStatus::NotServing)
                .await;
        }
    }

    /// Reports the trace service `SERVING` once the server polls this future, then waits
    /// for `shutdown`.
    async fn serving(health: HealthReporter, shutdown: impl Future<Output = ()>) {
        health
            .set_service_status(TRACE_SERVICE_NAME, ServingStatus::Serving)
            .await;
        shutdown.await;
    }
}

/// Serves OTLP/gRPC (trace + health) on `listener` until `shutdown`; see [`GrpcReceiver`]
/// to add services.
///
/// # Errors
/// A transport error from the server.
pub async fn serve_grpc(
    listener: tokio::net::TcpListener,
    sink: Arc<dyn SpanSink>,
    options: ReceiverOptions,
    stats: Arc<ReceiverStats>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), tonic::transport::Error> {
    GrpcReceiver::new(sink, options, stats)
        .serve(listener, shutdown)
        .await
}
