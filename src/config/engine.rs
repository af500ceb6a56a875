//! Building the [`Engine`] from the layered [`Config`]: the engine knows its own options
//! ([`EngineOptions`]) and never reads the root config; this is where the two meet.

use crate::conventions::run_key::RunKeyMode;
use crate::engine::budget_state::BudgetTracker;
use crate::engine::delegation_state::DelegationTracker;
use crate::engine::{Engine, EngineOptions};
use crate::fingerprint::{FingerprintKey, Fingerprinter};
use crate::registry::Registry;

use super::{Config, ConfigError};

/// Errors building an engine from configuration.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Config(#[from] ConfigError),
}

impl Engine {
    /// An engine for `config`: its profiles, registry limits, fingerprinting and run key.
    /// With no `detection.fingerprint_key`, a random key is drawn (fingerprints are then
    /// stable only for the life of the process).
    pub fn from_config(config: &Config) -> Result<Engine, EngineError> {
        let profiles = config.profiles()?;
        let registry = Registry::new(profiles.clone(), config.registry.clone());
        let fingerprinter = Fingerprinter::new(&config.detection.fingerprint_config());
        let fingerprint_key = match config.detection.fingerprint_key.as_deref() {
            Some(key) if !key.is_empty() => FingerprintKey::new(key.as_bytes()),
            _ => FingerprintKey::random(),
        };
        let mode = config.detection.run_key_mode()?;
        let options = EngineOptions {
            run_key_attribute: Some(config.detection.run_key_attribute.clone())
                .filter(|a| !a.is_empty() && mode == RunKeyMode::Attribute),
            run_key_by_agent: mode == RunKeyMode::TraceAndAgent,
            match_tool_name_without_arguments: config.detection.match_tool_name_without_arguments,
            custom_conventions: config.conventions.custom.clone(),
        };
        let mut engine = Engine::new(registry, fingerprinter, fingerprint_key, options);
        engine.tool_fingerprints = arc_swap::ArcSwap::from_pointee(config.fingerprint_rules()?);
        engine.comparer = crate::compare::Comparer::new(&config.detection.compare_config());
        engine.follow_near_repeat();
        engine.delegations = DelegationTracker::new(
            &engine.registry.profiles(),
            config.budgets.max_handoffs,
            config.budgets.action,
            config.registry.max_runs,
        );
        if config.budgets.any() {
            engine.budgets = Some(BudgetTracker::new(
                config.budgets.clone(),
                config.registry.max_runs,
            ));
        }
        Ok(engine)
    }

    /// Applies the detection rules of `config` to this running engine (a config reload):
    /// its profiles (thresholds, presets, actions, per-profile tool rules) and the
    /// `[[tools]]` fingerprint rules. Runs in progress keep their events and reported
    /// detections ([`Registry::set_profiles`]). Returns the settings that changed but
    /// cannot take effect without a restart (turning delegation detection on where it was
    /// off at start-up, the `[detection]` comparison keys), as dotted keys.
    ///
    /// # Errors
    /// A profile or tool rule that does not validate; nothing is applied then.
    pub fn reload_detection(&self, config: &Config) -> Result<Vec<String>, ConfigError> {
        let profiles = config.profiles()?;
        let rules = config.fingerprint_rules()?;
        let mut needs_restart = Vec::new();
        if self.delegations.is_none() {
            needs_restart.extend(
                profiles
                    .iter()
                    .filter(|p| p.delegation_cycle > 0)
                    .map(|p| format!("profiles.{}.delegation_cycle", p.name)),
            );
        }
        if config.detection.compare_config() != *self.comparer.config() {
            needs_restart.push("detection (comparison keys)".to_string());
        }
        self.registry.set_profiles(profiles);
        self.follow_near_repeat();
        self.tool_fingerprints.store(std::sync::Arc::new(rules));
        if let Some(delegations) = &self.delegations {
            delegations.set_profiles(&self.registry.profiles());
        }
        Ok(needs_restart)
    }

    /// Computes the arguments' SimHash only while some current profile can fire
    /// `near_repeat` (at start and after each reload).
    fn follow_near_repeat(&self) {
        let used = self
            .registry
            .profiles()
            .iter()
            .any(|p| p.uses_near_repeat());
        self.comparer.set_near_signatures(used);
    }
}
