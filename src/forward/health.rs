//! Whether the downstream answers: the `loopwatch_exporter_up` gauge (1/0) and the
//! operator-facing log lines (issue 10). Readiness does **not** depend on it: a collector
//! outage must not mark every sidecar NotReady.
//!
//! Logging: the first failure after being up is a WARN; while it stays down, one WARN per
//! [`WARN_EVERY`] with the number of failures since the last one (the rest at debug); the
//! recovery is an INFO with the number of failures and how long it was down.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Least time between two WARN lines while the downstream stays down.
pub const WARN_EVERY: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
struct Outage {
    since: Option<Instant>,
    last_warn: Option<Instant>,
    failures: u64,
    failures_since_warn: u64,
}

/// Reachability of the downstream, from export outcomes and idle probes.
#[derive(Debug)]
pub struct DownstreamHealth {
    endpoint: String,
    up: AtomicI64,
    outage: Mutex<Outage>,
}

impl DownstreamHealth {
    /// Health of `endpoint`, assumed up until an attempt or a probe says otherwise.
    pub fn new(endpoint: impl Into<String>) -> Self {
        Self {
            endpoint: endpoint.into(),
            up: AtomicI64::new(1),
            outage: Mutex::new(Outage::default()),
        }
    }

    /// 1 when the last export attempt or probe reached the downstream, else 0.
    pub fn up(&self) -> i64 {
        self.up.load(Ordering::Relaxed)
    }

    fn outage(&self) -> std::sync::MutexGuard<'_, Outage> {
        self.outage.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The downstream answered (a success, or a final answer such as `INVALID_ARGUMENT`).
    pub fn reached(&self) {
        if self.up.swap(1, Ordering::Relaxed) == 1 {
            return;
        }
        let mut outage = self.outage();
        let down_for = outage.since.map(|s| s.elapsed()).unwrap_or_default();
        tracing::info!(
            endpoint = %self.endpoint,
            failures = outage.failures,
            down_for = %humantime::format_duration(Duration::from_secs(down_for.as_secs())),
            "downstream recovered"
        );
        *outage = Outage::default();
    }

    /// An attempt or probe did not reach the downstream (transport error, `UNAVAILABLE`,
    /// timeout). `error` is what failed, for the log.
    pub fn unreachable(&self, error: &dyn std::fmt::Display) {
        let was_up = self.up.swap(0, Ordering::Relaxed) == 1;
        let now = Instant::now();
        let mut outage = self.outage();
        outage.failures += 1;
        outage.failures_since_warn += 1;
        if was_up {
            outage.since = Some(now);
            outage.last_warn = Some(now);
            outage.failures_since_warn = 0;
            tracing::warn!(endpoint = %self.endpoint, %error,
                "downstream unreachable; retrying with backoff (further failures are summarised every minute)");
        } else if outage
            .last_warn
            .is_none_or(|t| now.duration_since(t) >= WARN_EVERY)
        {
            let failures = std::mem::take(&mut outage.failures_since_warn);
            outage.last_warn = Some(now);
            let down_for = outage.since.map(|s| s.elapsed()).unwrap_or_default();
            tracing::warn!(endpoint = %self.endpoint, %error, failures,
                down_for = %humantime::format_duration(Duration::from_secs(down_for.as_secs())),
                "downstream still unreachable");
        } else {
            tracing::debug!(endpoint = %self.endpoint, %error, "downstream unreachable");
        }
    }
}

/// Opens (and closes) a TCP connection to `endpoint`'s host and port within `timeout`.
///
/// # Errors
/// Why the endpoint was not reached (bad URI, refused, timed out).
pub async fn tcp_probe(endpoint: &str, timeout: Duration) -> Result<(), String> {
    let uri: http::Uri = endpoint.parse().map_err(|e| format!("{e}"))?;
    let host = uri.host().ok_or("no host in the endpoint")?;
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("https") {
            443
        } else {
            80
        });
    let host = host.trim_start_matches('[').trim_end_matches(']');
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port))).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err("timed out".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn up_down_up() {
        let h = DownstreamHealth::new("http://127.0.0.1:1");
        assert_eq!(h.up(), 1);
        h.unreachable(&"connection refused");
        h.unreachable(&"connection refused");
        assert_eq!(h.up(), 0);
        assert_eq!(h.outage().failures, 2);
        h.reached();
        assert_eq!(h.up(), 1);
        assert_eq!(h.outage().failures, 0);
    }

    #[tokio::test]
    async fn probe_reaches_a_listener_and_not_a_closed_port() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await;
        let listener = listener.unwrap_or_else(|e| panic!("{e}"));
        let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
        let t = Duration::from_secs(1);
        assert_eq!(tcp_probe(&format!("http://{addr}"), t).await, Ok(()));
        drop(listener);
        assert!(tcp_probe(&format!("http://{addr}"), t).await.is_err());
        assert!(tcp_probe("not a uri", t).await.is_err());
    }
}
