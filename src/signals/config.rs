//! Signal sink configuration (`[signals]` section; DESIGN §6).
//!
//! A sink is on when its `url` is set. Durations are humantime strings (`"5s"`, `"1h"`).
//! Every struct rejects unknown keys so a typo cannot silently disable a sink.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// Default capacity of each sink's queue, in signals: 100 000 (the bound that matters is
/// usually [`DEFAULT_QUEUE_MAX_BYTES`]).
pub const DEFAULT_QUEUE_CAPACITY: usize = 100_000;
/// Default bound of each sink's queue in bytes of queued signals: 64 MiB (about 50 000
/// signals of a few span ids each).
pub const DEFAULT_QUEUE_MAX_BYTES: u64 = 64 << 20;
/// Default capacity of the ring of recent signals served by `GET /v1/signals`.
pub const DEFAULT_RECENT_CAPACITY: usize = 1024;

/// Errors of [`SignalsConfig::validate`]; each names the offending key.
#[derive(Debug, thiserror::Error)]
pub enum SignalsConfigError {
    /// A sink URL that its client cannot parse.
    #[error("signals.{field}: invalid URL {url:?}: {reason}")]
    InvalidUrl {
        /// Dotted key, e.g. `redis.url`.
        field: &'static str,
        /// The configured value.
        url: String,
        /// Why the client rejected it.
        reason: String,
    },
    /// A value that must be positive is zero.
    #[error("signals.{field} must be greater than 0")]
    Zero {
        /// Dotted key, e.g. `webhook.queue_capacity`.
        field: &'static str,
    },
    /// A string that must be non-empty (and a valid NATS token or name) is not.
    #[error("signals.{field}: invalid value {value:?}: {reason}")]
    InvalidValue {
        /// Dotted key, e.g. `nats.stream`.
        field: &'static str,
        /// The configured value.
        value: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A key that only acts together with another that is missing (e.g. a webhook
    /// `secret` without a `url`: no webhook sink runs, so nothing would be signed).
    #[error("signals.{field} is set but signals.{needs} is not: {reason}")]
    WithoutRequired {
        /// Dotted key that is set, e.g. `webhook.secret`.
        field: &'static str,
        /// Dotted key it needs, e.g. `webhook.url`.
        needs: &'static str,
        /// What the combination would do.
        reason: &'static str,
    },
    /// A key whose value would be worse than leaving it out (the value is not echoed: it
    /// may be a secret).
    #[error("signals.{field} must not be empty: {reason}")]
    Empty {
        /// Dotted key, e.g. `webhook.secret`.
        field: &'static str,
        /// What to do instead.
        reason: &'static str,
    },
}

/// All signal sinks plus the in-memory ring.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SignalsConfig {
    /// Redis sink (`PUBLISH` + `SET … EX` for kill).
    pub redis: RedisSinkConfig,
    /// NATS sink (core or JetStream).
    pub nats: NatsSinkConfig,
    /// Webhook sink (signed `POST`).
    pub webhook: WebhookSinkConfig,
    /// Number of recent signals kept for `GET /v1/signals` (default 1024).
    pub recent_capacity: usize,
    /// Backoff between delivery attempts of a sink that is down.
    pub retry: RetryConfig,
}

impl Default for SignalsConfig {
    fn default() -> Self {
        Self {
            redis: RedisSinkConfig::default(),
            nats: NatsSinkConfig::default(),
            webhook: WebhookSinkConfig::default(),
            recent_capacity: DEFAULT_RECENT_CAPACITY,
            retry: RetryConfig::default(),
        }
    }
}

/// Exponential backoff between attempts to deliver the same signal: the n-th retry
/// (n from 0) waits a random time in `[d/2, d]` with `d = min(max_backoff, initial_backoff · 2ⁿ)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// First delay (default `100ms`).
    #[serde(with = "humantime_serde")]
    pub initial_backoff: Duration,
    /// Largest delay (default `5s`).
    #[serde(with = "humantime_serde")]
    pub max_backoff: Duration,
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// Redis sink: `PUBLISH <channel> <json>`; for action `kill` also
/// `SET <key_prefix><trace_id> <json> EX <kill_ttl>` (both in one `MULTI`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RedisSinkConfig {
    /// Server URL, e.g. `redis://127.0.0.1:6379`, or `rediss://…` for TLS; the sink is off
    /// when absent.
    pub url: Option<String>,
    /// Pub/sub channel (default `loopwatch:signals`).
    pub channel: String,
    /// Prefix of the kill-flag key, followed by the trace_id hex (default `loopwatch:kill:`).
    pub key_prefix: String,
    /// Expiry of the kill-flag key, whole seconds, at least 1 (default `1h`).
    #[serde(with = "humantime_serde")]
    pub kill_ttl: Duration,
    /// Signals queued for this sink before the oldest warning is dropped (default 100 000).
    pub queue_capacity: usize,
    /// Bytes of signals queued for this sink before the oldest warning is dropped (default
    /// 64 MiB). Kills go only when nothing else is queued, and while the sink is delivering
    /// a kill waits (up to 10 s) for room instead.
    pub queue_max_bytes: u64,
    /// `[signals.redis.tls]`: CA and client certificate for a `rediss://` URL
    /// (`server_name` is not supported: the URL's host is verified).
    pub tls: crate::net::tls::ClientTlsConfig,
}

