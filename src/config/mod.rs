//! Configuration: embedded defaults ← TOML file ← `LOOPWATCH_<SECTION>__<KEY>` env vars
//! ← CLI flags (each layer overrides the one before). Every struct rejects unknown keys,
//! so a typo is a start-up error rather than a silently disabled guard.
//! `config.example.toml` documents every key with its default.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::{Deserialize, Serialize};

pub mod engine;
pub use engine::EngineError;
pub mod env_names;
pub mod ui;
pub mod validate_security;

use crate::conventions::run_key::RunKeyMode;
use crate::detector::{FingerprintRules, ProfileSettings, ToolRule, ToolRules};
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

/// Checks a `log.level` filter: comma-separated directives, each a level (`trace`,
/// `debug`, `info`, `warn`, `error`, `off`) or `target=level` (`tracing_subscriber`'s
/// `EnvFilter` syntax). A bare word that is no level is refused: `EnvFilter` would read it
/// as a target name and turn every other log line off, the detection lines included.
fn validate_log_level(level: &str) -> Result<(), String> {
    use tracing_subscriber::filter::LevelFilter;
    for directive in level.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level_part = match directive.rsplit_once('=') {
            Some((_, level)) => level,
            None if directive.contains('[') => continue,
            None => directive,
        };
        if level_part.parse::<LevelFilter>().is_err() {
            return Err(format!(
                "{directive:?} is not a level (trace, debug, info, warn, error, off) \
                 or a `target=level` directive"
            ));
        }
    }
    tracing_subscriber::EnvFilter::try_new(level)
        .map(drop)
        .map_err(|e| format!("{level:?}: {e}"))
}

/// One line per figment error: the dotted key (without figment's profile prefix), what is
/// wrong, and the source (file or `LOOPWATCH_` environment variable).
fn describe(error: figment::Error) -> ConfigError {
    describe_with_fields(error, &[])
}

/// A figment path as the rest of loopwatch's errors name keys: sections joined with `.`,
/// list indices in brackets (`["tools", "0", "tool"]` → `tools[0].tool`). A number under a
/// table keyed by names the user chose (`profiles`, `tool_volatile_keys`) is a name.
fn dotted_key(path: &[String]) -> String {
    let mut key = String::new();
    let mut parent = "";
    for segment in path {
        let named = matches!(parent, "profiles" | "tool_volatile_keys");
        parent = segment;
        if !key.is_empty() && !named && segment.parse::<usize>().is_ok() {
            key.push_str(&format!("[{segment}]"));
        } else {
            if !key.is_empty() {
                key.push('.');
            }
            key.push_str(segment);
        }
    }
    key
}

