//! `repeated_outcome` (issue 29 item 3): the last N calls, whatever their tools and
//! arguments, returned the same outcome: the same error, the same "not found" (results
//! compared after noise and echoed arguments are removed, [`crate::compare`]). A result
//! counts only when it is an outcome ([`CallTraits::OUTCOME`]: it says something; an empty
//! or trivially short success does not, nor a write's plain acknowledgement). A different
//! result, or one that is no outcome, ends the streak.

use super::{CallRecord, CallTraits, Match, Pattern};
use crate::fingerprint::Fingerprint;

/// Length of the streak of same outcomes that ends the window (0 when its last call's
/// result is no outcome).
pub(crate) fn streak(window: &[CallRecord]) -> usize {
    let Some(current) = window.last() else {
        return 0;
    };
    if current.result.is_none() || !current.traits.has(CallTraits::OUTCOME) {
        return 0;
    }
    window
        .iter()
        .rev()
        .take_while(|r| r.result == current.result && r.traits.has(CallTraits::OUTCOME))
        .count()
}

/// Checks the window whose last record is the completing call; `threshold(n)` is the
/// threshold of the last n calls (the largest of their tools', 0 if any has it off).
pub(crate) fn check(window: &[CallRecord], threshold: &dyn Fn(usize) -> usize) -> Option<Match> {
    let length = streak(window);
    if length < 2 {
        return None;
    }
    let threshold = threshold(length);
    if threshold == 0 || length < threshold {
        return None;
    }
    let members = &window[window.len() - threshold..];
    let mut tool_names = Vec::new();
    let mut fingerprints: Vec<Fingerprint> = Vec::new();
    for r in members {
        if !tool_names.contains(&r.tool_name) {
            tool_names.push(r.tool_name.clone());
        }
        if !fingerprints.contains(&r.fingerprint) {
            fingerprints.push(r.fingerprint);
        }
    }
    Some(Match {
        pattern: Pattern::RepeatedOutcome,
        tool_names,
        count: threshold,
        progress: false,
        fingerprints,
        members: members.iter().map(|r| r.index).collect(),
        evidence: super::evidence_of_same(members.iter()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::tests::rec;

    fn outcome(index: usize, tool: &str, arg: u8, result: u8) -> CallRecord {
        let mut r = rec(index, tool, arg, result);
        r.traits = CallTraits::with_flags(CallTraits::OUTCOME);
        r
    }

    #[test]
    fn the_same_outcome_for_different_arguments() {
        let w: Vec<_> = (0..4).map(|i| outcome(i, "bash", i as u8, 7)).collect();
        let m = check(&w, &|_| 4).expect("four in a row");
        assert_eq!(m.pattern, Pattern::RepeatedOutcome);
        assert_eq!(m.members, [0, 1, 2, 3]);
        assert_eq!(m.fingerprints.len(), 4);
        assert_eq!(m.tool_names.len(), 1);
        assert!(check(&w[..3], &|_| 4).is_none());
        assert!(check(&w, &|_| 0).is_none(), "off");
    }

    #[test]
    fn a_trivial_or_different_result_ends_the_streak() {
        let mut w: Vec<_> = (0..5).map(|i| outcome(i, "bash", i as u8, 7)).collect();
        w[1] = rec(1, "bash", 1, 7); // same result, but no outcome (e.g. empty output)
        assert_eq!(streak(&w), 3);
        assert!(check(&w, &|_| 4).is_none());
        w[1] = outcome(1, "bash", 1, 8);
        assert_eq!(streak(&w), 3);
        w[1] = outcome(1, "grep", 1, 7); // another tool, the same outcome
        assert_eq!(streak(&w), 5);
    }
}
