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

use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

pub mod client;
pub mod queue;
pub mod retry;
pub mod stats;
mod worker;

pub use client::{ExportClient, RawBytesCodec};
pub use queue::{ForwardPermit, ForwardQueue};
pub use retry::{classify, classify_status, Backoff, RetryDecision};
pub use stats::{DeliveryLatency, DropReason, ForwarderStats, LatencyHook};

/// Compression of forwarded requests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForwardCompression {
    /// Send uncompressed.
    #[default]
    None,
    /// `grpc-encoding: gzip`.
    Gzip,
}

/// Exporter section of the config file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ForwarderConfig {
    /// Downstream OTLP/gRPC endpoint, e.g. `http://127.0.0.1:4317`; none = detect-only.
    pub endpoint: Option<String>,
    /// Requests the queue holds (default 1024); when full, receivers refuse.
    pub queue_capacity: usize,
    /// Per-attempt timeout, e.g. `"5s"`.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// `none` or `gzip`.
    pub compression: ForwardCompression,
    /// Give up retrying one request after this long (default `"5m"`, as the Collector).
    #[serde(with = "humantime_serde")]
    pub max_elapsed_retry: Duration,
    /// First backoff wait (default `"1s"`), doubled per retry, ±50 % jitter.
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// Largest backoff wait (default `"30s"`).
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// Export RPCs in flight at once (default 4).
    pub concurrency: usize,
    /// `[exporter.tls]`: CA, client certificate and server name for an `https://` endpoint.
    pub tls: crate::tls::ClientTlsConfig,
}

impl Default for ForwarderConfig {
    fn default() -> Self {
        Self {
            endpoint: None,
            queue_capacity: 1024,
            timeout: Duration::from_secs(5),
            compression: ForwardCompression::None,
            max_elapsed_retry: Duration::from_secs(300),
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(30),
            concurrency: 4,
            tls: crate::tls::ClientTlsConfig::default(),
        }
    }
}

impl ForwarderConfig {
    /// Checks values a runtime cannot work with.
    ///
    /// # Errors
    /// [`ForwardError::InvalidConfig`] naming the field.
    pub fn validate(&self) -> Result<(), ForwardError> {
        let bad = |field: &'static str, message: &str| {
            Err(ForwardError::InvalidConfig {
                field,
                message: message.to_owned(),
            })
        };
        if self.queue_capacity == 0 {
            return bad("queue_capacity", "must be at least 1");
        }
        if self.concurrency == 0 {
            return bad("concurrency", "must be at least 1");
        }
        if self.timeout.is_zero() {
            return bad("timeout", "must be positive");
        }
        if self.initial_backoff.is_zero() || self.max_backoff < self.initial_backoff {
            return bad(
                "initial_backoff",
                "must be positive and not above max_backoff",
            );
        }
        Ok(())
    }
}

/// Forwarder set-up errors.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    /// A config value is out of range.
    #[error("exporter.{field}: {message}")]
    InvalidConfig {
        /// The offending key.
        field: &'static str,
        /// Why.
        message: String,
    },
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_parse_and_validation() {
        let cfg: ForwarderConfig = toml::from_str("").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg, ForwarderConfig::default());
        assert_eq!(cfg.queue_capacity, 1024);
        let cfg: ForwarderConfig = toml::from_str(
            "endpoint = \"http://127.0.0.1:4317\"\ntimeout = \"2s\"\ncompression = \"gzip\"\nmax_elapsed_retry = \"1m\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.timeout, Duration::from_secs(2));
        assert_eq!(cfg.compression, ForwardCompression::Gzip);
        assert_eq!(cfg.max_elapsed_retry, Duration::from_secs(60));
        assert!(toml::from_str::<ForwarderConfig>("endpoit = \"x\"").is_err());
        assert!(toml::from_str::<ForwarderConfig>("compression = \"zstd\"").is_err());
        let zero = ForwarderConfig {
            queue_capacity: 0,
            ..ForwarderConfig::default()
        };
        assert_eq!(
            zero.validate().err().map(|e| e.to_string()).as_deref(),
            Some("exporter.queue_capacity: must be at least 1")
        );
    }
}
