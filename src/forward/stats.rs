//! Forwarder counters (atomics; read by the metrics exporter) and the latency hook.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Why a forwarded request was dropped. `as_str` is the metric label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// The downstream answered a non-retryable code.
    NonRetryable,
    /// Retries went on past `max_elapsed_retry`.
    RetriesExhausted,
    /// Still queued, in flight or in backoff when the shutdown deadline passed.
    Shutdown,
}

impl DropReason {
    /// Every reason, in label order.
    pub const ALL: [DropReason; 3] = [Self::NonRetryable, Self::RetriesExhausted, Self::Shutdown];

    /// The metric label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::NonRetryable => "non_retryable",
            Self::RetriesExhausted => "retries_exhausted",
            Self::Shutdown => "shutdown",
        }
    }
}

/// Timing of one delivered request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeliveryLatency {
    /// Duration of the successful export RPC.
    pub export: Duration,
    /// From entering the queue to delivery (includes queueing and retries).
    pub since_enqueued: Duration,
}

/// Called once per delivered request (e.g. to feed a histogram).
pub type LatencyHook = Arc<dyn Fn(DeliveryLatency) + Send + Sync>;

/// Counters of one forwarder.
#[derive(Default)]
pub struct ForwarderStats {
    forwarded_requests: AtomicU64,
    forwarded_spans: AtomicU64,
    retries: AtomicU64,
    dropped_requests: [AtomicU64; 3],
    dropped_spans: [AtomicU64; 3],
    warned: [AtomicBool; 3],
    downstream_rejected_spans: AtomicU64,
    discarded_requests: AtomicU64,
    queued: AtomicU64,
    in_flight: AtomicU64,
    in_backoff: AtomicU64,
    pending_requests: AtomicU64,
    pending_spans: AtomicU64,
    pending_bytes: AtomicU64,
    exports: AtomicU64,
    latency_hook: OnceLock<LatencyHook>,
}

impl std::fmt::Debug for ForwarderStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForwarderStats")
            .field("forwarded_requests", &self.forwarded_requests())
            .field("retries", &self.retries())
            .field("queue_depth", &self.queue_depth())
            .finish_non_exhaustive()
    }
}

impl ForwarderStats {
    /// Installs the latency hook (first call wins; returns false if one was set).
    pub fn set_latency_hook(&self, hook: LatencyHook) -> bool {
        self.latency_hook.set(hook).is_ok()
    }

