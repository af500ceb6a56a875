//! Call hops the engine has seen (DESIGN §2 "One call, one event"): an MCP server span
//! between the client's and the server's tool span of one call
//! ([`crate::conventions::is_call_hop`]). A tool span whose parent is a hop takes the hop's
//! parent as its own ([`crate::registry::CallContext::via_hop`]), so the registry makes the
//! two tool spans one call. The hop may come in the tool span's request (read from there),
//! in an earlier request (kept here), or in a later one (the registry applies it then,
//! [`crate::registry::Registry::relink`]).
//!
//! At most [`MAX_HOPS`] hops are kept, oldest dropped first: a hop is only needed here when
//! its tool span comes in a later request, and the server exports both together (the tool
//! span ends first), so this only covers requests re-ordered in flight. A tool span whose
//! hop was dropped and whose outer span is already in its run is counted as a call of its
//! own.

use std::collections::{HashMap, VecDeque};

use crate::registry::{SpanId, TraceId};

/// Hops kept across requests (about 64 bytes each).
pub const MAX_HOPS: usize = 16_384;

/// (trace_id, span_id) of a hop.
type HopKey = (TraceId, SpanId);

/// Hop span → its parent span_id, bounded (oldest first out).
#[derive(Debug, Default)]
pub struct HopIndex {
    parents: HashMap<HopKey, SpanId>,
    order: VecDeque<HopKey>,
}

impl HopIndex {
    /// Keeps `span_id` of `trace_id` as a hop whose parent is `parent`.
    pub fn record(&mut self, trace_id: &[u8], span_id: &[u8], parent: &[u8]) {
        let key = (TraceId::from_slice(trace_id), SpanId::from_slice(span_id));
        if self.parents.contains_key(&key) {
            return;
        }
        if self.order.len() >= MAX_HOPS {
            if let Some(old) = self.order.pop_front() {
                self.parents.remove(&old);
            }
        }
        self.order.push_back(key.clone());
        self.parents.insert(key, SpanId::from_slice(parent));
    }

    /// The parent of hop `span_id` of `trace_id`, when it is one.
    pub fn parent(&self, trace_id: &[u8], span_id: &[u8]) -> Option<&SpanId> {
        if self.parents.is_empty() {
            return None;
        }
        self.parents
            .get(&(TraceId::from_slice(trace_id), SpanId::from_slice(span_id)))
    }

    /// Hops kept.
    pub fn len(&self) -> usize {
        self.parents.len()
    }

    pub fn is_empty(&self) -> bool {
        self.parents.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hops_are_bounded_oldest_first_out() {
        let mut hops = HopIndex::default();
        for i in 0..MAX_HOPS as u32 + 3 {
            hops.record(&[1; 16], &i.to_be_bytes(), &[9; 8]);
        }
        assert_eq!(hops.len(), MAX_HOPS);
        assert_eq!(hops.parent(&[1; 16], &0u32.to_be_bytes()), None);
        assert_eq!(
            hops.parent(&[1; 16], &(MAX_HOPS as u32 + 2).to_be_bytes())
                .map(|p| p.as_slice()),
            Some(&[9u8; 8][..])
        );
        assert_eq!(
            hops.parent(&[2; 16], &(MAX_HOPS as u32).to_be_bytes()),
            None
        );
    }
}
