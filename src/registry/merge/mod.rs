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
use std::sync::Arc;

use super::call_context::{CallKey, ToolCallPart};
use super::kept::KeptEvent;
use super::{RunEvent, RunState};
use crate::detector::Observation;

/// Events searched on each side of the insertion point for the other span of one call.
pub const NEAR: usize = 64;

/// Message parts kept per run while no tool call has claimed them.
pub const MAX_PENDING_PARTS: usize = 1024;

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
mod tests;

#[cfg(test)]
mod split_tests;
