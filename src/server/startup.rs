//! The one start-up line an operator reads first: listeners, downstream, signal sinks and
//! profiles, from the loaded config (logged by [`crate::server::run`]).

use crate::config::Config;

/// What `loopwatch serve` runs with, as log fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartupSummary {
    /// The downstream OTLP endpoint, or `none (detect-only)`.
    pub downstream: String,
    /// Signal sinks that are on (`redis`, `nats`, `webhook`), comma-separated, or `none`;
    /// the gRPC Watch stream and `GET /v1/signals` are always on.
    pub sinks: String,
    /// Enabled profiles as `name(action)`, comma-separated, e.g. `nudge(warn),stop(kill)`.
    pub profiles: String,
}

impl StartupSummary {
    /// Reads the summary from a validated config. Errors: an invalid profile section (as
    /// `Config::profiles`).
    pub fn of(config: &Config) -> Result<Self, crate::config::ConfigError> {
        let on = |url: &Option<String>| url.as_deref().is_some_and(|u| !u.is_empty());
        let signals = &config.signals;
        let sinks: Vec<&str> = [
            ("redis", on(&signals.redis.url)),
            ("nats", on(&signals.nats.url)),
            ("webhook", on(&signals.webhook.url)),
        ]
        .into_iter()
        .filter_map(|(name, on)| on.then_some(name))
        .collect();
        let profiles: Vec<String> = config
            .profiles()?
            .iter()
            .map(|p| format!("{}({})", p.name, p.action.as_str()))
            .collect();
        Ok(StartupSummary {
            downstream: config
                .exporter
                .endpoint
                .clone()
                .filter(|e| !e.is_empty())
                .unwrap_or_else(|| "none (detect-only)".into()),
            sinks: if sinks.is_empty() {
                "none".into()
            } else {
                sinks.join(",")
            },
            profiles: profiles.join(","),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_detect_only_without_sinks() {
        let s = StartupSummary::of(&Config::default()).unwrap();
        assert_eq!(s.downstream, "none (detect-only)");
        assert_eq!(s.sinks, "none");
        assert_eq!(s.profiles, "nudge(warn),stop(kill)");
    }

    #[test]
    fn names_the_downstream_sinks_and_profiles_that_are_on() {
        let mut config = Config::default();
        config.exporter.endpoint = Some("http://collector:4317".into());
        config.signals.redis.url = Some("redis://127.0.0.1:6379".into());
        config.signals.webhook.url = Some("https://example.com/hook".into());
        config.signals.nats.url = Some(String::new());
        let s = StartupSummary::of(&config).unwrap();
        assert_eq!(s.downstream, "http://collector:4317");
        assert_eq!(s.sinks, "redis,webhook");
    }
}
