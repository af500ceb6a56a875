//! Resource limits on the span path (config section `[limits]`): a memory limiter, a cap on
//! spans per request and a cap on decoded bytes in flight. Every refusal they cause is
//! retryable except the span cap (a request over it would be refused again: the client
//! must send smaller batches).
//!
//! - [`memory`]: the process RSS against `memory_mib`, as the OpenTelemetry Collector's
//!   `memory_limiter` processor does (hard limit, spike headroom, check interval); over the
//!   soft limit new requests are refused (gRPC `RESOURCE_EXHAUSTED` with `RetryInfo`, HTTP
//!   503 with `Retry-After`).
//! - [`in_flight`]: decompressed request bodies being read and processed, in bytes; over
//!   the cap a request waits up to `receiver.admission_wait`, then is refused the same way.
//! - `max_spans_per_request`, `max_values_per_request`: the wire reader stops at the caps
//!   ([`crate::otlp::wire::WireRequest::read_limited`]).
//!
//! The per-run state bound (`registry.max_bytes`) lives with the runs, in
//! [`crate::registry`].

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub mod in_flight;
pub mod memory;

pub use in_flight::{DecodedBytes, InFlight};
pub use memory::MemoryLimiter;

/// Default `max_spans_per_request`: 100 000. The SDKs' batch span processors send 512 spans
/// per export, the Collector's batch processor 8 192 by default; a span view costs about
/// 350 bytes even for an empty span, so the cap bounds one request's views to ~35 MB.
pub const DEFAULT_MAX_SPANS_PER_REQUEST: usize = 100_000;

/// Default `max_values_per_request`: 1 000 000 attributes, events, array/kvlist elements and
/// resource and scope entries (an SDK span carries at most 128 attributes by default; the
/// Collector's 8 192-span batch of 30 attributes is 250 k). A value view costs 32–80 bytes even when empty, so the cap
/// bounds one request's values to ~80 MB.
pub const DEFAULT_MAX_VALUES_PER_REQUEST: usize = 1_000_000;

/// Default `max_decoded_bytes_in_flight`: 256 MiB (16 requests of the 16 MiB receive limit).
/// With a memory limit it is at most a quarter of that limit ([`Limits::new`]).
pub const DEFAULT_MAX_DECODED_BYTES_IN_FLIGHT: u64 = 256 * 1024 * 1024;

/// Least decoded-bytes budget a memory limit brings it down to: 16 MiB, one request of the
/// default receive limit.
pub const MIN_DECODED_BYTES_IN_FLIGHT: u64 = 16 * 1024 * 1024;

/// Config section `[limits]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// Hard memory limit of the process in MiB, checked against its resident set size.
    /// New requests are refused (retryably) while RSS is above `memory_mib -
    /// memory_spike_mib`. `0` (default) = 80 % of the container's cgroup memory limit when
    /// there is one, else no memory limit.
    pub memory_mib: u64,
    /// Headroom below `memory_mib` kept for requests already admitted, in MiB; `0`
    /// (default) = 20 % of `memory_mib` (the Collector's `spike_limit_mib` default).
    pub memory_spike_mib: u64,
    /// How often the RSS is read (at most; it is read when a request arrives and the last
    /// reading is older than this). Default `100ms`.
    #[serde(with = "humantime_serde")]
    pub memory_check_interval: Duration,
    /// Most spans one request may hold (default 100 000). Over it the request is refused
    /// with gRPC `RESOURCE_EXHAUSTED` without `RetryInfo` / HTTP 413, which OTLP clients do
    /// not retry: the same request would be refused again, the client must send smaller
    /// batches.
    pub max_spans_per_request: usize,
    /// Most attribute values one request may hold: span and event attributes, events, the
    /// elements of array and kvlist values, and the entries around the spans
    /// (`resource_spans`, their `resource` and its `service.name`, `scope_spans`), all
    /// counted (default 1 000 000). Over it:
    /// refused as for `max_spans_per_request`. OTLP/JSON requests are not counted (their
    /// decoding is bounded by the receive limit only).
    pub max_values_per_request: usize,
    /// Most bytes the requests being received, decoded and processed may hold at once,
    /// counted as what they decode to (default 256 MiB; with a memory limit at most a
    /// quarter of it, at least 16 MiB). Must be at least `receiver.max_recv_msg_size_mib`.
    pub max_decoded_bytes_in_flight: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            memory_mib: 0,
            memory_spike_mib: 0,
            memory_check_interval: Duration::from_millis(100),
            max_spans_per_request: DEFAULT_MAX_SPANS_PER_REQUEST,
            max_values_per_request: DEFAULT_MAX_VALUES_PER_REQUEST,
            max_decoded_bytes_in_flight: DEFAULT_MAX_DECODED_BYTES_IN_FLIGHT,
        }
    }
}

