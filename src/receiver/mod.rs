//! OTLP receivers: gRPC `TraceService/Export` and HTTP `POST /v1/traces` (or the path
//! `receiver.traces_url_path` sets).
//!
//! Both first take an admission from their `Arc<dyn SpanSink>` ([`admit`], waiting at most
//! `admission_wait`) **before** reading and decoding the body, then decode the request and
//! hand it over; a refusal ([`AcceptError`](crate::ingest::AcceptError)) becomes gRPC
//! `UNAVAILABLE` with `RetryInfo` / HTTP 503 with `Retry-After`, so clients retry and nothing
//! is dropped silently. The receive limit
//! applies to the decompressed size. Rejections are counted in [`ReceiverStats`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub mod body;
pub mod decode;
pub mod error;
pub mod grpc;
pub mod heavy;
pub mod http;
pub mod partial;
pub use crate::otlp::rpc_status;
pub mod stats;

pub use error::ReceiveError;
pub use grpc::{serve_grpc, GrpcReceiver, OtlpTraceService};
pub use http::{router as http_router, serve_http};
pub use stats::{ReceiverStats, RejectReason};

/// Default wait for an admission slot before refusing: 20 ms.
pub const DEFAULT_ADMISSION_WAIT: Duration = Duration::from_millis(20);

/// Waits up to `options.admission_wait` for room on the span path.
///
/// # Errors
/// [`AcceptError::QueueFull`] when the wait passes; what the sink answered otherwise.
pub async fn admit(
    sink: &dyn crate::ingest::SpanSink,
    options: &ReceiverOptions,
) -> Result<crate::ingest::Admission, crate::ingest::AcceptError> {
    // `timeout` polls the admission once before looking at the clock: a free slot is taken
    // even with a zero wait.
    tokio::time::timeout(options.admission_wait, sink.admit())
        .await
        .unwrap_or(Err(crate::ingest::AcceptError::QueueFull))
}

/// Waits up to `options.admission_wait` for `bytes` of the decoded-bytes budget
/// ([`crate::ingest::SpanSink::reserve_decoded`]).
///
/// # Errors
/// [`AcceptError::InFlightLimit`](crate::ingest::AcceptError::InFlightLimit) when the wait
/// passes.
pub async fn reserve_decoded(
    sink: &dyn crate::ingest::SpanSink,
    options: &ReceiverOptions,
    bytes: usize,
) -> Result<crate::ingest::limits::DecodedBytes, crate::ingest::AcceptError> {
    tokio::time::timeout(options.admission_wait, sink.reserve_decoded(bytes))
        .await
        .map_err(|_| crate::ingest::AcceptError::InFlightLimit)
}

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
    /// The OTLP/HTTP traces path (default `/v1/traces`, OTLP/HTTP's), as the Collector's
    /// `otlp` receiver `protocols.http.traces_url_path` sets it; for senders configured
    /// with another path (e.g. `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=http://host:4318/otlp/traces`).
    /// Any other path is 404. Checked by [`ReceiverConfig::validate`].
    pub traces_url_path: String,
    /// Largest accepted request after decompression, in MiB (default 16).
    pub max_recv_msg_size_mib: usize,
    /// Delay suggested to refused clients (`Retry-After`, gRPC `RetryInfo`), e.g. `"1s"`.
    #[serde(with = "humantime_serde")]
    pub retry_after: Duration,
    /// How long a request waits for room on the span path (a forward-queue slot) before it
    /// is refused with a retryable status, e.g. `"20ms"`. The wait happens before the body
    /// is read or decoded, so a refused request costs almost nothing.
    #[serde(with = "humantime_serde")]
    pub admission_wait: Duration,
    /// `[receiver.tls]`: TLS (and mTLS) on both receivers.
    pub tls: crate::net::tls::ServerTlsConfig,
    /// `[receiver.auth]`: optional token check on both receivers.
    pub auth: crate::net::auth::ReceiverAuthConfig,
    /// `[receiver.connections]`: per-listener connection limit, HTTP/2 and idle limits.
    pub connections: crate::net::listen::ConnectionConfig,
    /// A request body must arrive whole within this (default `30s`), else the request is
    /// refused retryably (`body_timeout`). The body is read before the request takes a
    /// forward-queue slot, so a slow client holds none.
    #[serde(with = "humantime_serde")]
    pub body_read_timeout: Duration,
    /// After the first 2 s of a body, its bytes must arrive at this average rate at least,
    /// in bytes per second (default 16384; 0 = off), else it is refused retryably
    /// (`body_too_slow`).
    pub body_min_rate: u64,
    /// Requests being received and processed at once on both OTLP receivers together
    /// (default 4096); more are refused at once, retryably (`too_many_requests`). With
    /// `connections.max_concurrent_streams` per connection, it bounds what many slow
    /// streams can hold.
    pub max_concurrent_requests: usize,
}

