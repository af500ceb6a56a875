//! What the detectors would decide about a call that has not been made yet (the
//! pre-execution check, `POST /v1/check`): each profile's detector state is copied and fed
//! the call, so the run itself never changes.

use std::sync::Arc;

use super::{merge, Registry};
use crate::detector::{Detection, Observation, ProfileSettings};
use crate::fingerprint::Fingerprint;

/// One profile's answer for a hypothetical call.
#[derive(Clone, Debug)]
pub struct WhatIf {
    /// The profile whose detector was asked.
    pub profile: Arc<ProfileSettings>,
    /// The detection the call would complete, if any.
    pub detection: Option<Detection>,
}

impl Registry {
    /// What each profile's detector would find if the run `run_key` made a call to
    /// `tool_name` with arguments fingerprinted `call_fingerprint`, and it returned what
    /// the run's last call with the same fingerprint returned (no result when there was
    /// none, or it was not captured). One answer per profile, in profile order; `None` for
    /// a run the registry does not hold. Cost: one copy of each profile's detector
    /// (at most its history of calls) and one backwards scan of the run's kept events.
    pub fn what_if(
        &self,
        run_key: &str,
        tool_name: Arc<str>,
        call_fingerprint: Fingerprint,
    ) -> Option<Vec<WhatIf>> {
        let run = self.runs.get(run_key)?;
        // The call's latest result and traits (its effect, outcome, signatures) stand for
        // the result it would get again.
        let last = (0..run.events.len()).rev().find_map(|index| {
            match merge::observation(&run.events, index) {
                Observation::ToolCall {
                    call_fingerprint: Some(seen),
                    result_fingerprint,
                    traits,
                    ..
                } if seen == call_fingerprint => Some((result_fingerprint, traits)),
                _ => None,
            }
        });
        let (result_fingerprint, traits) = last.unwrap_or_default();
        let call = Observation::ToolCall {
            tool_name,
            call_fingerprint: Some(call_fingerprint),
            result_fingerprint,
            traits,
        };
        // A run's held first event ([`Registry::held_first`]) is fed to the copies first.
        let held = self
            .held_first(&run)
            .then(|| merge::observation(&run.events, 0));
        Some(
            run.detectors
                .iter()
                .map(|detector| {
                    let mut detector = detector.clone();
                    if let Some(first) = &held {
                        detector.observe(first);
                    }
                    WhatIf {
                        profile: detector.shared_settings().clone(),
                        detection: detector.observe(&call),
                    }
                })
                .collect(),
        )
    }
}
