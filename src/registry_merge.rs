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
//! - **Call hops**: OpenLLMetry traces an MCP `tools/call` as a client `{name}.tool` span,
//!   a server `mcp.server` span under it and a server `{name}.tool` span under that
//!   (traceloop/openllmetry `opentelemetry-instrumentation-mcp`, `instrumentation.py` and
//!   `fastmcp_instrumentation.py`). A tool span whose parent is such a call hop
//!   ([`crate::conventions::is_call_hop`]) counts the hop's parent as its parent
//!   ([`CallContext::via_hop`]; one hop, never two), so the rule above makes the two tool
//!   spans one call. The engine applies the hop when it knows it (same request, or a hop
//!   seen before); a hop arriving after its child is applied by [`relink`].
//! - **Joins**: a tool call without arguments or result takes them from the `tool_call` /
//!   `tool_call_response` message parts with the same `gen_ai.tool.call.id` on the run's
//!   inference spans, whichever arrives first. Parts no tool call has claimed yet are kept,
//!   at most [`MAX_PENDING_PARTS`] per run (oldest dropped first).
//!
//! - **One call on two sibling spans** (google-adk 0.1.0–1.1.x: `tool_call [name]` with the
//!   arguments, then `tool_response [name]` with the result, under one parent): both spans
//!   stay in the run; the result span is no call ([`crate::detector::Observation::ToolResult`]:
//!   it takes a place in the sequence and changes nothing), and the call span is observed
//!   with the result of the next span of its tool under its parent when that is a result
//!   span ([`observation`]). The pairing is read from the run's order each time the call
//!   is observed, so it is the same whatever order the spans arrived in; a result span
//!   arriving after its call makes the run replay.
//!
//! - **One response traced twice**: a model-response span whose parent span is a
//!   model-response span of the run reading as the same response (the same text, or both
//!   tool calls) records the same LLM call: a framework's model span with a provider
//!   instrumentation's span inside (pydantic-ai's `chat` span and Logfire's
//!   `Chat Completion with …`, an OpenInference LangChain `LLM` span and the OpenAI
//!   instrumentation's). Both stay in the run; the inner one is the response and the outer
//!   one is observed as [`Observation::OuterResponse`] (no response, changes nothing)
//!   while a span of the same response is nested in it ([`observation`]). The inner span
//!   ends first, so it is exported first: a detection it completes is reported once, and
//!   the outer span arriving later changes nothing (taking the outer span as the response
//!   would report the detection again on it). Read from the spans present, never stored,
//!   so it is the same whatever order and batches they came in; a chain of three nested
//!   spans leaves the innermost one. Only the parent link is followed: a span between the
//!   two that is no response (none is known here) keeps them two responses.
//!
//! Any change to an event already in the run makes the run replay (the registry's replay
//! keeps detections independent of arrival order).

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::num::NonZeroU64;
use std::sync::Arc;

use super::kept::KeptEvent;
use super::{RunEvent, RunState};
use crate::detector::Observation;
use crate::fingerprint::Fingerprint;

/// The seed of [`CallKey`]'s hash.
const CALL_KEY_SEED: u64 = 0x6c6f_6f70_7761_7463;

/// Events searched on each side of the insertion point for the other span of one call.
pub const NEAR: usize = 64;

/// Message parts kept per run while no tool call has claimed them.
pub const MAX_PENDING_PARTS: usize = 1024;

/// A `gen_ai.tool.call.id` or MCP request as a run compares it: a fixed-seed 64-bit
/// foldhash of the string (8 bytes, no allocation per call; the same key in every process).
/// Two different ids share a key with probability about 2⁻⁶⁴ per pair, and only ids of one
/// run near each other in time (or pending in it) are ever compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallKey(NonZeroU64);

