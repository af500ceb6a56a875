//! The contract between the OTLP receivers and the span path: the request a receiver hands
//! over ([`IncomingRequest`]), the trait it hands it to ([`SpanSink`]) and why the span path
//! may refuse it ([`AcceptError`]).
//!
//! This module sits low in the layout (it imports only [`crate::otlp`]): receivers, the span
//! path ([`crate::pipeline`]) and the forward queue all depend on it, never on each other
//! upwards. Arrows point down: receiver → span path → forward.

use bytes::Bytes;

use crate::otlp::ExportTraceServiceRequest;

/// One OTLP trace export as a receiver got it.
#[derive(Clone, Debug)]
pub struct IncomingRequest {
    /// The decoded request.
    pub request: ExportTraceServiceRequest,
    /// The original protobuf encoding (after decompression) when the request arrived as
    /// protobuf; forwarded untouched when no span was annotated. `None` for OTLP/JSON.
    pub raw_protobuf: Option<Bytes>,
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
