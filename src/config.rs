//! Configuration: embedded defaults ← TOML file ← `LOOPWATCH_<SECTION>__<KEY>` env vars
//! ← CLI flags (each layer overrides the one before). Every struct rejects unknown keys,
//! so a typo is a start-up error rather than a silently disabled guard.
//! `config.example.toml` documents every key with its default.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

pub mod exporter;
pub mod security;
pub mod telemetry;

use self::exporter::ForwarderConfig;
use crate::detector::{Action, ProfileSettings};
use crate::fingerprint::FingerprintConfig;
use crate::receiver::ReceiverConfig;
use crate::registry::RegistryConfig;
use crate::signals::SignalsConfig;

/// Everything `loopwatch serve` reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `[receiver]`: OTLP listeners and the receive limit.
    pub receiver: ReceiverConfig,
    /// `[exporter]`: the downstream OTLP/gRPC endpoint (unset = detect-only).
    pub exporter: ForwarderConfig,
    /// `[detection]`: run key and fingerprinting.
    pub detection: DetectionConfig,
    /// `[profiles.<name>]`: overrides of the built-in `nudge` / `stop` profiles, or new ones.
    pub profiles: BTreeMap<String, ProfileConfig>,
    /// `[registry]`: per-run state limits.
    pub registry: RegistryConfig,
    /// `[signals.*]`: kill/warn signal sinks.
    pub signals: SignalsConfig,
    /// `[admin]`: HTTP admin API, metrics and health.
    pub admin: AdminConfig,
    /// `[log]`
    pub log: LogConfig,
    /// `[shutdown]`
    pub shutdown: ShutdownConfig,
    /// `[telemetry]`: loopwatch's own metrics over OTLP (off by default).
    pub telemetry: telemetry::TelemetryConfig,
}

/// `[detection]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DetectionConfig {
    /// Attribute whose value keys a run (span attributes, then resource attributes), e.g.
    /// `gen_ai.conversation.id`; empty = trace_id.
    pub run_key_attribute: String,
    /// Match calls whose arguments were not captured by tool name alone.
    pub match_tool_name_without_arguments: bool,
    /// Key of the HMAC-SHA256 that fingerprints leave the process under (attributes,
    /// signals, API). Unset = a random key per process (a warning says so once).
    pub fingerprint_key: Option<String>,
    /// Argument keys removed at any depth before fingerprinting (exact names).
    pub volatile_keys: Vec<String>,
    /// Result keys removed at any depth (default `tool_call_id`).
    pub result_volatile_keys: Vec<String>,
    /// Extra argument keys removed per tool name.
    pub tool_volatile_keys: BTreeMap<String, Vec<String>>,
    /// Arguments/results larger than this many bytes are hashed raw (default 1 MiB).
    pub max_bytes: usize,
    /// Structured values nested deeper than this are hashed raw (default 64).
    pub max_depth: usize,
}

impl Default for DetectionConfig {
    fn default() -> Self {
        let f = FingerprintConfig::default();
        DetectionConfig {
            run_key_attribute: String::new(),
            match_tool_name_without_arguments: false,
            fingerprint_key: None,
            volatile_keys: f.volatile_keys,
            result_volatile_keys: f.result_volatile_keys,
            tool_volatile_keys: f.tool_volatile_keys,
            max_bytes: f.max_bytes,
            max_depth: f.max_depth,
        }
    }
}

impl DetectionConfig {
    /// The fingerprinting settings of this section.
    pub fn fingerprint_config(&self) -> FingerprintConfig {
        FingerprintConfig {
            volatile_keys: self.volatile_keys.clone(),
            result_volatile_keys: self.result_volatile_keys.clone(),
            tool_volatile_keys: self.tool_volatile_keys.clone(),
            max_bytes: self.max_bytes,
            max_depth: self.max_depth,
        }
    }
}

/// `[profiles.<name>]`: every key optional; unset keys come from the built-in profile of
/// the same name, else from the profile named by `extends` (default `nudge`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProfileConfig {
    pub extends: Option<String>,
    pub action: Option<Action>,
    pub window: Option<usize>,
    pub repeated_call: Option<usize>,
    pub repeated_result: Option<usize>,
    pub alternating_calls: Option<usize>,
    pub cycle: Option<usize>,
    pub max_cycle_period: Option<usize>,
    pub repeated_text: Option<usize>,
    /// Publish signals for this profile's warn/kill detections (default true).
    pub signals: Option<bool>,
    /// Set to false to switch a built-in profile off.
    pub enabled: Option<bool>,
}

