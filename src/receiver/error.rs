//! Why a receiver refused a request, and how that maps to gRPC and HTTP statuses
//! (OTLP spec, "OTLP/gRPC Response" and "OTLP/HTTP Response" sections).

use crate::ingest::AcceptError;

use super::stats::RejectReason;

/// Accepted `Content-Encoding` / `grpc-encoding` values, as listed in error messages.
pub const ACCEPTED_ENCODINGS: &str = "identity, gzip, zstd, deflate";
/// Accepted OTLP/HTTP `Content-Type` values, as listed in error messages.
pub const ACCEPTED_CONTENT_TYPES: &str = "application/x-protobuf, application/json";

/// A request the receiver could not take. Mapped to a status only at the edge.
#[derive(Debug, thiserror::Error)]
pub enum ReceiveError {
    /// `grpc-encoding` / `Content-Encoding` names a compression we do not decode.
    #[error("unsupported compression `{0}`; accepted encodings: {ACCEPTED_ENCODINGS}")]
    UnsupportedEncoding(String),
    /// OTLP/HTTP `Content-Type` other than protobuf or JSON.
    #[error("unsupported content type `{0}`; accepted: {ACCEPTED_CONTENT_TYPES}")]
    UnsupportedContentType(String),
    /// The request is larger than the receive limit once decompressed.
    #[error("request exceeds the receive limit of {limit} bytes (measured after decompression)")]
    TooLarge {
        /// The limit in bytes.
        limit: usize,
    },
    /// More spans than `limits.max_spans_per_request` (the reader stopped at the cap).
    #[error("request holds more than {limit} spans (limits.max_spans_per_request); send smaller batches")]
    TooManySpans {
        /// The cap.
        limit: usize,
    },
    /// More values (attributes, events, array/kvlist elements, resource and scope entries)
    /// than `limits.max_values_per_request` (the reader stopped at the cap).
    #[error("request holds more than {limit} values: attributes, events, array and kvlist elements, resource and scope entries (limits.max_values_per_request); send smaller batches")]
    TooManyValues {
        /// The cap.
        limit: usize,
    },
    /// The body is not valid data for its declared compression.
    #[error("request body is not valid {encoding} data: {source}")]
    Decompress {
        /// The declared encoding.
        encoding: &'static str,
        /// What the decompressor reported.
        source: std::io::Error,
    },
    /// The (decompressed) body is not an `ExportTraceServiceRequest` protobuf.
    #[error("invalid OTLP protobuf ExportTraceServiceRequest: {0}")]
    InvalidProtobuf(#[from] prost::DecodeError),
    /// The (decompressed) body is not an `ExportTraceServiceRequest` protobuf, as the wire
    /// reader found (same cases as prost, except invalid UTF-8, which is read lossily).
    #[error("invalid OTLP protobuf ExportTraceServiceRequest: {0}")]
    InvalidWire(#[from] crate::otlp::wire::WireError),
    /// The body is not OTLP/JSON; `path` names the offending field.
    #[error("invalid OTLP/JSON at `{path}`: {message}")]
    InvalidJson {
        /// JSON path of the field, e.g. `resourceSpans[0].scopeSpans[0].spans[0].traceId`.
        path: String,
        /// What was wrong with it.
        message: String,
    },
    /// Not one span of the request could be read (each was malformed on its own): the
    /// request is refused, naming the first (had any been read, the request would have
    /// been accepted with the others, the bad ones reported in `partial_success`).
    #[error("invalid OTLP request: no span could be read: {0}")]
    NoReadableSpan(String),
    /// The request body could not be read from the connection.
    #[error("could not read the request body: {0}")]
    Body(String),
    /// The body did not arrive whole within `receiver.body_read_timeout` (retryable).
    #[error("the request body did not arrive within {}", humantime::format_duration(*timeout))]
    BodyTimeout {
        /// The deadline.
        timeout: std::time::Duration,
    },
    /// The body arrived slower than `receiver.body_min_rate` bytes per second (retryable).
    #[error("the request body arrived slower than {min_rate} bytes/s")]
    BodyTooSlow {
        /// The minimum rate, bytes per second.
        min_rate: u64,
    },
    /// More requests in progress than `receiver.max_concurrent_requests` (retryable).
    #[error("too many requests in progress ({limit})")]
    TooManyRequests {
        /// The limit.
        limit: usize,
    },
    /// The pipeline refused the request (queue full or shutting down): retryable.
    #[error("{0}; retry later")]
    Refused(#[from] AcceptError),
}

impl ReceiveError {
    /// The reason label this error is counted under in [`super::ReceiverStats`].
    pub fn reason(&self) -> RejectReason {
        match self {
            Self::UnsupportedEncoding(_) => RejectReason::UnsupportedEncoding,
            Self::UnsupportedContentType(_) => RejectReason::UnsupportedContentType,
            Self::TooLarge { .. } => RejectReason::TooLarge,
            Self::TooManySpans { .. } => RejectReason::TooManySpans,
            Self::TooManyValues { .. } => RejectReason::TooManyValues,
            Self::Decompress { .. }
            | Self::InvalidProtobuf(_)
            | Self::InvalidWire(_)
            | Self::InvalidJson { .. }
            | Self::NoReadableSpan(_)
            | Self::Body(_) => RejectReason::InvalidPayload,
            Self::Refused(AcceptError::QueueFull) => RejectReason::QueueFull,
            Self::Refused(AcceptError::ShuttingDown) => RejectReason::ShuttingDown,
            Self::Refused(AcceptError::MemoryLimit) => RejectReason::MemoryLimit,
            Self::Refused(AcceptError::InFlightLimit) => RejectReason::InFlightLimit,
            Self::Refused(AcceptError::StorageUnavailable) => RejectReason::QueueUnwritable,
            Self::BodyTimeout { .. } => RejectReason::BodyTimeout,
            Self::BodyTooSlow { .. } => RejectReason::BodyTooSlow,
            Self::TooManyRequests { .. } => RejectReason::TooManyRequests,
        }
    }

    /// Whether the client should retry the same request later (answered with `RetryInfo`
    /// / `Retry-After`): refusals of the span path and the receivers' own protections
    /// against slow or too many clients.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Self::Refused(_)
                | Self::BodyTimeout { .. }
                | Self::BodyTooSlow { .. }
                | Self::TooManyRequests { .. }
        )
    }

    /// The gRPC code: `UNIMPLEMENTED` for unknown compression, `RESOURCE_EXHAUSTED` over
    /// the size or span cap (without `RetryInfo`: OTLP clients do not retry it, and the same
    /// request would be refused again), `INVALID_ARGUMENT` for malformed payloads;
    /// refusals are retryable: `UNAVAILABLE` (queue full, shutting down) or
    /// `RESOURCE_EXHAUSTED` (memory or in-flight limit), both sent with `RetryInfo`.
    pub fn grpc_code(&self) -> tonic::Code {
        match self {
            Self::UnsupportedEncoding(_) => tonic::Code::Unimplemented,
            Self::TooLarge { .. } | Self::TooManySpans { .. } | Self::TooManyValues { .. } => {
                tonic::Code::ResourceExhausted
            }
            Self::Refused(AcceptError::MemoryLimit | AcceptError::InFlightLimit) => {
                tonic::Code::ResourceExhausted
            }
            Self::Refused(_)
            | Self::BodyTimeout { .. }
            | Self::BodyTooSlow { .. }
            | Self::TooManyRequests { .. } => tonic::Code::Unavailable,
            Self::Body(_) => tonic::Code::Cancelled,
            Self::UnsupportedContentType(_)
            | Self::Decompress { .. }
            | Self::InvalidProtobuf(_)
            | Self::InvalidWire(_)
            | Self::NoReadableSpan(_)
            | Self::InvalidJson { .. } => tonic::Code::InvalidArgument,
        }
    }

    /// The HTTP status: 415 for unknown compression or content type, 413 over the size or
    /// span cap (OTLP/HTTP clients do not retry it), 400 for malformed payloads, 503 (with
    /// `Retry-After`) when refused.
    pub fn http_status(&self) -> http::StatusCode {
        use http::StatusCode as S;
        match self {
            Self::UnsupportedEncoding(_) | Self::UnsupportedContentType(_) => {
                S::UNSUPPORTED_MEDIA_TYPE
            }
            Self::TooLarge { .. } | Self::TooManySpans { .. } | Self::TooManyValues { .. } => {
                S::PAYLOAD_TOO_LARGE
            }
            Self::Refused(_)
            | Self::BodyTimeout { .. }
            | Self::BodyTooSlow { .. }
            | Self::TooManyRequests { .. } => S::SERVICE_UNAVAILABLE,
            Self::Decompress { .. }
            | Self::InvalidProtobuf(_)
            | Self::InvalidWire(_)
            | Self::InvalidJson { .. }
            | Self::NoReadableSpan(_)
            | Self::Body(_) => S::BAD_REQUEST,
        }
    }
}
