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
