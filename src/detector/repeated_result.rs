//! `repeated_result`: the completing call's last `threshold` occurrences in the window all
//! returned the same captured result (reference check 1). Never shows progress.

use super::{CallRecord, Match, Pattern};

/// Checks the window whose last record is the completing call.
pub(crate) fn check(window: &[CallRecord], threshold: usize) -> Option<Match> {
    let current = window.last()?;
    let result = current.result?;
    let occurrences = super::occurrences(window, &current.fingerprint);
    let first = occurrences.len().checked_sub(threshold)?;
    let last = &occurrences[first..];
    if !last.iter().all(|&i| window[i].result == Some(result)) {
        return None;
    }
    Some(Match {
        pattern: Pattern::RepeatedResult,
        tool_names: vec![current.tool_name.clone()],
        count: threshold,
        progress: false,
        fingerprints: vec![current.fingerprint],
        positions: last.to_vec(),
    })
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
        let m = check(&w, 3).expect("three same results");
        assert_eq!(m.pattern, Pattern::RepeatedResult);
        assert_eq!(m.count, 3);
        assert_eq!(m.positions, vec![0, 2, 3]);
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
        assert_eq!(check(&w, 3).map(|m| m.positions), Some(vec![1, 2, 3]));
        let changed = vec![rec(0, "a", 1, 7), rec(1, "a", 1, 9), rec(2, "a", 1, 7)];
        assert!(check(&changed, 3).is_none());
    }

    #[test]
    fn missing_result_or_too_few_never_fires() {
        let w = vec![
            rec(0, "a", 1, 7),
            rec(1, "a", 1, 7),
            rec_no_result(2, "a", 1),
        ];
        assert!(check(&w, 3).is_none());
        let w = vec![rec(0, "a", 1, 7), rec(1, "a", 1, 7)];
        assert!(check(&w, 3).is_none());
        // same result, different calls: not this pattern
        let w = vec![rec(0, "a", 1, 7), rec(1, "a", 2, 7), rec(2, "a", 3, 7)];
        assert!(check(&w, 3).is_none());
    }
}