impl CallKey {
    /// The key of `id`.
    pub fn of(id: &str) -> CallKey {
        let hash = foldhash::fast::FixedState::with_seed(CALL_KEY_SEED).hash_one(id);
        CallKey(NonZeroU64::new(hash).unwrap_or(NonZeroU64::MIN))
    }
}

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
    pub call_id: Option<CallKey>,
    /// MCP request of a `tools/call` span: `mcp.session.id` and `jsonrpc.request.id`.
    pub mcp_request: Option<CallKey>,
    /// Tool-call parts of an inference span's messages, fingerprinted.
    pub parts: Vec<ToolCallPart>,
    /// A tool call none of whose spans (nor a joined `tool_call` part) captured
    /// arguments so far: set from the span, cleared when a merge or join brings them.
    pub without_arguments: bool,
    /// `parent_span_id` is not the span's own parent but its parent's parent: the span's
    /// parent is a call hop ([`crate::conventions::is_call_hop`]), an MCP server span
    /// between the two tool spans of one call. Set once; a hop is never followed twice.
    pub via_hop: bool,
    /// A call whose result is on its next sibling span, if any (google-adk 0.1.0–1.1.x
    /// `tool_call [name]`, [`crate::event::SplitSpan::Call`]): see [`observation`].
    pub result_on_sibling: bool,
}

/// A `tool_call` (arguments) or `tool_call_response` (result) message part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCallPart {
    /// `id` of the part: the `gen_ai.tool.call.id` of the call.
    pub call_id: CallKey,
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
    pending: HashMap<CallKey, ToolCallPart>,
    order: VecDeque<CallKey>,
}

impl CallIndex {
    /// Estimated heap bytes of the pending parts (for [`super::RunState::heap_bytes`]).
    pub(crate) fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.parts.as_ref().map_or(0, |p| {
            size_of::<PendingParts>()
                + p.pending.capacity() * (size_of::<CallKey>() + size_of::<ToolCallPart>() + 1)
                + p.order.capacity() * size_of::<CallKey>()
        })
    }

    /// The part kept for call id `id`, if any.
    fn get(&self, id: CallKey) -> Option<&ToolCallPart> {
        self.parts.as_ref()?.pending.get(&id)
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
                parts.order.push_back(part.call_id);
                parts.pending.insert(part.call_id, part.clone());
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
        event: KeptEvent,
        changed: bool,
        replaces_without_arguments: bool,
    },
}

/// Decides where `event` goes, applying replacements, merges and joins to `run`.
pub(super) fn place(run: &mut RunState, event: &RunEvent) -> Placement {
    if let Some(i) = run.seen.position(&run.events, &event.span_id) {
        return re_export(run, i, event);
    }
    let position = run
        .events
        .partition_point(|e| e.order_key() < event.order_key());
    let mut event = keep(run, position, event);
    let mut changed = false;
    let mut replaces_without_arguments = false;
    if event.is_tool_call() {
        if let Some(part) = event.call_id.and_then(|id| run.calls.get(id)) {
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
            run.seen.removing(&run.events, j);
            let inner = run.events.remove(j);
            replaces_without_arguments |= inner.without_arguments();
            fill(&mut event, &inner);
            changed = true;
        }
    } else if event.is_tool_result() {
        // The call observed before it (if any) is observed with this result now.
        let lo = position.saturating_sub(NEAR);
        changed = (lo..position)
            .rev()
            .find(|&j| split_siblings(&run.events[j], &event))
            .is_some_and(|j| {
                let call = &run.events[j];
                call.is_tool_call() && call.result_fingerprint().is_none()
            });
    } else {
        // The events within NEAR of the new one (placing it changes no length).
        let lo = position.saturating_sub(NEAR);
        let hi = (position + NEAR).min(run.events.len());
        // A response nested in one observed already: that one is its outer span now.
        if event.is_response() {
            changed |= (lo..hi).any(|j| nested_response(&run.events[j], &event));
        }
        for part in event.parts() {
            let target = (lo..hi).find(|&j| {
                run.events[j].is_tool_call() && run.events[j].call_id == Some(part.call_id)
            });
            match target {
                Some(j) => changed |= fill_from_part(&mut run.events[j], part),
                None => run.calls.keep(part),
            }
        }
    }
    Placement::Insert {
        event,
        changed,
        replaces_without_arguments,
    }
}

