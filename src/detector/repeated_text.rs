//! `repeated_text`: `threshold` consecutive model responses without tool calls whose
//! normalised text is the same; any tool call in between resets the streak.

use crate::fingerprint::Fingerprint;

/// The current streak of identical text responses.
#[derive(Clone, Debug, Default)]
pub(crate) struct TextStreak {
    /// SHA-256 of the previous normalised text (`None` after a reset).
    previous: Option<Fingerprint>,
    /// Observation indices of the streak's responses (at most `threshold`).
    members: Vec<usize>,
}

impl TextStreak {
    /// Identical responses in the current streak.
    pub(crate) fn len(&self) -> usize {
        self.members.len()
    }

    /// A tool call or a tool-call response: the streak starts over.
    pub(crate) fn reset(&mut self) {
        self.previous = None;
        self.members.clear();
    }

    /// Adds a text response; returns the streak's members when it reaches `threshold`
    /// (the streak then starts over, as in the reference).
    pub(crate) fn observe(
        &mut self,
        digest: Fingerprint,
        index: usize,
        threshold: usize,
    ) -> Option<Vec<usize>> {
        if self.previous != Some(digest) {
            self.members.clear();
        }
        self.previous = Some(digest);
        self.members.push(index);
        if self.members.len() >= threshold {
            let members = std::mem::take(&mut self.members);
            self.reset();
            return Some(members);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::text_fingerprint;

    #[test]
    fn fires_on_n_identical_in_a_row_then_restarts() {
        let mut s = TextStreak::default();
        assert_eq!(s.observe(text_fingerprint("done"), 0, 3), None);
        assert_eq!(s.observe(text_fingerprint("done"), 1, 3), None);
        assert_eq!(
            s.observe(text_fingerprint("done"), 2, 3),
            Some(vec![0, 1, 2])
        );
        assert_eq!(s.observe(text_fingerprint("done"), 3, 3), None);
        assert_eq!(s.observe(text_fingerprint("done"), 4, 3), None);
        assert_eq!(
            s.observe(text_fingerprint("done"), 5, 3),
            Some(vec![3, 4, 5])
        );
    }

    #[test]
    fn a_different_text_or_a_reset_breaks_the_streak() {
        let mut s = TextStreak::default();
        s.observe(text_fingerprint("a"), 0, 3);
        s.observe(text_fingerprint("a"), 1, 3);
        assert_eq!(s.observe(text_fingerprint("b"), 2, 3), None);
        assert_eq!(s.observe(text_fingerprint("b"), 3, 3), None);
        s.reset();
        assert_eq!(s.observe(text_fingerprint("b"), 4, 3), None);
        assert_eq!(s.observe(text_fingerprint("b"), 5, 3), None);
        assert_eq!(s.observe(text_fingerprint("b"), 6, 3), Some(vec![4, 5, 6]));
    }
}
