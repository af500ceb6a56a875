//! Counters of what a receiver accepted and refused, by reason (atomics; read by the
//! metrics exporter).

use std::sync::atomic::{AtomicU64, Ordering};

/// Why a request was refused. `as_str` is the metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// The forward queue was full (retryable).
    QueueFull,
    /// The process was shutting down (retryable).
    ShuttingDown,
    /// Over the receive limit after decompression.
    TooLarge,
    /// Malformed protobuf/JSON, corrupt compression, unreadable body.
    InvalidPayload,
    /// Unknown `grpc-encoding` / `Content-Encoding`.
    UnsupportedEncoding,
    /// Unknown OTLP/HTTP `Content-Type`.
    UnsupportedContentType,
    /// More spans than `limits.max_spans_per_request`.
    TooManySpans,
    /// More attribute values than `limits.max_values_per_request`.
    TooManyValues,
    /// The process was over its memory limit (`limits.memory_mib`; retryable).
    MemoryLimit,
    /// Decoded bytes in flight stayed over `limits.max_decoded_bytes_in_flight` for the
    /// admission wait (retryable).
    InFlightLimit,
    /// Spans left out of an accepted request because they could not be read (counted in
    /// spans only; the request itself was accepted: OTLP partial success).
    UnreadableSpan,
    /// The body did not arrive within `receiver.body_read_timeout` (retryable).
    BodyTimeout,
    /// The body arrived slower than `receiver.body_min_rate` (retryable).
    BodyTooSlow,
    /// More requests in progress on the receivers than `receiver.max_concurrent_requests`
    /// (retryable).
    TooManyRequests,
    /// The persistent queue could not write the request (disk full, I/O error; retryable).
    QueueUnwritable,
}

impl RejectReason {
    /// Every reason, in label order.
    pub const ALL: [RejectReason; 15] = [
        Self::QueueFull,
        Self::ShuttingDown,
        Self::TooLarge,
        Self::InvalidPayload,
        Self::UnsupportedEncoding,
        Self::UnsupportedContentType,
        Self::TooManySpans,
        Self::TooManyValues,
        Self::MemoryLimit,
        Self::InFlightLimit,
        Self::UnreadableSpan,
        Self::BodyTimeout,
        Self::BodyTooSlow,
        Self::TooManyRequests,
        Self::QueueUnwritable,
    ];

    /// The metric label value (snake_case).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::QueueFull => "queue_full",
            Self::ShuttingDown => "shutting_down",
            Self::TooLarge => "too_large",
            Self::InvalidPayload => "invalid_payload",
            Self::UnsupportedEncoding => "unsupported_encoding",
            Self::UnsupportedContentType => "unsupported_content_type",
            Self::TooManySpans => "too_many_spans",
            Self::TooManyValues => "too_many_values",
            Self::MemoryLimit => "memory_limit",
            Self::InFlightLimit => "in_flight_limit",
            Self::UnreadableSpan => "unreadable_span",
            Self::BodyTimeout => "body_timeout",
            Self::BodyTooSlow => "body_too_slow",
            Self::TooManyRequests => "too_many_requests",
            Self::QueueUnwritable => "queue_unwritable",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Accepted and refused requests and spans of one receiver. Spans of a refused request
/// are counted only when the request could be decoded (queue full, shutting down).
#[derive(Debug, Default)]
pub struct ReceiverStats {
    accepted_requests: AtomicU64,
    accepted_spans: AtomicU64,
    rejected_requests: [AtomicU64; RejectReason::ALL.len()],
    rejected_spans: [AtomicU64; RejectReason::ALL.len()],
    /// Unknown OTLP/JSON fields (ignored), warned once per sender.
    pub otlp_json_unknown_fields: crate::otlp::json::UnknownFieldLog,
    /// Strings read with U+FFFD in place of invalid UTF-8 or a lone surrogate escape
    /// (OTLP/JSON; protobuf strings are read lossily without being counted).
    replaced_strings: AtomicU64,
    /// Rate limit of the WARN about partially accepted requests.
    partial_log: crate::net::log_limit::LogLimit,
}

impl ReceiverStats {
    /// Records one accepted request carrying `spans` spans.
    pub fn record_accepted(&self, spans: u64) {
        self.accepted_requests.fetch_add(1, Ordering::Relaxed);
        self.accepted_spans.fetch_add(spans, Ordering::Relaxed);
    }

    /// Records one refused request carrying `spans` spans (0 when unknown).
    pub fn record_rejected(&self, reason: RejectReason, spans: u64) {
        self.rejected_requests[reason.index()].fetch_add(1, Ordering::Relaxed);
        self.rejected_spans[reason.index()].fetch_add(spans, Ordering::Relaxed);
    }

    /// Records what an accepted request lost or had replaced (OTLP partial success): its
    /// left-out spans under [`RejectReason::UnreadableSpan`] (spans only: the request was
    /// accepted) and its replaced strings; logs at WARN, at most once per 10 s, with
    /// `message` (the partial-success message the client got).
    pub fn record_partial(&self, rejected_spans: u64, replaced_strings: u64, message: &str) {
        if rejected_spans == 0 && replaced_strings == 0 {
            return;
        }
        let reason = RejectReason::UnreadableSpan.index();
        self.rejected_spans[reason].fetch_add(rejected_spans, Ordering::Relaxed);
        self.replaced_strings
            .fetch_add(replaced_strings, Ordering::Relaxed);
        if let Some(requests) = self.partial_log.hit() {
            tracing::warn!(
                requests,
                rejected_spans,
                replaced_strings,
                %message,
                "request accepted in part (OTLP partial success); at most one such line per 10 s"
            );
        }
    }

    /// Strings replaced with U+FFFD so far (see [`ReceiverStats::record_partial`]).
    pub fn replaced_strings(&self) -> u64 {
        self.replaced_strings.load(Ordering::Relaxed)
    }

    /// Requests accepted so far.
    pub fn accepted_requests(&self) -> u64 {
        self.accepted_requests.load(Ordering::Relaxed)
    }

    /// Spans accepted so far.
    pub fn accepted_spans(&self) -> u64 {
        self.accepted_spans.load(Ordering::Relaxed)
    }

    /// Requests refused for `reason` so far.
    pub fn rejected_requests(&self, reason: RejectReason) -> u64 {
        self.rejected_requests[reason.index()].load(Ordering::Relaxed)
    }

    /// Spans refused for `reason` so far (only decodable requests contribute).
    pub fn rejected_spans(&self, reason: RejectReason) -> u64 {
        self.rejected_spans[reason.index()].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_per_reason() {
        let stats = ReceiverStats::default();
        stats.record_accepted(3);
        stats.record_rejected(RejectReason::QueueFull, 7);
        stats.record_rejected(RejectReason::QueueFull, 2);
        stats.record_rejected(RejectReason::TooLarge, 0);
        assert_eq!(stats.accepted_requests(), 1);
        assert_eq!(stats.accepted_spans(), 3);
        assert_eq!(stats.rejected_requests(RejectReason::QueueFull), 2);
        assert_eq!(stats.rejected_spans(RejectReason::QueueFull), 9);
        assert_eq!(stats.rejected_requests(RejectReason::TooLarge), 1);
        assert_eq!(stats.rejected_requests(RejectReason::InvalidPayload), 0);
        let labels: Vec<_> = RejectReason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(labels.len(), 15);
        assert!(RejectReason::ALL
            .iter()
            .enumerate()
            .all(|(i, r)| r.index() == i));
    }
}