/// `event` as the run keeps it, sharing the origin of the events around `position` (or
/// of the last one, or one the run lists) when equal.
fn keep(run: &RunState, position: usize, event: &RunEvent) -> KeptEvent {
    let around = [
        position.checked_sub(1).and_then(|i| run.events.get(i)),
        run.events.get(position),
        run.events.last(),
    ];
    let neighbours = around.into_iter().flatten().map(|e| &e.origin);
    let origin = KeptEvent::origin_for(event, neighbours.chain(&run.origins));
    KeptEvent::new(event, origin)
}

/// Places a copy of the span held at `i`.
fn re_export(run: &mut RunState, i: usize, event: &RunEvent) -> Placement {
    if event.call.completeness <= run.events[i].completeness {
        return Placement::Duplicate;
    }
    run.seen.removing(&run.events, i);
    let old = run.events.remove(i);
    let origin = KeptEvent::origin_for(event, [&old.origin].into_iter().chain(&run.origins));
    let mut new = KeptEvent::new(event, origin);
    fill(&mut new, &old);
    Placement::Insert {
        event: new,
        changed: true,
        replaces_without_arguments: old.without_arguments(),
    }
}

/// A call hop span ([`crate::conventions::is_call_hop`]) as the registry needs it: in run
/// `run_key`, span `span_id` of `trace_id`, starting at `start_time_unix_nano`, is the
/// child of `parent_span_id`.
#[derive(Clone, Debug)]
pub struct CallHop {
    pub run_key: Arc<str>,
    pub trace_id: super::TraceId,
    pub span_id: super::SpanId,
    pub parent_span_id: super::SpanId,
    pub start_time_unix_nano: u64,
}

/// Applies a call hop that arrived after (or with) the tool spans under it: each tool call
/// of the run whose parent is the hop (and that followed no hop yet) takes the hop's parent
/// as its parent, and is merged into that parent when the parent is a tool call of the
/// same name in the run (the outer span is the call, filled from the inner one). The hop
/// starts before its child, so the events from [`NEAR`] before its start to [`NEAR`] after
/// are searched. True when the run changed (it must replay).
pub(super) fn relink(run: &mut RunState, hop: &CallHop) -> bool {
    let position = run
        .events
        .partition_point(|e| e.start_time_unix_nano < hop.start_time_unix_nano);
    let lo = position.saturating_sub(NEAR);
    let hi = (position + NEAR).min(run.events.len());
    let children: Vec<usize> = (lo..hi)
        .filter(|&j| {
            let e = &run.events[j];
            e.is_tool_call()
                && !e.via_hop()
                && e.parent_span_id() == hop.span_id.as_slice()
                && e.trace_id() == hop.trace_id.as_slice()
        })
        .collect();
    let changed = !children.is_empty();
    for j in children.into_iter().rev() {
        run.events[j].set_parent_via_hop(&hop.parent_span_id);
        let from = j.saturating_sub(NEAR);
        if let Some(outer) = (from..j)
            .rev()
            .find(|&k| same_call(&run.events[k], &run.events[j]))
        {
            run.seen.removing(&run.events, j);
            let inner = run.events.remove(j);
            fill(&mut run.events[outer], &inner);
        }
    }
    changed
}

/// The observation the detectors take for `events[index]`: the event's own, except that a
/// call whose result is on its sibling span ([`CallContext::result_on_sibling`]) and that
/// has no result of its own takes the result of the next event of its tool under its parent
/// (among the [`NEAR`] after it) when that is a result span, and that a model response with
/// a span of the same response nested in it (among the [`NEAR`] on each side) is
/// [`Observation::OuterResponse`]. Other events cost one flag test.
pub(super) fn observation(events: &[KeptEvent], index: usize) -> Observation {
    let event = &events[index];
    if event.is_response() {
        let lo = index.saturating_sub(NEAR);
        let hi = (index + 1 + NEAR).min(events.len());
        if events[lo..hi].iter().any(|e| nested_response(event, e)) {
            return Observation::OuterResponse;
        }
    }
    let mut observation = event.observation();
    if event.result_on_sibling() && event.result_fingerprint().is_none() {
        let hi = (index + 1 + NEAR).min(events.len());
        let next = events
            .get(index + 1..hi)
            .unwrap_or_default()
            .iter()
            .find(|e| split_siblings(event, e));
        if let (
            Some(result),
            Observation::ToolCall {
                result_fingerprint, ..
            },
        ) = (next.and_then(|e| e.sibling_result()), &mut observation)
        {
            *result_fingerprint = Some(*result);
        }
    }
    observation
}

