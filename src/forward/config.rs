//! `[exporter]` section: where and how the span path forwards (read by [`crate::forward`]).
//!
//! A leaf module (no crate imports but the TLS settings of [`crate::net::tls`]), so the top-level [`crate::config`] does not depend on
//! the forwarder, and the forwarder depends only on this section.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// An `[exporter]` value out of range.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("exporter.{field}: {message}")]
pub struct InvalidExporterConfig {
    /// The offending key.
    pub field: &'static str,
    /// Why.
    pub message: String,
}

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
    /// Requests accepted and not yet delivered (queued, in flight or in backoff) at most
    /// (default 1024); when all are taken, receivers refuse with a retryable status.
    pub queue_capacity: usize,
    /// Per-attempt timeout, e.g. `"5s"`.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// `none` or `gzip`.
    pub compression: ForwardCompression,
    /// Give up retrying one request after this long (default `"5m"`, as the Collector).
    #[serde(with = "humantime_serde")]
    pub max_elapsed_retry: Duration,
    /// First backoff wait (default `"1s"`), doubled per retry up to `max_backoff`; each wait
    /// is drawn in `[d/2, d]` (jitter inside the cap).
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// Largest backoff wait, server-requested (`RetryInfo`) waits included (default `"30s"`).
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
    /// Export RPCs in flight at once (default 10, like the Collector's queue consumers).
    /// Retries sleeping in backoff do not take one.
    pub concurrency: usize,
    /// Queued requests are sent together, their protobuf bytes concatenated (no re-encoding),
    /// up to this many bytes per export (default 1 MiB; a larger request goes alone).
    pub batch_max_bytes: usize,
    /// How long the worker waits for more requests to fill a batch (default `"0s"`: only
    /// what is already queued is batched, adding no latency).
    #[serde(with = "humantime_serde")]
    pub batch_timeout: Duration,
    /// `[exporter.tls]`: CA, client certificate and server name for an `https://` endpoint.
    pub tls: crate::net::tls::ClientTlsConfig,
    /// `[exporter.queue]`: the byte bound and the opt-in persistent (on-disk) queue.
    pub queue: QueueConfig,
}

/// Default of `exporter.queue.max_bytes`: 256 MiB.
pub const DEFAULT_QUEUE_MAX_BYTES: usize = 256 * 1024 * 1024;

/// `[exporter.queue]`: how much the forward queue holds and where, besides the request count
/// bound `exporter.queue_capacity`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct QueueConfig {
    /// Bytes (encoded requests, after decompression) accepted and not yet delivered —
    /// queued, in flight or in backoff — at most (default 256 MiB), in both modes. A request
    /// that does not fit is refused with a retryable status, like a full `queue_capacity`;
    /// a single request larger than the bound is still taken when nothing is pending.
    pub max_bytes: usize,
    /// Keep accepted requests on disk until delivered (default false): each request is
    /// committed with fsync **before** the receiver acknowledges it and deleted once
    /// delivered or given up, so kill -9 and restart lose nothing (pending requests are
    /// re-queued at start-up; requests in flight at the kill may be delivered twice).
    pub persistent: bool,
    /// Directory of the persistent queue (required when `persistent`; created if missing;
    /// one loopwatch process per directory).
    pub directory: Option<PathBuf>,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            max_bytes: DEFAULT_QUEUE_MAX_BYTES,
            persistent: false,
            directory: None,
        }
    }
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
            concurrency: 10,
            batch_max_bytes: 1024 * 1024,
            batch_timeout: Duration::ZERO,
            tls: crate::net::tls::ClientTlsConfig::default(),
            queue: QueueConfig::default(),
        }
    }
}

impl ForwarderConfig {
    /// Checks values a runtime cannot work with.
    ///
    /// # Errors
    /// [`InvalidExporterConfig`] naming the field.
    pub fn validate(&self) -> Result<(), InvalidExporterConfig> {
        let bad = |field: &'static str, message: &str| {
            Err(InvalidExporterConfig {
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
        if self.batch_max_bytes == 0 {
            return bad("batch_max_bytes", "must be at least 1");
        }
        if self.queue.max_bytes == 0 {
            return bad("queue.max_bytes", "must be at least 1");
        }
        if self.queue.persistent
            && self
                .queue
                .directory
                .as_ref()
                .is_none_or(|d| d.as_os_str().is_empty())
        {
            return bad(
                "queue.directory",
                "required when exporter.queue.persistent = true",
            );
        }
        if self.queue.persistent && self.endpoint.as_deref().is_none_or(str::is_empty) {
            // Without a downstream nothing is forwarded, so nothing would be queued: a
            // persistent queue set for a deployment that lost its endpoint on the way.
            return bad(
                "queue.persistent",
                "needs exporter.endpoint (without one nothing is forwarded or queued)",
            );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_parse_and_validation() {
        let cfg: ForwarderConfig = toml::from_str("").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg, ForwarderConfig::default());
        assert_eq!(cfg.queue_capacity, 1024);
        assert_eq!(cfg.concurrency, 10);
        assert_eq!(cfg.batch_max_bytes, 1024 * 1024);
        assert_eq!(cfg.batch_timeout, Duration::ZERO);
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

    #[test]
    fn queue_section_defaults_and_validation() {
        let cfg: ForwarderConfig = toml::from_str("").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.queue.max_bytes, 268_435_456);
        assert!(!cfg.queue.persistent);
        assert_eq!(cfg.queue.directory, None);
        let cfg: ForwarderConfig = toml::from_str(
            "endpoint = \"http://127.0.0.1:4317\"\n[queue]\npersistent = true\ndirectory = \"/var/lib/loopwatch/queue\"\nmax_bytes = 1048576\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(cfg.validate().is_ok());
        let no_endpoint = ForwarderConfig {
            endpoint: None,
            ..cfg.clone()
        };
        assert_eq!(
            no_endpoint.validate().err().map(|e| e.to_string()).as_deref(),
            Some("exporter.queue.persistent: needs exporter.endpoint (without one nothing is forwarded or queued)")
        );
        assert_eq!(cfg.queue.max_bytes, 1_048_576);
        assert_eq!(
            cfg.queue.directory.as_deref(),
            Some(std::path::Path::new("/var/lib/loopwatch/queue"))
        );
        assert!(toml::from_str::<ForwarderConfig>("[queue]\npersistant = true").is_err());
        let no_dir: ForwarderConfig =
            toml::from_str("[queue]\npersistent = true").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            no_dir.validate().err().map(|e| e.to_string()).as_deref(),
            Some("exporter.queue.directory: required when exporter.queue.persistent = true")
        );
        let zero: ForwarderConfig =
            toml::from_str("[queue]\nmax_bytes = 0").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            zero.validate().err().map(|e| e.to_string()).as_deref(),
            Some("exporter.queue.max_bytes: must be at least 1")
        );
    }
}