impl Default for RedisSinkConfig {
    fn default() -> Self {
        Self {
            url: None,
            channel: "loopwatch:signals".to_owned(),
            key_prefix: "loopwatch:kill:".to_owned(),
            kill_ttl: Duration::from_secs(3600),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            queue_max_bytes: DEFAULT_QUEUE_MAX_BYTES,
            tls: crate::net::tls::ClientTlsConfig::default(),
        }
    }
}

/// NATS sink: subject `<subject_prefix>.<action>.<service>`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NatsSinkConfig {
    /// Server URL, e.g. `nats://127.0.0.1:4222`, or `tls://…` to require TLS; the sink is
    /// off when absent.
    pub url: Option<String>,
    /// Subject prefix (default `loopwatch.signals`).
    pub subject_prefix: String,
    /// Publish through JetStream and await the ack (default true); the stream is created
    /// when absent, so a consumer that reconnects still gets the signals it missed.
    pub jetstream: bool,
    /// JetStream stream name (default `LOOPWATCH_SIGNALS`), subjects `<subject_prefix>.>`.
    pub stream: String,
    /// Age past which the stream discards a signal, as a humantime string (default `7d`;
    /// `0s` = kept until a size limit). Applied when loopwatch creates the stream; an
    /// existing stream keeps its own limits.
    #[serde(with = "humantime_serde")]
    pub stream_max_age: Duration,
    /// Bytes the stream keeps before discarding its oldest signals (default 256 MiB;
    /// 0 = no size limit). Applied when loopwatch creates the stream.
    pub stream_max_bytes: u64,
    /// Signals queued for this sink before the oldest warning is dropped (default 100 000).
    pub queue_capacity: usize,
    /// Bytes of signals queued for this sink before the oldest warning is dropped (default
    /// 64 MiB). Kills go only when nothing else is queued, and while the sink is delivering
    /// a kill waits (up to 10 s) for room instead.
    pub queue_max_bytes: u64,
    /// `[signals.nats.tls]`: CA and client certificate; setting any requires TLS
    /// (`server_name` is not supported: the URL's host is verified).
    pub tls: crate::net::tls::ClientTlsConfig,
    /// TLS handshake before the server's INFO (NATS `handshake_first`, e.g. behind a
    /// TLS-terminating proxy); default false.
    pub tls_first: bool,
}

impl Default for NatsSinkConfig {
    fn default() -> Self {
        Self {
            url: None,
            subject_prefix: "loopwatch.signals".to_owned(),
            jetstream: true,
            stream: "LOOPWATCH_SIGNALS".to_owned(),
            stream_max_age: Duration::from_secs(7 * 24 * 3600),
            stream_max_bytes: 256 << 20,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            queue_max_bytes: DEFAULT_QUEUE_MAX_BYTES,
            tls: crate::net::tls::ClientTlsConfig::default(),
            tls_first: false,
        }
    }
}

/// Webhook sink: `POST <url>` with the JSON signal, signed with `secret`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebhookSinkConfig {
    /// Endpoint URL (http or https); the sink is off when absent.
    pub url: Option<String>,
    /// HMAC-SHA256 key of the `X-Loopwatch-Signature` header; no header when absent (serve
    /// warns once at start-up). Set without `url`, or empty, it is a config error: a secret
    /// that signs nothing, or signs with an empty key, is a mistake, not a choice.
    pub secret: Option<String>,
    /// Timeout of each request (default `5s`).
    #[serde(with = "humantime_serde")]
    pub timeout: Duration,
    /// Signals queued for this sink before the oldest warning is dropped (default 100 000).
    pub queue_capacity: usize,
    /// Bytes of signals queued for this sink before the oldest warning is dropped (default
    /// 64 MiB). Kills go only when nothing else is queued, and while the sink is delivering
    /// a kill waits (up to 10 s) for room instead.
    pub queue_max_bytes: u64,
}

