//! Progress means a real change (issue 29 item 2). A repeated call whose results changed is
//! progress (severity `info`, reference `progress`), unless each of its changing results
//! grew by the same block as the one before ([`super::traits::CallTraits::growth`]): the
//! same chunk appended or prepended at each call (an edit that prepends instead of
//! replacing) is no progress. Results that differ only in noise were made equal before
//! they were compared; [`evidence_of_same`] says so.

use super::{CallRecord, Evidence, ResultKey};
use crate::fingerprint::Fingerprint;

/// Progress (reference `progress`): every result was captured and some call returned
/// different results, not by growing the same way at each call. A missing result anywhere
/// shows no progress (where the reference's answer would depend on set iteration order,
/// this is the conservative one). The evidence says why changed results were no progress.
pub(crate) fn shows_progress<'a>(calls: impl Iterator<Item = &'a CallRecord>) -> (bool, Evidence) {
    // Per call fingerprint, its records' results and growth signatures in order.
    let mut groups: Vec<(Fingerprint, Vec<Grown>)> = Vec::new();
    let mut noise = false;
    for call in calls {
        let Some(result) = call.result else {
            return (false, Evidence::None);
        };
        noise |= call.traits.has(super::CallTraits::NOISE);
        let growth = call.traits.growth();
        match groups.iter_mut().find(|(fp, _)| *fp == call.fingerprint) {
            Some((_, results)) => results.push((result, growth)),
            None => groups.push((call.fingerprint, vec![(result, growth)])),
        }
    }
    let mut grew = false;
    for (_, results) in &groups {
        if results.iter().all(|(r, _)| *r == results[0].0) {
            continue;
        }
        if grows_by_one_block(results) {
            grew = true;
        } else {
            return (true, Evidence::None);
        }
    }
    let evidence = if grew {
        Evidence::Growth
    } else if noise {
        Evidence::Noise
    } else {
        Evidence::None
    };
    (false, evidence)
}

/// Results needed to say that a result grows by one block each time: the run keeps 8 bits
/// of each growth signature, so three equal deltas by chance are one in 2¹⁶.
pub(crate) const GROWTH_RESULTS: usize = 4;

/// A result and its growth signature.
type Grown = (ResultKey, Option<u8>);

/// True when at least [`GROWTH_RESULTS`] results each differ from the one before by the
/// same non-zero growth delta (modulo 2⁸).
fn grows_by_one_block(results: &[Grown]) -> bool {
    if results.len() < GROWTH_RESULTS {
        return false;
    }
    let signatures: Option<Vec<u8>> = results.iter().map(|(_, g)| *g).collect();
    let Some(signatures) = signatures else {
        return false;
    };
    let delta = |w: &[u8]| w[1].wrapping_sub(w[0]);
    let first = delta(&signatures[..2]);
    first != 0 && signatures.windows(2).all(|w| delta(w) == first)
}

/// The evidence of a detection whose results were the same: [`Evidence::Noise`] when
/// noise was removed from any of them before they were compared.
pub(crate) fn evidence_of_same<'a>(calls: impl Iterator<Item = &'a CallRecord>) -> Evidence {
    let mut calls = calls;
    if calls.any(|c| c.traits.has(super::CallTraits::NOISE)) {
        Evidence::Noise
    } else {
        Evidence::None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::tests::rec;
    use crate::detector::CallTraits;

    fn grown(index: usize, result: u8, growth: u32) -> CallRecord {
        let mut r = rec(index, "edit", 1, result);
        r.traits.set_growth(growth);
        r
    }

    #[test]
    fn the_same_block_each_time_is_no_progress() {
        let w: Vec<_> = (0..4)
            .map(|i| grown(i, i as u8, 100 + 7 * i as u32))
            .collect();
        assert_eq!(shows_progress(w.iter()), (false, Evidence::Growth));
        let mut other = w.clone();
        other[3] = grown(3, 3, 999);
        assert_eq!(shows_progress(other.iter()), (true, Evidence::None));
        // three results are no pattern yet
        assert_eq!(shows_progress(w[..3].iter()), (true, Evidence::None));
    }

    #[test]
    fn noise_is_said_on_same_results() {
        let mut a = rec(0, "bash", 1, 7);
        a.traits = CallTraits::with_flags(CallTraits::NOISE);
        let b = rec(1, "bash", 1, 7);
        assert_eq!(evidence_of_same([&a, &b].into_iter()), Evidence::Noise);
        assert_eq!(
            shows_progress([&a, &b].into_iter()),
            (false, Evidence::Noise)
        );
        assert_eq!(evidence_of_same([&b].into_iter()), Evidence::None);
    }
}
