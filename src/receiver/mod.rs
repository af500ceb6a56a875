//! OTLP receivers: gRPC `TraceService/Export` and HTTP `POST /v1/traces`.
//!
//! Both decode each request and hand it to an `Arc<dyn SpanSink>`; a refusal
//! ([`AcceptError`](crate::ingest::AcceptError)) becomes gRPC `UNAVAILABLE` / HTTP 503
//! with `Retry-After`, so clients retry and nothing is dropped silently. The receive limit
//! applies to the decompressed size. Rejections are counted in [`ReceiverStats`].

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub mod decode;
pub mod error;
pub mod grpc;
pub mod http;
pub use crate::otlp::rpc_status;
pub mod stats;

pub use error::ReceiveError;
pub use grpc::{serve_grpc, GrpcReceiver, OtlpTraceService};
pub use http::{router as http_router, serve_http};
pub use stats::{ReceiverStats, RejectReason};

/// Default receive limit: 16 MiB after decompression.
pub const DEFAULT_MAX_RECV_MSG_SIZE_MIB: usize = 16;

/// Receiver section of the config file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReceiverConfig {
    /// OTLP/gRPC listen address (default `0.0.0.0:4317`).
    pub grpc_listen: SocketAddr,
    /// OTLP/HTTP listen address (default `0.0.0.0:4318`).
    pub http_listen: SocketAddr,
    /// Largest accepted request after decompression, in MiB (default 16).
    pub max_recv_msg_size_mib: usize,
    /// Delay suggested to refused clients (`Retry-After`, gRPC `RetryInfo`), e.g. `"1s"`.
    #[serde(with = "humantime_serde")]
    pub retry_after: Duration,
    /// `[receiver.tls]`: TLS (and mTLS) on both receivers.
    pub tls: crate::tls::ServerTlsConfig,
    /// `[receiver.auth]`: optional token check on both receivers.
    pub auth: crate::auth::ReceiverAuthConfig,
    /// `[receiver.connections]`: per-listener connection limit, HTTP/2 and idle limits.
    pub connections: crate::listen::ConnectionConfig,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        Self {
            grpc_listen: SocketAddr::from(([0, 0, 0, 0], 4317)),
            http_listen: SocketAddr::from(([0, 0, 0, 0], 4318)),
            max_recv_msg_size_mib: DEFAULT_MAX_RECV_MSG_SIZE_MIB,
            retry_after: Duration::from_secs(1),
            tls: Default::default(),
            auth: Default::default(),
            connections: Default::default(),
        }
    }
}

impl ReceiverConfig {
    /// The runtime options both receivers take.
    pub fn options(&self) -> ReceiverOptions {
        ReceiverOptions {
            max_recv_msg_size: self.max_recv_msg_size_mib.saturating_mul(1024 * 1024),
            retry_after: self.retry_after,
        }
    }
}

/// Runtime options shared by the gRPC and HTTP receivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReceiverOptions {
    /// Largest accepted request in bytes, measured after decompression.
    pub max_recv_msg_size: usize,
    /// Delay suggested to clients refused with `UNAVAILABLE` / 503.
    pub retry_after: Duration,
}

impl Default for ReceiverOptions {
    fn default() -> Self {
        ReceiverConfig::default().options()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_and_unknown_keys() {
        let cfg: ReceiverConfig = toml::from_str("").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.grpc_listen.port(), 4317);
        assert_eq!(cfg.http_listen.port(), 4318);
        assert_eq!(cfg.options().max_recv_msg_size, 16 * 1024 * 1024);
        let cfg: ReceiverConfig =
            toml::from_str("max_recv_msg_size_mib = 4\nretry_after = \"3s\"\n")
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.options().max_recv_msg_size, 4 * 1024 * 1024);
        assert_eq!(cfg.retry_after, Duration::from_secs(3));
        assert!(toml::from_str::<ReceiverConfig>("max_recv_msg_size = 4").is_err());
    }
}