/// True when `a` and `b` are spans of calls traced on two sibling spans (a call with
/// [`CallContext::result_on_sibling`] or a result span) of the same tool under the same
/// parent span.
fn split_siblings(a: &KeptEvent, b: &KeptEvent) -> bool {
    let split = |e: &KeptEvent| e.result_on_sibling() || e.is_tool_result();
    split(a)
        && split(b)
        && !a.parent_span_id().is_empty()
        && a.parent_span_id() == b.parent_span_id()
        && a.tool_name() == b.tool_name()
        && a.trace_id() == b.trace_id()
        && a.span_id() != b.span_id()
}

/// True when `inner` is a span of the model response `outer` records, nested in it: its
/// parent span is `outer`'s and both read as the same response (see module docs).
fn nested_response(outer: &KeptEvent, inner: &KeptEvent) -> bool {
    outer.same_response(inner)
        && !inner.parent_span_id().is_empty()
        && inner.parent_span_id() == outer.span_id()
        && inner.trace_id() == outer.trace_id()
        && outer.span_id() != inner.span_id()
}

/// True when `inner` is the same call as `outer` traced again (see module docs).
fn same_call(outer: &KeptEvent, inner: &KeptEvent) -> bool {
    if !outer.is_tool_call() || !inner.is_tool_call() {
        return false;
    }
    // The links first: most neighbours are other calls of the same tool, which only the
    // parent link or the MCP request id tells apart.
    let nested = !inner.parent_span_id().is_empty()
        && inner.parent_span_id() == outer.span_id()
        && inner.trace_id() == outer.trace_id();
    let same_mcp_request =
        outer.mcp_request().is_some() && outer.mcp_request() == inner.mcp_request();
    (nested || same_mcp_request)
        && outer.tool_name() == inner.tool_name()
        && outer.span_id() != inner.span_id()
}

/// Fills the call and result fingerprints `target` lacks from `source`; true if any was.
/// `target` has arguments once either had them.
fn fill(target: &mut KeptEvent, source: &KeptEvent) -> bool {
    target.set_without_arguments(target.without_arguments() && source.without_arguments());
    if !target.is_tool_call() || !source.is_tool_call() {
        return false;
    }
    let mut changed = false;
    if let (None, Some(&call)) = (target.call_fingerprint(), source.call_fingerprint()) {
        target.set_call_fingerprint(call);
        changed = true;
    }
    if let (None, Some(&result)) = (target.result_fingerprint(), source.result_fingerprint()) {
        target.set_result_fingerprint(result);
        changed = true;
    }
    changed
}