/// `[admin]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct AdminConfig {
    /// HTTP admin listen address (`/v1/…`, `/metrics`, `/healthz`, `/readyz`); empty = off.
    /// Default `127.0.0.1:8787`: loopback only unless configured.
    pub listen: String,
    /// Bearer token for the admin API (all but `/healthz`, `/readyz`) and gRPC
    /// `Signals/Watch`; unset = open.
    pub auth_token: Option<String>,
    /// File holding the admin token (trailing newline ignored); instead of `auth_token`.
    pub auth_token_file: Option<std::path::PathBuf>,
    /// `[admin.tls]`: TLS (and mTLS) on the admin listener.
    pub tls: crate::tls::ServerTlsConfig,
    /// `[admin.connections]`: the admin listener's own connection limit and timeouts.
    pub connections: crate::listen::ConnectionConfig,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: "127.0.0.1:8787".into(),
            auth_token: None,
            auth_token_file: None,
            tls: Default::default(),
            connections: crate::listen::ConnectionConfig::admin_default(),
        }
    }
}

/// `[log]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// `tracing` filter, e.g. `info` or `loopwatch=debug,info`. `RUST_LOG` wins when set.
    pub level: String,
    /// `text` (one readable line per event) or `json`.
    pub format: LogFormat,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            format: LogFormat::Text,
        }
    }
}

/// Log line format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// `[shutdown]`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ShutdownConfig {
    /// After SIGTERM/SIGINT, how long to keep delivering queued requests (default `10s`).
    #[serde(with = "humantime_serde")]
    pub drain_timeout: Duration,
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        ShutdownConfig {
            drain_timeout: Duration::from_secs(10),
        }
    }
}

/// Configuration errors, each naming the key or file at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("config file {0} does not exist")]
    MissingFile(String),
    /// Parse errors, one per bad key: `key: what is wrong (where it came from)`.
    #[error("invalid configuration: {0}")]
    Invalid(String),
    #[error("invalid configuration: {key}: {reason}")]
    Key { key: String, reason: String },
    #[error("invalid configuration: {0}")]
    Other(String),
}

/// One line per figment error: the dotted key (without figment's profile prefix), what is
/// wrong, and the source (file or `LOOPWATCH_` environment variable).
fn describe(error: figment::Error) -> ConfigError {
    let lines: Vec<String> = error
        .into_iter()
        .map(|e| {
            let key = e.path.join(".");
            let origin = e
                .metadata
                .as_ref()
                .map(|m| match &m.source {
                    Some(source) => format!(" (in {source})"),
                    None => format!(" (in {})", m.name),
                })
                .unwrap_or_default();
            // figment quotes the whole list: expected `one of `a`, `b``
            let mut what = e.kind.to_string().replace("`one of ", "one of ");
            if what.ends_with("``") {
                what.pop();
            }
            if key.is_empty() {
                format!("{what}{origin}")
            } else {
                format!("{key}: {what}{origin}")
            }
        })
        .collect();
    ConfigError::Invalid(lines.join("; "))
}

/// A profile ready to run, with its signal switch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvedProfile {
    pub settings: ProfileSettings,
    pub signals: bool,
}

impl Config {
    /// Builds the layered figment: defaults, then `file` (if any), then env, then `overrides`
    /// (dotted keys, e.g. `("receiver.grpc_listen", "127.0.0.1:0")`).
    pub fn figment(file: Option<&Path>, overrides: &[(&str, String)]) -> Figment {
        let mut figment = Figment::from(Serialized::defaults(Config::default()));
        if let Some(file) = file {
            figment = figment.merge(Toml::file_exact(file));
        }
        // Only `LOOPWATCH_<SECTION>__<KEY>` names are config keys; others (e.g.
        // LOOPWATCH_CONFIG, the file path) are left to the CLI.
        figment = figment.merge(
            Env::prefixed("LOOPWATCH_")
                .filter(|key| key.as_str().contains("__"))
                .split("__"),
        );
        for (key, value) in overrides {
            figment = figment.merge(Serialized::default(key, value));
        }
        figment
    }

