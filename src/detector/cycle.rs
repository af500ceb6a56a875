//! `cycle`: the last `p·threshold` calls repeat a p-call sequence, 3 ≤ p ≤
//! `max_cycle_period` (≤ 8), with ≥ 2 distinct calls and no shorter period (reference
//! check 3). The smallest matching p wins. The calls looked at are those kept since the
//! last detection, which may reach past the window: an exact repetition of a p-call
//! sequence is never legitimate work.

use super::{shows_progress, CallRecord, Match, Pattern};
use crate::fingerprint::Fingerprint;

/// Checks the calls kept since the last detection (`window`, whose last record is the
/// completing call); `threshold(p)` is the repeat count needed for period p (0 = off).
pub(crate) fn check(
    window: &[CallRecord],
    threshold: &dyn Fn(usize) -> usize,
    max_period: usize,
) -> Option<Match> {
    for period in 3..=max_period.min(window.len()) {
        let threshold = threshold(period);
        if threshold == 0 {
            continue;
        }
        let len = period.checked_mul(threshold)?;
        let Some(start) = window.len().checked_sub(len) else {
            continue; // a longer period may have a smaller threshold
        };
        let seq = &window[start..];
        let pattern: Vec<Fingerprint> = seq[..period].iter().map(|r| r.fingerprint).collect();
        if is_cycle(seq, &pattern) {
            let mut fingerprints: Vec<Fingerprint> = Vec::new();
            for fp in &pattern {
                if !fingerprints.contains(fp) {
                    fingerprints.push(*fp);
                }
            }
            let (progress, evidence) = shows_progress(seq.iter());
            return Some(Match {
                pattern: Pattern::Cycle,
                tool_names: seq[..period].iter().map(|r| r.tool_name.clone()).collect(),
                count: threshold,
                progress,
                fingerprints,
                members: seq.iter().map(|r| r.index as usize).collect(),
                evidence,
            });
        }
    }
    None
}

/// `seq` repeats `pattern`, which has ≥ 2 distinct calls and is not a shorter period
/// repeated.
fn is_cycle(seq: &[CallRecord], pattern: &[Fingerprint]) -> bool {
    let period = pattern.len();
    let distinct = pattern.iter().any(|fp| *fp != pattern[0]);
    let repeats = seq
        .iter()
        .enumerate()
        .all(|(i, r)| r.fingerprint == pattern[i % period]);
    let shorter = (1..period)
        .any(|q| period.is_multiple_of(q) && (0..period).all(|i| pattern[i] == pattern[i % q]));
    distinct && repeats && !shorter
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::tests::rec;

    fn seq(calls: &[(&str, u8)]) -> Vec<CallRecord> {
        calls
            .iter()
            .enumerate()
            .map(|(i, (tool, arg))| rec(i, tool, *arg, 0))
            .collect()
    }

    #[test]
    fn fires_on_abc_three_times() {
        let abc = [("a", 1), ("b", 2), ("c", 3)];
        let calls: Vec<_> = std::iter::once(("z", 9))
            .chain(abc.iter().copied().cycle().take(9))
            .collect();
        let m = check(&seq(&calls), &|_| 3, 3).expect("ABCx3");
        assert_eq!(m.members, (1..10).collect::<Vec<_>>());
        assert_eq!(
            m.tool_names.iter().map(|t| &**t).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(m.fingerprints.len(), 3);
        assert_eq!(m.count, 3);
        assert!(check(&seq(&calls[..9]), &|_| 3, 3).is_none());
    }

    #[test]
    fn aab_counts_two_distinct_calls() {
        let calls: Vec<_> = [("a", 1), ("a", 1), ("b", 2)]
            .iter()
            .copied()
            .cycle()
            .take(9)
            .collect();
        let m = check(&seq(&calls), &|_| 3, 3).expect("AAB x3");
        assert_eq!(m.tool_names.len(), 3);
        assert_eq!(m.fingerprints.len(), 2);
    }

    #[test]
    fn shorter_periods_and_single_calls_are_not_cycles() {
        let same: Vec<_> = std::iter::repeat_n(("a", 1), 9).collect();
        assert!(check(&seq(&same), &|_| 3, 3).is_none());
        // period 4 = ABAB is period 2 in disguise
        let abab: Vec<_> = [("a", 1), ("b", 2)]
            .iter()
            .copied()
            .cycle()
            .take(12)
            .collect();
        assert!(check(&seq(&abab), &|_| 3, 4).is_none());
        // a real period 4 is found when allowed
        let abcd: Vec<_> = [("a", 1), ("b", 2), ("c", 3), ("d", 4)]
            .iter()
            .copied()
            .cycle()
            .take(12)
            .collect();
        assert!(check(&seq(&abcd), &|_| 3, 3).is_none());
        assert_eq!(
            check(&seq(&abcd), &|_| 3, 4).map(|m| m.members.len()),
            Some(12)
        );
    }
}
