//! Where an event goes in its run (DESIGN §2 "One call, one event" and "Joins"): the
//! rules that make one tool call one event however many spans recorded it.
//!
//! - **Re-exported span** (same span_id again): the more complete copy is kept (ended over
//!   unended, then more of arguments/result captured; [`CallContext::completeness`]); it
//!   replaces the earlier copy in the run, keeping whatever the earlier one had been
//!   filled with. An identical or less complete copy is a duplicate.
//! - **One call traced twice**: a tool span whose parent span is a tool call of the same
//!   tool in the run, or that carries the same MCP request (`mcp.session.id` +
//!   `jsonrpc.request.id` of a `tools/call`) as one, is the same call. The outer (earlier)
//!   span stays the call; the inner one only fills the call fingerprint and result
//!   fingerprint the outer lacks. When the outer span arrives after its inner span, the
//!   inner event is taken out of the run and the outer one replaces it, filled from it.
//!   Spans nested this way start close together, so only the [`NEAR`] events around the
//!   insertion point are searched.
//! - **Joins**: a tool call without arguments or result takes them from the `tool_call` /
//!   `tool_call_response` message parts with the same `gen_ai.tool.call.id` on the run's
//!   inference spans, whichever arrives first. Parts no tool call has claimed yet are kept,
//!   at most [`MAX_PENDING_PARTS`] per run (oldest dropped first).
//!
//! Any change to an event already in the run makes the run replay (the registry's replay
//! keeps detections independent of arrival order).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use super::{RunEvent, RunState};
use crate::detector::Observation;
use crate::fingerprint::Fingerprint;

/// Events searched on each side of the insertion point for the other span of one call.
pub const NEAR: usize = 64;

/// Message parts kept per run while no tool call has claimed them.
pub const MAX_PENDING_PARTS: usize = 1024;

/// What the registry needs to know of a span beyond its observation, to tell copies and
/// double traces of one call apart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CallContext {
    /// The span's parent span_id (empty for a root span).
    pub parent_span_id: super::SpanId,
    /// How complete this copy is: 4 when the span has ended (end time set and not before
    /// the start), plus 1 for captured arguments and 1 for a captured result.
    pub completeness: u8,
    /// `gen_ai.tool.call.id` of a tool call.
    pub call_id: Option<Arc<str>>,
    /// MCP request of a `tools/call` span: `mcp.session.id` and `jsonrpc.request.id`.
    pub mcp_request: Option<Arc<str>>,
    /// Tool-call parts of an inference span's messages, fingerprinted.
    pub parts: Vec<ToolCallPart>,
    /// A tool call none of whose spans (nor a joined `tool_call` part) captured
    /// arguments so far: set from the span, cleared when a merge or join brings them.
    pub without_arguments: bool,
}

/// A `tool_call` (arguments) or `tool_call_response` (result) message part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCallPart {
    /// `id` of the part: the `gen_ai.tool.call.id` of the call.
    pub call_id: Arc<str>,
    /// Tool name of a `tool_call` part (the call fingerprint is only used for a tool call
    /// of that name).
    pub tool_name: Option<Arc<str>>,
    pub call_fingerprint: Option<Fingerprint>,
    pub result_fingerprint: Option<Fingerprint>,
}

/// Per-run parts waiting for their tool call: 8 bytes until a run keeps its first part
/// (runs whose message parts all find their call never allocate it).
#[derive(Debug, Default)]
pub struct CallIndex {
    parts: Option<Box<PendingParts>>,
}

#[derive(Debug, Default)]
struct PendingParts {
    pending: HashMap<Arc<str>, ToolCallPart>,
    order: VecDeque<Arc<str>>,
}

