//! `[telemetry]`: where loopwatch's own metrics go over OTLP ([`crate::telemetry`]), and
//! the loop guard that refuses loopwatch's own receiver as that endpoint.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `[telemetry]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TelemetryConfig {
    /// OTLP/gRPC endpoint (e.g. `http://otel-collector:4317`) loopwatch's own metrics go
    /// to. Unset or empty = off. Never loopwatch's own receiver.
    pub endpoint: Option<String>,
    /// How often metrics are collected and exported.
    #[serde(with = "humantime_serde")]
    pub interval: Duration,
    /// Per-export timeout.
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
}

impl Default for TelemetryConfig {
    fn default() -> Self {
        TelemetryConfig {
            endpoint: None,
            interval: Duration::from_secs(10),
            timeout: Duration::from_secs(5),
        }
    }
}

/// A `[telemetry]` setting that cannot work.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TelemetryConfigError {
    #[error("telemetry.endpoint: {0:?} is not an http:// or https:// URL with a host")]
    BadEndpoint(String),
    #[error("telemetry.endpoint: {endpoint:?} is loopwatch's own OTLP receiver ({listen}); send self-telemetry to a collector")]
    OwnReceiver {
        endpoint: String,
        listen: SocketAddr,
    },
    #[error("telemetry.interval: must be at least 100ms")]
    Interval,
}

impl TelemetryConfig {
    /// The endpoint when self-telemetry is on.
    pub fn enabled_endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref().filter(|e| !e.is_empty())
    }

    /// Checks the endpoint is a URL and not one of `own_listeners` (the OTLP receivers):
    /// same port, and a host that is loopback, `localhost`, or the listener's own address.
    pub fn validate(&self, own_listeners: &[SocketAddr]) -> Result<(), TelemetryConfigError> {
        if self.interval < Duration::from_millis(100) {
            return Err(TelemetryConfigError::Interval);
        }
        let Some(endpoint) = self.enabled_endpoint() else {
            return Ok(());
        };
        let bad = || TelemetryConfigError::BadEndpoint(endpoint.to_string());
        let uri: http::Uri = endpoint.parse().map_err(|_| bad())?;
        let default_port = match uri.scheme_str() {
            Some("http") => 80,
            Some("https") => 443,
            _ => return Err(bad()),
        };
        let host = uri.host().ok_or_else(bad)?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(default_port);
        let ip: Option<IpAddr> = host.parse().ok();
        let local = host.eq_ignore_ascii_case("localhost") || ip.is_some_and(|ip| ip.is_loopback());
        for listen in own_listeners {
            // An IP other than loopback may be another host on the same port (a collector
            // at 10.0.0.5:4317 beside a loopwatch on 0.0.0.0:4317): refused only when it is
            // the listener's own address.
            let same_host = local || ip == Some(listen.ip());
            if listen.port() != 0 && listen.port() == port && same_host {
                return Err(TelemetryConfigError::OwnReceiver {
                    endpoint: endpoint.to_string(),
                    listen: *listen,
                });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(endpoint: &str) -> TelemetryConfig {
        TelemetryConfig {
            endpoint: Some(endpoint.into()),
            ..TelemetryConfig::default()
        }
    }

    #[test]
    fn refuses_its_own_receivers() {
        let own: Vec<SocketAddr> = vec![
            "0.0.0.0:4317".parse().unwrap(),
            "0.0.0.0:4318".parse().unwrap(),
        ];
        for endpoint in [
            "http://127.0.0.1:4317",
            "http://localhost:4318",
            "http://[::1]:4317",
        ] {
            let err = with(endpoint).validate(&own).unwrap_err();
            assert!(
                matches!(err, TelemetryConfigError::OwnReceiver { .. }),
                "{endpoint}: {err}"
            );
            assert!(err.to_string().starts_with("telemetry.endpoint"), "{err}");
        }
        let own_ip: Vec<SocketAddr> = vec!["10.1.2.3:4317".parse().unwrap()];
        assert!(with("http://10.1.2.3:4317").validate(&own_ip).is_err());
        // Another host on the same port is a collector, not a loop.
        assert!(with("http://10.1.2.3:4317").validate(&own).is_ok());
    }

    #[test]
    fn accepts_a_collector_and_off() {
        let own: Vec<SocketAddr> = vec!["0.0.0.0:4317".parse().unwrap()];
        assert!(with("http://otel-collector:4317").validate(&own).is_ok());
        assert!(with("http://127.0.0.1:14317").validate(&own).is_ok());
        assert!(TelemetryConfig::default().validate(&own).is_ok());
        assert!(with("").validate(&own).is_ok());
    }

    #[test]
    fn names_bad_settings() {
        assert_eq!(
            with("otel-collector:4317").validate(&[]),
            Err(TelemetryConfigError::BadEndpoint(
                "otel-collector:4317".into()
            ))
        );
        let fast = TelemetryConfig {
            interval: Duration::from_millis(10),
            ..TelemetryConfig::default()
        };
        assert_eq!(fast.validate(&[]), Err(TelemetryConfigError::Interval));
    }
}
