//! Per-run delegation state for the engine: the agent activations of each run
//! ([`crate::conventions::agents`]) in span start-time order, the `delegation_cycle`
//! detections of every profile that sets it ([`crate::detector::delegation`]) and the
//! `max_handoffs` budget. Bounded like the budgets: at most `max_runs` runs (least recently
//! seen dropped first) and [`MAX_ACTIVATIONS`] activations per run (oldest dropped first).
//!
//! Activations are kept sorted whatever order their spans arrive in, and a run's
//! detections are recomputed from the whole sequence at each activation, so the set of
//! detections is the one of the spans present; a detection is reported once (by profile
//! and completing span), as the detectors report theirs.

use std::sync::Arc;
use std::time::Instant;

use dashmap::DashMap;

use crate::detector::budget::{Budget, BudgetAction, Exceeded};
use crate::detector::delegation::{self, agent_key};
use crate::detector::{Action, Detection, Pattern, ProfileSettings, Severity};
use crate::engine::budget_state::BUDGET_PROFILE;
use crate::registry::{RunDetection, SpanId};

/// Most activations kept per run.
pub const MAX_ACTIVATIONS: usize = 4096;

/// The span that hands a run to an agent.
pub struct ActivationSpan<'a> {
    pub run_key: &'a Arc<str>,
    pub trace_id: &'a [u8],
    pub span_id: &'a [u8],
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub service_name: Option<Arc<str>>,
}

#[derive(Clone)]
struct Act {
    start: u64,
    end: u64,
    span_id: SpanId,
    /// [`agent_key`] of the agent.
    key: Arc<str>,
    /// The agent's name as the span gave it.
    name: Arc<str>,
    service_name: Option<Arc<str>>,
}

struct RunDelegation {
    trace_id: crate::registry::TraceId,
    acts: Vec<Act>,
    /// (profile index, completing span) of the detections reported (`usize::MAX`: the
    /// handoff budget).
    reported: Vec<(usize, SpanId)>,
    /// The run's detections as its sequence stands.
    detections: Vec<RunDetection>,
    last_seen: Instant,
}

/// A run's delegation figures, for `loopwatch explain`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Standing {
    /// The agents the run was handed to, one per change, in order.
    pub agents: Vec<Arc<str>>,
    /// Per profile that sets `delegation_cycle`: (profile, threshold, rounds of the cycle
    /// going on since its last detection, the cycle's period).
    pub cycles: Vec<(String, usize, usize, usize)>,
    /// Handoffs so far and the `max_handoffs` limit (0 = off).
    pub handoffs: usize,
    pub max_handoffs: u64,
}

/// Delegation cycles and handoff counts of every run.
pub struct DelegationTracker {
    /// (index in the registry's profiles, profile) of each profile with `delegation_cycle`.
    /// Swapped whole by a config reload ([`DelegationTracker::set_profiles`]).
    profiles: arc_swap::ArcSwap<Vec<(usize, Arc<ProfileSettings>)>>,
    max_handoffs: u64,
    budget_profile: Arc<ProfileSettings>,
    runs: DashMap<Arc<str>, RunDelegation, foldhash::fast::RandomState>,
    max_runs: usize,
}

impl DelegationTracker {
    /// A tracker for the enabled profiles of `profiles` that set `delegation_cycle` and for
    /// `max_handoffs` (0 = off), reported with `action`; `None` when neither is on.
    pub fn new(
        profiles: &[Arc<ProfileSettings>],
        max_handoffs: u64,
        action: BudgetAction,
        max_runs: usize,
    ) -> Option<Self> {
        let profiles = delegating(profiles);
        if profiles.is_empty() && max_handoffs == 0 {
            return None;
        }
        // Only the handoff budget reports under it (the built-in is parsed from TOML).
        let budget_profile = profiles
            .first()
            .map_or_else(ProfileSettings::nudge, |(_, p)| ProfileSettings::clone(p));
        let budget_profile = ProfileSettings {
            name: BUDGET_PROFILE.into(),
            action: action.into(),
            ..budget_profile
        };
        Some(DelegationTracker {
            profiles: arc_swap::ArcSwap::from_pointee(profiles),
            max_handoffs,
            budget_profile: Arc::new(budget_profile),
            runs: DashMap::with_hasher(foldhash::fast::RandomState::default()),
            max_runs: max_runs.max(1),
        })
    }

