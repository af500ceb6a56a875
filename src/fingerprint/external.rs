//! The external form of fingerprints: what leaves the process (annotated spans, signals,
//! the API) is an HMAC-SHA256 of the internal fingerprint under `fingerprint_key`.

use std::fmt;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::Fingerprint;

/// A key for the external form of fingerprints: lowercase hex HMAC-SHA256 (DESIGN §3), so
/// a short argument cannot be recovered by hashing guesses.
#[derive(Clone)]
pub struct FingerprintKey {
    /// HMAC-SHA256 keyed once (the padded key's two blocks already hashed), cloned per use.
    keyed: Hmac<Sha256>,
    /// Tells this key's entries apart in [`RECENT_SHORT`] (unique per key made; a clone is
    /// the same key and shares it).
    id: u64,
}

/// Keys made so far: the next [`FingerprintKey::id`].
static NEXT_KEY_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Short fingerprints remembered per thread.
const RECENT_SHORT_LEN: usize = 8;

/// (key id, fingerprint, first 8 bytes of the MAC).
type RememberedShort = (u64, Fingerprint, [u8; 8]);

thread_local! {
    /// The last [`RECENT_SHORT_LEN`] short MACs this thread computed, filled round-robin
    /// (the next slot, then the slots). A loop annotates each of its spans, and signals
    /// each detection, with the same one or two fingerprints.
    static RECENT_SHORT: std::cell::RefCell<(usize, [Option<RememberedShort>; RECENT_SHORT_LEN])> =
        const { std::cell::RefCell::new((0, [None; RECENT_SHORT_LEN])) };
}

impl fmt::Debug for FingerprintKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FingerprintKey(<redacted>)")
    }
}

impl FingerprintKey {
    /// A key from configured bytes (any length, as HMAC allows).
    pub fn new(key: &[u8]) -> Self {
        // HMAC accepts keys of any length: `new_from_slice` cannot fail for it.
        let keyed = match <Hmac<Sha256> as Mac>::new_from_slice(key) {
            Ok(mac) => mac,
            Err(_) => unreachable!("HMAC takes keys of any length"),
        };
        let id = NEXT_KEY_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        FingerprintKey { keyed, id }
    }

    /// A random 32-byte key, for when no `fingerprint_key` is configured (external
    /// fingerprints are then stable only for the life of the process).
    pub fn random() -> Self {
        Self::new(&rand::random::<[u8; 32]>())
    }

    /// Lowercase hex (64 chars) of HMAC-SHA256(key, fingerprint).
    pub fn hex(&self, fingerprint: &Fingerprint) -> String {
        crate::otlp::lower_hex(&self.mac(fingerprint))
    }

    /// The short external form: the first 16 hex chars of [`FingerprintKey::hex`].
    pub fn short(&self, fingerprint: &Fingerprint) -> String {
        crate::otlp::lower_hex(&self.short_mac(fingerprint))
    }

    /// [`FingerprintKey::short`] held inline (no allocation), as signals carry it.
    pub fn short_compact(&self, fingerprint: &Fingerprint) -> compact_str::CompactString {
        crate::otlp::compact_hex(&self.short_mac(fingerprint))
    }

    /// The first 8 bytes of the MAC of `fingerprint`, remembered per thread for the last few
    /// fingerprints ([`RECENT_SHORT`]): a loop storm asks for the same ones over and over.
    fn short_mac(&self, fingerprint: &Fingerprint) -> [u8; 8] {
        let remembered = RECENT_SHORT.with_borrow(|(_, recent)| {
            recent
                .iter()
                .flatten()
                .find_map(|(id, fp, short)| (*id == self.id && fp == fingerprint).then_some(*short))
        });
        if let Some(short) = remembered {
            return short;
        }
        let mut short = [0u8; 8];
        short.copy_from_slice(&self.mac(fingerprint)[..8]);
        RECENT_SHORT.with_borrow_mut(|(next, recent)| {
            recent[*next] = Some((self.id, *fingerprint, short));
            *next = (*next + 1) % RECENT_SHORT_LEN;
        });
        short
    }

    fn mac(&self, fingerprint: &Fingerprint) -> [u8; 32] {
        let mut mac = self.keyed.clone();
        mac.update(fingerprint);
        mac.finalize().into_bytes().into()
    }
}