/// [`describe`], where an unknown field's list of expected fields also names
/// `extra_fields` (keys read before the rest is extracted, e.g. a profile's `extends`).
fn describe_with_fields(error: figment::Error, extra_fields: &[&str]) -> ConfigError {
    let lines: Vec<String> = error
        .into_iter()
        .map(|e| {
            let key = dotted_key(&e.path);
            let origin = e
                .metadata
                .as_ref()
                .and_then(|m| match &m.source {
                    // A value merged in code (profiles are re-read after presets and
                    // `extends` are applied) has no user-facing origin.
                    Some(figment::Source::Code(_)) => None,
                    Some(source) => Some(format!(" (in {source})")),
                    None => Some(format!(" (in {})", m.name)),
                })
                .unwrap_or_default();
            let what = match &e.kind {
                figment::error::Kind::UnknownField(field, expected) => {
                    let mut expected: Vec<&str> = expected.to_vec();
                    expected.extend(extra_fields);
                    let list: Vec<String> = expected.iter().map(|f| format!("`{f}`")).collect();
                    format!(
                        "unknown field `{field}`, expected one of {}",
                        list.join(", ")
                    )
                }
                kind => {
                    // figment quotes the whole list: expected `one of `a`, `b``
                    let mut what = kind.to_string().replace("`one of ", "one of ");
                    if what.ends_with("``") {
                        what.pop();
                    }
                    what
                }
            };
            if key.is_empty() {
                format!("{what}{origin}")
            } else {
                format!("{key}: {what}{origin}")
            }
        })
        .collect();
    ConfigError::Invalid(lines.join("; "))
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

    /// Checks everything a running server would trip over: profiles, tool rules and
    /// signal sinks. The first of [`Config::problems`].
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.problems().into_iter().next() {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }

    /// Every problem of the configuration, each check on its own, in the order
    /// [`Config::validate`] reports them; empty when the configuration is valid.
    pub fn problems(&self) -> Vec<ConfigError> {
        let key = |(key, reason)| ConfigError::Key { key, reason };
        let checks: [&dyn Fn() -> Result<(), ConfigError>; 18] = [
            &|| self.detection.run_key_mode().map(drop),
            &|| {
                validate_log_level(&self.log.level).map_err(|reason| ConfigError::Key {
                    key: "log.level".into(),
                    reason,
                })
            },
            &|| {
                if !self.admin.listen.is_empty() && self.admin.listen.parse::<SocketAddr>().is_err()
                {
                    return Err(ConfigError::Key {
                        key: "admin.listen".into(),
                        reason: format!(
                            "{:?} is not a socket address (e.g. 127.0.0.1:8787; empty = off)",
                            self.admin.listen
                        ),
                    });
                }
                Ok(())
            },
            &|| {
                if self.log.sampling.enabled && self.log.sampling.tick.is_zero() {
                    return Err(ConfigError::Key {
                        key: "log.sampling.tick".into(),
                        reason: "must be more than 0 when log.sampling.enabled".into(),
                    });
                }
                Ok(())
            },
            &|| self.profiles().map(drop),
            &|| self.check_tool_profiles(),
            &|| self.fingerprint_rules().map(drop),
            &|| self.conventions.validate().map_err(key),
            &|| {
                self.signals
                    .validate()
                    .map_err(|e| ConfigError::Other(e.to_string()))
            },
            &|| {
                self.exporter
                    .validate()
                    .map_err(|e| ConfigError::Other(format!("exporter: {e}")))
            },
            &|| {
                self.telemetry
                    .validate(&[self.receiver.grpc_listen, self.receiver.http_listen])
                    .map_err(|e| ConfigError::Other(e.to_string()))
            },
            &|| self.check_exporter_endpoint(),
            &|| {
                self.limits
                    .validate(self.receiver.options().max_recv_msg_size)
                    .map_err(key)
            },
            &|| self.registry.validate().map_err(key),
            &|| self.ui.validate().map_err(key),
            &|| self.budgets.validate().map_err(key),
            &|| self.receiver.validate().map_err(key),
            &|| {
                if self.server.worker_threads > ServerConfig::MAX_WORKER_THREADS {
                    return Err(ConfigError::Key {
                        key: "server.worker_threads".into(),
                        reason: format!(
                            "{} is more than {}; 0 means one per CPU",
                            self.server.worker_threads,
                            ServerConfig::MAX_WORKER_THREADS
                        ),
                    });
                }
                validate_security::validate(self).map_err(ConfigError::Other)
            },
        ];
        checks.iter().filter_map(|check| check().err()).collect()
    }

    /// `exporter.endpoint`, when set, is an http:// or https:// URL with a host.
    fn check_exporter_endpoint(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// Every `tools[i].profiles` entry names a profile (built in or `[profiles.*]`, enabled
    /// or not): a misspelt name would leave the rule acting nowhere.
    fn check_tool_profiles(&self) -> Result<(), ConfigError> {
        let known = |name: &str| {
            ProfileSettings::BUILT_IN.contains(&name) || self.profiles.contains_key(name)
        };
        for (i, tool) in self.tools.iter().enumerate() {
            if let Some(unknown) = tool.profiles.iter().find(|p| !known(p)) {
                let mut names: Vec<&str> = ProfileSettings::BUILT_IN.to_vec();
                names.extend(
                    self.profiles
                        .keys()
                        .map(String::as_str)
                        .filter(|n| !ProfileSettings::BUILT_IN.contains(n)),
                );
                return Err(ConfigError::Key {
                    key: format!("tools[{i}].profiles"),
                    reason: format!(
                        "no profile named {unknown:?} (profiles: {})",
                        names.join(", ")
                    ),
                });
            }
        }
        Ok(())
    }

    /// The `[[tools]]` fingerprint keys (volatile keys, transient errors), compiled.
    /// Errors name the key (`tools[i].match`, `tools[i].transient_errors`, …).
    pub fn fingerprint_rules(&self) -> Result<FingerprintRules, ConfigError> {
        FingerprintRules::compile(
            &self.tools,
            &self.detection.volatile_keys,
            &self.detection.result_volatile_keys,
        )
        .map_err(key_error)
    }

    /// The profiles to run: the built-ins `nudge` and `stop` (unless `enabled = false`),
    /// then user profiles in name order. Each starts from a base, then takes its keys:
    /// the base is the preset named by `preset`, else the built-in of the same name, else
    /// the built-in named by `extends` (default `nudge`). Each gets the `[[tools]]` entries
    /// that apply to it, then its preset's own entries. Errors name the key.
    pub fn profiles(&self) -> Result<Vec<ProfileSettings>, ConfigError> {
        let mut names: Vec<String> = ProfileSettings::BUILT_IN.map(String::from).to_vec();
        names.extend(
            self.profiles
                .keys()
                .filter(|n| !ProfileSettings::BUILT_IN.contains(&n.as_str()))
                .cloned(),
        );
        let mut out = Vec::new();
        for name in names {
            if let Some(settings) = self.profile(&name)? {
                out.push(settings);
            }
        }
        Ok(out)
    }

    /// One profile, resolved and validated; `None` when it is switched off.
    fn profile(&self, name: &str) -> Result<Option<ProfileSettings>, ConfigError> {
        let key = |field: &str| format!("profiles.{name}.{field}");
        let mut own = self.profiles.get(name).cloned().unwrap_or_default();
        let text = |field: &str, own: &mut figment::value::Dict| match own.remove(field) {
            None => Ok(None),
            Some(v) => v.into_string().map(Some).ok_or_else(|| ConfigError::Key {
                key: key(field),
                reason: "must be a string".into(),
            }),
        };
        let extends = text("extends", &mut own)?;
        let preset = text("preset", &mut own)?;
        let built_in = ProfileSettings::BUILT_IN.contains(&name);
        let mut base = match (&preset, &extends) {
            (Some(_), Some(_)) => {
                return Err(ConfigError::Key {
                    key: key("extends"),
                    reason: "set either preset or extends, not both".into(),
                })
            }
            (Some(preset), None) => {
                ProfileSettings::preset_table(preset).ok_or_else(|| ConfigError::Key {
                    key: key("preset"),
                    reason: format!(
                        "unknown preset {preset:?} (expected one of {})",
                        ProfileSettings::preset_names().join(", ")
                    ),
                })?
            }
            (None, Some(_)) if built_in => {
                return Err(ConfigError::Key {
                    key: key("extends"),
                    reason: "a built-in profile cannot extend another".into(),
                })
            }
            (None, extends) => {
                let base = extends.as_deref().unwrap_or("nudge");
                let base = if built_in { name } else { base };
                ProfileSettings::built_in_table(base).ok_or_else(|| ConfigError::Key {
                    key: key("extends"),
                    reason: format!(
                        "unknown built-in profile {base:?} (expected {})",
                        ProfileSettings::BUILT_IN.join(" or ")
                    ),
                })?
            }
        };
        let preset_tools: Vec<ToolRule> = match base.remove("tools") {
            Some(tools) => tools
                .try_into()
                .map_err(|e| ConfigError::Other(format!("preset tools: {e}")))?,
            None => Vec::new(),
        };
        let mut settings: ProfileSettings = Figment::from(Serialized::defaults(base))
            .merge(Serialized::defaults(own))
            .extract()
            .map_err(|e| match describe_with_fields(e, &["extends", "preset"]) {
                ConfigError::Invalid(text) => {
                    ConfigError::Invalid(format!("profiles.{name}.{text}"))
                }
                other => other,
            })?;
        settings.name = name.to_string();
        if !settings.enabled {
            return Ok(None);
        }
        settings.validate().map_err(key_error)?;
        let mut entries: Vec<(String, ToolRule)> = self
            .tools
            .iter()
            .enumerate()
            .map(|(i, t)| (format!("tools[{i}]"), t.clone()))
            .collect();
        entries.extend(
            preset_tools
                .into_iter()
                .enumerate()
                .map(|(i, t)| (format!("{}.tools[{i}]", key("preset")), t)),
        );
        settings.tools = std::sync::Arc::new(
            ToolRules::compile(&settings.limits_base(), &entries).map_err(key_error)?,
        );
        Ok(Some(settings))
    }
}

fn key_error(e: crate::detector::ProfileError) -> ConfigError {
    ConfigError::Key {
        key: e.key,
        reason: e.reason,
    }
}

#[cfg(test)]
mod validation_tests {
    use super::*;

    fn error_of(toml: &str) -> Option<String> {
        Config::from_toml(toml).err().map(|e| e.to_string())
    }

    #[test]
    fn a_key_inside_a_list_is_named_with_its_index_in_brackets() {
        let err = error_of("[[tools]]\nmatch = \"x\"\nwindw = 5\n").unwrap();
        assert!(
            err.starts_with("invalid configuration: tools[0].windw: unknown field `windw`"),
            "{err}"
        );
    }

    #[test]
    fn an_unknown_profile_key_lists_extends_and_preset_among_the_keys() {
        let err = error_of("[profiles.nudge]\nwindw = 5\n").unwrap();
        assert!(
            err.contains("profiles.nudge.windw: unknown field `windw`"),
            "{err}"
        );
        assert!(err.contains("`window`"), "{err}");
        assert!(err.ends_with("`extends`, `preset`"), "{err}");
        let err = error_of("[receiver]\ngrpc_lisen = 1\n").unwrap();
        assert!(err.contains("unknown field `grpc_lisen`"), "{err}");
        assert!(!err.contains("`preset`"), "{err}");
    }

    #[test]
    fn a_log_level_that_is_no_level_or_directive_is_refused() {
        for ok in [
            "info",
            "WARN",
            "off",
            "info,loopwatch=debug",
            "loopwatch::server=trace",
            "",
        ] {
            assert_eq!(error_of(&format!("[log]\nlevel = {ok:?}")), None, "{ok}");
        }
        // `EnvFilter` reads a bare word as a target: every other line would be off.
        let err = error_of("[log]\nlevel = \"chatty\"").unwrap_or_default();
        assert!(
            err.contains("log.level") && err.contains("\"chatty\""),
            "{err}"
        );
        let err = error_of("[log]\nlevel = \"loopwatch=loud\"").unwrap_or_default();
        assert!(err.contains("log.level"), "{err}");
    }

    #[test]
    fn a_tool_rule_limited_to_an_unknown_profile_is_refused() {
        let rule = |profiles: &str| {
            format!("[[tools]]\nmatch = \"read_*\"\nrepeated_call = 4\nprofiles = {profiles}\n[profiles.strict]\nenabled = false\n")
        };
        assert_eq!(error_of(&rule("[\"stop\", \"strict\"]")), None);
        let err = error_of(&rule("[\"stpo\"]")).unwrap_or_default();
        assert!(
            err.contains("tools[0].profiles")
                && err.contains("\"stpo\"")
                && err.contains("nudge, stop, strict"),
            "{err}"
        );
    }

    #[test]
    fn a_profile_key_error_names_no_source_code_location() {
        let err = error_of("[profiles.nudge]\nwindo = 10").unwrap_or_default();
        assert!(err.contains("profiles.nudge.windo"), "{err}");
        assert!(!err.contains(".rs:"), "{err}");
    }

    #[test]
    fn an_admin_listen_address_that_does_not_parse_is_refused() {
        assert_eq!(error_of("[admin]\nlisten = \"\""), None);
        assert_eq!(error_of("[admin]\nlisten = \"0.0.0.0:9000\""), None);
        let err = error_of("[admin]\nlisten = \"nope\"").unwrap_or_default();
        assert!(
            err.contains("admin.listen") && err.contains("\"nope\""),
            "{err}"
        );
    }
}