impl Default for WebhookSinkConfig {
    fn default() -> Self {
        Self {
            url: None,
            secret: None,
            timeout: Duration::from_secs(5),
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            queue_max_bytes: DEFAULT_QUEUE_MAX_BYTES,
        }
    }
}

impl SignalsConfig {
    /// Checks what can be checked without connecting: URLs parse, capacities and
    /// durations are positive, the NATS prefix and stream name are valid.
    ///
    /// # Errors
    /// The first problem found, naming its key (e.g. `signals.redis.url`).
    pub fn validate(&self) -> Result<(), SignalsConfigError> {
        if self.recent_capacity == 0 {
            return Err(SignalsConfigError::Zero {
                field: "recent_capacity",
            });
        }
        if self.retry.initial_backoff.is_zero() {
            return Err(SignalsConfigError::Zero {
                field: "retry.initial_backoff",
            });
        }
        if let Some(url) = &self.redis.url {
            ::redis::Client::open(url.as_str()).map_err(|e| SignalsConfigError::InvalidUrl {
                field: "redis.url",
                url: url.clone(),
                reason: e.to_string(),
            })?;
        }
        check_positive(self.redis.queue_capacity, "redis.queue_capacity")?;
        check_positive(self.redis.queue_max_bytes as usize, "redis.queue_max_bytes")?;
        check_positive(self.nats.queue_max_bytes as usize, "nats.queue_max_bytes")?;
        check_positive(
            self.webhook.queue_max_bytes as usize,
            "webhook.queue_max_bytes",
        )?;
        if self.redis.kill_ttl.as_secs() == 0 {
            return Err(SignalsConfigError::Zero {
                field: "redis.kill_ttl",
            });
        }
        if let Some(url) = &self.nats.url {
            url.parse::<async_nats::ServerAddr>()
                .map_err(|e| SignalsConfigError::InvalidUrl {
                    field: "nats.url",
                    url: url.clone(),
                    reason: e.to_string(),
                })?;
        }
        check_positive(self.nats.queue_capacity, "nats.queue_capacity")?;
        let prefix = &self.nats.subject_prefix;
        if prefix.is_empty()
            || prefix
                .split('.')
                .any(|token| token.is_empty() || !is_valid_token(token))
        {
            return Err(SignalsConfigError::InvalidValue {
                field: "nats.subject_prefix",
                value: prefix.clone(),
                reason: "must be dot-separated non-empty tokens without `*`, `>` or whitespace",
            });
        }
        let stream = &self.nats.stream;
        if stream.is_empty() || !is_valid_token(stream) {
            return Err(SignalsConfigError::InvalidValue {
                field: "nats.stream",
                value: stream.clone(),
                reason: "must be non-empty without `.`, `*`, `>` or whitespace",
            });
        }
        if let Some(url) = &self.webhook.url {
            let parsed = reqwest::Url::parse(url).map_err(|e| SignalsConfigError::InvalidUrl {
                field: "webhook.url",
                url: url.clone(),
                reason: e.to_string(),
            })?;
            if !matches!(parsed.scheme(), "http" | "https") {
                return Err(SignalsConfigError::InvalidUrl {
                    field: "webhook.url",
                    url: url.clone(),
                    reason: "scheme must be http or https".to_owned(),
                });
            }
        }
        match (&self.webhook.secret, &self.webhook.url) {
            (Some(_), None) => {
                return Err(SignalsConfigError::WithoutRequired {
                    field: "webhook.secret",
                    needs: "webhook.url",
                    reason: "the webhook sink is off without a url, so nothing would be signed",
                })
            }
            (Some(secret), Some(_)) if secret.is_empty() => {
                return Err(SignalsConfigError::Empty {
                    field: "webhook.secret",
                    reason: "an empty HMAC key proves nothing; set a random secret, or remove the key to send unsigned posts",
                })
            }
            _ => {}
        }
        if self.webhook.timeout.is_zero() {
            return Err(SignalsConfigError::Zero {
                field: "webhook.timeout",
            });
        }
        check_positive(self.webhook.queue_capacity, "webhook.queue_capacity")
    }
}

fn check_positive(value: usize, field: &'static str) -> Result<(), SignalsConfigError> {
    if value == 0 {
        Err(SignalsConfigError::Zero { field })
    } else {
        Ok(())
    }
}

