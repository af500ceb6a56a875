//! `near_repeat` (issue 29 item 5): the last N calls of one tool have near-identical
//! arguments (their SimHashes, [`crate::compare::signature::simhash`], differ in at most
//! `near_repeat_distance` bits of 32), at least two of them differ, and all returned the
//! same result: `find /usr -name java`, `find /opt -name java`, … all empty; a query
//! reworded a little for the same answer. Exact repeats are repeated_result's.

use super::{CallRecord, Match, Pattern};
use crate::compare::signature::distance;
use crate::fingerprint::Fingerprint;

/// Length of the run of near repeats that ends the window.
pub(crate) fn streak(window: &[CallRecord], max_distance: u32) -> usize {
    let Some(current) = window.last() else {
        return 0;
    };
    let (Some(near), Some(_)) = (current.traits.near(), current.result) else {
        return 0;
    };
    window
        .iter()
        .rev()
        .take_while(|r| {
            r.tool_name == current.tool_name
                && r.result == current.result
                && r.traits
                    .near()
                    .is_some_and(|n| distance(n, near) <= max_distance)
        })
        .count()
}

/// [`streak`] as `explain` counts it: 0 while every call of the streak has the same
/// arguments (that is repeated_call's and repeated_result's count, not a near repeat).
pub(crate) fn near_streak(window: &[CallRecord], max_distance: u32) -> usize {
    let length = streak(window, max_distance);
    let tail = &window[window.len() - length..];
    if tail.iter().any(|r| r.fingerprint != tail[0].fingerprint) {
        length
    } else {
        0
    }
}

/// Checks the window whose last record is the completing call.
pub(crate) fn check(window: &[CallRecord], threshold: usize, max_distance: u32) -> Option<Match> {
    if threshold == 0 {
        return None;
    }
    if streak(window, max_distance) < threshold {
        return None;
    }
    let members = &window[window.len() - threshold..];
    let mut fingerprints: Vec<Fingerprint> = Vec::new();
    for r in members {
        if !fingerprints.contains(&r.fingerprint) {
            fingerprints.push(r.fingerprint);
        }
    }
    if fingerprints.len() < 2 {
        return None;
    }
    Some(Match {
        pattern: Pattern::NearRepeat,
        tool_names: vec![members[0].tool_name.clone()],
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

    fn near(index: usize, arg: u8, simhash: u32, result: u8) -> CallRecord {
        let mut r = rec(index, "bash", arg, result);
        r.traits.set_near(simhash);
        r
    }

    #[test]
    fn near_arguments_with_one_result() {
        let w = vec![
            near(0, 1, 0b0000, 5),
            near(1, 2, 0b0001, 5),
            near(2, 3, 0b0011, 5),
            near(3, 4, 0b0010, 5),
        ];
        let m = check(&w, 4, 2).expect("four near repeats");
        assert_eq!(m.pattern, Pattern::NearRepeat);
        assert_eq!(m.fingerprints.len(), 4);
        assert!(check(&w, 4, 0).is_none(), "not within 0 bits");
        let mut other_result = w.clone();
        other_result[0] = near(0, 1, 0, 6);
        assert!(check(&other_result, 4, 2).is_none());
        let same: Vec<_> = (0..4).map(|i| near(i, 1, 0, 5)).collect();
        assert!(
            check(&same, 4, 2).is_none(),
            "exact repeats are not near ones"
        );
    }
}