impl Default for ReceiverConfig {
    fn default() -> Self {
        Self {
            grpc_listen: SocketAddr::from(([0, 0, 0, 0], 4317)),
            http_listen: SocketAddr::from(([0, 0, 0, 0], 4318)),
            traces_url_path: crate::otlp::TRACES_PATH.to_owned(),
            max_recv_msg_size_mib: DEFAULT_MAX_RECV_MSG_SIZE_MIB,
            retry_after: Duration::from_secs(1),
            admission_wait: DEFAULT_ADMISSION_WAIT,
            tls: Default::default(),
            auth: Default::default(),
            connections: Default::default(),
            body_read_timeout: DEFAULT_BODY_READ_TIMEOUT,
            body_min_rate: DEFAULT_BODY_MIN_RATE,
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
        }
    }
}

/// Default `receiver.body_read_timeout`: 30 s.
pub const DEFAULT_BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Default `receiver.body_min_rate`: 16 KiB per second.
pub const DEFAULT_BODY_MIN_RATE: u64 = 16 * 1024;
/// Default `receiver.max_concurrent_requests`: 4096.
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 4096;

impl ReceiverConfig {
    /// The runtime options both receivers take.
    pub fn options(&self) -> ReceiverOptions {
        ReceiverOptions {
            max_recv_msg_size: self.max_recv_msg_size_mib.saturating_mul(1024 * 1024),
            retry_after: self.retry_after,
            admission_wait: self.admission_wait,
            traces_url_path: Arc::from(self.traces_url_path.as_str()),
            body_read_timeout: self.body_read_timeout,
            body_min_rate: self.body_min_rate,
            requests: RequestSlots::new(self.max_concurrent_requests),
        }
    }

    /// Errors as (key, reason) for a `traces_url_path` the HTTP receiver cannot serve
    /// ([`route_path_problem`]); it must start with `/` (the Collector prepends a missing
    /// one, loopwatch says so instead).
    pub fn validate(&self) -> Result<(), (String, String)> {
        if self.body_read_timeout.is_zero() {
            return Err((
                "receiver.body_read_timeout".into(),
                "must be above 0".into(),
            ));
        }
        if self.max_concurrent_requests == 0 {
            return Err((
                "receiver.max_concurrent_requests".into(),
                "must be at least 1".into(),
            ));
        }
        let path = self.traces_url_path.as_str();
        match route_path_problem(path) {
            Some(problem) => Err((
                "receiver.traces_url_path".into(),
                format!("{path:?} {problem}"),
            )),
            None => Ok(()),
        }
    }
}

/// Why `path` cannot be the HTTP receiver's route, if it cannot: not starting with `/`, a
/// query or fragment, characters a request path cannot carry unencoded, or what axum's
/// router reads as a parameter (`{name}`) or refuses (a segment starting with `:` or `*`,
/// axum 0.7's parameter syntax).
pub fn route_path_problem(path: &str) -> Option<&'static str> {
    if !path.starts_with('/') {
        Some("must start with `/`, e.g. \"/v1/traces\"")
    } else if path.contains(['?', '#']) {
        Some("is a path only: no query (`?`) or fragment (`#`)")
    } else if path.contains(['{', '}']) {
        Some("cannot hold `{` or `}`")
    } else if path
        .split('/')
        .any(|segment| segment.starts_with([':', '*']))
    {
        Some("cannot have a segment starting with `:` or `*`")
    } else if !path.is_ascii() || path.parse::<::http::uri::PathAndQuery>().is_err() {
        // Clients send a path percent-encoded: `/spür` arrives as `/sp%C3%BCr`.
        Some("has characters a URL path cannot hold unencoded (percent-encode them)")
    } else {
        None
    }
}

