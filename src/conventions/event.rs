//! Events extracted from spans: what the conventions produce and the registry consumes.
//!
//! DESIGN §2: a tool call (`execute_tool` and its equivalents) or a model response
//! (inference span: `chat` / `text_completion` / `generate_content`).

/// A tool-call argument or result value exactly as it was found on the span.
#[derive(Clone, Debug, PartialEq)]
pub enum Payload {
    /// A string attribute (often JSON text, but not always: OpenInference-LangChain
    /// records the bare value of a one-parameter tool).
    Text(String),
    /// A structured AnyValue (kvlist, array, scalar) mapped to JSON.
    Json(serde_json::Value),
    /// A `bytesValue` attribute (may hold UTF-8 JSON).
    Bytes(Vec<u8>),
}

/// Outcome of a tool call, from the span status (OTLP `STATUS_CODE_ERROR` → `Error`;
/// `UNSET` and `OK` → `Ok`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CallStatus {
    Ok,
    Error { message: String },
}

/// A tool call, as one convention reads it from one span.
#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// `gen_ai.tool.name` (or the convention's equivalent).
    pub tool_name: String,
    /// `gen_ai.tool.call.id` where the convention records one.
    pub call_id: Option<String>,
    /// Arguments; `None` when not captured (content capture off, placeholder).
    pub arguments: Option<Payload>,
    /// Result; `None` when not captured.
    pub result: Option<Payload>,
    pub status: CallStatus,
    /// Whether the span records the whole call or one of two sibling spans of it.
    pub split: SplitSpan,
}

/// How much of a call a tool span records. google-adk 0.1.0–1.1.x traces a call as two
/// sibling spans under one parent: `tool_call [name]` (arguments), then
/// `tool_response [name]` (result); the registry pairs them (DESIGN §2 "One call, one
/// event").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SplitSpan {
    /// The whole call (every other convention).
    #[default]
    Whole,
    /// The call; its result, if any, is on the next sibling span of the same tool.
    Call,
    /// Only the result of the call on the sibling span before it: always a result, never
    /// arguments, and no call of its own.
    Result,
}

/// A model response read from an inference span's output.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelResponse {
    /// A response without tool calls; the concatenated text parts (feeds repeated_text).
    Text(String),
    /// A response that requested tool calls (resets the repeated_text streak).
    ToolCalls,
}

/// What a span means to loopwatch.
#[derive(Clone, Debug, PartialEq)]
pub enum EventKind {
    ToolCall(ToolCall),
    ModelResponse(ModelResponse),
}

/// The result of extracting one span with a convention.
#[derive(Clone, Debug, PartialEq)]
pub struct ExtractedEvent {
    pub kind: EventKind,
    /// `gen_ai.agent.name` (or equivalent) where present.
    pub agent_name: Option<String>,
    /// Which convention matched, e.g. `"genai"`, `"openinference"`, `"pydantic-legacy"`.
    pub convention: &'static str,
}

/// Marker of a call's id on a span that records several calls ([`call_span_id`]).
const CALL_MARK: [u8; 2] = [0xca, 0x11];

/// The most calls one span yields: a span recording more gives its first `MAX_SPAN_CALLS`
/// (the index of a call is two bytes of its id, [`call_span_id`]).
pub const MAX_SPAN_CALLS: usize = 1 << 16;

/// The id under which call `index` (0-based, in the span's order) of a span that records
/// several calls is kept in its run, so the calls are distinct events that a re-exported
/// copy of the span repeats exactly (DESIGN §2 "Several calls on one span"): call 0 is the
/// span's own id, call `k ≥ 1` the span id followed by a 2-byte mark and `k` (big
/// endian). [`span_of_call`] maps it back for annotation and reports.
pub fn call_span_id(span_id: &[u8], index: usize) -> smallvec::SmallVec<[u8; 8]> {
    let mut id = smallvec::SmallVec::from_slice(span_id);
    if index > 0 {
        let index = u16::try_from(index).unwrap_or(u16::MAX);
        id.extend_from_slice(&CALL_MARK);
        id.extend_from_slice(&index.to_be_bytes());
    }
    id
}

/// The span id of a call's id ([`call_span_id`]): the id itself unless it is at least 12
/// bytes (a valid 8-byte span id and the 4-byte suffix) ending in the mark and an index.
/// A valid span id (8 bytes) is never shortened; an invalid id of 12 bytes or more that
/// happens to end so is read as a call's (its annotation then misses, as for any span whose
/// id is not the one it was sent with; nothing else changes).
pub fn span_of_call(id: &[u8]) -> &[u8] {
    match id.len().checked_sub(4) {
        Some(len) if len >= 8 && id[len..len + 2] == CALL_MARK => &id[..len],
        _ => id,
    }
}

#[cfg(test)]
mod call_id_tests {
    use super::*;

    #[test]
    fn call_ids_map_back_to_their_span() {
        let span = [7u8; 8];
        assert_eq!(call_span_id(&span, 0).as_slice(), &span);
        let third = call_span_id(&span, 2);
        assert_eq!(
            third.as_slice(),
            &[7, 7, 7, 7, 7, 7, 7, 7, 0xca, 0x11, 0, 2]
        );
        assert_ne!(third, call_span_id(&span, 1));
        assert_eq!(span_of_call(&third), &span);
        assert_eq!(span_of_call(&span), &span);
        // Short, empty and unmarked ids are their own span.
        for id in [&[][..], &[0xca, 0x11, 0, 1], &[1; 12], &[1; 16]] {
            assert_eq!(span_of_call(id), id);
        }
        // Past u16, the index saturates instead of wrapping onto another call.
        assert_eq!(&call_span_id(&span, 70_000)[10..], &[0xff, 0xff]);
    }
}
