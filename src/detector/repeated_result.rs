//! `repeated_result`: the completing call's last `threshold` occurrences in the window all
//! returned the same captured result (reference check 1), counting only the occurrences
//! since the last state change with new arguments ([`super::mutations`]). Never shows
//! progress.
//! With `repeated_result_scope = "run"`, [`RunStreaks`] counts the occurrences since the
//! last detection instead, however far apart.

use std::collections::VecDeque;

use foldhash::HashMap;

use super::{CallRecord, Match, Pattern, ResultKey};
use crate::fingerprint::Fingerprint;

/// Checks the window whose last record is the completing call, counting occurrences from
/// window position `from` on.
pub(crate) fn check(window: &[CallRecord], threshold: usize, from: usize) -> Option<Match> {
    if threshold == 0 {
        return None;
    }
    let current = window.last()?;
    let result = current.result?;
    let occurrences = super::occurrences(window, &current.fingerprint, from);
    let first = occurrences.len().checked_sub(threshold)?;
    let last = &occurrences[first..];
    if !last.iter().all(|&i| window[i].result == Some(result)) {
        return None;
    }
    let mut found = stuck_call(
        current,
        threshold,
        last.iter().map(|&i| window[i].index as usize).collect(),
    );
    found.evidence = super::evidence_of_same(last.iter().map(|&i| &window[i]));
    Some(found)
}

/// The repeated_result match of `current`'s call: `threshold` identical results, at the
/// call ordinals `members` (window scope or run scope alike).
fn stuck_call(current: &CallRecord, threshold: usize, members: Vec<usize>) -> Match {
    Match {
        pattern: Pattern::RepeatedResult,
        tool_names: vec![current.tool_name.clone()],
        count: threshold,
        progress: false,
        fingerprints: vec![current.fingerprint],
        members,
        evidence: super::Evidence::None,
    }
}

/// Calls tracked at once in run scope; past it, calls seen once are dropped first.
const MAX_STREAKS: usize = 4096;

/// Per call fingerprint: the result of its latest occurrence and the observation indices of
/// its latest occurrences that all returned it (at most the threshold), since the last
/// detection.
#[derive(Clone, Debug, Default)]
pub(crate) struct RunStreaks {
    streaks: HashMap<Fingerprint, (Option<ResultKey>, VecDeque<usize>)>,
}

impl RunStreaks {
    /// Adds a call (before checking it), keeping at most `threshold` (its repeated_result
    /// threshold) occurrences. A missing result starts the streak over.
    pub(crate) fn observe(&mut self, call: &CallRecord, threshold: usize) {
        if self.streaks.len() >= MAX_STREAKS && !self.streaks.contains_key(&call.fingerprint) {
            self.streaks.retain(|_, (_, members)| members.len() > 1);
            if self.streaks.len() >= MAX_STREAKS {
                self.streaks.clear();
            }
        }
        let (result, members) = self.streaks.entry(call.fingerprint).or_default();
        if *result != call.result || call.result.is_none() {
            members.clear();
        }
        *result = call.result;
        members.push_back(call.index as usize);
        while members.len() > threshold.max(1) {
            members.pop_front();
        }
    }

    /// The run-scope repeated_result for the call just observed, at its `threshold`.
    pub(crate) fn check(&self, current: &CallRecord, threshold: usize) -> Option<Match> {
        let (result, members) = self.streaks.get(&current.fingerprint)?;
        if threshold == 0 || result.is_none() || members.len() < threshold {
            return None;
        }
        Some(stuck_call(
            current,
            threshold,
            members.iter().copied().collect(),
        ))
    }

    /// Latest occurrences of `fingerprint` in a row with the same captured result (at most
    /// the threshold; 0 when unknown or after a missing result).
    pub(crate) fn len_of(&self, fingerprint: &Fingerprint) -> usize {
        match self.streaks.get(fingerprint) {
            Some((Some(_), members)) => members.len(),
            _ => 0,
        }
    }

    /// After a detection: counting starts over.
    pub(crate) fn clear(&mut self) {
        self.streaks.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::tests::{rec, rec_no_result};

    #[test]
    fn fires_on_the_last_n_same_results() {
        let w = vec![
            rec(0, "a", 1, 7),
            rec(1, "b", 2, 8),
            rec(2, "a", 1, 7),
            rec(3, "a", 1, 7),
        ];
        let m = check(&w, 3, 0).expect("three same results");
        assert_eq!(m.pattern, Pattern::RepeatedResult);
        assert_eq!(m.count, 3);
        assert_eq!(m.members, vec![0, 2, 3]);
        assert_eq!(&*m.tool_names[0], "a");
        assert!(!m.progress);
    }

    #[test]
    fn only_the_last_n_occurrences_count() {
        // an old different result is outside the last 3
        let w = vec![
            rec(0, "a", 1, 9),
            rec(1, "a", 1, 7),
            rec(2, "a", 1, 7),
            rec(3, "a", 1, 7),
        ];
        assert_eq!(check(&w, 3, 0).map(|m| m.members), Some(vec![1, 2, 3]));
        let changed = vec![rec(0, "a", 1, 7), rec(1, "a", 1, 9), rec(2, "a", 1, 7)];
        assert!(check(&changed, 3, 0).is_none());
    }

    #[test]
    fn missing_result_or_too_few_never_fires() {
        let w = vec![
            rec(0, "a", 1, 7),
            rec(1, "a", 1, 7),
            rec_no_result(2, "a", 1),
        ];
        assert!(check(&w, 3, 0).is_none());
        let w = vec![rec(0, "a", 1, 7), rec(1, "a", 1, 7)];
        assert!(check(&w, 3, 0).is_none());
        // same result, different calls: not this pattern
        let w = vec![rec(0, "a", 1, 7), rec(1, "a", 2, 7), rec(2, "a", 3, 7)];
        assert!(check(&w, 3, 0).is_none());
    }
}