    /// Judges delegation cycles under `profiles` from now on (a config reload); each run's
    /// sequence is checked against them on its next activation.
    pub fn set_profiles(&self, profiles: &[Arc<ProfileSettings>]) {
        self.profiles.store(Arc::new(delegating(profiles)));
    }

    /// Adds the activation of `agent` by `span` to its run; returns the detections it
    /// completes (a span seen before adds nothing).
    pub fn observe(
        &self,
        span: &ActivationSpan<'_>,
        agent: &str,
        now: Instant,
    ) -> Vec<RunDetection> {
        let key = agent_key(agent);
        if key.is_empty() {
            return Vec::new();
        }
        self.make_room(span.run_key);
        let mut run = self
            .runs
            .entry(span.run_key.clone())
            .or_insert_with(|| RunDelegation {
                trace_id: span.trace_id.into(),
                acts: Vec::new(),
                reported: Vec::new(),
                detections: Vec::new(),
                last_seen: now,
            });
        run.last_seen = now;
        if run
            .acts
            .iter()
            .any(|a| a.span_id.as_slice() == span.span_id)
        {
            return Vec::new();
        }
        let act = Act {
            start: span.start_time_unix_nano,
            end: span.end_time_unix_nano,
            span_id: span.span_id.into(),
            // Bounded like every kept name (a hostile agent name is not copied whole into
            // each act and detection).
            key: Arc::from(&*super::intern::bounded_name(&key)),
            name: Arc::from(&*super::intern::bounded_name(agent)),
            service_name: span.service_name.clone(),
        };
        let at = run
            .acts
            .partition_point(|a| (a.start, a.span_id.as_slice()) <= (act.start, span.span_id));
        run.acts.insert(at, act);
        if run.acts.len() > MAX_ACTIVATIONS {
            run.acts.remove(0);
        }
        let all = self.detect(&run, span.run_key);
        let new: Vec<RunDetection> = all
            .iter()
            .filter(|d| {
                let first = !run
                    .reported
                    .iter()
                    .any(|(p, s)| *p == d.profile_index && *s == d.span_id);
                first
            })
            .cloned()
            .collect();
        for d in &new {
            run.reported.push((d.profile_index, d.span_id.clone()));
        }
        run.detections = all;
        new
    }

    /// Every detection of the run's sequence as it stands (spans arriving out of order
    /// recompute it: a detection reported before an earlier span arrived, that the
    /// sequence no longer completes, stays reported but is no detection of the run).
    fn detect(&self, run: &RunDelegation, run_key: &Arc<str>) -> Vec<RunDetection> {
        let sequence = collapsed(&run.acts);
        let keys: Vec<&Arc<str>> = sequence.iter().map(|&i| &run.acts[i].key).collect();
        let mut out = Vec::new();
        for (index, profile) in self.profiles.load().iter() {
            for (n, found) in delegation::find(&keys, profile.delegation_cycle)
                .into_iter()
                .enumerate()
            {
                let act = &run.acts[sequence[found.at]];
                let agents = found
                    .members()
                    .map(|i| run.acts[sequence[i]].name.clone())
                    .collect();
                let detection = Detection {
                    pattern: Pattern::DelegationCycle,
                    tool_names: agents,
                    count: found.cycles,
                    window: 0,
                    severity: severity(profile.action),
                    fingerprints: Vec::new(),
                    members: Vec::new(),
                    call: None,
                    response: None,
                    budget: None,
                    evidence: crate::detector::Evidence::None,
                };
                out.push(self.detection(run, run_key, act, *index, profile, detection, n + 1));
            }
        }
        let handoffs = delegation::handoffs(sequence.len()) as u64;
        if self.max_handoffs > 0 && handoffs > self.max_handoffs {
            // The activation that made the handoff over the limit.
            let act = &run.acts[sequence[self.max_handoffs as usize + 1]];
            let exceeded = Exceeded {
                budget: Budget::MaxHandoffs,
                limit: self.max_handoffs,
                value: self.max_handoffs + 1,
                tool: None,
            };
            let detection = Detection {
                pattern: Pattern::BudgetExceeded,
                tool_names: vec![act.name.clone()],
                count: exceeded.value as usize,
                window: 0,
                severity: severity(self.budget_profile.action),
                fingerprints: Vec::new(),
                members: Vec::new(),
                call: None,
                response: None,
                budget: Some(exceeded),
                evidence: crate::detector::Evidence::None,
            };
            let profile = self.budget_profile.clone();
            out.push(self.detection(run, run_key, act, usize::MAX, &profile, detection, 1));
        }
        out
    }

