//! The agents part of `loopwatch explain`: the sequence of agents a run was handed to, how
//! far each profile's `delegation_cycle` is from firing and the `max_handoffs` budget
//! ([`crate::engine::delegation_state`]).

use serde::Serialize;

use super::fired::Fired;
use crate::engine::Engine;

/// A run's agents and delegation figures.
#[derive(Clone, Debug, Serialize)]
pub struct DelegationExplanation {
    /// The agents the run was handed to, one per change of agent, in start order.
    pub agents: Vec<String>,
    /// Per profile that sets `delegation_cycle`: how many times the run has gone round
    /// the cycle going on (since the profile's last detection) against its threshold.
    pub cycles: Vec<CycleFigure>,
    /// Handoffs (changes of agent) so far, and the `max_handoffs` budget (0 = off).
    pub handoffs: usize,
    pub max_handoffs: u64,
    /// `delegation_cycle` and `max_handoffs` detections of the run.
    pub fired: Vec<Fired>,
}

/// One profile's `delegation_cycle` figure.
#[derive(Clone, Debug, Serialize)]
pub struct CycleFigure {
    pub profile: String,
    pub rounds: usize,
    /// Agents in the cycle (0 when none is going on).
    pub period: usize,
    pub threshold: usize,
}

/// The delegation figures of `run_key`, for every profile or only `profile`; `None` when
/// the run was never handed to an agent (or the tracker is off).
pub fn explain(
    engine: &Engine,
    run_key: &str,
    profile: Option<&str>,
) -> Option<DelegationExplanation> {
    let tracker = engine.delegations.as_ref()?;
    let standing = tracker.standing(run_key)?;
    Some(DelegationExplanation {
        agents: standing.agents.iter().map(|a| a.to_string()).collect(),
        cycles: standing
            .cycles
            .into_iter()
            .filter(|(name, ..)| profile.is_none_or(|p| p == name))
            .map(|(profile, threshold, rounds, period)| CycleFigure {
                profile,
                rounds,
                period,
                threshold,
            })
            .collect(),
        handoffs: standing.handoffs,
        max_handoffs: standing.max_handoffs,
        fired: tracker
            .detections(run_key)
            .iter()
            .filter(|d| profile.is_none_or(|p| p == d.profile.name))
            .map(Fired::from)
            .collect(),
    })
}

/// The text lines of `loopwatch explain` for a run's agents.
pub fn render_text(delegation: &DelegationExplanation, out: &mut String) {
    out.push_str(&format!(
        "  agents: {} ({} handoff(s){})\n",
        delegation.agents.join(" → "),
        delegation.handoffs,
        match delegation.max_handoffs {
            0 => String::new(),
            limit => format!(", max_handoffs {limit}"),
        }
    ));
    for cycle in &delegation.cycles {
        let agents = match cycle.period {
            0 => String::new(),
            p => format!(" (a cycle of {p} agents)"),
        };
        out.push_str(&format!(
            "    profile {}: delegation_cycle {}/{}{agents}\n",
            cycle.profile, cycle.rounds, cycle.threshold
        ));
    }
    for fired in &delegation.fired {
        out.push_str(&format!(
            "    FIRED {} {} on span {}: {}\n",
            fired.pattern, fired.severity, fired.span_id, fired.reason
        ));
    }
}