impl CallIndex {
    /// Estimated heap bytes of the pending parts (for [`super::RunState::heap_bytes`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.parts.as_ref().map_or(0, |p| {
            size_of::<PendingParts>()
                + p.pending.capacity() * (size_of::<Arc<str>>() + size_of::<ToolCallPart>() + 8)
                + p.order.capacity() * size_of::<Arc<str>>()
        })
    }

    /// The part kept for call id `id`, if any.
    fn get(&self, id: &str) -> Option<&ToolCallPart> {
        self.parts.as_ref()?.pending.get(id)
    }

    fn keep(&mut self, part: &ToolCallPart) {
        let parts = self.parts.get_or_insert_default();
        match parts.pending.get_mut(&part.call_id) {
            Some(kept) => {
                kept.tool_name = kept.tool_name.take().or(part.tool_name.clone());
                kept.call_fingerprint = kept.call_fingerprint.or(part.call_fingerprint);
                kept.result_fingerprint = kept.result_fingerprint.or(part.result_fingerprint);
            }
            None => {
                if parts.order.len() >= MAX_PENDING_PARTS {
                    if let Some(old) = parts.order.pop_front() {
                        parts.pending.remove(&old);
                    }
                }
                parts.order.push_back(part.call_id.clone());
                parts.pending.insert(part.call_id.clone(), part.clone());
            }
        }
    }

    /// Parts kept (for tests and bounds).
    pub fn len(&self) -> usize {
        self.parts.as_ref().map_or(0, |p| p.pending.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What to do with an arriving event.
pub(super) enum Placement {
    /// Already held (same or less complete copy).
    Duplicate,
    /// Merged into a call already in the run; `changed` when that call gained content.
    Absorbed { changed: bool },
    /// Insert this event; `changed` when events already in the run were replaced,
    /// removed or filled (the run must replay); `replaces_without_arguments` when one of
    /// the events it replaces (an earlier copy, inner spans of the call) was a tool call
    /// placed without arguments, i.e. counted already.
    Insert {
        event: Box<RunEvent>,
        changed: bool,
        replaces_without_arguments: bool,
    },
}

/// Decides where `event` goes, applying replacements, merges and joins to `run`.
pub(super) fn place(run: &mut RunState, event: &RunEvent) -> Placement {
    if run.seen.may_contain(&event.span_id) {
        if let Some(placement) = re_export(run, event) {
            return placement;
        }
    }
    let mut event = event.clone();
    let mut changed = false;
    let mut replaces_without_arguments = false;
    let position = run
        .events
        .partition_point(|e| e.order_key() < event.order_key());
    match &event.observation {
        Observation::ToolCall { .. } => {
            if let Some(part) = event.call.call_id.as_ref().and_then(|id| run.calls.get(id)) {
                fill_from_part(&mut event, part);
            }
            let lo = position.saturating_sub(NEAR);
            if let Some(outer) = (lo..position)
                .rev()
                .find(|&j| same_call(&run.events[j], &event))
            {
                let filled = fill(&mut run.events[outer], &event);
                return Placement::Absorbed { changed: filled };
            }
            let hi = (position + NEAR).min(run.events.len());
            let inners: Vec<usize> = (position..hi)
                .filter(|&j| same_call(&event, &run.events[j]))
                .collect();
            for j in inners.into_iter().rev() {
                let inner = run.events.remove(j);
                run.seen.remove(&inner.span_id);
                replaces_without_arguments |= inner.call.without_arguments;
                fill(&mut event, &inner);
                changed = true;
            }
        }
        _ => {
            for part in event.call.parts.clone() {
                let lo = position.saturating_sub(NEAR);
                let hi = (position + NEAR).min(run.events.len());
                let target = (lo..hi).find(|&j| {
                    matches!(run.events[j].observation, Observation::ToolCall { .. })
                        && run.events[j].call.call_id.as_ref() == Some(&part.call_id)
                });
                match target {
                    Some(j) => changed |= fill_from_part(&mut run.events[j], &part),
                    None => run.calls.keep(&part),
                }
            }
        }
    }
    Placement::Insert {
        event: Box::new(event),
        changed,
        replaces_without_arguments,
    }
}

/// Places a copy of a span the run may hold; `None` when it holds none (the span_id only
/// shares its key in [`RunState::seen`] with a held one).
fn re_export(run: &mut RunState, event: &RunEvent) -> Option<Placement> {
    let i = run.events.iter().position(|e| e.span_id == event.span_id)?;
    if event.call.completeness <= run.events[i].call.completeness {
        return Some(Placement::Duplicate);
    }
    let old = run.events.remove(i);
    run.seen.remove(&old.span_id);
    let mut new = event.clone();
    fill(&mut new, &old);
    Some(Placement::Insert {
        event: Box::new(new),
        changed: true,
        replaces_without_arguments: old.call.without_arguments,
    })
}

/// True when `inner` is the same call as `outer` traced again (see module docs).
fn same_call(outer: &RunEvent, inner: &RunEvent) -> bool {
    let (Observation::ToolCall { tool_name: a, .. }, Observation::ToolCall { tool_name: b, .. }) =
        (&outer.observation, &inner.observation)
    else {
        return false;
    };
    if a != b || outer.span_id == inner.span_id {
        return false;
    }
    let nested = !inner.call.parent_span_id.is_empty()
        && inner.call.parent_span_id == outer.span_id
        && inner.trace_id == outer.trace_id;
    let same_mcp_request =
        outer.call.mcp_request.is_some() && outer.call.mcp_request == inner.call.mcp_request;
    nested || same_mcp_request
}

/// Fills the call and result fingerprints `target` lacks from `source`; true if any was.
/// `target` has arguments once either had them.
fn fill(target: &mut RunEvent, source: &RunEvent) -> bool {
    target.call.without_arguments &= source.call.without_arguments;
    let (
        Observation::ToolCall {
            call_fingerprint,
            result_fingerprint,
            ..
        },
        Observation::ToolCall {
            call_fingerprint: source_call,
            result_fingerprint: source_result,
            ..
        },
    ) = (&mut target.observation, &source.observation)
    else {
        return false;
    };
    let mut changed = false;
    if call_fingerprint.is_none() && source_call.is_some() {
        *call_fingerprint = *source_call;
        changed = true;
    }
    if result_fingerprint.is_none() && source_result.is_some() {
        *result_fingerprint = *source_result;
        changed = true;
    }
    changed
}

/// Fills what `target` lacks from a message part with its call id; a `tool_call` part of
/// the same tool name brings the arguments.
fn fill_from_part(target: &mut RunEvent, part: &ToolCallPart) -> bool {
    let Observation::ToolCall {
        tool_name,
        call_fingerprint,
        result_fingerprint,
    } = &mut target.observation
    else {
        return false;
    };
    let mut changed = false;
    let name_matches = part.tool_name.as_ref().is_none_or(|n| n == tool_name);
    if part.call_fingerprint.is_some() && name_matches {
        target.call.without_arguments = false;
    }
    if call_fingerprint.is_none() && part.call_fingerprint.is_some() && name_matches {
        *call_fingerprint = part.call_fingerprint;
        changed = true;
    }
    if result_fingerprint.is_none() && part.result_fingerprint.is_some() {
        *result_fingerprint = part.result_fingerprint;
        changed = true;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{Registry, RegistryConfig};
    use std::time::Instant;

    fn registry() -> Registry {
        Registry::new(
            vec![crate::detector::ProfileSettings::nudge()],
            RegistryConfig::default(),
        )
    }

    fn tool(span: u8, parent: u8, start: u64, call: Option<u8>, result: Option<u8>) -> RunEvent {
        RunEvent {
            run_key: Arc::from("r"),
            trace_id: [1; 16].into(),
            span_id: [span; 8].into(),
            start_time_unix_nano: start,
            end_time_unix_nano: start + 10,
            service_name: None,
            agent_name: None,
            observation: Observation::ToolCall {
                tool_name: Arc::from("t"),
                call_fingerprint: call.map(|c| [c; 32]),
                result_fingerprint: result.map(|r| [r; 32]),
            },
            call: CallContext {
                parent_span_id: if parent == 0 {
                    Default::default()
                } else {
                    [parent; 8].into()
                },
                completeness: 4,
                without_arguments: call.is_none(),
                ..CallContext::default()
            },
        }
    }

    fn calls(r: &Registry) -> usize {
        r.run("r").map_or(0, |s| s.tool_calls)
    }

    fn without_arguments(r: &Registry) -> u64 {
        r.stats()
            .tool_calls_without_arguments
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    #[test]
    fn a_call_traced_twice_counts_without_arguments_only_if_no_span_had_them() {
        let now = Instant::now();
        // Outer span with arguments, inner span (child, same tool) without, in one request
        // (either order in it): one call, with arguments.
        for batch in [
            vec![
                tool(1, 0, 100, Some(7), Some(9)),
                tool(2, 1, 101, None, None),
            ],
            vec![
                tool(2, 1, 101, None, None),
                tool(1, 0, 100, Some(7), Some(9)),
            ],
        ] {
            let r = registry();
            r.observe(batch, now);
            assert_eq!((calls(&r), without_arguments(&r)), (1, 0));
        }
        // The outer span first, the inner one in a later request: absorbed, not counted.
        let r = registry();
        r.observe(vec![tool(1, 0, 100, Some(7), None)], now);
        r.observe(vec![tool(2, 1, 101, None, Some(9))], now);
        assert_eq!((calls(&r), without_arguments(&r)), (1, 0));
        // Neither span captured arguments (content capture off): one call, counted once.
        let r = registry();
        r.observe(vec![tool(1, 0, 100, None, None)], now);
        r.observe(vec![tool(2, 1, 101, None, None)], now);
        r.observe(vec![tool(2, 1, 101, None, None)], now); // an identical re-export
        assert_eq!((calls(&r), without_arguments(&r)), (1, 1));
        // Two separate calls without arguments count twice.
        r.observe(vec![tool(3, 0, 200, None, None)], now);
        assert_eq!((calls(&r), without_arguments(&r)), (2, 2));
        // Documented limit: the inner span alone in an earlier request is placed (and
        // counted) before its outer span brings the arguments.
        let r = registry();
        r.observe(vec![tool(2, 1, 101, None, None)], now);
        r.observe(vec![tool(1, 0, 100, Some(7), None)], now);
        assert_eq!((calls(&r), without_arguments(&r)), (1, 1));
        // The outer copy replacing it is not counted again, with or without arguments.
        let r = registry();
        r.observe(vec![tool(2, 1, 101, None, None)], now);
        r.observe(vec![tool(1, 0, 100, None, None)], now);
        assert_eq!((calls(&r), without_arguments(&r)), (1, 1));
    }

    #[test]
    fn late_outer_span_replaces_its_inner_span_and_is_filled_from_it() {
        let r = registry();
        let now = Instant::now();
        // Inner (child of span 1) first, carrying the result; the outer has none.
        r.observe(vec![tool(2, 1, 101, Some(7), Some(9))], now);
        assert_eq!(calls(&r), 1);
        r.observe(vec![tool(1, 0, 100, Some(7), None)], now);
        assert_eq!(calls(&r), 1, "one call");
        let run = r.runs.get("r").unwrap();
        assert_eq!(
            run.events[0].span_id[..],
            [1; 8],
            "the outer span is the call"
        );
        assert_eq!(
            run.events[0].observation,
            Observation::ToolCall {
                tool_name: Arc::from("t"),
                call_fingerprint: Some([7; 32]),
                result_fingerprint: Some([9; 32]),
            }
        );
    }

    #[test]
    fn unfinished_snapshot_is_replaced_identical_copy_is_a_duplicate() {
        let r = registry();
        let now = Instant::now();
        let mut snapshot = tool(1, 0, 100, Some(7), None);
        snapshot.end_time_unix_nano = 0;
        snapshot.call.completeness = 1;
        r.observe(vec![snapshot], now);
        let finished = tool(1, 0, 100, Some(7), Some(9));
        r.observe(vec![finished.clone()], now);
        r.observe(vec![finished], now);
        assert_eq!(calls(&r), 1);
        assert_eq!(
            r.stats()
                .duplicate_spans
                .load(std::sync::atomic::Ordering::Relaxed),
            1
        );
        let run = r.runs.get("r").unwrap();
        assert_eq!(run.events[0].end_time_unix_nano, 110);
    }

    #[test]
    fn unclaimed_message_parts_are_bounded() {
        let r = registry();
        let now = Instant::now();
        let parts = (0..MAX_PENDING_PARTS + 10)
            .map(|i| ToolCallPart {
                call_id: Arc::from(format!("c{i}")),
                tool_name: Some(Arc::from("t")),
                call_fingerprint: Some([1; 32]),
                result_fingerprint: None,
            })
            .collect();
        let response = RunEvent {
            observation: Observation::ToolCallResponse,
            call: CallContext {
                parts,
                ..CallContext::default()
            },
            ..tool(9, 0, 1, None, None)
        };
        r.observe(vec![response], now);
        assert_eq!(r.runs.get("r").unwrap().calls.len(), MAX_PENDING_PARTS);
        // The newest parts are kept and fill a call that arrives later.
        let mut late = tool(3, 0, 50, None, None);
        late.call.call_id = Some(Arc::from(format!("c{}", MAX_PENDING_PARTS + 9)));
        r.observe(vec![late], now);
        let run = r.runs.get("r").unwrap();
        let call = run.events.iter().find(|e| e.span_id[..] == [3; 8]).unwrap();
        assert!(matches!(
            call.observation,
            Observation::ToolCall {
                call_fingerprint: Some(_),
                ..
            }
        ));
    }
}
