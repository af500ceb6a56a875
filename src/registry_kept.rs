//! How a run keeps an event (issue 8 item 4, "per-run state compact"): [`KeptEvent`] holds
//! what a [`RunEvent`] says, without what repeats across the run's events.
//!
//! - The run key is the run's own (its map key), not stored per event.
//! - trace_id, `service.name` and agent name live in one shared [`Origin`]: an event takes
//!   the origin of a neighbour when they are equal (spans of one trace and agent), so a
//!   run usually holds one origin however many calls it keeps.
//! - span_id and parent span_id are kept inline up to 8 bytes (every valid OTLP span_id);
//!   a longer id, an MCP request and message parts (inference spans only) go to a box
//!   allocated only for the events that have them.
//! - Call ids and MCP requests are 64-bit keys ([`super::CallKey`]), not strings.
//!
//! Every field of the [`RunEvent`] comes back from [`KeptEvent::to_run_event`], so replays,
//! merges and moves between runs see exactly what arrived.

use std::sync::Arc;

use super::merge::{CallKey, ToolCallPart};
use super::{CallContext, RunEvent, SpanId, TraceId};
use crate::detector::Observation;

/// What the spans of a run usually share: trace_id and names (one allocation per run, or
/// per change of trace or agent along it).
#[derive(Debug, PartialEq, Eq)]
pub struct Origin {
    pub trace_id: TraceId,
    pub service_name: Option<Arc<str>>,
    pub agent_name: Option<Arc<str>>,
}

impl Origin {
    /// True when `event` has this trace_id and these names.
    fn matches(&self, event: &RunEvent) -> bool {
        self.trace_id == event.trace_id
            && self.service_name == event.service_name
            && self.agent_name == event.agent_name
    }
}

/// A span id of up to 8 bytes, inline (9 bytes); longer ids are kept in [`Rare`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ShortId {
    bytes: [u8; 8],
    /// Length in bytes, or [`LONG`] when the id is in [`Rare`].
    len: u8,
}

/// [`ShortId::len`] of an id longer than 8 bytes.
const LONG: u8 = u8::MAX;

impl ShortId {
    /// The inline form of `id`, or `None` when it is longer than 8 bytes.
    fn of(id: &[u8]) -> Option<ShortId> {
        let len = id.len();
        if len > 8 {
            return None;
        }
        let mut bytes = [0; 8];
        bytes[..len].copy_from_slice(id);
        Some(ShortId {
            bytes,
            len: len as u8,
        })
    }

    fn long() -> ShortId {
        ShortId {
            bytes: [0; 8],
            len: LONG,
        }
    }

    fn get<'a>(&'a self, long: Option<&'a [u8]>) -> &'a [u8] {
        match self.len {
            LONG => long.unwrap_or_default(),
            n => &self.bytes[..usize::from(n)],
        }
    }
}

/// What few events carry: ids longer than 8 bytes, an MCP request, message parts.
#[derive(Clone, Debug, Default)]
struct Rare {
    span_id: Option<Box<[u8]>>,
    parent_span_id: Option<Box<[u8]>>,
    mcp_request: Option<CallKey>,
    parts: Vec<ToolCallPart>,
}

/// One event as its run keeps it (152 bytes, no heap allocation of its own for a tool
/// call with valid ids; see the module docs).
#[derive(Clone, Debug)]
pub struct KeptEvent {
    /// Span start and end, ns since the Unix epoch.
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub origin: Arc<Origin>,
    pub observation: Observation,
    /// `gen_ai.tool.call.id` of a tool call, as its key.
    pub call_id: Option<CallKey>,
    /// How complete this copy is ([`CallContext::completeness`]).
    pub completeness: u8,
    /// [`CallContext::without_arguments`].
    pub without_arguments: bool,
    span_id: ShortId,
    parent_span_id: ShortId,
    rare: Option<Box<Rare>>,
}

impl KeptEvent {
    /// Keeps `event` with `origin` (which must match it; see [`Origin`]).
    pub fn new(event: &RunEvent, origin: Arc<Origin>) -> KeptEvent {
        let call = &event.call;
        let mut rare = Rare {
            mcp_request: call.mcp_request,
            parts: call.parts.clone(),
            ..Rare::default()
        };
        let span_id = ShortId::of(&event.span_id).unwrap_or_else(|| {
            rare.span_id = Some(event.span_id.as_slice().into());
            ShortId::long()
        });
        let parent_span_id = ShortId::of(&call.parent_span_id).unwrap_or_else(|| {
            rare.parent_span_id = Some(call.parent_span_id.as_slice().into());
            ShortId::long()
        });
        let is_rare = rare.span_id.is_some()
            || rare.parent_span_id.is_some()
            || rare.mcp_request.is_some()
            || !rare.parts.is_empty();
        KeptEvent {
            start_time_unix_nano: event.start_time_unix_nano,
            end_time_unix_nano: event.end_time_unix_nano,
            origin,
            observation: event.observation.clone(),
            call_id: call.call_id,
            completeness: call.completeness,
            without_arguments: call.without_arguments,
            span_id,
            parent_span_id,
            rare: is_rare.then(|| Box::new(rare)),
        }
    }

