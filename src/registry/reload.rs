//! Swapping the profiles of a running registry (a config reload, `loopwatch serve` on
//! SIGHUP or a changed file). New runs start under the new set at once; a run in progress
//! adopts it when its next span arrives: its detectors are rebuilt for the new profiles and
//! its kept events replayed through them, so it is judged as if the new rules had applied
//! from its first kept call. Detections it already reported stay reported (matched by
//! profile name), so a reload never repeats a signal; a loop the new thresholds find among
//! the kept calls is reported then, once.

use std::sync::Arc;

use super::{occurrence_key, Detectors, Identity, OccurrenceKey, Registry, RunDetection, RunState};
use crate::detector::{Detector, ProfileSettings};

/// The profiles a registry runs side by side, in the order detections refer to them
/// ([`RunDetection::profile_index`]).
pub type ProfileSet = Vec<Arc<ProfileSettings>>;

impl Registry {
    /// Replaces the profiles every run is judged under. Runs adopt the new set lazily
    /// (see the module docs); nothing is lost of their events, ordinals or reported
    /// detections. Profiles are matched across the swap by name.
    pub fn set_profiles(&self, profiles: Vec<ProfileSettings>) {
        self.profiles
            .store(Arc::new(profiles.into_iter().map(Arc::new).collect()));
    }

    /// Brings `run` onto the current profile set when it was judged under an older one:
    /// new detectors (a forgotten base keeps its ordinals, not its loops in progress),
    /// occurrence counts and reported identities moved to the new profile indices (those
    /// of a profile that is gone are dropped), then a replay of the kept events that
    /// reports what was not reported before into `out`.
    pub(super) fn adopt_current_profiles(
        &self,
        key: &Arc<str>,
        run: &mut RunState,
        out: &mut Vec<RunDetection>,
    ) {
        let current = self.profiles.load();
        let up_to_date = run.detectors.len() == current.len()
            && run
                .detectors
                .iter()
                .zip(current.iter())
                .all(|(d, p)| Arc::ptr_eq(d.shared_settings(), p));
        if up_to_date {
            return;
        }
        let old_names: Vec<String> = run
            .detectors
            .iter()
            .map(|d| d.settings().name.clone())
            .collect();
        let new_index = |old: usize| -> Option<usize> {
            let name = old_names.get(old)?;
            current.iter().position(|p| &p.name == name)
        };
        // The detections of kept events are found again by the replay: uncounted first,
        // under the indices they were counted with.
        let dropped = run.detections.split_off(run.base_detections());
        if let Some(tallies) = &mut run.tallies {
            for d in &dropped {
                if let Some(n) = tallies.occurrences.get_mut(&occurrence_key(d)) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        run.detectors = current.iter().map(|p| Detector::new(p.clone())).collect();
        if let Some(forgotten) = &mut run.forgotten {
            forgotten.base = rebased(&forgotten.base, &current);
        }
        if let Some(tallies) = &mut run.tallies {
            tallies.occurrences = std::mem::take(&mut tallies.occurrences)
                .into_iter()
                .filter_map(|((index, pattern, fps), n)| {
                    let key: OccurrenceKey = (new_index(index)?, pattern, fps);
                    Some((key, n))
                })
                .collect();
            tallies.reported = std::mem::take(&mut tallies.reported)
                .into_iter()
                .filter_map(|(index, span, pattern)| {
                    let identity: Identity = (new_index(index)?, span, pattern);
                    Some(identity)
                })
                .collect();
        }
        // Detections of forgotten events are history: they keep their profile (by name)
        // and take its new index where it still exists.
        for d in &mut run.detections {
            if let Some(index) = new_index(d.profile_index) {
                d.profile_index = index;
            }
        }
        self.replay(key, run, out);
    }
}

/// A forgotten base for `profiles`: ordinals go on from `base` (every profile observed the
/// same events), the loops in progress among the forgotten events are not carried over.
fn rebased(base: &Detectors, profiles: &[Arc<ProfileSettings>]) -> Detectors {
    profiles
        .iter()
        .map(|p| match base.first() {
            Some(from) => Detector::continuing(p.clone(), from),
            None => Detector::new(p.clone()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Instant;

    use super::super::{Registry, RegistryConfig, RunEvent};
    use crate::detector::{Observation, ProfileSettings};

    /// A profile named `name` where only repeated_call can fire (calls without results):
    /// `n` of the same call in a window of 10.
    fn repeated_call(name: &str, n: usize) -> ProfileSettings {
        ProfileSettings {
            name: name.into(),
            window: 10,
            repeated_call: n,
            ..ProfileSettings::nudge()
        }
    }

    /// The same tool call (no result), span `span`, starting at `10·span`.
    fn call(span: u64) -> RunEvent {
        RunEvent {
            run_key: Arc::from("run"),
            trace_id: [7; 16].into(),
            span_id: span.to_be_bytes().into(),
            start_time_unix_nano: 10 * span,
            end_time_unix_nano: 10 * span + 1,
            service_name: None,
            agent_name: None,
            observation: Observation::ToolCall {
                tool_name: Arc::from("search"),
                call_fingerprint: Some([1; 32]),
                result_fingerprint: None,
                traits: Default::default(),
            },
            call: Default::default(),
        }
    }

    /// (profile, completing span, occurrence) of each detection.
    fn shape(detections: &[super::RunDetection]) -> Vec<(String, u64, u32)> {
        detections
            .iter()
            .map(|d| {
                let span = u64::from_be_bytes(d.span_id.as_slice().try_into().unwrap());
                (d.profile.name.clone(), span, d.occurrence)
            })
            .collect()
    }

    #[test]
    fn a_lowered_threshold_judges_the_run_in_progress_on_its_next_span() {
        let r = Registry::new(vec![repeated_call("p", 3)], RegistryConfig::default());
        let now = Instant::now();
        assert!(r.observe(vec![call(1), call(2)], now).is_empty());
        r.set_profiles(vec![repeated_call("p", 2)]);
        // Calls 1 and 2 now make a loop: reported when the run's next span arrives.
        let found = r.observe(vec![call(3)], now);
        assert_eq!(shape(&found), [("p".to_string(), 2, 1)]);
        // The loop goes on under the new threshold, and nothing is reported twice.
        let found = r.observe(vec![call(4)], now);
        assert_eq!(shape(&found), [("p".to_string(), 4, 2)]);
        assert_eq!(r.profiles()[0].repeated_call, 2);
    }

    #[test]
    fn reported_detections_follow_their_profile_by_name_and_a_removed_profile_is_dropped() {
        let profiles = vec![repeated_call("a", 3), repeated_call("b", 3)];
        let r = Registry::new(profiles, RegistryConfig::default());
        let now = Instant::now();
        let found = r.observe(vec![call(1), call(2), call(3)], now);
        assert_eq!(
            shape(&found),
            [("a".to_string(), 3, 1), ("b".to_string(), 3, 1)]
        );
        // `a` goes, `b` moves to index 0: its detection at span 3 stays reported.
        r.set_profiles(vec![repeated_call("b", 3)]);
        assert!(r.observe(vec![call(3)], now).is_empty(), "a duplicate span");
        let kept = r.detections("run").unwrap();
        assert_eq!(shape(&kept), [("b".to_string(), 3, 1)]);
        assert_eq!(kept[0].profile_index, 0);
        // And it counts on: the next loop of `b` is its second occurrence.
        let found = r.observe(vec![call(4), call(5), call(6)], now);
        assert_eq!(shape(&found), [("b".to_string(), 6, 2)]);
    }
}
