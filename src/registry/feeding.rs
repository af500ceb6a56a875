//! Feeding a run's kept events to its detectors: one at a time as they arrive in order
//! ([`Registry::feed`]), the first one held back until a second arrives
//! ([`Registry::held_first`]), all of them again from the base state after a late span, a
//! merge or a reload ([`Registry::replay`]), and into the base state as they are forgotten
//! past the cap ([`Registry::enforce_event_cap`]); each detection recorded with its span
//! context ([`Registry::record`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use smallvec::SmallVec;

use crate::conventions::event::span_of_call;
use crate::detector::{Detection, Detector, Pattern, ProfileSettings};

use super::run_state::{Forgotten, RunState};
use super::{merge, occurrence_key, Registry, RunDetection, SpanId};

impl Registry {
    /// Re-runs the kept events from the base state; reports detections not reported before.
    pub(super) fn replay(&self, key: &Arc<str>, run: &mut RunState, out: &mut Vec<RunDetection>) {
        let dropped = run.detections.split_off(run.base_detections());
        if let Some(tallies) = &mut run.tallies {
            for d in &dropped {
                if let Some(n) = tallies.occurrences.get_mut(&occurrence_key(d)) {
                    *n = n.saturating_sub(1);
                }
            }
        }
        let mut detectors = match &run.forgotten {
            Some(forgotten) => forgotten.base.clone(),
            None => Self::fresh_detectors(&run.detectors),
        };
        // With an approval: the last kept event at or before it (`Some(None)`: it came
        // before every kept event), after which the loops in progress are forgotten again.
        let reset_after = run
            .tallies
            .as_ref()
            .and_then(|t| t.approved_through.as_ref())
            .map(|(start, end, span)| {
                let approved = (*start, *end, span.as_slice());
                run.events.iter().rposition(|e| e.order_key() <= approved)
            });
        if reset_after == Some(None) {
            detectors.iter_mut().for_each(Detector::forget_loops);
        }
        for index in 0..run.events.len() {
            let observation = merge::observation(&run.events, index);
            for (profile_index, detector) in detectors.iter_mut().enumerate() {
                if let Some(d) = detector.observe(&observation) {
                    let profile = detector.shared_settings().clone();
                    self.record(key, run, (profile_index, profile), d, index, out);
                }
            }
            if reset_after == Some(Some(index)) {
                detectors.iter_mut().for_each(Detector::forget_loops);
            }
        }
        run.detectors = detectors;
    }

    /// Feeds kept event `index` to the run's detectors (in order: every event before it was
    /// fed) and records what they detect.
    pub(super) fn feed(
        &self,
        key: &Arc<str>,
        run: &mut RunState,
        index: usize,
        out: &mut Vec<RunDetection>,
    ) {
        let observation = merge::observation(&run.events, index);
        let mut detectors = std::mem::take(&mut run.detectors);
        for (profile_index, detector) in detectors.iter_mut().enumerate() {
            if let Some(d) = detector.observe(&observation) {
                let profile = detector.shared_settings().clone();
                self.record(key, run, (profile_index, profile), d, index, out);
            }
        }
        run.detectors = detectors;
    }

    /// True while the run's only event is held back from its detectors: its first event
    /// arrived alone, under profiles where one observation completes no detection
    /// ([`ProfileSettings::needs_two_observations`]), so feeding it with the second event
    /// (or a replay) finds exactly what feeding it at once would have. Until then the
    /// detectors keep no call of the run, a saving of one call record per profile on each
    /// run that never makes a second call. Whatever reads the detectors' state feeds the
    /// held event first ([`Registry::what_if`], [`Registry::approve`]).
    pub(super) fn held_first(&self, run: &RunState) -> bool {
        run.events.len() == 1
            && run.forgotten.is_none()
            && run.detectors.first().is_some_and(|d| d.observations() == 0)
    }

