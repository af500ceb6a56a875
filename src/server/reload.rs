//! Hot reload of the detection config: `loopwatch serve --config FILE` re-reads the file on
//! SIGHUP and when its content changes (checked every [`POLL_PERIOD`]; a Kubernetes
//! ConfigMap update swaps a symlink, which the content check sees). A file that loads and
//! validates (the same layering as at start-up: defaults, file, `LOOPWATCH_*` env, CLI
//! flags) has its `[profiles.*]` and `[[tools]]` applied at once
//! ([`crate::engine::Engine::reload_detection`]); every other changed setting is named in
//! one WARN line as needing a restart. A file that does not load changes nothing: the
//! running config stays, an ERROR line says why. Each attempt is counted
//! ([`crate::metrics::reload`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::config::Config;
use crate::engine::Engine;
use crate::metrics::Metrics;

/// How often the config file's content is compared with the one last read.
pub const POLL_PERIOD: Duration = Duration::from_secs(1);

/// The sections a reload applies; every other key needs a restart.
pub const RELOADABLE: [&str; 2] = ["profiles", "tools"];

/// Where the running config came from, to read it again the same way.
#[derive(Clone, Debug)]
pub struct ReloadSource {
    /// The `--config` file.
    pub file: PathBuf,
    /// CLI flags as dotted keys (they beat the file, as at start-up).
    pub overrides: Vec<(String, String)>,
}

/// What one reload attempt did.
#[derive(Debug)]
pub enum ReloadOutcome {
    /// Applied; the dotted keys that changed but need a restart (empty: none).
    Applied { needs_restart: Vec<String> },
    /// Refused: the running config stays.
    Failed(String),
}

/// Re-reads `source`, applies what can be applied to `engine` and returns the outcome;
/// `running` is the config in effect and becomes the new one (its non-reloadable sections
/// kept: they still run). Logs and counts the attempt.
pub fn reload_once(
    source: &ReloadSource,
    running: &mut Config,
    engine: &Engine,
    metrics: &Metrics,
) -> ReloadOutcome {
    let overrides: Vec<(&str, String)> = source
        .overrides
        .iter()
        .map(|(k, v)| (k.as_str(), v.clone()))
        .collect();
    let outcome = Config::load(Some(&source.file), &overrides)
        .map_err(|e| e.to_string())
        .and_then(|new| {
            let mut needs_restart = changed_keys(running, &new);
            needs_restart.extend(engine.reload_detection(&new).map_err(|e| e.to_string())?);
            running.profiles = new.profiles;
            running.tools = new.tools;
            Ok(needs_restart)
        });
    match outcome {
        Ok(needs_restart) => {
            metrics.config_reloads.record(true);
            let profiles = engine
                .registry
                .profiles()
                .iter()
                .map(|p| format!("{}({})", p.name, p.action.as_str()))
                .collect::<Vec<_>>()
                .join(",");
            tracing::info!(
                file = %source.file.display(),
                profiles = %profiles,
                tool_rules = running.tools.len(),
                "config reloaded: profiles and tool rules applied"
            );
            if !needs_restart.is_empty() {
                tracing::warn!(
                    file = %source.file.display(),
                    "config reload: these settings changed but take effect only after a restart: {}",
                    needs_restart.join(", ")
                );
            }
            ReloadOutcome::Applied { needs_restart }
        }
        Err(error) => {
            metrics.config_reloads.record(false);
            tracing::error!(
                file = %source.file.display(),
                "config reload failed, the running config stays: {error}"
            );
            ReloadOutcome::Failed(error)
        }
    }
}

/// Dotted keys (`section.key`, one level down) whose value differs between `old` and
/// `new`, outside the [`RELOADABLE`] sections. Values are compared, never printed (some
/// are secrets).
pub fn changed_keys(old: &Config, new: &Config) -> Vec<String> {
    let (Ok(Value::Object(old)), Ok(Value::Object(new))) =
        (serde_json::to_value(old), serde_json::to_value(new))
    else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for (section, new_value) in &new {
        if RELOADABLE.contains(&section.as_str()) {
            continue;
        }
        let old_value = old.get(section).unwrap_or(&Value::Null);
        if old_value == new_value {
            continue;
        }
        match (old_value, new_value) {
            (Value::Object(o), Value::Object(n)) => {
                let keys: std::collections::BTreeSet<&String> = o.keys().chain(n.keys()).collect();
                for key in keys {
                    if o.get(key) != n.get(key) {
                        out.push(format!("{section}.{key}"));
                    }
                }
            }
            _ => out.push(section.clone()),
        }
    }
    out
}

/// Reloads on SIGHUP and on a change of the file's content until `stop` resolves. The
/// SIGHUP handler is registered when this is called (before the server says it is
/// listening), so a SIGHUP sent right after that line reloads rather than ends the
/// process. Where SIGHUP cannot be registered (not Unix), only the file is watched.
pub fn watch(
    source: ReloadSource,
    mut running: Config,
    engine: Arc<Engine>,
    metrics: Arc<Metrics>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let mut hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
    async move {
        let mut last = std::fs::read(&source.file).ok();
        let mut tick = tokio::time::interval(POLL_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tokio::pin!(stop);
        loop {
            #[cfg(unix)]
            let hup = async {
                match hangup.as_mut() {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            };
            #[cfg(not(unix))]
            let hup = std::future::pending::<()>();
            let by_signal = tokio::select! {
                _ = &mut stop => return,
                _ = hup => true,
                _ = tick.tick() => false,
            };
            let content = std::fs::read(&source.file).ok();
            if !by_signal && content == last {
                continue;
            }
            if by_signal {
                tracing::info!(file = %source.file.display(), "SIGHUP: reloading the config");
            } else {
                tracing::info!(file = %source.file.display(), "config file changed: reloading");
            }
            last = content;
            reload_once(&source, &mut running, &engine, &metrics);
        }
    }
}