impl LimitsConfig {
    /// Checks the section against the receive limit (`max_recv_msg_size` bytes, after
    /// decompression).
    ///
    /// # Errors
    /// `(key, reason)` naming the offending key.
    pub fn validate(&self, max_recv_msg_size: usize) -> Result<(), (String, String)> {
        let key = |k: &str| format!("limits.{k}");
        if self.max_spans_per_request == 0 {
            return Err((key("max_spans_per_request"), "must be at least 1".into()));
        }
        if self.max_values_per_request == 0 {
            return Err((key("max_values_per_request"), "must be at least 1".into()));
        }
        if self.max_decoded_bytes_in_flight < max_recv_msg_size as u64 {
            return Err((
                key("max_decoded_bytes_in_flight"),
                format!(
                    "{} is below receiver.max_recv_msg_size_mib ({max_recv_msg_size} bytes): a request of that size could never be decoded",
                    self.max_decoded_bytes_in_flight
                ),
            ));
        }
        if self.memory_mib > 0 && self.memory_spike_mib >= self.memory_mib {
            return Err((
                key("memory_spike_mib"),
                format!(
                    "{} must be below limits.memory_mib ({})",
                    self.memory_spike_mib, self.memory_mib
                ),
            ));
        }
        if self.memory_check_interval.is_zero() {
            return Err((key("memory_check_interval"), "must be above 0".into()));
        }
        Ok(())
    }
}

/// The runtime limits shared by the span path and the metrics: built once from
/// [`LimitsConfig`].
#[derive(Debug)]
pub struct Limits {
    /// The memory limiter (off when no limit applies).
    pub memory: MemoryLimiter,
    /// The decoded-bytes budget.
    pub in_flight: InFlight,
    /// `max_spans_per_request` and `max_values_per_request`.
    pub read: crate::otlp::wire::ReadLimits,
}

impl Limits {
    /// Limits as configured; `memory_mib = 0` reads the cgroup limit now.
    ///
    /// With a memory limit, the decoded-bytes budget is at most a quarter of it (at least
    /// 16 MiB): what requests decode to is counted against the memory the process may use
    /// (issue 31 item 1), leaving the rest to the runs, the queues and the allocator.
    pub fn new(config: &LimitsConfig) -> Self {
        let memory = MemoryLimiter::new(config);
        let decoded = match memory.hard_limit_bytes() {
            Some(hard) => config
                .max_decoded_bytes_in_flight
                .min((hard / 4).max(MIN_DECODED_BYTES_IN_FLIGHT)),
            None => config.max_decoded_bytes_in_flight,
        };
        Self {
            memory,
            in_flight: InFlight::new(decoded),
            read: crate::otlp::wire::ReadLimits {
                max_spans: config.max_spans_per_request,
                max_values: config.max_values_per_request,
            },
        }
    }

    /// No limits at all (tests, embedded use).
    pub fn unlimited() -> Self {
        Self {
            memory: MemoryLimiter::with_limit(None, 0, Duration::from_secs(1)),
            in_flight: InFlight::new(u64::MAX),
            read: crate::otlp::wire::ReadLimits::NONE,
        }
    }
}
