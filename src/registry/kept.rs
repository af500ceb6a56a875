//! How a run keeps an event (issue 8 item 4, "per-run state compact"): [`KeptEvent`] holds
//! what a [`RunEvent`] says, without what repeats across the run's events.
//!
//! - The run key is the run's own (its map key), not stored per event.
//! - trace_id, `service.name`, agent name and tool name live in one shared [`Origin`]: an
//!   event takes an equal origin of a neighbour or of the run's list of recent origins
//!   ([`MAX_ORIGINS`]), so a run usually holds one origin per tool however many calls it
//!   keeps.
//! - The observation is unpacked: its two 32-byte digests inline (a text response's digest
//!   in the call digest's place), which of them are present and its kind in one flag byte,
//!   its tool name in the origin.
//! - The end time is kept as a 40-bit duration after the start (over 18 minutes; an end
//!   before the start goes to the rare box with its exact value).
//! - span_id and parent span_id are kept inline up to 8 bytes (every valid OTLP span_id),
//!   their lengths in one byte; a longer id, an MCP request, an end time that is no
//!   40-bit duration and message parts (inference spans only) go to a box allocated only
//!   for the events that have them.
//! - Call ids and MCP requests are 64-bit keys ([`super::CallKey`]), not strings.
//!
//! Every field of the [`RunEvent`] comes back from [`KeptEvent::to_run_event`], so replays,
//! merges and moves between runs see exactly what arrived.

use std::sync::Arc;

use super::call_context::{CallKey, ToolCallPart};
use super::{CallContext, RunEvent, SpanId, TraceId};
use crate::detector::{CallTraits, Observation};
use crate::fingerprint::Fingerprint;

/// Origins a run lists for sharing (beyond its neighbours): more distinct (trace, agent,
/// tool) combinations than this still share with equal neighbours, each new one is just not
/// listed.
pub const MAX_ORIGINS: usize = 32;

/// What the spans of a run usually share: trace_id, names and the tool name (one
/// allocation per run and tool, or per change of trace or agent along it).
#[derive(Debug, PartialEq, Eq)]
pub struct Origin {
    pub trace_id: TraceId,
    pub service_name: Option<Arc<str>>,
    pub agent_name: Option<Arc<str>>,
    /// The tool of a tool call; `None` for model responses.
    pub tool_name: Option<Arc<str>>,
}

impl Origin {
    /// True when `event` has this trace_id, these names and this tool.
    fn matches(&self, event: &RunEvent) -> bool {
        self.trace_id == event.trace_id
            && self.service_name == event.service_name
            && self.agent_name == event.agent_name
            && self.tool_name.as_ref() == tool_name(&event.observation)
    }
}

fn tool_name(observation: &Observation) -> Option<&Arc<str>> {
    match observation {
        Observation::ToolCall { tool_name, .. } | Observation::ToolResult { tool_name, .. } => {
            Some(tool_name)
        }
        _ => None,
    }
}

/// [`KeptEvent::flags`] bits: the observation's kind (two bits), digests present,
/// [`CallContext::without_arguments`], the end time's place, [`CallContext::via_hop`] and
/// [`CallContext::result_on_sibling`].
const KIND: u8 = 0b11;
const TOOL_CALL: u8 = 0;
const TEXT_RESPONSE: u8 = 1;
const TOOL_CALL_RESPONSE: u8 = 2;
/// [`Observation::ToolResult`]: the result span of a call traced on two sibling spans.
const TOOL_RESULT: u8 = 3;
const HAS_CALL: u8 = 1 << 2;
const HAS_RESULT: u8 = 1 << 3;
const WITHOUT_ARGUMENTS: u8 = 1 << 4;
/// The end time is in [`Rare::end_time_unix_nano`], not a 40-bit duration.
const END_IN_RARE: u8 = 1 << 5;
/// The parent span_id kept is the parent of the span's call hop ([`CallContext::via_hop`]).
const VIA_HOP: u8 = 1 << 6;
/// [`CallContext::result_on_sibling`].
const RESULT_ON_SIBLING: u8 = 1 << 7;

/// A span id length nibble of an id longer than 8 bytes (kept in [`Rare`]).
const LONG: u8 = 0xF;

/// The longest duration kept inline: 40 bits of ns (about 18 minutes).
const MAX_DURATION: u64 = (1 << 40) - 1;

