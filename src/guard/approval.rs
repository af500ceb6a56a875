//! Answers to a `require_approval` signal: approve (the run goes on with its loop
//! counters reset) or deny (the run is stopped with a `kill` signal). Each answer is
//! counted (`loopwatch_approvals_total{decision}`) and logged.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::detector::Action;
use crate::engine::Engine;
use crate::metrics::Metrics;
use crate::signals::SignalHub;

/// What approving or denying a run did.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answered {
    pub run_key: String,
    /// `approve` or `deny`.
    pub decision: String,
    /// approve: the profiles whose loop counters were reset; deny: the profile of the
    /// detection the kill signal answers.
    pub profiles: Vec<String>,
    /// deny: the id of the `kill` signal published; empty for approve.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub signal_id: String,
}

/// An answer that cannot be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ApprovalError {
    #[error("no run {0:?}: loopwatch does not hold it (never seen, or evicted)")]
    UnknownRun(String),
    #[error("run {0:?} has no detection awaiting approval")]
    NothingToDeny(String),
}

/// Applies approvals and denials; shared by the admin routes.
#[derive(Clone)]
pub struct Approvals {
    /// Where a denial's kill signal goes (none: signals are off, the denial is only
    /// recorded).
    pub signals: Option<SignalHub>,
    pub metrics: Arc<Metrics>,
}

impl Approvals {
    /// Resets every profile's loop counters of `run_key` (the calls that formed the loop
    /// no longer count toward any pattern; call ordinals and occurrences go on).
    pub fn approve(&self, engine: &Engine, run_key: &str) -> Result<Answered, ApprovalError> {
        if !engine.registry.approve(run_key) {
            return Err(ApprovalError::UnknownRun(run_key.to_owned()));
        }
        self.metrics.record_approval("approve");
        tracing::info!(run_key, "run approved: its loop counters are reset");
        Ok(Answered {
            run_key: run_key.to_owned(),
            decision: "approve".into(),
            profiles: engine
                .registry
                .profiles()
                .iter()
                .map(|p| p.name.clone())
                .collect(),
            signal_id: String::new(),
        })
    }

    /// Publishes a `kill` signal for the run's latest detection awaiting approval.
    pub fn deny(&self, engine: &Engine, run_key: &str) -> Result<Answered, ApprovalError> {
        let detections = engine
            .registry
            .detections(run_key)
            .ok_or_else(|| ApprovalError::UnknownRun(run_key.to_owned()))?;
        let awaiting = detections
            .iter()
            .rev()
            .find(|d| {
                d.detection.severity.action_in(d.profile.action) == Some(Action::RequireApproval)
            })
            .ok_or_else(|| ApprovalError::NothingToDeny(run_key.to_owned()))?;
        let mut signal = crate::pipeline::signal_with_action(awaiting, Action::Kill, engine);
        // Its own id: consumers dedupe by id, and the require_approval signal of the same
        // detection already has the detection's.
        signal.id = crate::signals::signal_id(
            &awaiting.run_key,
            &format!("{}/deny", awaiting.profile.name),
            awaiting.detection.pattern.as_str(),
            &awaiting.detection.fingerprints,
            awaiting.occurrence,
        );
        let signal_id = signal.id.to_string();
        if let Some(hub) = &self.signals {
            self.metrics
                .record_signal(&awaiting.profile.name, Action::Kill);
            hub.publish(signal);
        }
        self.metrics.record_approval("deny");
        tracing::warn!(run_key, signal_id, "run denied: a kill signal is published");
        Ok(Answered {
            run_key: run_key.to_owned(),
            decision: "deny".into(),
            profiles: vec![awaiting.profile.name.clone()],
            signal_id,
        })
    }
}
