//! Forwarding to the downstream OTLP/gRPC exporter endpoint: bounded queue, retries with
//! backoff on OTLP-retryable codes, drain on shutdown.
//!
//! Receivers take an admission slot ([`ForwardQueue::admit`]) before reading a request; the
//! span path queues the encoded request with [`ForwardQueue::send`]. A worker takes requests
//! off the queue, batches what is waiting (raw bytes, no re-encoding) and exports with up to
//! `concurrency` RPCs in flight ([`ExportClient`]); retries ([`crate::net::retry`]) sleep without
//! holding a delivery slot. While the downstream is down, requests stay pending, the slots
//! run out, and receivers refuse with a retryable status: nothing is dropped silently. Final
//! failures are logged (first one per reason at `error`) and counted in [`ForwarderStats`];
//! reachability is [`DownstreamHealth`] (`loopwatch_exporter_up`).
//!
//! The queue is bounded in requests (`queue_capacity`) and in bytes (`queue.max_bytes`).
//! With `exporter.queue.persistent` every accepted request is also on disk ([`store`]) from
//! before its acknowledgement until it leaves the forwarder; what is left at start-up
//! (kill -9, or the drain deadline passed) is re-queued and delivered first. A store that
//! cannot write (disk full) refuses requests retryably and heals by itself ([`store`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub mod client;
pub mod health;
pub mod queue;
pub mod stats;
pub mod store;
mod worker;

pub mod config;
pub use crate::net::retry::{classify, classify_status, Backoff, RetryDecision, RetryPolicy};
pub use client::{ExportBody, ExportClient, RawBytesCodec};
pub use config::{ForwardCompression, ForwarderConfig, InvalidExporterConfig};
pub use health::DownstreamHealth;
pub use queue::{ForwardPermit, ForwardQueue, HeldBytes};
pub use stats::{DeliveryLatency, DropReason, ForwarderStats, LatencyHook};

/// Forwarder set-up errors.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// A config value is out of range.
    #[error(transparent)]
    InvalidConfig(#[from] InvalidExporterConfig),
    /// `[exporter.tls]` cannot be loaded or does not fit the endpoint.
    #[error("exporter.tls: {0}")]
    Tls(String),
    /// `exporter.endpoint` is not a valid URI.
    #[error("exporter.endpoint `{endpoint}` is not a valid URI: {message}")]
    InvalidEndpoint {
        /// The configured value.
        endpoint: String,
        /// The parser's complaint.
        message: String,
    },
    /// `exporter.queue.directory` cannot hold the persistent queue.
    #[error("exporter.queue.directory: {0}")]
    Store(store::StoreError),
}

/// What [`Forwarder::shutdown`] left behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Requests still queued, in flight or in backoff at the deadline (counted as dropped,
    /// reason `shutdown`).
    pub undelivered: u64,
    /// The spans of those requests: acknowledged to clients and not delivered.
    pub undelivered_spans: u64,
    /// Spans given up on since start for any reason (shutdown included).
    pub dropped_spans_total: u64,
    /// Persistent mode: requests still pending at the deadline, left in the store and
    /// delivered after the next start (not lost, not counted as dropped).
    pub kept_on_disk: u64,
    /// The spans of those requests.
    pub kept_on_disk_spans: u64,
}

/// How often an idle forwarder probes the downstream (TCP connect) for
/// `loopwatch_exporter_up`.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(5);

/// The running forwarder: queue + worker task (+ an idle probe of the downstream).
pub struct Forwarder {
    queue: ForwardQueue,
    stats: Arc<ForwarderStats>,
    health: Option<Arc<DownstreamHealth>>,
    flush: CancellationToken,
    close: Option<oneshot::Sender<()>>,
    worker: JoinHandle<()>,
    probe: Option<JoinHandle<()>>,
    healer: Option<JoinHandle<()>>,
    store: Option<Arc<store::DiskQueue>>,
}

