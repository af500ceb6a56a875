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