    #[allow(clippy::too_many_arguments)]
    fn detection(
        &self,
        run: &RunDelegation,
        run_key: &Arc<str>,
        act: &Act,
        profile_index: usize,
        profile: &Arc<ProfileSettings>,
        detection: Detection,
        occurrence: usize,
    ) -> RunDetection {
        RunDetection {
            profile_index,
            profile: profile.clone(),
            detection: Arc::new(detection),
            run_key: run_key.clone(),
            trace_id: run.trace_id.clone(),
            span_id: act.span_id.clone(),
            span_ids: Arc::new([]),
            time_unix_nano: act.end,
            occurrence: u32::try_from(occurrence).unwrap_or(u32::MAX),
            service_name: act.service_name.clone(),
            agent_name: Some(act.name.clone()),
        }
    }

    /// Past `max_runs`, drops the least recently seen 1 % before a new run is added.
    fn make_room(&self, run_key: &Arc<str>) {
        if self.runs.contains_key(run_key) || self.runs.len() < self.max_runs {
            return;
        }
        let mut by_age: Vec<(Instant, Arc<str>)> = self
            .runs
            .iter()
            .map(|r| (r.last_seen, r.key().clone()))
            .collect();
        by_age.sort();
        for (_, key) in by_age.into_iter().take((self.max_runs / 100).max(1)) {
            self.runs.remove(&key);
        }
    }

    /// The keys of every run with an activation.
    pub fn run_keys(&self) -> Vec<String> {
        self.runs.iter().map(|r| r.key().to_string()).collect()
    }

    /// The delegation detections of a run so far.
    pub fn detections(&self, run_key: &str) -> Vec<RunDetection> {
        self.runs
            .get(run_key)
            .map(|r| r.detections.clone())
            .unwrap_or_default()
    }

    /// A run's sequence of agents and how far it is from each threshold; `None` for a run
    /// with no activation.
    pub fn standing(&self, run_key: &str) -> Option<Standing> {
        let run = self.runs.get(run_key)?;
        let sequence = collapsed(&run.acts);
        let keys: Vec<&Arc<str>> = sequence.iter().map(|&i| &run.acts[i].key).collect();
        Some(Standing {
            agents: sequence.iter().map(|&i| run.acts[i].name.clone()).collect(),
            cycles: self
                .profiles
                .load()
                .iter()
                .map(|(_, p)| {
                    let (rounds, period) = delegation::standing(&keys, p.delegation_cycle);
                    (p.name.clone(), p.delegation_cycle, rounds, period)
                })
                .collect(),
            handoffs: delegation::handoffs(sequence.len()),
            max_handoffs: self.max_handoffs,
        })
    }
}

