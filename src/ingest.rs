//! The contract between the OTLP receivers and the span path: the request a receiver hands
//! over ([`IncomingRequest`]), the trait it hands it to ([`SpanSink`]) and why the span path
//! may refuse it ([`AcceptError`]).
//!
//! This module sits low in the layout (it imports only [`crate::otlp`] and [`crate::wire`]): receivers, the span
//! path ([`crate::pipeline`]) and the forward queue all depend on it, never on each other
//! upwards. Arrows point down: receiver → span path → forward.

use bytes::Bytes;

use crate::otlp::ExportTraceServiceRequest;
use crate::wire::WireRequest;

/// One OTLP trace export as a receiver got it.
#[derive(Clone, Debug)]
pub enum IncomingRequest {
    /// OTLP protobuf (gRPC, HTTP): read from its bytes by [`crate::wire`]; the bytes are
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
    /// The forward queue is full: gRPC `UNAVAILABLE`, HTTP 503 with `Retry-After`.
    #[error("forward queue is full")]
    QueueFull,
    /// The process is shutting down: gRPC `UNAVAILABLE`, HTTP 503.
    #[error("shutting down")]
    ShuttingDown,
}

/// What the receivers hand requests to. `accept` must not block: it either takes the
/// request (processing and queueing it for forwarding) or refuses it.
pub trait SpanSink: Send + Sync + 'static {
    /// Takes one request. On `Err` nothing of the request was kept, so the client may retry.
    fn accept(&self, request: IncomingRequest) -> Result<(), AcceptError>;
}
