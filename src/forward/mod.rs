//! Forwarding to the downstream OTLP/gRPC exporter endpoint: bounded queue, retries with
//! backoff on OTLP-retryable codes, drain on shutdown.
//!
//! Producers call [`ForwardQueue::try_reserve`] before doing detection work and
//! [`ForwardPermit::send`] with the encoded request. A worker takes requests off the
//! queue (up to `concurrency` at once) and exports each with [`ExportClient`]. While the
//! downstream is down, requests stay queued, the queue fills, and receivers refuse with a
//! retryable status: nothing is dropped silently. Final failures are logged (first one per
//! reason at `warn`) and counted in [`ForwarderStats`].

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub mod client;
pub mod queue;
pub mod retry;
pub mod stats;
mod worker;

pub use crate::config::exporter::{ForwardCompression, ForwarderConfig, InvalidExporterConfig};
pub use client::{ExportClient, RawBytesCodec};
pub use queue::{ForwardPermit, ForwardQueue};
pub use retry::{classify, classify_status, Backoff, RetryDecision};
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
}

/// What [`Forwarder::shutdown`] left behind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Requests still queued or in flight at the deadline (counted as dropped, reason
    /// `shutdown`).
    pub undelivered: u64,
}

/// The running forwarder: queue + worker task.
#[derive(Debug)]
pub struct Forwarder {
    queue: ForwardQueue,
    stats: Arc<ForwarderStats>,
    close: Option<oneshot::Sender<()>>,
    worker: JoinHandle<()>,
}

impl Forwarder {
    /// Validates `config` and spawns the worker on the current tokio runtime. With no
    /// endpoint the worker discards requests (counted in `discarded_requests`).
    ///
    /// # Errors
    /// [`ForwardError`] for an invalid config or endpoint.
    pub fn start(config: &ForwarderConfig) -> Result<Self, ForwardError> {
        config.validate()?;
        let client = config
            .endpoint
            .as_deref()
            .map(|e| ExportClient::with_tls(e, config.compression, config.timeout, &config.tls))
            .transpose()?;
        let stats = Arc::new(ForwarderStats::default());
        let (queue, rx) = ForwardQueue::new(config.queue_capacity, Arc::clone(&stats));
        let (close_tx, close_rx) = oneshot::channel();
        let worker = tokio::spawn(worker::run(
            rx,
            close_rx,
            client,
            config.clone(),
            Arc::clone(&stats),
        ));
        Ok(Self {
            queue,
            stats,
            close: Some(close_tx),
            worker,
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

    /// Closes the queue (new reservations fail with `ShuttingDown`) and keeps delivering
    /// what is queued until it is empty or `deadline` passes; what is left is dropped,
    /// counted, and reported.
    pub async fn shutdown(mut self, deadline: Duration) -> ShutdownReport {
        if let Some(close) = self.close.take() {
            let _ = close.send(());
        }
        let undelivered = match tokio::time::timeout(deadline, &mut self.worker).await {
            Ok(_) => 0,
            Err(_) => {
                self.worker.abort();
                let _ = (&mut self.worker).await;
                let left = self.stats.queue_depth() + self.stats.in_flight();
                self.stats.abandoned(left);
                left
            }
        };
        tracing::info!(
            forwarded_requests = self.stats.forwarded_requests(),
            forwarded_spans = self.stats.forwarded_spans(),
            retries = self.stats.retries(),
            dropped_non_retryable = self.stats.dropped_requests(DropReason::NonRetryable),
            dropped_retries_exhausted = self.stats.dropped_requests(DropReason::RetriesExhausted),
            undelivered,
            "forwarder stopped"
        );
        ShutdownReport { undelivered }
    }
}