    /// Loads and validates the configuration.
    pub fn load(file: Option<&Path>, overrides: &[(&str, String)]) -> Result<Config, ConfigError> {
        if let Some(f) = file {
            if !f.exists() {
                return Err(ConfigError::MissingFile(f.display().to_string()));
            }
        }
        let config: Config = Self::figment(file, overrides).extract().map_err(describe)?;
        config.validate()?;
        Ok(config)
    }

    /// Parses a TOML string on top of the defaults (no env): for tests and `check-config`.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let config: Config = Figment::from(Serialized::defaults(Config::default()))
            .merge(Toml::string(text))
            .extract()
            .map_err(describe)?;
        config.validate()?;
        Ok(config)
    }

    /// Checks everything a running server would trip over: profiles and signal sinks.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.profiles()?;
        self.signals
            .validate()
            .map_err(|e| ConfigError::Other(e.to_string()))?;
        self.exporter
            .validate()
            .map_err(|e| ConfigError::Other(format!("exporter: {e}")))?;
        self.telemetry
            .validate(&[self.receiver.grpc_listen, self.receiver.http_listen])
            .map_err(|e| ConfigError::Other(e.to_string()))?;
        if let Some(endpoint) = self.exporter.endpoint.as_deref().filter(|e| !e.is_empty()) {
            let valid = endpoint.parse::<http::Uri>().ok().filter(|u| {
                matches!(u.scheme_str(), Some("http") | Some("https")) && u.host().is_some()
            });
            if valid.is_none() {
                return Err(ConfigError::Key {
                    key: "exporter.endpoint".into(),
                    reason: format!("{endpoint:?} is not an http:// or https:// URL with a host"),
                });
            }
        }
        security::validate(self).map_err(ConfigError::Other)?;
        Ok(())
    }

    /// The profiles to run: the built-ins `nudge` and `stop` (unless disabled) with their
    /// overrides, plus user profiles, in name order after the built-ins. Errors name the key.
    pub fn profiles(&self) -> Result<Vec<ResolvedProfile>, ConfigError> {
        let mut names: Vec<String> = vec!["nudge".into(), "stop".into()];
        names.extend(
            self.profiles
                .keys()
                .filter(|n| n.as_str() != "nudge" && n.as_str() != "stop")
                .cloned(),
        );
        let mut out = Vec::new();
        for name in names {
            let overrides = self.profiles.get(&name).cloned().unwrap_or_default();
            if overrides.enabled == Some(false) {
                continue;
            }
            let base_name = match name.as_str() {
                "nudge" | "stop" => name.clone(),
                _ => overrides.extends.clone().unwrap_or_else(|| "nudge".into()),
            };
            let mut s = match base_name.as_str() {
                "nudge" => ProfileSettings::nudge(),
                "stop" => ProfileSettings::stop(),
                other => {
                    return Err(ConfigError::Key {
                        key: format!("profiles.{name}.extends"),
                        reason: format!(
                            "unknown built-in profile {other:?} (expected nudge or stop)"
                        ),
                    })
                }
            };
            s.name = name.clone();
            let o = &overrides;
            s.action = o.action.unwrap_or(s.action);
            s.window = o.window.unwrap_or(s.window);
            s.repeated_call = o.repeated_call.unwrap_or(s.repeated_call);
            s.repeated_result = o.repeated_result.unwrap_or(s.repeated_result);
            s.alternating_calls = o.alternating_calls.unwrap_or(s.alternating_calls);
            s.cycle = o.cycle.unwrap_or(s.cycle);
            s.max_cycle_period = o.max_cycle_period.unwrap_or(s.max_cycle_period);
            s.repeated_text = o.repeated_text.unwrap_or(s.repeated_text);
            s.validate().map_err(|e| ConfigError::Key {
                key: e.key.clone(),
                reason: e.reason.clone(),
            })?;
            out.push(ResolvedProfile {
                settings: s,
                signals: o.signals.unwrap_or(true),
            });
        }
        Ok(out)
    }
}