impl std::fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Forwarder")
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Forwarder {
    /// Validates `config` and spawns the worker on the current tokio runtime. With no
    /// endpoint the worker discards requests (counted in `discarded_requests`) and the
    /// persistent queue is not opened. With `queue.persistent` (and an endpoint) it opens
    /// the store and re-queues what it holds, oldest first, before anything new.
    ///
    /// # Errors
    /// [`ForwardError`] for an invalid config or endpoint, or a persistent queue directory
    /// that cannot be created, written or locked.
    pub fn start(config: &ForwarderConfig) -> Result<Self, ForwardError> {
        config.validate()?;
        let endpoint = config.endpoint.as_deref().filter(|e| !e.is_empty());
        let client = endpoint
            .map(|e| ExportClient::with_tls(e, config.compression, config.timeout, &config.tls))
            .transpose()?;
        let stats = Arc::new(ForwarderStats::default());
        let health = endpoint.map(|e| Arc::new(DownstreamHealth::new(e)));
        let (store, stored) = match (&config.queue.directory, endpoint) {
            (Some(directory), Some(_)) if config.queue.persistent => {
                let (store, stored) =
                    store::DiskQueue::open(directory).map_err(ForwardError::Store)?;
                (Some(Arc::new(store)), stored)
            }
            _ => (None, Vec::new()),
        };
        let (queue, rx) = ForwardQueue::new(
            config.queue_capacity,
            config.queue.max_bytes,
            Arc::clone(&stats),
            store.clone(),
        );
        if let Some(store) = &store {
            let spans: u64 = stored.iter().map(|r| r.spans).sum();
            tracing::info!(
                path = %store.path().display(),
                requests = stored.len(),
                spans,
                "persistent forward queue open; pending requests re-queued"
            );
            for request in stored {
                queue.requeue(request);
            }
        }
        let (close_tx, close_rx) = oneshot::channel();
        let flush = CancellationToken::new();
        let shared = Arc::new(worker::Shared {
            client,
            config: config.clone(),
            stats: Arc::clone(&stats),
            health: health.clone(),
            flush: flush.clone(),
            slots: Arc::new(tokio::sync::Semaphore::new(config.concurrency)),
            store: store.clone(),
        });
        let worker = tokio::spawn(worker::run(rx, close_rx, queue.clone(), shared));
        let probe = match (endpoint, &health) {
            (Some(endpoint), Some(health)) => Some(tokio::spawn(probe(
                endpoint.to_owned(),
                Arc::clone(health),
                Arc::clone(&stats),
                config.timeout.min(Duration::from_secs(1)),
            ))),
            _ => None,
        };
        let healer = store.clone().map(|store| tokio::spawn(heal(store)));
        Ok(Self {
            queue,
            stats,
            health,
            flush,
            close: Some(close_tx),
            worker,
            probe,
            healer,
            store,
        })
    }

    /// A producer handle of the queue.
    pub fn queue(&self) -> ForwardQueue {
        self.queue.clone()
    }

    /// The counters.
    pub fn stats(&self) -> Arc<ForwarderStats> {
        Arc::clone(&self.stats)
    }

    /// Downstream reachability (`None` without an endpoint).
    pub fn health(&self) -> Option<Arc<DownstreamHealth>> {
        self.health.clone()
    }

    /// Closes the queue (new admissions fail with `ShuttingDown`), wakes every retry sleeping
    /// in backoff so it is tried at once (a retry that fails again keeps its backoff
    /// schedule, bounded by `deadline`), and keeps delivering until nothing is pending or
    /// `deadline` passes. What is left is dropped, counted (reason `shutdown`) and reported:
    /// at ERROR when acknowledged spans were lost, at WARN when earlier drops happened. In
    /// persistent mode what is left stays on disk for the next start instead (WARN).
    pub async fn shutdown(mut self, deadline: Duration) -> ShutdownReport {
        if let Some(close) = self.close.take() {
            let _ = close.send(());
        }
        self.flush.cancel();
        if let Some(probe) = self.probe.take() {
            probe.abort();
        }
        if let Some(healer) = self.healer.take() {
            healer.abort();
        }
        let left = match tokio::time::timeout(deadline, &mut self.worker).await {
            Ok(_) => (0, 0),
            Err(_) => {
                // Dropping the worker's JoinSet aborts its delivery tasks.
                self.worker.abort();
                let _ = (&mut self.worker).await;
                (self.stats.pending_requests(), self.stats.pending_spans())
            }
        };
        let ((undelivered, undelivered_spans), kept) = match &self.store {
            Some(store) => {
                if let Err(error) = store::blocking(|| store.sync()) {
                    tracing::warn!(%error, "could not sync the persistent queue at shutdown; delivered requests may be sent again after a restart");
                }
                if left.0 > 0 {
                    tracing::warn!(
                        path = %store.path().display(),
                        requests = left.0,
                        spans = left.1,
                        "forward drain deadline passed; undelivered requests stay in the persistent queue and are delivered after the next start"
                    );
                }
                ((0, 0), left)
            }
            None => {
                self.stats.abandoned(left.0, left.1);
                (left, (0, 0))
            }
        };
        let report = ShutdownReport {
            undelivered,
            undelivered_spans,
            dropped_spans_total: self.stats.dropped_spans_total(),
            kept_on_disk: kept.0,
            kept_on_disk_spans: kept.1,
        };
        let s = &self.stats;
        macro_rules! summary {
            ($level:ident, $msg:literal) => {
                tracing::$level!(
                    forwarded_requests = s.forwarded_requests(),
                    forwarded_spans = s.forwarded_spans(),
                    exports = s.exports(),
                    retries = s.retries(),
                    dropped_spans_non_retryable = s.dropped_spans(DropReason::NonRetryable),
                    dropped_spans_retries_exhausted = s.dropped_spans(DropReason::RetriesExhausted),
                    undelivered_requests = undelivered,
                    undelivered_spans,
                    kept_on_disk_requests = report.kept_on_disk,
                    kept_on_disk_spans = report.kept_on_disk_spans,
                    ?deadline,
                    $msg
                )
            };
        }
        if undelivered > 0 {
            summary!(error, "forwarder stopped: acknowledged spans were NOT delivered before the drain deadline");
        } else if report.dropped_spans_total > 0 {
            summary!(warn, "forwarder stopped; some spans were dropped earlier");
        } else if report.kept_on_disk > 0 {
            summary!(
                warn,
                "forwarder stopped; undelivered requests are kept in the persistent queue"
            );
        } else {
            summary!(info, "forwarder stopped; everything accepted was delivered");
        }
        report
    }
}

