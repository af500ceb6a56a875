//! Delegation cycles (`delegation_cycle`): agents of a multi-agent run handing the work
//! around the same cycle again and again (A hands off to B, B hands back to A, …). Pure:
//! a function of the run's sequence of agent activations, in span start-time order.
//!
//! The sequence is the agents that took over the run, one entry per change of agent
//! (consecutive activations of the same agent are one: an agent span and the handoff that
//! led to it name the same agent). A cycle of period p (2 ≤ p ≤ [`MAX_PERIOD`]) holds at
//! position k when the agent at k is the agent at k − p; a streak of L such positions in a
//! row has gone round the cycle ⌈L / p⌉ times (A,B,A is once: B handed back to A). A
//! detection is the first position where some period has gone round `threshold` times
//! (the period with the most rounds; the shortest on ties); the positions up to it are
//! consumed, as the call patterns consume their window, so a cycle that goes on is
//! detected again once it has gone round `threshold` more times.
//!
//! Agents are compared by [`agent_key`], so a handoff tool named after its target
//! (`transfer_to_billing_agent`) and that agent's own span (`Billing Agent`) are the same
//! agent.

/// The longest cycle of agents looked for.
pub const MAX_PERIOD: usize = 4;

/// A cycle found: where it completed and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    /// Position in the sequence of the activation that completed it.
    pub at: usize,
    /// Agents in the cycle.
    pub period: usize,
    /// Times round the cycle.
    pub cycles: usize,
}

impl Found {
    /// Positions of the cycle's agents, in cycle order, ending just before [`Found::at`]
    /// (the agent at `at` is the first of them again).
    pub fn members(&self) -> std::ops::Range<usize> {
        self.at - self.period..self.at
    }
}

/// The comparison key of an agent name: lower case, every run of characters that are
/// not letters or digits one `_`, none at either end (`"Billing Agent"` and
/// `billing_agent` are the same agent, as the OpenAI Agents SDK names the handoff tool of
/// an agent: `transfer_to_` + this form of its name).
pub fn agent_key(name: &str) -> String {
    let mut key = String::with_capacity(name.len());
    let mut gap = false;
    for c in name.chars() {
        if c.is_alphanumeric() {
            if gap && !key.is_empty() {
                key.push('_');
            }
            gap = false;
            key.extend(c.to_lowercase());
        } else {
            gap = true;
        }
    }
    key
}

/// Every cycle `sequence` completes with `threshold` rounds (0 = off), in order.
pub fn find<K: PartialEq>(sequence: &[K], threshold: usize) -> Vec<Found> {
    let mut out = Vec::new();
    if threshold == 0 {
        return out;
    }
    let mut scan = Scan::default();
    for at in 0..sequence.len() {
        if let Some(found) = scan.step(sequence, at, threshold) {
            out.push(found);
        }
    }
    out
}

/// How far the sequence's last positions have gone round a cycle since the last
/// detection: (rounds, period); (0, 0) when no cycle is going. For `loopwatch explain`.
pub fn standing<K: PartialEq>(sequence: &[K], threshold: usize) -> (usize, usize) {
    let mut scan = Scan::default();
    for at in 0..sequence.len() {
        // With no threshold nothing is consumed: the streak of the whole sequence.
        scan.step(
            sequence,
            at,
            if threshold == 0 {
                usize::MAX
            } else {
                threshold
            },
        );
    }
    scan.best()
}

/// Streaks per period since the last detection.
#[derive(Default)]
struct Scan {
    /// First position of the current stretch (after the last detection).
    start: usize,
    /// Streak length per period, index p − 2.
    streaks: [usize; MAX_PERIOD - 1],
}

impl Scan {
    fn step<K: PartialEq>(&mut self, sequence: &[K], at: usize, threshold: usize) -> Option<Found> {
        for (i, streak) in self.streaks.iter_mut().enumerate() {
            let period = i + 2;
            let holds = at >= self.start + period && sequence[at] == sequence[at - period];
            *streak = if holds { *streak + 1 } else { 0 };
        }
        let (cycles, period) = self.best();
        if cycles < threshold {
            return None;
        }
        self.start = at + 1;
        self.streaks = Default::default();
        Some(Found { at, period, cycles })
    }

    /// (rounds, period) of the period gone round most; the shortest on ties.
    fn best(&self) -> (usize, usize) {
        let mut best = (0, 0);
        for (i, streak) in self.streaks.iter().enumerate() {
            let period = i + 2;
            let cycles = streak.div_ceil(period);
            if cycles > best.0 {
                best = (cycles, period);
            }
        }
        best
    }
}

/// Handoffs in a sequence of agents: every change of agent.
pub fn handoffs(sequence_len: usize) -> usize {
    sequence_len.saturating_sub(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq(s: &str) -> Vec<char> {
        s.chars().collect()
    }

    #[test]
    fn ping_pong_is_counted_in_round_trips() {
        // A,B,A: B handed back once.
        assert_eq!(standing(&seq("ABA"), 3), (1, 2));
        assert_eq!(standing(&seq("ABAB"), 3), (1, 2));
        assert_eq!(standing(&seq("ABABA"), 3), (2, 2));
        assert_eq!(
            find(&seq("ABABABA"), 3),
            vec![Found {
                at: 6,
                period: 2,
                cycles: 3
            }]
        );
        // Consumed: the next detection needs three more rounds after position 6.
        assert_eq!(find(&seq("ABABABAB"), 3).len(), 1);
        // After position 6 the stretch starts at position 7: B,A,B,A,B,A,B goes round three
        // times at position 13.
        assert_eq!(find(&seq("ABABABABABABA"), 3).len(), 1);
        let again = find(&seq("ABABABABABABAB"), 3);
        assert_eq!(again.iter().map(|f| f.at).collect::<Vec<_>>(), [6, 13]);
    }

    #[test]
    fn a_supervisor_with_different_workers_is_no_cycle() {
        assert_eq!(find(&seq("SXSYSZSXSY"), 3), vec![]);
        // The same two workers in turn is a cycle of period 4.
        let found = find(&seq("SXSYSXSYSXSYS"), 3);
        assert_eq!(found.len(), 1);
        assert_eq!((found[0].period, found[0].cycles, found[0].at), (4, 3, 12));
        assert_eq!(found[0].members(), 8..12);
    }

    #[test]
    fn longer_cycles_and_off() {
        let found = find(&seq("ABCABCABCA"), 3);
        assert_eq!(
            found,
            vec![Found {
                at: 9,
                period: 3,
                cycles: 3
            }]
        );
        assert_eq!(find(&seq("ABABABABAB"), 0), vec![]);
        assert_eq!(standing(&seq(""), 3), (0, 0));
        assert_eq!(standing(&seq("ABC"), 3), (0, 0));
        assert_eq!(handoffs(0), 0);
        assert_eq!(handoffs(5), 4);
    }

    #[test]
    fn agent_keys_match_handoff_tool_names() {
        assert_eq!(agent_key("Billing Agent"), "billing_agent");
        assert_eq!(agent_key("billing_agent"), "billing_agent");
        assert_eq!(agent_key("  Réservation-Agent!! "), "réservation_agent");
        assert_eq!(agent_key("___"), "");
    }
}
