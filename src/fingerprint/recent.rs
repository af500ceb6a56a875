//! The fingerprints of the last few tool-call texts of one request, by the exact text they
//! were computed from.
//!
//! A loop is the same call again: the arguments (and, for a no-op, the result) of a
//! looping agent arrive as the same bytes call after call, and the calls of one run sit
//! together in a request. Canonicalising and hashing such a text again gives the same
//! fingerprint, so [`crate::engine::Engine`] looks a text up here first. An entry matches
//! only on the exact tool name, text and context (a result's comparison form depends on the
//! call's arguments, whose words it masks: its context is the call fingerprint), and one
//! engine computes a text's fingerprint from those alone (the volatile keys and patterns
//! are the tool's), so a remembered fingerprint is the one that would be computed. Each
//! entry also keeps 64 bits computed with the fingerprint (the call's traits, packed). It is filled from the texts the request's extraction owns
//! already (moved in, not copied) and lives for one request: nothing is kept between
//! requests and no memory grows with traffic.

use std::cell::Cell;
use std::sync::Arc;

use super::Fingerprint;

/// Texts remembered per kind (arguments, results): a run's loop of period up to this many
/// calls repeats within them (the detector's cycles are of period 2 to `max_cycle_period`,
/// 3 by default).
pub const REMEMBERED: usize = 4;

/// The last [`REMEMBERED`] fingerprinted argument texts and result texts of a request.
#[derive(Debug, Default)]
pub struct RecentFingerprints {
    arguments: Ring,
    results: Ring,
}

#[derive(Debug, Default)]
struct Ring {
    entries: [Option<Entry>; REMEMBERED],
    /// The slot the next new text replaces.
    next: usize,
    /// The last lookup: its text's hash and whether it found the text. [`Ring::keep`]
    /// after a hit keeps nothing (the text is there), after a miss it keeps the text under
    /// that hash without searching or hashing again. Only a hint: an entry kept twice, or
    /// under another text's hash (never found, as a lookup compares hashes first), changes
    /// no fingerprint.
    last: Cell<(u64, bool)>,
}

#[derive(Debug)]
struct Entry {
    /// [`hash`] of `text`: most texts that differ are told apart without comparing them.
    hash: u64,
    tool: Arc<str>,
    text: String,
    /// What else the fingerprint depends on (zeros for arguments).
    context: Fingerprint,
    fingerprint: Fingerprint,
    /// Computed with the fingerprint (packed traits).
    extra: u64,
}

/// A remembered fingerprint and the 64 bits kept with it.
pub type Remembered = (Fingerprint, u64);

/// A fixed-seed hash of `text` (only entries of equal hash are compared byte for byte).
fn hash(text: &str) -> u64 {
    use std::hash::BuildHasher;
    foldhash::fast::FixedState::with_seed(0x6c6f_6f70_7761_7463).hash_one(text)
}

impl Ring {
    fn find(&self, tool: &str, text: &str, context: &Fingerprint) -> Option<Remembered> {
        let hash = hash(text);
        let found = self
            .entries
            .iter()
            .flatten()
            .find(|e| e.hash == hash && *e.tool == *tool && e.context == *context && e.text == text)
            .map(|e| (e.fingerprint, e.extra));
        self.last.set((hash, found.is_some()));
        found
    }

    /// Keeps `text` (the text of the last lookup) unless that lookup found it.
    fn keep(&mut self, tool: &Arc<str>, text: String, context: Fingerprint, kept: Remembered) {
        let (hash, found) = self.last.replace((0, true));
        if found {
            return;
        }
        self.entries[self.next] = Some(Entry {
            hash,
            tool: tool.clone(),
            text,
            context,
            fingerprint: kept.0,
            extra: kept.1,
        });
        self.next = (self.next + 1) % REMEMBERED;
    }
}

impl RecentFingerprints {
    /// The call fingerprint (and its 64 bits) remembered for `tool` called with the
    /// argument text `text`.
    pub fn arguments(&self, tool: &str, text: &str) -> Option<Remembered> {
        self.arguments.find(tool, text, &[0; 32])
    }