/// Runtime options shared by the gRPC and HTTP receivers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReceiverOptions {
    /// Largest accepted request in bytes, measured after decompression.
    pub max_recv_msg_size: usize,
    /// Delay suggested to clients refused with `UNAVAILABLE` / 503.
    pub retry_after: Duration,
    /// Longest wait for an admission before refusing (see [`ReceiverConfig::admission_wait`]).
    pub admission_wait: Duration,
    /// The path the HTTP receiver serves (see [`ReceiverConfig::traces_url_path`]).
    pub traces_url_path: Arc<str>,
    /// See [`ReceiverConfig::body_read_timeout`].
    pub body_read_timeout: Duration,
    /// See [`ReceiverConfig::body_min_rate`] (bytes per second; 0 = off).
    pub body_min_rate: u64,
    /// The requests in progress on the receivers that share these options (clones share
    /// the count): [`ReceiverConfig::max_concurrent_requests`].
    pub requests: RequestSlots,
}

impl ReceiverOptions {
    /// The rules a body is read under: `max_bytes` (as sent), the deadline, the minimum
    /// rate, and how long a frame waits for the decoded-bytes budget.
    pub fn body_rules(&self, max_bytes: usize) -> body::BodyRules {
        body::BodyRules {
            max_bytes,
            timeout: self.body_read_timeout,
            min_rate: self.body_min_rate,
            budget_wait: self.admission_wait,
        }
    }
}

/// The shared count of requests in progress (`receiver.max_concurrent_requests`): a slot is
/// taken without waiting when a request arrives and given back when it is answered.
#[derive(Clone, Debug)]
pub struct RequestSlots {
    semaphore: Arc<tokio::sync::Semaphore>,
    limit: usize,
}

impl RequestSlots {
    /// Room for `limit` requests at once.
    pub fn new(limit: usize) -> Self {
        let limit = limit.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        Self {
            semaphore: Arc::new(tokio::sync::Semaphore::new(limit)),
            limit,
        }
    }

    /// A slot, held until dropped.
    ///
    /// # Errors
    /// [`ReceiveError::TooManyRequests`] when every slot is taken.
    pub fn try_take(&self) -> Result<tokio::sync::OwnedSemaphorePermit, ReceiveError> {
        Arc::clone(&self.semaphore)
            .try_acquire_owned()
            .map_err(|_| ReceiveError::TooManyRequests { limit: self.limit })
    }

    /// Requests in progress now.
    pub fn in_use(&self) -> usize {
        self.limit - self.semaphore.available_permits().min(self.limit)
    }
}

impl PartialEq for RequestSlots {
    fn eq(&self, other: &Self) -> bool {
        self.limit == other.limit
    }
}

impl Eq for RequestSlots {}

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
        assert_eq!(cfg.admission_wait, Duration::from_millis(20));
        assert!(toml::from_str::<ReceiverConfig>("max_recv_msg_size = 4").is_err());
    }

    #[test]
    fn traces_url_path_must_be_an_absolute_path() {
        let with = |path: &str| ReceiverConfig {
            traces_url_path: path.into(),
            ..ReceiverConfig::default()
        };
        assert_eq!(ReceiverConfig::default().traces_url_path, "/v1/traces");
        for ok in ["/v1/traces", "/", "/otlp/v1/traces", "/a%20b", "/a*b"] {
            assert_eq!(with(ok).validate(), Ok(()), "{ok}");
            assert_eq!(&*with(ok).options().traces_url_path, ok);
        }
        for (bad, says) in [
            ("v1/traces", "must start with `/`"),
            ("", "must start with `/`"),
            ("/v1/traces?x=1", "no query"),
            ("/v1#t", "no query"),
            ("/{signal}", "`{`"),
            ("/:signal", "starting with `:`"),
            ("/v1/*rest", "starting with `:` or `*`"),
            ("/v1 traces", "percent-encode"),
            ("/spür", "percent-encode"),
        ] {
            let err = with(bad).validate().err();
            assert!(
                err.as_ref()
                    .is_some_and(|(key, reason)| key == "receiver.traces_url_path"
                        && reason.contains(says)
                        && reason.contains(&format!("{bad:?}"))),
                "{bad}: {err:?}"
            );
        }
    }
}
