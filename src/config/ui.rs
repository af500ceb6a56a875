//! `[ui]`: settings of the built-in fleet page (`/ui` on the admin listener).

use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::net::trace_url::{TraceUrl, TRACE_ID_PLACEHOLDER};

/// Default `ui.session_ttl`: 12 hours.
pub const DEFAULT_SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Longest `ui.session_ttl`: 30 days.
pub const MAX_SESSION_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// `[ui]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct UiConfig {
    /// Link from a run's drill-down to the trace in the user's tracing UI: an `http://` or
    /// `https://` URL with a host containing `{trace_id}`, which is replaced by the trace id
    /// (32 lowercase hex characters), e.g. `"https://jaeger.example/trace/{trace_id}"`.
    /// Unset = no link (the page shows the trace id only).
    pub trace_url: Option<String>,
    /// How long a `/ui` login lasts (with `admin.auth_token` set), from the login on:
    /// default `12h`, between `1s` and `30d`.
    #[serde(with = "humantime_serde")]
    pub session_ttl: Duration,
}

impl Default for UiConfig {
    fn default() -> Self {
        Self {
            trace_url: None,
            session_ttl: DEFAULT_SESSION_TTL,
        }
    }
}

impl UiConfig {
    /// Checks `trace_url`.
    ///
    /// # Errors
    /// `("ui.trace_url", why)` when it lacks `{trace_id}` or is not an http(s) URL with a
    /// host once the placeholder is filled in; `("ui.session_ttl", why)` outside 1 s–30 d.
    pub fn validate(&self) -> Result<(), (String, String)> {
        if let Some(template) = &self.trace_url {
            TraceUrl::new(template).map_err(|reason| ("ui.trace_url".to_string(), reason))?;
        }
        if self.session_ttl < Duration::from_secs(1) || self.session_ttl > MAX_SESSION_TTL {
            return Err((
                "ui.session_ttl".to_string(),
                format!(
                    "{} is not between 1s and 30d",
                    humantime::format_duration(self.session_ttl)
                ),
            ));
        }
        Ok(())
    }

    /// The validated link template, if set; `None` also for an invalid one (start-up and
    /// `check-config` refuse those through [`UiConfig::validate`]).
    pub fn trace_url(&self) -> Option<TraceUrl> {
        self.trace_url
            .as_deref()
            .and_then(|t| TraceUrl::new(t).ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_url_and_session_ttl_are_checked() {
        let config = UiConfig {
            trace_url: Some("https://x/".into()),
            ..UiConfig::default()
        };
        assert_eq!(config.validate().unwrap_err().0, "ui.trace_url");
        assert!(config.trace_url().is_none());
        assert!(UiConfig::default().validate().is_ok());
        for ttl in [
            Duration::ZERO,
            Duration::from_millis(500),
            MAX_SESSION_TTL * 2,
        ] {
            let config = UiConfig {
                session_ttl: ttl,
                ..UiConfig::default()
            };
            let (key, why) = config.validate().unwrap_err();
            assert_eq!(key, "ui.session_ttl");
            assert!(why.contains("between 1s and 30d"), "{why}");
        }
    }
}
