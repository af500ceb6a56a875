//! The matching hash (issue 33 item 1): a keyed 128-bit hash of exactly the bytes the
//! SHA-256 fingerprint digests (`tool_name ‖ 0x00 ‖ canonical arguments`, `status ‖ 0x00 ‖
//! canonical result`), for comparing fingerprints inside one process.
//!
//! Two calls have equal matching hashes exactly when their canonical bytes are equal, but
//! for collisions of the hash. The hash is XXH3-128 under a secret of 192 random bytes drawn
//! once per process ([`MatchingKey::process`]): the values never leave the process (the
//! external form stays the HMAC-SHA256 of the SHA-256 digest, [`super::FingerprintKey`]),
//! so an adversary who controls tool arguments sees neither the secret nor any hash, only
//! whether a loop fires. Why XXH3 and not SipHash, and what a forced collision would cost:
//! `docs/security.md` ("Fingerprints").
//!
//! The hash streams over the canonical bytes as the SHA-256 does (the one-pass writer's
//! buffer in one call, the tree path's pieces as they are written), so it costs the
//! canonicalisation plus XXH3's ~0.1 cycles per byte, where SHA-256 (SHA-NI) costs about 2.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, OnceLock};

use sha2::{Digest, Sha256};
use xxhash_rust::xxh3::Xxh3;

use super::{Fingerprint, Fingerprinter, Sink};
use crate::conventions::event::{CallStatus, Payload};

/// A matching hash: XXH3-128 of the bytes a [`Fingerprint`] digests, under the
/// fingerprinter's [`MatchingKey`]. Meaningful only inside the process that computed it.
pub type MatchHash = u128;

/// XXH3's secret length (bytes), `xxhash_rust::xxh3::DEFAULT_SECRET_SIZE`.
const SECRET_LEN: usize = 192;

/// The secret of the matching hash: 192 random bytes (shared by clones).
#[derive(Clone, PartialEq, Eq)]
pub struct MatchingKey {
    secret: Arc<[u8; SECRET_LEN]>,
}

impl fmt::Debug for MatchingKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("MatchingKey(<redacted>)")
    }
}

impl MatchingKey {
    /// A fresh random key (the operating system's generator, through `rand`).
    pub fn random() -> Self {
        let mut secret = [0u8; SECRET_LEN];
        rand::fill(&mut secret[..]);
        MatchingKey {
            secret: Arc::new(secret),
        }
    }

    /// The key of this process: drawn at first use, shared by every [`Fingerprinter`]
    /// made with [`Fingerprinter::new`] (so engines, replays and reloads agree).
    pub fn process() -> &'static MatchingKey {
        static KEY: OnceLock<MatchingKey> = OnceLock::new();
        KEY.get_or_init(MatchingKey::random)
    }

    /// XXH3-128 of `bytes` in one call under this key (the tests' statement of the hash).
    #[cfg(test)]
    pub(super) fn hash_of(&self, bytes: &[u8]) -> MatchHash {
        xxhash_rust::xxh3::xxh3_128_with_secret(bytes, &self.secret[..])
    }

    fn hasher(&self) -> MatchSink {
        MatchSink(Xxh3::with_secret(*self.secret))
    }
}

/// Streams bytes into XXH3-128.
struct MatchSink(Xxh3);

impl Sink for MatchSink {
    fn put(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
    }
}

/// Streams bytes into both hashes: one canonicalisation, both results.
struct Both(Sha256, Xxh3);

impl Sink for Both {
    fn put(&mut self, bytes: &[u8]) {
        self.0.update(bytes);
        self.1.update(bytes);
    }
}

impl Both {
    fn new(key: &MatchingKey) -> Self {
        Both(Sha256::new(), key.hasher().0)
    }

    fn finish(self) -> (MatchHash, Fingerprint) {
        (self.1.digest128(), self.0.finalize().into())
    }
}

impl Fingerprinter {
    /// This fingerprinter with `key` for its matching hashes (the exported fingerprints do
    /// not depend on it).
    pub fn with_matching_key(mut self, key: MatchingKey) -> Self {
        self.matching = key;
        self
    }

    /// The matching hash of [`Fingerprinter::call_fingerprint_normalized`]'s bytes.
    pub fn call_match_normalized(
        &self,
        tool_name: &str,
        arguments: &Payload,
        volatile_keys: Option<&HashSet<String>>,
        normalize: impl FnOnce(&Payload) -> Option<Payload>,
    ) -> MatchHash {
        let mut sink = self.matching.hasher();
        sink.put(tool_name.as_bytes());
        sink.put(&[0]);
        self.feed_call_normalized(tool_name, arguments, volatile_keys, normalize, &mut sink);
        sink.0.digest128()
    }