/// True when `token` is one valid NATS subject token: non-empty, no `.`, `*`, `>` or
/// whitespace.
pub fn is_valid_token(token: &str) -> bool {
    !token.is_empty()
        && !token
            .chars()
            .any(|c| c == '.' || c == '*' || c == '>' || c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_match_design() {
        let config: SignalsConfig = toml::from_str("").expect("empty config parses");
        assert_eq!(config.redis.channel, "loopwatch:signals");
        assert_eq!(config.redis.key_prefix, "loopwatch:kill:");
        assert_eq!(config.redis.kill_ttl, Duration::from_secs(3600));
        assert_eq!(config.nats.subject_prefix, "loopwatch.signals");
        assert!(config.nats.jetstream);
        assert_eq!(config.nats.stream, "LOOPWATCH_SIGNALS");
        assert_eq!(config.webhook.timeout, Duration::from_secs(5));
        assert_eq!(config.webhook.queue_capacity, 100_000);
        assert_eq!(config.webhook.queue_max_bytes, 64 << 20);
        assert_eq!(config.recent_capacity, 1024);
        assert_eq!(config.redis.url, None);
        config.validate().expect("defaults are valid");
    }

    #[test]
    fn parses_humantime_and_rejects_unknown_keys() {
        let config: SignalsConfig = toml::from_str(
            "recent_capacity = 10\n[redis]\nurl = \"redis://127.0.0.1:6379\"\nkill_ttl = \"10m\"\n\
             [webhook]\nurl = \"http://127.0.0.1:9/hook\"\ntimeout = \"250ms\"\n",
        )
        .expect("valid config parses");
        assert_eq!(config.redis.kill_ttl, Duration::from_secs(600));
        assert_eq!(config.webhook.timeout, Duration::from_millis(250));
        assert_eq!(config.recent_capacity, 10);
        config.validate().expect("valid config validates");

        let typo = toml::from_str::<SignalsConfig>("[redis]\nchanel = \"x\"\n");
        assert!(typo.is_err(), "unknown key must be rejected");
    }

    #[test]
    fn a_webhook_secret_needs_a_url_and_a_value() {
        // A secret alone used to be ignored: no sink, nothing signed, no word said.
        let config: SignalsConfig =
            toml::from_str("[webhook]\nsecret = \"s3cr3t-value\"\n").expect("parses");
        let err = config
            .validate()
            .expect_err("secret without url is an error");
        let text = err.to_string();
        assert_eq!(
            text,
            "signals.webhook.secret is set but signals.webhook.url is not: the webhook sink is off without a url, so nothing would be signed"
        );
        assert!(
            !text.contains("s3cr3t-value"),
            "the secret is echoed: {text}"
        );

        let mut config = SignalsConfig::default();
        config.webhook.url = Some("https://hooks.example.com/loopwatch".to_owned());
        config.webhook.secret = Some(String::new());
        let err = config.validate().expect_err("empty secret is an error");
        assert!(
            err.to_string()
                .starts_with("signals.webhook.secret must not be empty"),
            "{err}"
        );

        // A url with a secret, and a url alone (unsigned, warned at start-up), are valid.
        config.webhook.secret = Some("s3cr3t-value".to_owned());
        config.validate().expect("url + secret is valid");
        config.webhook.secret = None;
        config.validate().expect("url alone is valid");
    }

    #[test]
    fn validate_names_the_bad_key() {
        let mut config = SignalsConfig::default();
        config.webhook.url = Some("ftp://example.com".to_owned());
        let err = config.validate().expect_err("ftp webhook is invalid");
        assert!(err.to_string().contains("signals.webhook.url"), "{err}");

        let mut config = SignalsConfig::default();
        config.nats.subject_prefix = "loop.*".to_owned();
        let err = config.validate().expect_err("wildcard prefix is invalid");
        assert!(
            err.to_string().contains("signals.nats.subject_prefix"),
            "{err}"
        );

        let mut config = SignalsConfig::default();
        config.redis.queue_capacity = 0;
        let err = config.validate().expect_err("zero capacity is invalid");
        assert!(
            err.to_string().contains("signals.redis.queue_capacity"),
            "{err}"
        );
    }

    #[test]
    fn tokens_are_validated() {
        assert!(is_valid_token("LOOPWATCH_SIGNALS"));
        assert!(!is_valid_token("a.b"));
        assert!(!is_valid_token("a b"));
        assert!(!is_valid_token(">"));
        assert!(!is_valid_token(""));
    }
}