    /// Attaches span context to a detection completed by `events[index]`, counts its
    /// occurrence, appends it to the run and reports it unless reported before.
    pub(super) fn record(
        &self,
        run_key: &Arc<str>,
        run: &mut RunState,
        (profile_index, profile): (usize, Arc<ProfileSettings>),
        detection: Detection,
        index: usize,
        out: &mut Vec<RunDetection>,
    ) {
        let completing = &run.events[index];
        // Detector indices count every observation since the run began, forgotten ones too.
        // Gathered on the stack first: collecting a filtered iterator straight into an
        // `Arc<[_]>` would allocate a `Vec` and then the `Arc`.
        let span_ids: SmallVec<[SpanId; 16]> = detection
            .members
            .iter()
            .filter_map(|m| m.checked_sub(run.forgotten_events()))
            .filter_map(|i| run.events.get(i))
            .map(|e| SpanId::from(span_of_call(e.span_id())))
            .collect();
        let span_ids = Arc::from(span_ids.as_slice());
        let mut rd = RunDetection {
            profile_index,
            profile,
            detection: Arc::new(detection),
            run_key: run_key.clone(),
            trace_id: completing.trace_id().into(),
            // The span, not the call's id in the run, when the span records several calls
            // (one span, one identity per profile and pattern).
            span_id: span_of_call(completing.span_id()).into(),
            span_ids,
            time_unix_nano: completing.end_time_unix_nano(),
            occurrence: 0,
            service_name: completing.origin.service_name.clone(),
            agent_name: completing.origin.agent_name.clone(),
        };
        let tallies = run.tallies.get_or_insert_default();
        let count = tallies.occurrences.entry(occurrence_key(&rd)).or_insert(0);
        *count += 1;
        rd.occurrence = *count;
        if tallies.reported.insert(rd.identity()) {
            out.push(rd.clone());
        }
        run.detections.push(rd);
    }

    /// Keeps at most `max_events_per_run` events. The forgotten ones are fed to the base
    /// detectors, so detection continues exactly; only re-ordering of spans that start
    /// before every kept event is lost.
    pub(super) fn enforce_event_cap(&self, run: &mut RunState) {
        let cap = self.config.max_events_per_run.max(1);
        if run.events.len() <= cap {
            return;
        }
        let excess = run.events.len() - cap;
        let mut forgotten = run.forgotten.take().unwrap_or_else(|| {
            Box::new(Forgotten {
                base: Self::fresh_detectors(&run.detectors),
                detections: 0,
                events: 0,
                tool_calls: 0,
            })
        });
        for index in 0..excess {
            // Observed with the events still held (a call takes its result span's result).
            let observation = merge::observation(&run.events, index);
            for detector in &mut forgotten.base {
                if detector.observe(&observation).is_some() {
                    // Already in `detections`: the base replays what was detected.
                    forgotten.detections += 1;
                }
            }
        }
        run.seen.removing_front(&run.events, excess);
        for event in run.events.drain(..excess) {
            if event.is_tool_call() {
                forgotten.tool_calls += 1;
            }
            if let Some(tallies) = &mut run.tallies {
                for profile_index in 0..run.detectors.len() {
                    for pattern in Pattern::ALL {
                        tallies.reported.remove(&(
                            profile_index,
                            SpanId::from(span_of_call(event.span_id())),
                            pattern,
                        ));
                    }
                }
            }
        }
        forgotten.detections = forgotten.detections.min(run.detections.len());
        // Detections of forgotten events are history: keep at most `cap` of them, so a run
        // that loops for ever holds bounded memory (occurrence counts live in `occurrences`).
        let old_detections = forgotten.detections.saturating_sub(cap);
        run.detections.drain(..old_detections);
        forgotten.detections -= old_detections;
        forgotten.events += excess;
        run.forgotten = Some(forgotten);
        self.stats
            .events_forgotten
            .fetch_add(excess as u64, Ordering::Relaxed);
    }
}