    /// The matching hash of [`Fingerprinter::call_fingerprint`]'s bytes.
    pub fn call_match(&self, tool_name: &str, arguments: &Payload) -> MatchHash {
        self.call_match_normalized(tool_name, arguments, None, |_| None)
    }

    /// The matching hash and the fingerprint of a call, from one canonicalisation (what
    /// [`Fingerprinter::call_match_normalized`] and
    /// [`Fingerprinter::call_fingerprint_normalized`] give).
    pub fn call_both_normalized(
        &self,
        tool_name: &str,
        arguments: &Payload,
        volatile_keys: Option<&HashSet<String>>,
        normalize: impl FnOnce(&Payload) -> Option<Payload>,
    ) -> (MatchHash, Fingerprint) {
        let mut sink = Both::new(&self.matching);
        sink.put(tool_name.as_bytes());
        sink.put(&[0]);
        self.feed_call_normalized(tool_name, arguments, volatile_keys, normalize, &mut sink);
        sink.finish()
    }

    /// The matching hash of [`Fingerprinter::result_fingerprint_with`]'s bytes; `None` as
    /// it.
    pub fn result_match_with(
        &self,
        status: &CallStatus,
        result: Option<&Payload>,
        volatile_keys: &HashSet<String>,
    ) -> Option<MatchHash> {
        let mut sink = self.matching.hasher();
        self.feed_result(status, result, volatile_keys, &mut sink)
            .then(|| sink.0.digest128())
    }

    /// The matching hash of [`Fingerprinter::result_fingerprint`]'s bytes.
    pub fn result_match(&self, status: &CallStatus, result: Option<&Payload>) -> Option<MatchHash> {
        self.result_match_with(status, result, &self.result_volatile_keys)
    }

    /// The matching hash and the fingerprint of a result, from one canonicalisation.
    pub fn result_both_with(
        &self,
        status: &CallStatus,
        result: Option<&Payload>,
        volatile_keys: &HashSet<String>,
    ) -> Option<(MatchHash, Fingerprint)> {
        let mut sink = Both::new(&self.matching);
        self.feed_result(status, result, volatile_keys, &mut sink)
            .then(|| sink.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn text(s: &str) -> Payload {
        Payload::Text(s.to_string())
    }

    #[test]
    fn matching_hash_is_keyed_xxh3_of_the_fingerprinted_bytes() {
        let fp = Fingerprinter::default();
        let args = text(r#"{"b": 1, "a": [1.0, "x"]}"#);
        let key = MatchingKey::process();
        let canonical = br#"{"a":[1,"x"],"b":1}"#.as_slice();
        let want = xxhash_rust::xxh3::xxh3_128_with_secret(
            &[b"read_file\0".as_slice(), canonical].concat(),
            &key.secret[..],
        );
        assert_eq!(fp.call_match("read_file", &args), want);
        let ok = CallStatus::Ok;
        let result = fp.result_match(&ok, Some(&args));
        let want = xxhash_rust::xxh3::xxh3_128_with_secret(
            &[b"ok\0".as_slice(), canonical].concat(),
            &key.secret[..],
        );
        assert_eq!(result, Some(want));
        assert_eq!(fp.result_match(&ok, None), None);
        assert_ne!(Some(fp.call_match("read_file", &text("{}"))), result);
    }

    #[test]
    fn another_key_changes_matching_hashes_not_fingerprints() {
        let a = Fingerprinter::default();
        let b = Fingerprinter::default().with_matching_key(MatchingKey::random());
        let c = Fingerprinter::default();
        for args in [
            text(r#"{"path": "a.txt"}"#),
            text("plain"),
            Payload::Json(json!([1, 2])),
        ] {
            assert_ne!(a.call_match("t", &args), b.call_match("t", &args));
            // the process key is one key
            assert_eq!(a.call_match("t", &args), c.call_match("t", &args));
            let (ma, fa) = a.call_both_normalized("t", &args, None, |_| None);
            let (mb, fb) = b.call_both_normalized("t", &args, None, |_| None);
            assert_eq!(fa, fb);
            assert_eq!(fa, a.call_fingerprint("t", &args));
            assert_eq!(
                (ma, mb),
                (a.call_match("t", &args), b.call_match("t", &args))
            );
            let ok = CallStatus::Ok;
            let keys = &a.result_volatile_keys;
            let (ra, ga) = a.result_both_with(&ok, Some(&args), keys).unwrap();
            let (rb, gb) = b.result_both_with(&ok, Some(&args), keys).unwrap();
            assert_ne!(ra, rb);
            assert_eq!(ga, gb);
            assert_eq!(Some(ga), a.result_fingerprint(&ok, Some(&args)));
        }
        assert!(!format!("{:?}", MatchingKey::random()).contains(char::is_numeric));
    }
}