/// (index, profile) of each enabled profile of `profiles` that sets `delegation_cycle`.
fn delegating(profiles: &[Arc<ProfileSettings>]) -> Vec<(usize, Arc<ProfileSettings>)> {
    profiles
        .iter()
        .enumerate()
        .filter(|(_, p)| p.enabled && p.delegation_cycle > 0)
        .map(|(i, p)| (i, p.clone()))
        .collect()
}

/// Positions in `acts` of the first activation of each change of agent.
fn collapsed(acts: &[Act]) -> Vec<usize> {
    let mut out: Vec<usize> = Vec::with_capacity(acts.len());
    for (i, act) in acts.iter().enumerate() {
        if out.last().is_none_or(|&last| acts[last].key != act.key) {
            out.push(i);
        }
    }
    out
}

fn severity(action: Action) -> Severity {
    match action {
        Action::Warn => Severity::Warn,
        Action::Kill | Action::RequireApproval => Severity::Kill,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tracker(max_handoffs: u64) -> DelegationTracker {
        let profiles = [
            Arc::new(ProfileSettings::nudge()),
            Arc::new(ProfileSettings::stop()),
        ];
        DelegationTracker::new(&profiles, max_handoffs, BudgetAction::Warn, 10).unwrap()
    }

    fn observe(t: &DelegationTracker, n: u8, agent: &str) -> Vec<(String, usize, u8)> {
        let key: Arc<str> = Arc::from("run");
        let span = ActivationSpan {
            run_key: &key,
            trace_id: &[1; 16],
            span_id: &[n; 8],
            start_time_unix_nano: u64::from(n) * 10,
            end_time_unix_nano: u64::from(n) * 10 + 5,
            service_name: None,
        };
        t.observe(&span, agent, Instant::now())
            .into_iter()
            .map(|d| {
                (
                    d.detection.pattern.as_str().to_owned(),
                    d.detection.count,
                    d.span_id[0],
                )
            })
            .collect()
    }

    #[test]
    fn ping_pong_warns_at_three_round_trips_in_any_arrival_order() {
        let agents = [
            "Triage", "billing", "triage", "Billing", "TRIAGE", "billing", "triage",
        ];
        let t = tracker(0);
        let mut found = Vec::new();
        for (n, agent) in agents.iter().enumerate() {
            found.extend(observe(&t, n as u8 + 1, agent));
        }
        assert_eq!(found, [("delegation_cycle".to_owned(), 3, 7)]);
        // Reversed arrival: the same detection, on the same span.
        let t = tracker(0);
        let mut found = Vec::new();
        for (n, agent) in agents.iter().enumerate().rev() {
            found.extend(observe(&t, n as u8 + 1, agent));
        }
        assert_eq!(found, [("delegation_cycle".to_owned(), 3, 7)]);
        // A span seen again adds nothing.
        assert_eq!(observe(&t, 7, "triage"), []);
        let standing = t.standing("run").unwrap();
        assert_eq!(standing.agents.len(), 7);
        assert_eq!(standing.cycles[1], ("stop".to_owned(), 6, 3, 2));
    }

    #[test]
    fn handoff_budget_fires_once_at_the_handoff_over_the_limit() {
        let t = tracker(2);
        let mut found = Vec::new();
        for (n, agent) in ["a", "b", "c", "d", "e"].iter().enumerate() {
            found.extend(observe(&t, n as u8 + 1, agent));
        }
        assert_eq!(found, [("budget_exceeded".to_owned(), 3, 4)]);
        let d = &t.detections("run")[0];
        assert_eq!(
            crate::annotate::reason(d),
            "budget max_handoffs exceeded: the run was handed between agents 3 times (limit 2)"
        );
    }

    #[test]
    fn off_when_no_profile_sets_it_and_no_handoff_budget() {
        let mut quiet = ProfileSettings::nudge();
        quiet.delegation_cycle = 0;
        assert!(DelegationTracker::new(&[Arc::new(quiet)], 0, BudgetAction::Warn, 10).is_none());
    }
}
