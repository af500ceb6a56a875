//! The dedupe index of a run's kept span_ids: where a span_id is held, if at all.
//!
//! A run of at most [`SMALL`] events has no index: its events are searched (a few 8-byte
//! comparisons). Past that an index is built once: 8-byte span_ids (every valid OTLP
//! span_id) as their own 64-bit value in a set (8 bytes per entry and a control byte; a
//! run holds each span_id once, so no two share a value), any other length as a fixed
//! SipHash with a count, since two such ids may share one. The index answers "maybe
//! held"; a hit is confirmed in the events, as only re-exported copies (and the rare
//! key collision) pay.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher};

use super::kept::KeptEvent;

/// Events a run holds before its span_ids are indexed.
pub const SMALL: usize = 16;

/// Kept span_ids of one run: none until it holds more than [`SMALL`] events.
#[derive(Debug, Default)]
pub struct SpanIds {
    index: Option<Box<Index>>,
}

#[derive(Debug, Default)]
struct Index {
    /// 8-byte span_ids, as their little-endian value.
    eight: HashSet<u64>,
    /// Other span_ids: a fixed hash of their bytes, with the number of events holding it.
    other: HashMap<u64, u32>,
}

impl Index {
    fn may_contain(&self, span_id: &[u8]) -> bool {
        match <[u8; 8]>::try_from(span_id) {
            Ok(bytes) => self.eight.contains(&u64::from_le_bytes(bytes)),
            Err(_) => self.other.contains_key(&hash(span_id)),
        }
    }

    fn insert(&mut self, span_id: &[u8]) {
        match <[u8; 8]>::try_from(span_id) {
            Ok(bytes) => {
                self.eight.insert(u64::from_le_bytes(bytes));
            }
            Err(_) => *self.other.entry(hash(span_id)).or_insert(0) += 1,
        }
    }

    fn remove(&mut self, span_id: &[u8]) {
        match <[u8; 8]>::try_from(span_id) {
            Ok(bytes) => {
                self.eight.remove(&u64::from_le_bytes(bytes));
            }
            Err(_) => {
                let key = hash(span_id);
                if let Some(n) = self.other.get_mut(&key) {
                    *n -= 1;
                    if *n == 0 {
                        self.other.remove(&key);
                    }
                }
            }
        }
    }
}

fn hash(span_id: &[u8]) -> u64 {
    BuildHasherDefault::<DefaultHasher>::default().hash_one(span_id)
}

impl SpanIds {
    /// The index in `events` (the run's kept events) of the one with `span_id`.
    pub fn position(&self, events: &[KeptEvent], span_id: &[u8]) -> Option<usize> {
        if self.index.as_ref().is_some_and(|i| !i.may_contain(span_id)) {
            return None;
        }
        events.iter().position(|e| e.span_id() == span_id)
    }

    /// Records an event with `span_id` joining `held` (the run's kept events before it).
    pub fn insert(&mut self, held: &[KeptEvent], span_id: &[u8]) {
        if self.index.is_none() && held.len() >= SMALL {
            let mut index = Index::default();
            for event in held {
                index.insert(event.span_id());
            }
            self.index = Some(Box::new(index));
        }
        if let Some(index) = &mut self.index {
            index.insert(span_id);
        }
    }

    /// Records an event with `span_id` leaving the run (it must have been inserted).
    pub fn remove(&mut self, span_id: &[u8]) {
        if let Some(index) = &mut self.index {
            index.remove(span_id);
        }
    }

    /// Estimated heap bytes of the index: one key and control byte per slot.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.index.as_ref().map_or(0, |i| {
            size_of::<Index>()
                + i.eight.capacity() * (size_of::<u64>() + 1)
                + i.other.capacity() * (size_of::<(u64, u32)>() + 1)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::Observation;
    use crate::registry::RunEvent;
    use std::sync::Arc;

    fn held(span_id: &[u8]) -> KeptEvent {
        let event = RunEvent {
            run_key: Arc::from("r"),
            trace_id: [1; 16].into(),
            span_id: span_id.into(),
            start_time_unix_nano: 0,
            end_time_unix_nano: 0,
            service_name: None,
            agent_name: None,
            observation: Observation::ToolCallResponse,
            call: Default::default(),
        };
        KeptEvent::new(&event, KeptEvent::origin_for(&event, []))
    }

    #[test]
    fn positions_are_found_with_and_without_the_index_and_removal_is_exact() {
        let mut ids = SpanIds::default();
        let mut events: Vec<KeptEvent> = Vec::new();
        for i in 0..SMALL as u64 + 4 {
            let id = i.to_le_bytes();
            ids.insert(&events, &id);
            events.push(held(&id));
            assert_eq!(ids.position(&events, &id), Some(i as usize));
            assert_eq!(ids.index.is_some(), i >= SMALL as u64);
        }
        assert_eq!(ids.position(&events, &[9; 8]), None);
        // Two events with other lengths, one of them the empty id.
        for id in [&b""[..], &[7; 9]] {
            ids.insert(&events, id);
            events.push(held(id));
        }
        assert_eq!(ids.position(&events, b""), Some(SMALL + 4));
        assert_eq!(ids.position(&events, &[7; 9]), Some(SMALL + 5));
        let gone = events.remove(SMALL + 4);
        ids.remove(gone.span_id());
        assert_eq!(ids.position(&events, b""), None);
        assert_eq!(ids.position(&events, &[7; 9]), Some(SMALL + 4));
        ids.remove(&3u64.to_le_bytes());
        events.remove(3);
        assert_eq!(ids.position(&events, &3u64.to_le_bytes()), None);
        assert!(ids.heap_bytes() > 0);
    }
}