    /// The result fingerprint (and its 64 bits) remembered for a successful call of `tool`
    /// with call fingerprint `call` (zeros when none) that returned the text `text`
    /// (errors are not remembered: their fingerprints are cheap, and a transient error's
    /// is unique to its span).
    pub fn result(&self, tool: &str, text: &str, call: &Fingerprint) -> Option<Remembered> {
        self.results.find(tool, text, call)
    }

    /// Remembers the call fingerprint of `tool` with the argument text `text`, unless the
    /// last [`RecentFingerprints::arguments`] lookup found it (call it after a lookup).
    pub fn keep_arguments(&mut self, tool: &Arc<str>, text: String, kept: Remembered) {
        self.arguments.keep(tool, text, [0; 32], kept);
    }

    /// Remembers the result fingerprint of a successful call of `tool` (call fingerprint
    /// `call`) returning `text`, unless the last [`RecentFingerprints::result`] lookup
    /// found it.
    pub fn keep_result(
        &mut self,
        tool: &Arc<str>,
        text: String,
        call: Fingerprint,
        kept: Remembered,
    ) {
        self.results.keep(tool, text, call, kept);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fp(n: u8) -> Fingerprint {
        [n; 32]
    }

    /// Looks `text` up as arguments of `tool` and, on a miss, keeps it (the engine's use).
    fn arguments(recent: &mut RecentFingerprints, tool: &Arc<str>, text: &str, f: u8) -> bool {
        let found = recent.arguments(tool, text);
        recent.keep_arguments(tool, text.into(), (fp(f), 0));
        found.is_some()
    }

    #[test]
    fn finds_only_the_same_tool_and_text_and_forgets_the_oldest() {
        let search: Arc<str> = Arc::from("search");
        let fetch: Arc<str> = Arc::from("fetch");
        let mut recent = RecentFingerprints::default();
        assert!(!arguments(&mut recent, &search, r#"{"q":1}"#, 1));
        assert_eq!(recent.result("search", r#"{"q":1}"#, &fp(0)), None);
        recent.keep_result(&search, r#"{"q":1}"#.into(), fp(0), (fp(2), 5));
        assert_eq!(recent.arguments("search", r#"{"q":1}"#), Some((fp(1), 0)));
        assert_eq!(
            recent.result("search", r#"{"q":1}"#, &fp(0)),
            Some((fp(2), 5))
        );
        // Another tool, another text of the same length, another spelling of one value.
        assert_eq!(recent.arguments("fetch", r#"{"q":1}"#), None);
        assert_eq!(recent.arguments("search", r#"{"q":2}"#), None);
        assert_eq!(recent.arguments("search", r#"{"q": 1}"#), None);
        // Found, so not kept again (no second slot): four other texts push it out.
        assert!(arguments(&mut recent, &search, r#"{"q":1}"#, 1));
        for n in 0..REMEMBERED as u8 - 1 {
            assert!(!arguments(&mut recent, &fetch, &n.to_string(), 10 + n));
        }
        assert_eq!(recent.arguments("search", r#"{"q":1}"#), Some((fp(1), 0)));
        assert!(!arguments(&mut recent, &fetch, "last", 99));
        assert_eq!(recent.arguments("search", r#"{"q":1}"#), None);
        assert_eq!(recent.arguments("fetch", "0"), Some((fp(10), 0)));
        assert_eq!(recent.arguments("fetch", "last"), Some((fp(99), 0)));
        // Results are a ring of their own, and found only for the same call.
        assert_eq!(
            recent.result("search", r#"{"q":1}"#, &fp(0)),
            Some((fp(2), 5))
        );
        assert_eq!(recent.result("search", r#"{"q":1}"#, &fp(1)), None);
        // A keep without a lookup before it keeps nothing findable, never a wrong one.
        recent.keep_arguments(&fetch, "unlooked".into(), (fp(7), 0));
        recent.keep_arguments(&fetch, "twice".into(), (fp(8), 0));
        assert_eq!(recent.arguments("fetch", "unlooked"), None);
        assert_eq!(recent.arguments("fetch", "twice"), None);
    }
}