/// Every [`store::HEAL_INTERVAL`], heals the persistent queue when a write failed (issue 31
/// item 3), so it accepts requests again, and `/readyz` says so, without a restart and
/// without waiting for a client to retry.
async fn heal(store: Arc<store::DiskQueue>) {
    loop {
        tokio::time::sleep(store::HEAL_INTERVAL).await;
        if store.heal_due() {
            let store = Arc::clone(&store);
            let _ = tokio::task::spawn_blocking(move || store.heal()).await;
        }
    }
}

/// While no export ran in the last interval, checks with a TCP connect that the downstream
/// is reachable, so `loopwatch_exporter_up` is true on an idle sidecar too. The first
/// probe runs at start-up.
async fn probe(
    endpoint: String,
    health: Arc<DownstreamHealth>,
    stats: Arc<ForwarderStats>,
    timeout: Duration,
) {
    let attempts_so_far = || stats.exports() + stats.retries() + stats.dropped_requests_total();
    // Equal at the first pass: the first probe runs at start-up, so the gauge is known
    // at once rather than after one interval.
    let mut last_attempts = attempts_so_far();
    loop {
        let attempts = attempts_so_far();
        if attempts == last_attempts {
            match health::tcp_probe(&endpoint, timeout).await {
                Ok(()) => health.reached(),
                Err(e) => health.unreachable(&e),
            }
        }
        last_attempts = attempts;
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}
