//! `escalate_after`: counts a run's non-progress detections per loop (pattern and call
//! fingerprints), so the k-th detection of the same loop can be a kill (the warn → block
//! → halt ladder of the in-process guards).

use foldhash::HashMap;

use super::Pattern;
use crate::fingerprint::Fingerprint;

/// Distinct loops remembered per run and profile; past it the counts start over (a run
/// with this many distinct loops is flagged long before).
const MAX_LOOPS: usize = 1024;

#[derive(Clone, Debug, Default)]
pub(crate) struct Escalation {
    counts: HashMap<(Pattern, Vec<Fingerprint>), usize>,
}

impl Escalation {
    /// Counts one more detection of this loop; returns how many there have been (1-based).
    pub(crate) fn count(&mut self, pattern: Pattern, fingerprints: &[Fingerprint]) -> usize {
        if self.counts.len() >= MAX_LOOPS
            && !self.counts.contains_key(&(pattern, fingerprints.to_vec()))
        {
            self.counts.clear();
        }
        let n = self
            .counts
            .entry((pattern, fingerprints.to_vec()))
            .or_insert(0);
        *n += 1;
        *n
    }
}
