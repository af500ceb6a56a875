//! The dedupe index of a run's kept span_ids: 64-bit keys with a count, not a second
//! heap copy of every span_id.
//!
//! An 8-byte span_id (every valid OTLP span_id) is its own key, so two such ids never
//! share one; any other length is hashed with a fixed SipHash, so a key may stand for more
//! than one span_id. The index therefore answers "maybe held": the caller confirms a hit
//! against the run's events (only re-exported copies, and the rare key collision, pay
//! that search). Counts make removal exact when two held spans share a key.

use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};

/// Kept span_ids of one run, as 64-bit keys with the number of events holding each.
/// 16 bytes per entry in the table (key and count) plus its control byte.
#[derive(Debug, Default)]
pub struct SpanIds {
    counts: HashMap<u64, u32>,
}

/// The 64-bit key of a span_id: its bytes for an 8-byte id, else a fixed hash of them.
fn key(span_id: &[u8]) -> u64 {
    match <[u8; 8]>::try_from(span_id) {
        Ok(bytes) => u64::from_le_bytes(bytes),
        Err(_) => BuildHasherDefault::<DefaultHasher>::default().hash_one(span_id),
    }
}

impl SpanIds {
    /// False when no held event has `span_id`; true when one may (confirm in the events).
    pub fn may_contain(&self, span_id: &[u8]) -> bool {
        self.counts.contains_key(&key(span_id))
    }

    /// Records an event with `span_id` added to the run.
    pub fn insert(&mut self, span_id: &[u8]) {
        *self.counts.entry(key(span_id)).or_insert(0) += 1;
    }

    /// Records an event with `span_id` leaving the run (it must have been inserted).
    pub fn remove(&mut self, span_id: &[u8]) {
        let key = key(span_id);
        if let Some(n) = self.counts.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.counts.remove(&key);
            }
        }
    }

    /// Estimated heap bytes of the table: one key, count and control byte per slot.
    pub fn heap_bytes(&self) -> usize {
        self.counts.capacity() * (std::mem::size_of::<(u64, u32)>() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_8_byte_ids_are_the_ids_and_counts_make_removal_exact() {
        assert_eq!(key(&[1, 0, 0, 0, 0, 0, 0, 0]), 1);
        let mut ids = SpanIds::default();
        assert!(!ids.may_contain(b""));
        ids.insert(b"");
        ids.insert(b"");
        ids.insert(&[7; 8]);
        ids.remove(b"");
        assert!(ids.may_contain(b""), "one event with the empty id is left");
        ids.remove(b"");
        assert!(!ids.may_contain(b""));
        assert!(ids.may_contain(&[7; 8]));
        assert!(!ids.may_contain(&[7; 9]));
    }
}
