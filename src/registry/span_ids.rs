//! The dedupe index of a run's kept span_ids: where a span_id is held, if at all.
//!
//! A run of at most [`SMALL`] events has no index: its events are searched (a few 8-byte
//! comparisons). Past that an index is built once: a hash table of 32-bit positions into the
//! run's events (4 bytes and a control byte per slot), hashed by the span_id each position
//! holds and compared on the events themselves, so ids of any length are exact and two ids
//! never hide each other. Positions are stored relative to a base that moves when events
//! leave from the front (forgetting past the cap), so that costs only the entries removed;
//! an event inserted or removed in the middle shifts the positions after it, O(index) as
//! the list's own shift is O(events).
//!
//! The caller tells the index about every change to the list: [`SpanIds::inserted`] after
//! an insert, [`SpanIds::removing`] / [`SpanIds::removing_front`] before a removal,
//! [`SpanIds::rebuild`] after anything else.

use std::hash::{BuildHasher, RandomState};

use hashbrown::HashTable;

use super::kept::KeptEvent;

/// Events a run holds before its span_ids are indexed.
pub const SMALL: usize = 16;

/// Kept span_ids of one run: none until it holds more than [`SMALL`] events.
#[derive(Debug, Default)]
pub struct SpanIds {
    index: Option<Box<Index>>,
}

#[derive(Debug)]
struct Index {
    /// Positions in the events, each plus `base` (wrapping).
    table: HashTable<u32>,
    /// Keyed per index: span ids come from clients.
    hasher: RandomState,
    base: u32,
}

impl Index {
    fn build(events: &[KeptEvent]) -> Index {
        let mut index = Index {
            table: HashTable::with_capacity(events.len()),
            hasher: RandomState::new(),
            base: 0,
        };
        for position in 0..events.len() {
            index.add(events, position);
        }
        index
    }

    fn hash(&self, span_id: &[u8]) -> u64 {
        self.hasher.hash_one(span_id)
    }

    fn position(&self, stored: u32) -> usize {
        stored.wrapping_sub(self.base) as usize
    }

    fn stored(&self, position: usize) -> u32 {
        (position as u32).wrapping_add(self.base)
    }

    /// Adds the entry of `events[position]` (positions are already right).
    fn add(&mut self, events: &[KeptEvent], position: usize) {
        let Some(event) = events.get(position) else {
            return;
        };
        let hash = self.hash(event.span_id());
        let stored = self.stored(position);
        let (hasher, base) = (&self.hasher, self.base);
        self.table.insert_unique(hash, stored, |&s| {
            let at = s.wrapping_sub(base) as usize;
            hasher.hash_one(events.get(at).map_or(&[][..], |e| e.span_id()))
        });
    }

    /// Removes the entry of `events[position]`.
    fn drop_entry(&mut self, events: &[KeptEvent], position: usize) {
        let Some(event) = events.get(position) else {
            return;
        };
        let hash = self.hash(event.span_id());
        let stored = self.stored(position);
        if let Ok(entry) = self.table.find_entry(hash, |&s| s == stored) {
            entry.remove();
        }
    }

    /// Adds `by` to every position at or after `from`.
    fn shift(&mut self, from: usize, by: isize) {
        let base = self.base;
        for stored in self.table.iter_mut() {
            let at = stored.wrapping_sub(base) as usize;
            if at >= from {
                *stored = (at.wrapping_add_signed(by) as u32).wrapping_add(base);
            }
        }
    }
}

impl SpanIds {
    /// The index in `events` (the run's kept events) of the one with `span_id`.
    pub fn position(&self, events: &[KeptEvent], span_id: &[u8]) -> Option<usize> {
        match &self.index {
            None => events.iter().position(|e| e.span_id() == span_id),
            Some(index) => index
                .table
                .find(index.hash(span_id), |&s| {
                    events
                        .get(index.position(s))
                        .is_some_and(|e| e.span_id() == span_id)
                })
                .map(|&s| index.position(s)),
        }
    }

