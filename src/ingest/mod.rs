//! The contract between the OTLP receivers and the span path: the request a receiver hands
//! over ([`IncomingRequest`]), the trait it hands it to ([`SpanSink`]) and why the span path
//! may refuse it ([`AcceptError`]).
//!
//! This module sits low in the layout (it imports only [`crate::otlp`], [`crate::otlp::wire`] and
//! [`crate::ingest::limits`]): receivers, the span path ([`crate::pipeline`]) and the forward queue all depend on it, never on each other
//! upwards. Arrows point down: receiver → span path → forward.

pub mod limits;

use bytes::Bytes;
use futures::future::BoxFuture;
use tokio::sync::OwnedSemaphorePermit;

use crate::otlp::wire::WireRequest;
use crate::otlp::ExportTraceServiceRequest;

/// One OTLP trace export as a receiver got it.
#[derive(Clone, Debug)]
pub enum IncomingRequest {
    /// OTLP protobuf (gRPC, HTTP): read from its bytes by [`crate::otlp::wire`]; the bytes are
    /// forwarded untouched when no span is annotated, annotated in place otherwise.
    Protobuf(WireRequest),
    /// OTLP/JSON, decoded by prost-serde; forwarded as its protobuf encoding.
    Json(ExportTraceServiceRequest),
}

impl IncomingRequest {
    /// The original protobuf encoding (after decompression), for a protobuf request.
    pub fn raw_protobuf(&self) -> Option<&Bytes> {
        match self {
            IncomingRequest::Protobuf(wire) => Some(&wire.bytes),
            IncomingRequest::Json(_) => None,
        }
    }

    /// The request decoded by prost (a copy; the span path never needs it). Fails for
    /// protobuf bytes prost refuses although the wire reader read them (strings that are
    /// not valid UTF-8).
    pub fn to_decoded(&self) -> Result<ExportTraceServiceRequest, prost::DecodeError> {
        match self {
            IncomingRequest::Protobuf(wire) => prost::Message::decode(wire.bytes.clone()),
            IncomingRequest::Json(request) => Ok(request.clone()),
        }
    }

    /// Size of the request's protobuf encoding in bytes (the bytes as received after
    /// decompression, or the encoded length of a JSON request), before annotation.
    pub fn encoded_len(&self) -> usize {
        match self {
            IncomingRequest::Protobuf(wire) => wire.bytes.len(),
            IncomingRequest::Json(request) => prost::Message::encoded_len(request),
        }
    }

    /// Number of spans in the request.
    pub fn span_count(&self) -> u64 {
        match self {
            IncomingRequest::Protobuf(wire) => wire.span_count(),
            IncomingRequest::Json(request) => crate::otlp::span_count(request),
        }
    }
}

/// Why a request was not accepted. Receivers map it to a retryable status.
#[derive(Debug, thiserror::Error, Clone, Copy, PartialEq, Eq)]
pub enum AcceptError {
    /// The forward queue stayed full for the admission wait: gRPC `UNAVAILABLE` with
    /// `RetryInfo`, HTTP 503 with `Retry-After`.
    #[error("forward queue is full")]
    QueueFull,
    /// The process is shutting down: gRPC `UNAVAILABLE`, HTTP 503.
    #[error("shutting down")]
    ShuttingDown,
    /// The process is over its memory limit (`limits.memory_mib`, [`crate::ingest::limits`]): gRPC
    /// `RESOURCE_EXHAUSTED` with `RetryInfo`, HTTP 503 with `Retry-After`.
    #[error("over the memory limit")]
    MemoryLimit,
    /// The decoded bytes of the requests being processed stayed over
    /// `limits.max_decoded_bytes_in_flight` for the admission wait: gRPC
    /// `RESOURCE_EXHAUSTED` with `RetryInfo`, HTTP 503 with `Retry-After`.
    #[error("too many decoded bytes in flight")]
    InFlightLimit,
    /// The persistent queue cannot write (disk full, I/O error) and so cannot keep the
    /// request before it is acknowledged: gRPC `UNAVAILABLE` with `RetryInfo`, HTTP 503 with
    /// `Retry-After`, until the store heals (it retries by itself) and `/readyz` says so.
    #[error("the persistent queue cannot write to disk")]
    StorageUnavailable,
}

/// Room for one request on the span path, taken **before** the request body is read and
/// decoded, so a refusal costs almost nothing. Dropping it unused gives the room back.
///
/// It holds one slot of the forward queue's admission semaphore (see
/// [`crate::forward::ForwardQueue::admit`]) or nothing (detect-only mode, test sinks).
#[derive(Debug, Default)]
pub struct Admission {
    slot: Option<OwnedSemaphorePermit>,
}

impl Admission {
    /// An admission that holds no slot (for sinks without a bounded queue).
    pub fn unlimited() -> Self {
        Self { slot: None }
    }

    /// An admission holding one semaphore slot, released when the request leaves the span
    /// path (delivered, given up, or dropped unused).
    pub fn with_slot(slot: OwnedSemaphorePermit) -> Self {
        Self { slot: Some(slot) }
    }

    /// The slot, if it holds one.
    pub fn into_slot(self) -> Option<OwnedSemaphorePermit> {
        self.slot
    }
}

/// What the receivers hand requests to, in two steps: [`SpanSink::admit`] before reading the
/// body (may wait; the receiver bounds the wait and refuses with a retryable status when it
/// passes), then [`SpanSink::accept`] with the decoded request (never blocks).
pub trait SpanSink: Send + Sync + 'static {
    /// Waits until the span path has room for one more request. The default admits at once.
    ///
    /// # Errors
    /// [`AcceptError::ShuttingDown`] once the span path stopped taking requests (a sink may
    /// also answer [`AcceptError::QueueFull`] instead of waiting).
    fn admit(&self) -> BoxFuture<'_, Result<Admission, AcceptError>> {
        Box::pin(std::future::ready(Ok(Admission::unlimited())))
    }

    /// Waits until `bytes` more decompressed bytes may be decoded and processed
    /// (`limits.max_decoded_bytes_in_flight`); the reservation is held until the request
    /// was handed to [`SpanSink::accept`] or refused. The default reserves nothing. The
    /// receiver bounds the wait and refuses with [`AcceptError::InFlightLimit`].
    fn reserve_decoded(&self, bytes: usize) -> BoxFuture<'_, crate::ingest::limits::DecodedBytes> {
        let _ = bytes;
        Box::pin(std::future::ready(
            crate::ingest::limits::DecodedBytes::none(),
        ))
    }

    /// What the receivers' wire reader may build of one request
    /// (`limits.max_spans_per_request`, `limits.max_values_per_request`); it stops there.
    /// The default is no cap.
    fn read_limits(&self) -> crate::otlp::wire::ReadLimits {
        crate::otlp::wire::ReadLimits::NONE
    }

    /// Takes one admitted request. On `Err` nothing of the request was kept, so the client
    /// may retry.
    ///
    /// # Errors
    /// [`AcceptError`] when the request is refused after all.
    fn accept(&self, admission: Admission, request: IncomingRequest) -> Result<(), AcceptError>;
}