/// An id of up to 8 bytes, inline, and its length nibble ([`LONG`] when it is not).
fn short_id(id: &[u8]) -> ([u8; 8], u8) {
    let mut bytes = [0; 8];
    match bytes.get_mut(..id.len()) {
        Some(head) => {
            head.copy_from_slice(id);
            (bytes, id.len() as u8)
        }
        None => (bytes, LONG),
    }
}

/// What few events carry: ids longer than 8 bytes, an MCP request, an end time before the
/// start or over 18 minutes after it, message parts.
#[derive(Clone, Debug, Default)]
struct Rare {
    span_id: Option<Box<[u8]>>,
    parent_span_id: Option<Box<[u8]>>,
    mcp_request: Option<CallKey>,
    end_time_unix_nano: u64,
    parts: Vec<ToolCallPart>,
}

/// One event as its run keeps it (128 bytes, no heap allocation of its own for a tool
/// call with valid ids; see the module docs).
#[derive(Clone, Debug)]
pub struct KeptEvent {
    /// Span start, ns since the Unix epoch.
    pub start_time_unix_nano: u64,
    pub origin: Arc<Origin>,
    /// `gen_ai.tool.call.id` of a tool call, as its key.
    pub call_id: Option<CallKey>,
    rare: Option<Box<Rare>>,
    /// The call fingerprint of a tool call, the text fingerprint of a text response (when
    /// [`HAS_CALL`]); zeros otherwise.
    call_fingerprint: Fingerprint,
    /// The result fingerprint of a tool call (when [`HAS_RESULT`]).
    result_fingerprint: Fingerprint,
    /// The call's [`CallTraits`], packed ([`CallTraits::pack`]).
    traits: u64,
    span_id: [u8; 8],
    parent_span_id: [u8; 8],
    /// End minus start: low 32 bits, high 8 bits (unless [`END_IN_RARE`]).
    duration: u32,
    duration_high: u8,
    /// How complete this copy is ([`CallContext::completeness`]).
    pub completeness: u8,
    /// Length of span_id (low nibble) and parent span_id (high nibble), [`LONG`] if in rare.
    lengths: u8,
    flags: u8,
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
        let (span_id, span_len) = short_id(&event.span_id);
        if span_len == LONG {
            rare.span_id = Some(event.span_id.as_slice().into());
        }
        let (parent_span_id, parent_len) = short_id(&call.parent_span_id);
        if parent_len == LONG {
            rare.parent_span_id = Some(call.parent_span_id.as_slice().into());
        }
        let mut flags = 0;
        let (call_fingerprint, result_fingerprint, traits) = match &event.observation {
            Observation::ToolCall {
                call_fingerprint,
                result_fingerprint,
                traits,
                ..
            } => (*call_fingerprint, *result_fingerprint, *traits),
            Observation::TextResponse { text_fingerprint } => {
                flags |= TEXT_RESPONSE;
                (Some(*text_fingerprint), None, CallTraits::default())
            }
            // The engine never gives an outer response (the registry observes a response
            // so while a span of it is nested in this one): kept as a response, no text.
            Observation::ToolCallResponse | Observation::OuterResponse => {
                flags |= TOOL_CALL_RESPONSE;
                (None, None, CallTraits::default())
            }
            Observation::ToolResult {
                result_fingerprint,
                traits,
                ..
            } => {
                flags |= TOOL_RESULT;
                (None, Some(*result_fingerprint), *traits)
            }
        };
        if call_fingerprint.is_some() {
            flags |= HAS_CALL;
        }
        if result_fingerprint.is_some() {
            flags |= HAS_RESULT;
        }
        if call.without_arguments {
            flags |= WITHOUT_ARGUMENTS;
        }
        if call.via_hop {
            flags |= VIA_HOP;
        }
        if call.result_on_sibling {
            flags |= RESULT_ON_SIBLING;
        }
        let duration = event
            .end_time_unix_nano
            .checked_sub(event.start_time_unix_nano)
            .filter(|&d| d <= MAX_DURATION);
        if duration.is_none() {
            flags |= END_IN_RARE;
            rare.end_time_unix_nano = event.end_time_unix_nano;
        }
        let duration = duration.unwrap_or(0);
        let is_rare = rare.span_id.is_some()
            || rare.parent_span_id.is_some()
            || rare.mcp_request.is_some()
            || flags & END_IN_RARE != 0
            || !rare.parts.is_empty();
        KeptEvent {
            start_time_unix_nano: event.start_time_unix_nano,
            origin,
            call_id: call.call_id,
            rare: is_rare.then(|| Box::new(rare)),
            call_fingerprint: call_fingerprint.unwrap_or_default(),
            result_fingerprint: result_fingerprint.unwrap_or_default(),
            traits: traits.pack(),
            span_id,
            parent_span_id,
            duration: duration as u32,
            duration_high: (duration >> 32) as u8,
            completeness: call.completeness,
            lengths: span_len | parent_len << 4,
            flags,
        }
    }

    /// The shared origin for `event` among `candidates` (origins of its run), or a new one.
    pub fn origin_for<'a>(
        event: &RunEvent,
        candidates: impl IntoIterator<Item = &'a Arc<Origin>>,
    ) -> Arc<Origin> {
        for origin in candidates {
            if origin.matches(event) {
                return origin.clone();
            }
        }
        Arc::new(Origin {
            trace_id: event.trace_id.clone(),
            service_name: event.service_name.clone(),
            agent_name: event.agent_name.clone(),
            tool_name: tool_name(&event.observation).cloned(),
        })
    }

    fn id<'a>(&'a self, inline: &'a [u8; 8], len: u8, long: Option<&'a [u8]>) -> &'a [u8] {
        match len {
            LONG => long.unwrap_or_default(),
            n => inline.get(..usize::from(n)).unwrap_or_default(),
        }
    }

    pub fn span_id(&self) -> &[u8] {
        let long = self.rare.as_ref().and_then(|r| r.span_id.as_deref());
        self.id(&self.span_id, self.lengths & 0xF, long)
    }

    /// The parent span_id (empty for a root span).
    pub fn parent_span_id(&self) -> &[u8] {
        let long = self.rare.as_ref().and_then(|r| r.parent_span_id.as_deref());
        self.id(&self.parent_span_id, self.lengths >> 4, long)
    }

    /// [`CallContext::via_hop`]: the parent kept is the parent of the span's call hop.
    pub fn via_hop(&self) -> bool {
        self.flags & VIA_HOP != 0
    }

    /// Takes `parent` (the parent of this span's call hop) as the parent span_id, and marks
    /// it [`Self::via_hop`] (one hop is followed, never two).
    pub fn set_parent_via_hop(&mut self, parent: &[u8]) {
        let (inline, len) = short_id(parent);
        let long = (len == LONG).then(|| Box::<[u8]>::from(parent));
        match (&mut self.rare, long) {
            (Some(rare), long) => rare.parent_span_id = long,
            (None, Some(long)) => {
                self.rare = Some(Box::new(Rare {
                    parent_span_id: Some(long),
                    ..Rare::default()
                }))
            }
            (None, None) => {}
        }
        self.parent_span_id = inline;
        self.lengths = (self.lengths & 0xF) | len << 4;
        self.flags |= VIA_HOP;
    }

    /// Span end, ns since the Unix epoch.
    pub fn end_time_unix_nano(&self) -> u64 {
        match &self.rare {
            Some(rare) if self.flags & END_IN_RARE != 0 => rare.end_time_unix_nano,
            _ => {
                let duration = u64::from(self.duration) | u64::from(self.duration_high) << 32;
                self.start_time_unix_nano + duration
            }
        }
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

    /// [`CallContext::without_arguments`].
    pub fn without_arguments(&self) -> bool {
        self.flags & WITHOUT_ARGUMENTS != 0
    }

    pub fn set_without_arguments(&mut self, without: bool) {
        self.flags =
            (self.flags & !WITHOUT_ARGUMENTS) | if without { WITHOUT_ARGUMENTS } else { 0 };
    }

    /// [`CallContext::result_on_sibling`].
    pub fn result_on_sibling(&self) -> bool {
        self.flags & RESULT_ON_SIBLING != 0
    }

    /// True for a tool call ([`Observation::ToolCall`]).
    pub fn is_tool_call(&self) -> bool {
        self.flags & KIND == TOOL_CALL
    }

    /// True for the result span of a call traced on two sibling spans
    /// ([`Observation::ToolResult`]): no call of its own.
    pub fn is_tool_result(&self) -> bool {
        self.flags & KIND == TOOL_RESULT
    }

    /// True for a model response (text or tool calls).
    pub fn is_response(&self) -> bool {
        matches!(self.flags & KIND, TEXT_RESPONSE | TOOL_CALL_RESPONSE)
    }

    /// True when `self` and `other` are model responses of one kind, text responses with
    /// the same text fingerprint or both tool-call responses.
    pub fn same_response(&self, other: &KeptEvent) -> bool {
        let kind = self.flags & KIND;
        (kind == TEXT_RESPONSE || kind == TOOL_CALL_RESPONSE)
            && kind == other.flags & KIND
            && self.call_fingerprint == other.call_fingerprint
    }

    /// The result fingerprint and traits of a result span ([`Self::is_tool_result`]).
    pub fn sibling_result(&self) -> Option<(&Fingerprint, CallTraits)> {
        self.is_tool_result()
            .then_some((&self.result_fingerprint, self.traits()))
    }

    /// The call's traits (both halves; zero where not known).
    pub fn traits(&self) -> CallTraits {
        CallTraits::unpack(self.traits)
    }

    /// The tool name of a tool call or tool result.
    pub fn tool_name(&self) -> Option<&Arc<str>> {
        self.origin.tool_name.as_ref()
    }

    /// The call fingerprint of a tool call, if captured.
    pub fn call_fingerprint(&self) -> Option<&Fingerprint> {
        (self.is_tool_call() && self.flags & HAS_CALL != 0).then_some(&self.call_fingerprint)
    }

    /// The result fingerprint of a tool call, if captured.
    pub fn result_fingerprint(&self) -> Option<&Fingerprint> {
        (self.is_tool_call() && self.flags & HAS_RESULT != 0).then_some(&self.result_fingerprint)
    }

    /// Sets the call fingerprint of a tool call and the arguments' half of its traits from
    /// `traits` (nothing for other events).
    pub fn set_call_fingerprint(&mut self, fingerprint: Fingerprint, traits: CallTraits) {
        if self.is_tool_call() {
            self.call_fingerprint = fingerprint;
            self.flags |= HAS_CALL;
            self.traits = self.traits().with_arguments_of(traits).pack();
        }
    }

    /// Sets the result fingerprint of a tool call and the result's half of its traits from
    /// `traits` (nothing for other events).
    pub fn set_result_fingerprint(&mut self, fingerprint: Fingerprint, traits: CallTraits) {
        if self.is_tool_call() {
            self.result_fingerprint = fingerprint;
            self.flags |= HAS_RESULT;
            self.traits = self.traits().with_result_of(traits).pack();
        }
    }

    /// The observation as the detectors take it (the tool name shared with the origin).
    pub fn observation(&self) -> Observation {
        match self.flags & KIND {
            TEXT_RESPONSE => Observation::TextResponse {
                text_fingerprint: self.call_fingerprint,
            },
            TOOL_CALL_RESPONSE => Observation::ToolCallResponse,
            TOOL_RESULT => Observation::ToolResult {
                tool_name: self.tool_name().cloned().unwrap_or_else(|| Arc::from("")),
                result_fingerprint: self.result_fingerprint,
                traits: self.traits(),
            },
            _ => Observation::ToolCall {
                tool_name: self.tool_name().cloned().unwrap_or_else(|| Arc::from("")),
                call_fingerprint: self.call_fingerprint().copied(),
                result_fingerprint: self.result_fingerprint().copied(),
                traits: self.traits(),
            },
        }
    }

    /// Sequence order: start time, end time, span_id.
    pub fn order_key(&self) -> (u64, u64, &[u8]) {
        (
            self.start_time_unix_nano,
            self.end_time_unix_nano(),
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
            end_time_unix_nano: self.end_time_unix_nano(),
            service_name: self.origin.service_name.clone(),
            agent_name: self.origin.agent_name.clone(),
            observation: self.observation(),
            call: CallContext {
                parent_span_id: SpanId::from_slice(self.parent_span_id()),
                completeness: self.completeness,
                call_id: self.call_id,
                mcp_request: self.mcp_request(),
                parts: self.parts().to_vec(),
                without_arguments: self.without_arguments(),
                via_hop: self.via_hop(),
                result_on_sibling: self.result_on_sibling(),
            },
        }
    }
}

#[cfg(test)]
mod tests;