    /// The shared origin for `event` among `candidates` (events of its run), or a new one.
    pub fn origin_for<'a>(
        event: &RunEvent,
        candidates: impl IntoIterator<Item = &'a KeptEvent>,
    ) -> Arc<Origin> {
        for kept in candidates {
            if kept.origin.matches(event) {
                return kept.origin.clone();
            }
        }
        Arc::new(Origin {
            trace_id: event.trace_id.clone(),
            service_name: event.service_name.clone(),
            agent_name: event.agent_name.clone(),
        })
    }

    pub fn span_id(&self) -> &[u8] {
        self.span_id
            .get(self.rare.as_ref().and_then(|r| r.span_id.as_deref()))
    }

    /// The parent span_id (empty for a root span).
    pub fn parent_span_id(&self) -> &[u8] {
        self.parent_span_id
            .get(self.rare.as_ref().and_then(|r| r.parent_span_id.as_deref()))
    }

    pub fn trace_id(&self) -> &[u8] {
        &self.origin.trace_id
    }

    /// [`CallContext::mcp_request`].
    pub fn mcp_request(&self) -> Option<CallKey> {
        self.rare.as_ref().and_then(|r| r.mcp_request)
    }

    /// Tool-call parts of an inference span ([`CallContext::parts`]).
    pub fn parts(&self) -> &[ToolCallPart] {
        self.rare.as_ref().map_or(&[], |r| &r.parts)
    }

    /// Sequence order: start time, end time, span_id.
    pub fn order_key(&self) -> (u64, u64, &[u8]) {
        (
            self.start_time_unix_nano,
            self.end_time_unix_nano,
            self.span_id(),
        )
    }

    /// The event as it arrived, under `run_key`.
    pub fn to_run_event(&self, run_key: &Arc<str>) -> RunEvent {
        RunEvent {
            run_key: run_key.clone(),
            trace_id: self.origin.trace_id.clone(),
            span_id: SpanId::from_slice(self.span_id()),
            start_time_unix_nano: self.start_time_unix_nano,
            end_time_unix_nano: self.end_time_unix_nano,
            service_name: self.origin.service_name.clone(),
            agent_name: self.origin.agent_name.clone(),
            observation: self.observation.clone(),
            call: CallContext {
                parent_span_id: SpanId::from_slice(self.parent_span_id()),
                completeness: self.completeness,
                call_id: self.call_id,
                mcp_request: self.mcp_request(),
                parts: self.parts().to_vec(),
                without_arguments: self.without_arguments,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(span_id: &[u8], parent: &[u8], mcp: Option<CallKey>) -> RunEvent {
        RunEvent {
            run_key: Arc::from("r"),
            trace_id: [3; 16].into(),
            span_id: span_id.into(),
            start_time_unix_nano: 5,
            end_time_unix_nano: 9,
            service_name: Some(Arc::from("svc")),
            agent_name: None,
            observation: Observation::ToolCall {
                tool_name: Arc::from("t"),
                call_fingerprint: Some([1; 32]),
                result_fingerprint: None,
            },
            call: CallContext {
                parent_span_id: parent.into(),
                completeness: 5,
                call_id: Some(CallKey::of("call_1")),
                mcp_request: mcp,
                parts: Vec::new(),
                without_arguments: false,
            },
        }
    }

    fn same(a: &RunEvent, b: &RunEvent) -> bool {
        (
            &a.run_key,
            &a.trace_id,
            &a.span_id,
            a.start_time_unix_nano,
            a.end_time_unix_nano,
            &a.service_name,
            &a.agent_name,
            &a.observation,
            &a.call,
        ) == (
            &b.run_key,
            &b.trace_id,
            &b.span_id,
            b.start_time_unix_nano,
            b.end_time_unix_nano,
            &b.service_name,
            &b.agent_name,
            &b.observation,
            &b.call,
        )
    }

    #[test]
    fn a_kept_event_gives_back_the_event_and_valid_ids_stay_inline() {
        assert_eq!(std::mem::size_of::<KeptEvent>(), 152);
        let key: Arc<str> = Arc::from("r");
        let valid = event(&[1; 8], &[2; 8], None);
        let kept = KeptEvent::new(&valid, KeptEvent::origin_for(&valid, []));
        assert!(kept.rare.is_none());
        assert!(same(&kept.to_run_event(&key), &valid));
        assert_eq!(
            (kept.span_id(), kept.parent_span_id()),
            (&[1; 8][..], &[2; 8][..])
        );
        // Long and empty ids, an MCP request: kept exactly, in the rare box.
        let odd = event(&[4; 12], b"", Some(CallKey::of("s\0r")));
        let kept_odd = KeptEvent::new(&odd, KeptEvent::origin_for(&odd, [&kept]));
        assert!(
            Arc::ptr_eq(&kept.origin, &kept_odd.origin),
            "same trace and names"
        );
        assert!(same(&kept_odd.to_run_event(&key), &odd));
        let other_agent = RunEvent {
            agent_name: Some(Arc::from("a")),
            ..valid.clone()
        };
        let origin = KeptEvent::origin_for(&other_agent, [&kept]);
        assert!(!Arc::ptr_eq(&kept.origin, &origin));
        assert_eq!(origin.agent_name.as_deref(), Some("a"));
    }
}
