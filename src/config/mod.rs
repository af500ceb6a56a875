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

pub mod engine;
pub use engine::EngineError;
mod errors;
use errors::describe;
pub use errors::ConfigError;
pub mod env_names;
mod profiles;
pub mod ui;
mod validate;
pub mod validate_security;

use crate::conventions::run_key::RunKeyMode;
use crate::detector::ToolRule;
use crate::fingerprint::FingerprintConfig;
use crate::forward::config::ForwarderConfig;
use crate::pipeline::log_sampling::LogSamplingConfig;
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
    /// `[profiles.<name>]`: overrides of the built-in `nudge` / `stop` profiles, or new ones
    /// (keys of [`ProfileSettings`], plus `extends` and `preset`; see [`Config::profiles`]).
    pub profiles: BTreeMap<String, figment::value::Dict>,
    /// `[[tools]]`: per-tool rules, first match wins ([`crate::detector::tools`]).
    pub tools: Vec<ToolRule>,
    /// `[budgets]`: per-run limits ([`crate::detector::budget`]); all off by default.
    pub budgets: crate::detector::budget::Budgets,
    /// `[registry]`: per-run state limits.
    pub registry: RegistryConfig,
    /// `[limits]`: memory limiter, spans per request, decoded bytes in flight.
    pub limits: crate::ingest::limits::LimitsConfig,
    /// `[signals.*]`: kill/warn signal sinks.
    pub signals: SignalsConfig,
    /// `[admin]`: HTTP admin API, metrics and health.
    pub admin: AdminConfig,
    /// `[ui]`: the fleet page (`/ui`): the link to a trace in the user's tracing UI.
    pub ui: ui::UiConfig,
    /// `[log]`
    pub log: LogConfig,
    /// `[shutdown]`
    pub shutdown: ShutdownConfig,
    /// `[server]`: the process itself (tokio worker threads).
    pub server: ServerConfig,
    /// `[telemetry]`: loopwatch's own metrics over OTLP (off by default).
    pub telemetry: crate::telemetry::TelemetryConfig,
    /// `[[conventions.custom]]`: user mappings for conventions loopwatch does not ship.
    pub conventions: crate::conventions::custom::ConventionsConfig,
}

/// `[detection]`
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DetectionConfig {
    /// How spans form runs ([`RunKeyMode`]): `trace` (default), `attribute` (needs
    /// `run_key_attribute`) or `trace_and_agent`. Unset with a non-empty
    /// `run_key_attribute` means `attribute` (configurations from before this key).
    pub run_key: Option<RunKeyMode>,
    /// Attribute whose value keys a run (span attributes, then resource attributes), e.g.
    /// `gen_ai.conversation.id`, with `run_key = "attribute"`; falls back to trace_id.
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
    /// Replace the built-in volatile patterns (shell line counters, timestamps, durations,
    /// PIDs, hex addresses, temporary paths, UUIDs and request ids, ANSI escapes, progress
    /// bars) in plain-text results and error messages before comparing them (default true).
    pub builtin_volatile_patterns: bool,
    /// Mask the words of a call's arguments echoed in its result before comparing
    /// outcomes (default true).
    pub argument_echo: bool,
    /// Letters (outside markup tags) a result needs to count as an outcome for
    /// repeated_outcome (default 10).
    pub min_outcome_letters: usize,
    /// Class tools as state-changing by name and shell tools by command (default true).
    pub mutation_heuristics: bool,
    /// Fingerprint shell tools' commands in normal form (whitespace, quoting, a leading
    /// `cd DIR &&`); changes their call fingerprints (default false).
    pub shell_normalise: bool,
}

impl Default for DetectionConfig {
    fn default() -> Self {
        let f = FingerprintConfig::default();
        let c = crate::compare::CompareConfig::default();
        DetectionConfig {
            run_key: None,
            run_key_attribute: String::new(),
            match_tool_name_without_arguments: false,
            fingerprint_key: None,
            volatile_keys: f.volatile_keys,
            result_volatile_keys: f.result_volatile_keys,
            tool_volatile_keys: f.tool_volatile_keys,
            max_bytes: f.max_bytes,
            max_depth: f.max_depth,
            builtin_volatile_patterns: c.builtin_volatile_patterns,
            argument_echo: c.argument_echo,
            min_outcome_letters: c.min_outcome_letters,
            mutation_heuristics: c.mutation_heuristics,
            shell_normalise: c.shell_normalise,
        }
    }
}