/// Fills what `target` lacks from a message part with its call id; a `tool_call` part of
/// the same tool name brings the arguments.
fn fill_from_part(target: &mut KeptEvent, part: &ToolCallPart) -> bool {
    if !target.is_tool_call() {
        return false;
    }
    let mut changed = false;
    let name_matches = part
        .tool_name
        .as_ref()
        .is_none_or(|n| Some(n) == target.tool_name());
    if part.call_fingerprint.is_some() && name_matches {
        target.set_without_arguments(false);
    }
    if let (None, Some(call), true) = (
        target.call_fingerprint(),
        part.call_fingerprint,
        name_matches,
    ) {
        target.set_call_fingerprint(call);
        changed = true;
    }
    if let (None, Some(result)) = (target.result_fingerprint(), part.result_fingerprint) {
        target.set_result_fingerprint(result);
        changed = true;
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::Observation;
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

    fn hop(span: u8, parent: u8, start: u64) -> CallHop {
        CallHop {
            run_key: Arc::from("r"),
            trace_id: [1; 16].into(),
            span_id: [span; 8].into(),
            parent_span_id: [parent; 8].into(),
            start_time_unix_nano: start,
        }
    }

    #[test]
    fn a_late_hop_merges_only_the_tool_call_under_it_into_its_parent() {
        let now = Instant::now();
        // Two sequential identical calls, each client span (1, 4) → hop (2, 5) → server
        // span (3, 6); the server spans carry the result the client spans lack.
        let spans = || {
            vec![
                tool(1, 0, 100, Some(7), None),
                tool(3, 2, 102, Some(7), Some(9)),
                tool(4, 0, 200, Some(7), None),
                tool(6, 5, 202, Some(7), Some(9)),
            ]
        };
        for hops in [
            vec![hop(2, 1, 101), hop(5, 4, 201)],
            vec![hop(5, 4, 201), hop(2, 1, 101)],
        ] {
            let r = registry();
            r.observe(spans(), now);
            assert_eq!(calls(&r), 4, "no hop known yet: four spans, four calls");
            r.relink(&hops);
            assert_eq!(calls(&r), 2, "one call per client span");
            let run = r.runs.get("r").unwrap();
            let ids: Vec<&[u8]> = run.events.iter().map(|e| e.span_id()).collect();
            assert_eq!(ids, [&[1; 8][..], &[4; 8][..]]);
            assert!(run
                .events
                .iter()
                .all(|e| e.result_fingerprint() == Some(&[9; 32])));
            // Applying a hop again changes nothing.
            drop(run);
            r.relink(&hops);
            assert_eq!(calls(&r), 2);
        }
        // A hop before its outer span: the child takes the hop's parent, and the outer
        // span arriving later absorbs it; a hop is followed once, never twice.
        let r = registry();
        r.observe(vec![tool(3, 2, 102, Some(7), Some(9))], now);
        r.relink(&[hop(2, 1, 101)]);
        r.relink(&[hop(1, 8, 99)]);
        assert_eq!(r.runs.get("r").unwrap().events[0].parent_span_id(), [1; 8]);
        r.observe(vec![tool(1, 0, 100, Some(7), None)], now);
        assert_eq!(calls(&r), 1);
        // A hop whose parent is no tool call in the run merges nothing.
        let r = registry();
        r.observe(
            vec![
                tool(3, 2, 102, Some(7), Some(9)),
                tool(4, 0, 200, Some(7), None),
            ],
            now,
        );
        r.relink(&[hop(2, 8, 101)]);
        assert_eq!(calls(&r), 2);
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
            run.events[0].span_id(),
            [1; 8],
            "the outer span is the call"
        );
        assert_eq!(
            run.events[0].observation(),
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
        assert_eq!(run.events[0].end_time_unix_nano(), 110);
    }

    #[test]
    fn unclaimed_message_parts_are_bounded() {
        let r = registry();
        let now = Instant::now();
        let parts = (0..MAX_PENDING_PARTS + 10)
            .map(|i| ToolCallPart {
                call_id: CallKey::of(&format!("c{i}")),
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
        late.call.call_id = Some(CallKey::of(&format!("c{}", MAX_PENDING_PARTS + 9)));
        r.observe(vec![late], now);
        let run = r.runs.get("r").unwrap();
        let call = run.events.iter().find(|e| e.span_id() == [3; 8]).unwrap();
        assert!(matches!(
            call.observation(),
            Observation::ToolCall {
                call_fingerprint: Some(_),
                ..
            }
        ));
    }
}

#[cfg(test)]
mod split_tests {
    //! google-adk 0.1.0–1.1.x: each call is a `tool_call [t]` span (arguments) and, after it
    //! under the same parent, a `tool_response [t]` span (result).
    use super::*;
    use crate::detector::{Observation, Pattern, ProfileSettings};
    use crate::registry::{Registry, RegistryConfig};
    use std::sync::atomic::Ordering;
    use std::time::Instant;

    /// The agent span every tool span of the run is a child of.
    const PARENT: u8 = 9;

    fn registry() -> Registry {
        Registry::new(
            vec![ProfileSettings::nudge(), ProfileSettings::stop()],
            RegistryConfig::default(),
        )
    }

    fn span(span: u8, start: u64, observation: Observation) -> RunEvent {
        RunEvent {
            run_key: Arc::from("r"),
            trace_id: [1; 16].into(),
            span_id: [span; 8].into(),
            start_time_unix_nano: start,
            end_time_unix_nano: start + 10,
            service_name: None,
            agent_name: None,
            observation,
            call: CallContext {
                parent_span_id: [PARENT; 8].into(),
                completeness: 5,
                ..CallContext::default()
            },
        }
    }

    /// `tool_call [tool]` with arguments `args`.
    fn call(id: u8, start: u64, tool: &str, args: u8) -> RunEvent {
        let mut event = span(
            id,
            start,
            Observation::ToolCall {
                tool_name: Arc::from(tool),
                call_fingerprint: Some([args; 32]),
                result_fingerprint: None,
            },
        );
        event.call.result_on_sibling = true;
        event
    }

    /// `tool_response [tool]` with result `result`.
    fn result(id: u8, start: u64, tool: &str, result: u8) -> RunEvent {
        span(
            id,
            start,
            Observation::ToolResult {
                tool_name: Arc::from(tool),
                result_fingerprint: [result; 32],
            },
        )
    }

    /// Three pairs of `t`: call i (span 10 + i) at 100·i, its result (span 20 + i) 20 ns
    /// later; arguments and results from `args` and `results`.
    fn pairs(args: [u8; 3], results: [u8; 3]) -> Vec<RunEvent> {
        (0..3u8)
            .flat_map(|i| {
                let start = 100 * u64::from(i + 1);
                [
                    call(11 + i, start, "t", args[usize::from(i)]),
                    result(21 + i, start + 20, "t", results[usize::from(i)]),
                ]
            })
            .collect()
    }

    /// (profile, pattern, completing span, call ordinal) of the run's detections.
    fn found(r: &Registry) -> Vec<(String, Pattern, u8, Option<usize>)> {
        r.detections("r")
            .unwrap_or_default()
            .iter()
            .map(|d| {
                (
                    d.profile.name.clone(),
                    d.detection.pattern,
                    d.span_id[0],
                    d.detection.call,
                )
            })
            .collect()
    }

    fn permutations(n: usize) -> Vec<Vec<usize>> {
        if n == 0 {
            return vec![vec![]];
        }
        let mut out = Vec::new();
        for rest in permutations(n - 1) {
            for at in 0..=rest.len() {
                let mut p = rest.clone();
                p.insert(at, n - 1);
                out.push(p);
            }
        }
        out
    }

    fn repeated_result_at_call_3() -> Vec<(String, Pattern, u8, Option<usize>)> {
        vec![("nudge".into(), Pattern::RepeatedResult, 13, Some(3))]
    }

    #[test]
    fn each_call_takes_the_result_of_its_sibling_in_any_arrival_order() {
        let now = Instant::now();
        let looping = pairs([7, 7, 7], [8, 8, 8]);
        let healthy = pairs([1, 2, 3], [8, 8, 8]);
        for order in permutations(6) {
            // One span per request, in this order.
            for (events, want) in [(&looping, repeated_result_at_call_3()), (&healthy, vec![])] {
                let r = registry();
                let mut reported = Vec::new();
                for &i in &order {
                    reported.extend(r.observe(vec![events[i].clone()], now));
                }
                assert_eq!(found(&r), want, "order {order:?}");
                assert_eq!(reported.len(), want.len(), "order {order:?}: reported");
                assert_eq!(r.run("r").unwrap().tool_calls, 3, "order {order:?}");
                assert_eq!(
                    r.stats()
                        .tool_calls_without_arguments
                        .load(Ordering::Relaxed),
                    0
                );
            }
        }
        // Batched: all in one request, calls then results, results then calls, and the
        // pairs split over requests with the response of a pair before its call.
        let batchings: [&[&[usize]]; 5] = [
            &[&[0, 1, 2, 3, 4, 5]],
            &[&[0, 2, 4], &[1, 3, 5]],
            &[&[1, 3, 5], &[0, 2, 4]],
            &[&[0, 1, 3], &[2, 5], &[4]],
            &[&[5, 4], &[3, 2, 1, 0]],
        ];
        for batches in batchings {
            let r = registry();
            for batch in batches {
                r.observe(batch.iter().map(|&i| looping[i].clone()).collect(), now);
            }
            assert_eq!(found(&r), repeated_result_at_call_3(), "{batches:?}");
        }
    }

    #[test]
    fn results_pair_by_tool_and_parent_and_a_result_alone_is_no_call() {
        let now = Instant::now();
        // Parallel calls: a and b pairs in turn, three rounds (ADK's merged
        // `tool_response` span yields no event); `a` returns the same each time, `b` not:
        // `a` warns at its third call (call 5), so `b`'s results, arriving between, were
        // never `a`'s.
        let mut events = Vec::new();
        for round in 0..3u8 {
            let start = 1000 * u64::from(round + 1);
            events.push(call(10 + round, start, "a", 1));
            events.push(result(20 + round, start + 20, "a", 5));
            events.push(call(30 + round, start + 40, "b", 2));
            events.push(result(40 + round, start + 60, "b", 6 + round));
        }
        events.reverse();
        let r = registry();
        r.observe(events, now);
        assert_eq!(
            found(&r),
            vec![("nudge".into(), Pattern::RepeatedResult, 12, Some(5))]
        );
        // A result whose call is not in the run (a before_tool_callback answered, or its
        // span is still to come) is no call; a call without its result (live mode) is a
        // call without a result.
        let r = registry();
        r.observe(vec![result(1, 100, "a", 5), result(2, 200, "a", 5)], now);
        assert_eq!(r.run("r").unwrap().tool_calls, 0);
        r.observe(vec![call(3, 300, "a", 1)], now);
        let events = r.events("r").unwrap();
        assert_eq!(
            events[2].observation,
            Observation::ToolCall {
                tool_name: Arc::from("a"),
                call_fingerprint: Some([1; 32]),
                result_fingerprint: None,
            }
        );
        assert_eq!(r.run("r").unwrap().tool_calls, 1);
        // A result under another parent or of another tool is not the call's.
        let mut other_parent = result(4, 310, "a", 5);
        other_parent.call.parent_span_id = [3; 8].into();
        r.observe(vec![other_parent, result(5, 320, "b", 5)], now);
        assert_eq!(r.events("r").unwrap()[2].observation, events[2].observation);
        // Its own result arriving (in a later request) completes it.
        r.observe(vec![result(6, 330, "a", 5)], now);
        assert!(matches!(
            r.events("r").unwrap()[2].observation,
            Observation::ToolCall {
                result_fingerprint: Some(fp),
                ..
            } if fp == [5; 32]
        ));
    }

    #[test]
    fn a_re_exported_result_span_is_a_duplicate_and_moves_keep_the_pairs() {
        let now = Instant::now();
        let r = registry();
        let looping = pairs([7, 7, 7], [8, 8, 8]);
        r.observe(looping.clone(), now);
        r.observe(looping.clone(), now);
        assert_eq!(r.stats().duplicate_spans.load(Ordering::Relaxed), 6);
        assert_eq!(found(&r), repeated_result_at_call_3());
        // Moved to another run (an agent found later), as the engine does: the same.
        let moves: std::collections::HashMap<Vec<u8>, Arc<str>> = looping
            .iter()
            .map(|e| (e.span_id.to_vec(), Arc::from("r2")))
            .collect();
        r.rehome("r", &moves, now);
        let moved: Vec<_> = r
            .detections("r2")
            .unwrap()
            .iter()
            .map(|d| (d.detection.pattern, d.span_id[0]))
            .collect();
        assert_eq!(moved, vec![(Pattern::RepeatedResult, 13)]);
    }
}