    /// Records that `events[position]` was just inserted (the events after it moved up).
    pub fn inserted(&mut self, events: &[KeptEvent], position: usize) {
        match &mut self.index {
            Some(index) => {
                if position + 1 < events.len() {
                    index.shift(position, 1);
                }
                index.add(events, position);
            }
            None if events.len() > SMALL => self.index = Some(Box::new(Index::build(events))),
            None => {}
        }
    }

    /// Records that `events[position]` is about to be removed (the events after it move
    /// down).
    pub fn removing(&mut self, events: &[KeptEvent], position: usize) {
        let Some(index) = &mut self.index else {
            return;
        };
        index.drop_entry(events, position);
        if position == 0 {
            index.base = index.base.wrapping_add(1);
        } else {
            index.shift(position + 1, -1);
        }
    }

    /// Records that the first `count` events are about to be removed.
    pub fn removing_front(&mut self, events: &[KeptEvent], count: usize) {
        let Some(index) = &mut self.index else {
            return;
        };
        for position in 0..count.min(events.len()) {
            index.drop_entry(events, position);
        }
        index.base = index.base.wrapping_add(count as u32);
    }

    /// Indexes `events` afresh (after the list was rebuilt).
    pub fn rebuild(&mut self, events: &[KeptEvent]) {
        self.index = (events.len() > SMALL).then(|| Box::new(Index::build(events)));
    }

    /// Estimated heap bytes of the index: a position and a control byte per slot.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.index.as_ref().map_or(0, |i| {
            size_of::<Index>() + i.table.capacity() * (size_of::<u32>() + 1)
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

    /// Every event is found where it is, and `absent` nowhere.
    fn consistent(ids: &SpanIds, events: &[KeptEvent], absent: &[&[u8]]) {
        for (i, e) in events.iter().enumerate() {
            assert_eq!(ids.position(events, e.span_id()), Some(i), "{i}");
        }
        for id in absent {
            assert_eq!(ids.position(events, id), None, "{id:?}");
        }
    }

    #[test]
    fn positions_are_found_with_and_without_the_index_through_every_change() {
        let mut ids = SpanIds::default();
        let mut events: Vec<KeptEvent> = Vec::new();
        for i in 0..SMALL as u64 + 4 {
            let id = i.to_le_bytes();
            events.push(held(&id));
            ids.inserted(&events, events.len() - 1);
            assert_eq!(ids.index.is_some(), events.len() > SMALL);
            consistent(&ids, &events, &[&[9; 8]]);
        }
        // Other lengths, the empty id among them, inserted in the middle.
        for (at, id) in [(3, &b""[..]), (0, &[7; 9]), (10, &[7; 12])] {
            events.insert(at, held(id));
            ids.inserted(&events, at);
            consistent(&ids, &events, &[&[9; 8], &[7; 10]]);
        }
        // Removals in the middle, at the front, and several from the front.
        for at in [4, 0, usize::MAX] {
            let at = at.min(events.len() - 1);
            let gone = events[at].span_id().to_vec();
            ids.removing(&events, at);
            events.remove(at);
            consistent(&ids, &events, &[&gone]);
        }
        let front: Vec<Vec<u8>> = events[..5].iter().map(|e| e.span_id().to_vec()).collect();
        ids.removing_front(&events, 5);
        events.drain(..5);
        let absent: Vec<&[u8]> = front.iter().map(Vec::as_slice).collect();
        consistent(&ids, &events, &absent);
        events.push(held(&[5; 8]));
        ids.inserted(&events, events.len() - 1);
        consistent(&ids, &events, &absent);
        assert!(ids.heap_bytes() > 0);
        events.truncate(3);
        ids.rebuild(&events);
        assert!(ids.index.is_none());
        consistent(&ids, &events, &absent);
    }
}
