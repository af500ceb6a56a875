//! `repeated_call`: the completing call occurs at least `threshold` times in the window
//! (reference check 4), counting only the occurrences since the last state change with new
//! arguments ([`super::mutations`]); `count` is the number of occurrences.

use super::{shows_progress, CallRecord, Match, Pattern};

/// Checks the window whose last record is the completing call, counting occurrences from
/// window position `from` on.
pub(crate) fn check(window: &[CallRecord], threshold: usize, from: usize) -> Option<Match> {
    if threshold == 0 {
        return None;
    }
    let current = window.last()?;
    let occurrences = super::occurrences(window, &current.fingerprint, from);
    if occurrences.len() < threshold {
        return None;
    }
    let (progress, evidence) = shows_progress(occurrences.iter().map(|&i| &window[i]));
    Some(Match {
        pattern: Pattern::RepeatedCall,
        tool_names: vec![current.tool_name.clone()],
        count: occurrences.len(),
        progress,
        fingerprints: vec![current.fingerprint],
        members: occurrences
            .iter()
            .map(|&i| window[i].index as usize)
            .collect(),
        evidence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::tests::{rec, rec_no_result};

    #[test]
    fn counts_every_occurrence_in_the_window() {
        let w: Vec<_> = (0..7)
            .map(|i| {
                if i % 3 == 1 {
                    rec(i, "b", 2, 0)
                } else {
                    rec(i, "a", 1, 0)
                }
            })
            .collect();
        let m = check(&w, 4, 0).expect("a occurs 5 times");
        assert_eq!(m.count, 5);
        assert_eq!(m.members, vec![0, 2, 3, 5, 6]);
        assert!(!m.progress);
        assert!(check(&w, 6, 0).is_none());
    }

    #[test]
    fn changing_results_are_progress() {
        let w: Vec<_> = (0..5).map(|i| rec(i, "poll", 1, i as u8)).collect();
        assert!(check(&w, 5, 0).expect("fires").progress);
        // a new edit in between: the count starts over
        assert!(check(&w, 3, 3).is_none());
        let mut w = w;
        w[0] = rec_no_result(0, "poll", 1);
        assert!(!check(&w, 5, 0).expect("fires").progress);
    }
}