    /// Requests delivered downstream.
    pub fn forwarded_requests(&self) -> u64 {
        self.forwarded_requests.load(Ordering::Relaxed)
    }
    /// Spans delivered downstream (as counted by the producer at enqueue time).
    pub fn forwarded_spans(&self) -> u64 {
        self.forwarded_spans.load(Ordering::Relaxed)
    }
    /// Export attempts that were retries.
    pub fn retries(&self) -> u64 {
        self.retries.load(Ordering::Relaxed)
    }
    /// Requests dropped for `reason`.
    pub fn dropped_requests(&self, reason: DropReason) -> u64 {
        self.dropped_requests[reason as usize].load(Ordering::Relaxed)
    }
    /// Spans dropped for `reason`.
    pub fn dropped_spans(&self, reason: DropReason) -> u64 {
        self.dropped_spans[reason as usize].load(Ordering::Relaxed)
    }
    /// Spans the downstream reported as rejected in an OTLP partial success.
    pub fn downstream_rejected_spans(&self) -> u64 {
        self.downstream_rejected_spans.load(Ordering::Relaxed)
    }
    /// Requests discarded because no endpoint is configured (detect-only mode).
    pub fn discarded_requests(&self) -> u64 {
        self.discarded_requests.load(Ordering::Relaxed)
    }
    /// Requests waiting in the queue (not yet taken by the worker).
    pub fn queue_depth(&self) -> u64 {
        self.queued.load(Ordering::Relaxed)
    }
    /// Requests in an export RPC right now (a batch counts each request it carries).
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }
    /// Requests waiting out a retry backoff (they hold no delivery slot).
    pub fn in_backoff(&self) -> u64 {
        self.in_backoff.load(Ordering::Relaxed)
    }
    /// Requests accepted and not yet delivered or given up: queued + in flight + in backoff.
    pub fn pending_requests(&self) -> u64 {
        self.pending_requests.load(Ordering::Relaxed)
    }
    /// Spans of the [`pending_requests`](Self::pending_requests).
    pub fn pending_spans(&self) -> u64 {
        self.pending_spans.load(Ordering::Relaxed)
    }
    /// Encoded bytes of the [`pending_requests`](Self::pending_requests), bounded by
    /// `exporter.queue.max_bytes`.
    pub fn pending_bytes(&self) -> u64 {
        self.pending_bytes.load(Ordering::Relaxed)
    }
    /// Export RPCs that succeeded (one per batch; fewer than requests when batching).
    pub fn exports(&self) -> u64 {
        self.exports.load(Ordering::Relaxed)
    }

    /// Adds `bytes` to the pending bytes; returns the amount before.
    pub(crate) fn hold_bytes(&self, bytes: u64) -> u64 {
        self.pending_bytes.fetch_add(bytes, Ordering::Relaxed)
    }
    pub(crate) fn release_bytes(&self, bytes: u64) {
        self.pending_bytes.fetch_sub(bytes, Ordering::Relaxed);
    }
    pub(crate) fn enqueued(&self, spans: u64) {
        self.queued.fetch_add(1, Ordering::Relaxed);
        self.pending_requests.fetch_add(1, Ordering::Relaxed);
        self.pending_spans.fetch_add(spans, Ordering::Relaxed);
    }
    /// Undoes [`enqueued`](Self::enqueued) for a request the closed queue did not take.
    pub(crate) fn unqueued(&self, spans: u64) {
        self.queued.fetch_sub(1, Ordering::Relaxed);
        self.pending_requests.fetch_sub(1, Ordering::Relaxed);
        self.pending_spans.fetch_sub(spans, Ordering::Relaxed);
    }
    pub(crate) fn dequeued(&self) {
        self.queued.fetch_sub(1, Ordering::Relaxed);
    }
    pub(crate) fn export_started(&self, requests: u64) {
        self.in_flight.fetch_add(requests, Ordering::Relaxed);
    }
    pub(crate) fn export_ended(&self, requests: u64) {
        self.in_flight.fetch_sub(requests, Ordering::Relaxed);
    }
    pub(crate) fn backoff_started(&self, requests: u64) {
        self.in_backoff.fetch_add(requests, Ordering::Relaxed);
    }
    pub(crate) fn backoff_ended(&self, requests: u64) {
        self.in_backoff.fetch_sub(requests, Ordering::Relaxed);
    }
    pub(crate) fn retried(&self) {
        self.retries.fetch_add(1, Ordering::Relaxed);
    }
    fn settled(&self, requests: u64, spans: u64) {
        self.pending_requests.fetch_sub(requests, Ordering::Relaxed);
        self.pending_spans.fetch_sub(spans, Ordering::Relaxed);
    }
    /// One export RPC carrying `requests` requests and `spans` spans succeeded.
    pub(crate) fn delivered(&self, requests: u64, spans: u64, latency: DeliveryLatency) {
        self.settled(requests, spans);
        self.exports.fetch_add(1, Ordering::Relaxed);
        self.forwarded_requests
            .fetch_add(requests, Ordering::Relaxed);
        self.forwarded_spans.fetch_add(spans, Ordering::Relaxed);
        if let Some(hook) = self.latency_hook.get() {
            hook(latency);
        }
    }
    pub(crate) fn discarded(&self, requests: u64, spans: u64) {
        self.settled(requests, spans);
        self.discarded_requests
            .fetch_add(requests, Ordering::Relaxed);
    }
    pub(crate) fn downstream_rejected(&self, spans: u64) {
        self.downstream_rejected_spans
            .fetch_add(spans, Ordering::Relaxed);
    }
    /// Counts a drop of `requests` requests holding `spans` spans; true the first time for
    /// this reason (warn once).
    pub(crate) fn dropped(&self, reason: DropReason, requests: u64, spans: u64) -> bool {
        self.settled(requests, spans);
        self.dropped_requests[reason as usize].fetch_add(requests, Ordering::Relaxed);
        self.dropped_spans[reason as usize].fetch_add(spans, Ordering::Relaxed);
        !self.warned[reason as usize].swap(true, Ordering::Relaxed)
    }
    /// Counts requests still pending at the shutdown deadline as dropped (reason `shutdown`).
    pub(crate) fn abandoned(&self, requests: u64, spans: u64) {
        self.dropped(DropReason::Shutdown, requests, spans);
    }
    /// Requests given up on for every reason since start.
    pub fn dropped_requests_total(&self) -> u64 {
        DropReason::ALL
            .iter()
            .map(|r| self.dropped_requests(*r))
            .sum()
    }
    /// Spans given up on for every reason since start.
    pub fn dropped_spans_total(&self) -> u64 {
        DropReason::ALL.iter().map(|r| self.dropped_spans(*r)).sum()
    }
}