impl DetectionConfig {
    /// The run-key mode in effect: `run_key`, else `attribute` when `run_key_attribute` is
    /// set, else `trace`. Errors (naming `detection.run_key`) when `attribute` has no
    /// `run_key_attribute`, or another mode has one it would ignore.
    pub fn run_key_mode(&self) -> Result<RunKeyMode, ConfigError> {
        let has_attribute = !self.run_key_attribute.is_empty();
        let key_error = |reason: String| ConfigError::Key {
            key: "detection.run_key".into(),
            reason,
        };
        match (self.run_key, has_attribute) {
            (None, true) => Ok(RunKeyMode::Attribute),
            (None, false) => Ok(RunKeyMode::Trace),
            (Some(RunKeyMode::Attribute), false) => Err(key_error(
                "\"attribute\" needs detection.run_key_attribute (the attribute whose value keys a run)"
                    .into(),
            )),
            (Some(mode @ (RunKeyMode::Trace | RunKeyMode::TraceAndAgent)), true) => {
                Err(key_error(format!(
                    "\"{}\" ignores detection.run_key_attribute = {:?}: set run_key = \"attribute\" or remove run_key_attribute",
                    mode.as_str(),
                    self.run_key_attribute
                )))
            }
            (Some(mode), _) => Ok(mode),
        }
    }

    /// The comparison settings of this section ([`crate::compare`]).
    pub fn compare_config(&self) -> crate::compare::CompareConfig {
        crate::compare::CompareConfig {
            builtin_volatile_patterns: self.builtin_volatile_patterns,
            argument_echo: self.argument_echo,
            min_outcome_letters: self.min_outcome_letters,
            mutation_heuristics: self.mutation_heuristics,
            shell_normalise: self.shell_normalise,
        }
    }

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
    pub tls: crate::net::tls::ServerTlsConfig,
    /// `[admin.connections]`: the admin listener's own connection limit and timeouts.
    pub connections: crate::net::listen::ConnectionConfig,
}

impl Default for AdminConfig {
    fn default() -> Self {
        AdminConfig {
            listen: "127.0.0.1:8787".into(),
            auth_token: None,
            auth_token_file: None,
            tls: Default::default(),
            connections: crate::net::listen::ConnectionConfig::admin_default(),
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
    /// `[log.sampling]`: how many `loop detected` lines a loop storm writes.
    pub sampling: LogSamplingConfig,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            format: LogFormat::Text,
            sampling: LogSamplingConfig::default(),
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

/// `[server]`
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerConfig {
    /// Tokio worker threads of `loopwatch serve`; `0` (the default) = tokio's default: one
    /// per CPU the process may use (affinity mask, cgroup CPU quota), or
    /// `TOKIO_WORKER_THREADS` when set. At most [`ServerConfig::MAX_WORKER_THREADS`].
    pub worker_threads: usize,
}

impl ServerConfig {
    /// Upper bound of `server.worker_threads` (a typo like `40000` is an error, not 40000
    /// threads).
    pub const MAX_WORKER_THREADS: usize = 1024;

    /// `Some(n)` when `worker_threads` fixes the count, `None` for tokio's default.
    pub fn worker_threads(&self) -> Option<usize> {
        (self.worker_threads > 0).then_some(self.worker_threads)
    }
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

    /// Loads the configuration and lists every problem [`Config::validate`] would stop at
    /// (for `check-config`, which reports them all at once). A file that does not parse is
    /// still one error: its first.
    pub fn load_with_problems(
        file: Option<&Path>,
        overrides: &[(&str, String)],
    ) -> Result<(Config, Vec<ConfigError>), ConfigError> {
        if let Some(f) = file {
            if !f.exists() {
                return Err(ConfigError::MissingFile(f.display().to_string()));
            }
        }
        let config: Config = Self::figment(file, overrides).extract().map_err(describe)?;
        let problems = config.problems();
        Ok((config, problems))
    }
}

#[cfg(test)]
mod validation_tests;
