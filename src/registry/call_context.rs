//! What the registry knows of a tool call beyond its observation: its 64-bit
//! [`CallKey`], the [`CallContext`] that tells copies and double traces of one call apart,
//! and the [`ToolCallPart`]s of an inference span's messages. Read by [`super::merge`]
//! (which joins them) and [`super::kept`] (which stores them).

use std::hash::BuildHasher;
use std::num::NonZeroU64;
use std::sync::Arc;

use crate::fingerprint::Fingerprint;

/// The seed of [`CallKey`]'s hash.
const CALL_KEY_SEED: u64 = 0x6c6f_6f70_7761_7463;

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
    /// `tool_call [name]`, [`crate::conventions::event::SplitSpan::Call`]): see `merge::observation`.
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
