//! `alternating_calls`: the last `2·threshold` calls of the window are A,B,A,B,… with
//! A ≠ B (reference check 2).

use super::{shows_progress, CallRecord, Match, Pattern};

/// Checks the window whose last record is the completing call.
pub(crate) fn check(window: &[CallRecord], threshold: usize) -> Option<Match> {
    if threshold == 0 {
        return None;
    }
    let len = threshold.checked_mul(2)?;
    let start = window.len().checked_sub(len)?;
    let seq = &window[start..];
    let (a, b) = (&seq.first()?.fingerprint, &seq.get(1)?.fingerprint);
    if a == b {
        return None;
    }
    let alternates = seq
        .iter()
        .enumerate()
        .all(|(i, r)| r.fingerprint == if i % 2 == 0 { *a } else { *b });
    if !alternates {
        return None;
    }
    let (progress, evidence) = shows_progress(seq.iter());
    Some(Match {
        pattern: Pattern::AlternatingCalls,
        tool_names: vec![seq[0].tool_name.clone(), seq[1].tool_name.clone()],
        count: threshold,
        progress,
        fingerprints: vec![*a, *b],
        members: seq.iter().map(|r| r.index as usize).collect(),
        evidence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::tests::{rec, rec_no_result};

    fn abab(n: usize, results: impl Fn(usize) -> u8) -> Vec<CallRecord> {
        (0..n)
            .map(|i| {
                let (tool, arg) = if i % 2 == 0 { ("a", 1) } else { ("b", 2) };
                rec(i, tool, arg, results(i))
            })
            .collect()
    }

    #[test]
    fn fires_on_n_cycles() {
        let w = abab(7, |_| 0);
        let m = check(&w, 3).expect("ABABAB at the end");
        assert_eq!(m.members, vec![1, 2, 3, 4, 5, 6]);
        assert_eq!(
            m.tool_names.iter().map(|t| &**t).collect::<Vec<_>>(),
            ["b", "a"]
        );
        assert_eq!(m.count, 3);
        assert!(!m.progress);
        assert!(check(&abab(5, |_| 0), 3).is_none());
    }

    #[test]
    fn changing_results_are_progress_unless_one_is_missing() {
        let m = check(&abab(6, |i| i as u8), 3).expect("fires");
        assert!(m.progress);
        let mut w = abab(6, |i| i as u8);
        w[5] = rec_no_result(5, "b", 2);
        assert!(!check(&w, 3).expect("fires").progress);
    }

    #[test]
    fn same_call_or_broken_alternation_never_fires() {
        let same: Vec<_> = (0..6).map(|i| rec(i, "a", 1, 0)).collect();
        assert!(check(&same, 3).is_none());
        let mut w = abab(6, |_| 0);
        w[4] = rec(4, "c", 3, 0);
        assert!(check(&w, 3).is_none());
    }
}
