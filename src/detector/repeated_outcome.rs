//! `repeated_outcome` (issue 29 item 3): the last N calls, whatever their tools and
//! arguments, returned the same outcome: the same error, the same "not found" (results
//! compared after noise and echoed arguments are removed, [`crate::compare`]). A result
//! counts only when it is an outcome ([`CallTraits::OUTCOME`]: it says something; an empty
//! or trivially short success does not, nor a write's plain acknowledgement). A result that
//! is no outcome ends the streak.
//!
//! An agent stuck between two errors is as stuck as one stuck on one: prose typed as a
//! command draws `DISCUSSION: command not found` and `unexpected EOF` by turns, a build
//! retried with varied flags fails one of two ways. So the streak may hold up to
//! `repeated_outcome_forms` different outcomes (a profile key; 1 = one outcome only), and a
//! third ends it; at the threshold every outcome of the last N calls must have come at
//! least twice, so one new answer at the end of a streak (the search that finally finds
//! something) is never part of it.

use smallvec::SmallVec;

use super::{CallRecord, CallTraits, Match, Pattern, ResultKey};
use crate::fingerprint::Fingerprint;

/// The most outcomes a streak may hold (`repeated_outcome_forms` ≤ this).
pub const MAX_FORMS: usize = 4;

/// Length of the streak of outcomes of at most `forms` different values that ends the
/// window (0 when its last call's result is no outcome).
pub(crate) fn streak(window: &[CallRecord], forms: usize) -> usize {
    let Some(current) = window.last() else {
        return 0;
    };
    let Some(result) = current
        .result
        .filter(|_| current.traits.has(CallTraits::OUTCOME))
    else {
        return 0;
    };
    if forms <= 1 {
        return window
            .iter()
            .rev()
            .take_while(|r| r.result == Some(result) && r.traits.has(CallTraits::OUTCOME))
            .count();
    }
    let mut seen: SmallVec<[ResultKey; MAX_FORMS]> = SmallVec::new();
    window
        .iter()
        .rev()
        .take_while(|r| {
            let Some(result) = r.result.filter(|_| r.traits.has(CallTraits::OUTCOME)) else {
                return false;
            };
            if seen.contains(&result) {
                return true;
            }
            if seen.len() >= forms {
                return false;
            }
            seen.push(result);
            true
        })
        .count()
}

/// True when every result of `members` occurs at least twice among them (or all are one).
fn each_form_repeats(members: &[CallRecord]) -> bool {
    let first = members[0].result;
    if members.iter().all(|r| r.result == first) {
        return true;
    }
    members.iter().all(|r| {
        members
            .iter()
            .filter(|other| other.result == r.result)
            .nth(1)
            .is_some()
    })
}

/// Checks the window whose last record is the completing call; `threshold(n)` is the
/// threshold of the last n calls (the largest of their tools', 0 if any has it off), and
/// `forms` the most different outcomes a streak may hold.
pub(crate) fn check(
    window: &[CallRecord],
    threshold: &dyn Fn(usize) -> usize,
    forms: usize,
) -> Option<Match> {
    let length = streak(window, forms);
    if length < 2 {
        return None;
    }
    let threshold = threshold(length);
    if threshold == 0 || length < threshold {
        return None;
    }
    let members = &window[window.len() - threshold..];
    if !each_form_repeats(members) {
        return None;
    }
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
        members: members.iter().map(|r| r.index as usize).collect(),
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
        let m = check(&w, &|_| 4, 1).expect("four in a row");
        assert_eq!(m.pattern, Pattern::RepeatedOutcome);
        assert_eq!(m.members, [0, 1, 2, 3]);
        assert_eq!(m.fingerprints.len(), 4);
        assert_eq!(m.tool_names.len(), 1);
        assert!(check(&w[..3], &|_| 4, 1).is_none());
        assert!(check(&w, &|_| 0, 1).is_none(), "off");
    }

    #[test]
    fn a_trivial_or_different_result_ends_the_streak() {
        let mut w: Vec<_> = (0..5).map(|i| outcome(i, "bash", i as u8, 7)).collect();
        w[1] = rec(1, "bash", 1, 7); // same result, but no outcome (e.g. empty output)
        assert_eq!(streak(&w, 1), 3);
        assert!(check(&w, &|_| 4, 1).is_none());
        w[1] = outcome(1, "bash", 1, 8);
        assert_eq!(streak(&w, 1), 3);
        w[1] = outcome(1, "grep", 1, 7); // another tool, the same outcome
        assert_eq!(streak(&w, 1), 5);
    }

    #[test]
    fn two_outcomes_by_turns_are_one_streak() {
        // A, B, A, B, A, B for six different arguments (prose typed as a command:
        // `command not found`, then `unexpected EOF`, by turns)
        let w: Vec<_> = (0..6)
            .map(|i| outcome(i, "bash", i as u8, 7 + (i % 2) as u8))
            .collect();
        assert_eq!(streak(&w, 1), 1);
        assert_eq!(streak(&w, 2), 6);
        assert!(check(&w, &|_| 6, 1).is_none(), "one form only");
        let m = check(&w, &|_| 6, 2).expect("two forms by turns");
        assert_eq!(m.members, [0, 1, 2, 3, 4, 5]);
        assert_eq!(m.fingerprints.len(), 6);
        // in any order: A, A, B, A, B, B
        let order = [7, 7, 8, 7, 8, 8];
        let w: Vec<_> = (0..6)
            .map(|i| outcome(i, "bash", i as u8, order[i]))
            .collect();
        assert!(check(&w, &|_| 6, 2).is_some());
        // a third outcome ends the streak
        let order = [7, 8, 9, 7, 8, 9];
        let w: Vec<_> = (0..6)
            .map(|i| outcome(i, "bash", i as u8, order[i]))
            .collect();
        assert_eq!(streak(&w, 2), 2);
        assert!(check(&w, &|_| 6, 2).is_none());
        assert!(check(&w, &|_| 6, 3).is_some());
    }

    #[test]
    fn one_new_answer_is_not_part_of_a_streak() {
        // five searches "not found", then one that finds something: no loop
        let order = [7, 7, 7, 7, 7, 8];
        let w: Vec<_> = (0..6)
            .map(|i| outcome(i, "grep", i as u8, order[i]))
            .collect();
        assert_eq!(streak(&w, 2), 6);
        assert!(check(&w, &|_| 6, 2).is_none());
        // and a one-off in the middle keeps six calls from being a streak
        let order = [7, 7, 8, 7, 7, 7];
        let w: Vec<_> = (0..6)
            .map(|i| outcome(i, "grep", i as u8, order[i]))
            .collect();
        assert!(check(&w, &|_| 6, 2).is_none());
        assert!(check(&w[3..], &|_| 3, 2).is_some(), "the last three alone");
    }
}
