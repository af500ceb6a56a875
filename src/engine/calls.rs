//! The [`CallContext`] of an extracted span: what the registry needs to recognise copies
//! and double traces of one call, and to join tool calls with message parts
//! (DESIGN §2 "One call, one event", "Joins").

use super::Engine;
use crate::conventions::event::{CallStatus, EventKind, ExtractedEvent, SplitSpan};
use crate::conventions::legacy::semantic_kernel;
use crate::conventions::messages::parts::{self, MessagePart};
use crate::conventions::wrappers;
use crate::otlp::view::{attr, attr_str, SpanView, ValueView};
use crate::registry::{CallContext, CallKey, ToolCallPart};

/// MCP semantic conventions: the method of a tool call.
const MCP_TOOLS_CALL: &str = "tools/call";

impl Engine {
    /// The call context of `span`, read as `extracted`.
    pub(crate) fn call_context(&self, span: &SpanView, extracted: &ExtractedEvent) -> CallContext {
        let ended =
            span.end_time_unix_nano != 0 && span.end_time_unix_nano >= span.start_time_unix_nano;
        let mut context = CallContext {
            parent_span_id: span.parent_span_id.into(),
            completeness: if ended { 4 } else { 0 },
            ..CallContext::default()
        };
        match &extracted.kind {
            EventKind::ToolCall(call) => {
                context.completeness +=
                    u8::from(call.arguments.is_some()) + u8::from(call.result.is_some());
                // A result span (no arguments) is no call: never one without arguments.
                context.without_arguments =
                    call.arguments.is_none() && call.split != SplitSpan::Result;
                context.result_on_sibling = call.split == SplitSpan::Call;
                context.call_id = call.call_id.as_deref().map(CallKey::of);
                context.mcp_request = mcp_request(span);
            }
            EventKind::ModelResponse(_) => context.parts = self.parts(span),
        }
        context
    }

    /// The tool-call parts of an inference span: its output messages' `tool_call` parts,
    /// then its input messages' `tool_call_response` parts, of which only those the
    /// conversation gained since the trace's last inference span are read when the input
    /// messages are a JSON list ([`super::conversations`]); then the results in a Semantic
    /// Kernel Python ≤ 1.18 prompt event ([`semantic_kernel::prompt_parts`]).
    fn parts(&self, span: &SpanView) -> Vec<ToolCallPart> {
        let joined = |found: Vec<MessagePart>| -> Vec<ToolCallPart> {
            found.into_iter().map(|part| self.part(part)).collect()
        };
        let mut parts = joined(parts::output_parts(span));
        let read = |text: &str| parts::input_parts_in_text(text).map(joined);
        // The first input-messages value holding JSON gives the parts, as
        // `parts::input_parts` reads them; text goes through the conversations.
        let input =
            parts::input_message_values(span).find_map(|value| match value.value.as_ref() {
                Some(ValueView::StringValue(text)) => {
                    self.conversations.parts(span.trace_id, text, read)
                }
                _ => parts::input_parts_in_value(value).map(joined),
            });
        parts.extend(input.unwrap_or_default());
        // Semantic Kernel Python ≤ 1.18: results in the prompt event's `tool` messages.
        parts.extend(joined(semantic_kernel::prompt_parts(span)));
        parts
    }

    /// A message part as the registry joins it: call and result fingerprinted as a tool
    /// span's would be (the tool's own volatile keys for a call's arguments).
    fn part(&self, part: MessagePart) -> ToolCallPart {
        match part {
            MessagePart::Call {
                id,
                name,
                arguments,
            } => {
                let rules = self.tool_fingerprints.load();
                let rule = name.as_deref().and_then(|n| rules.treatment(n));
                let mut traits = crate::detector::CallTraits::default();
                let interned = name.as_deref().map(|n| self.names.get_classed(n));
                let call_fingerprint =
                    interned
                        .as_ref()
                        .zip(arguments)
                        .and_then(|((name, class), arguments)| {
                            // No argument words: they mask a result read with its call, and a
                            // part's result is read apart (below), masked by none.
                            let view = self.comparer.arguments_of_class(
                                name,
                                *class,
                                Some(&arguments),
                                rule.map(|r| &r.compare),
                            );
                            traits = super::observe::argument_traits(&view);
                            self.call_fingerprint(name, Some(&arguments))
                        });
                ToolCallPart {
                    call_id: CallKey::of(&id),
                    call_fingerprint,
                    tool_name: interned.map(|(name, _)| name),
                    result_fingerprint: None,
                    traits,
                }
            }
            MessagePart::Response { id, response } => {
                // The tool is not named on a response part: no tool's own keys, and no
                // argument words to mask.
                let result = wrappers::normalize_result(response);
                let json = super::observe::result_is_json(&CallStatus::Ok, Some(&result));
                let (result_fingerprint, traits) =
                    self.compared_result(&CallStatus::Ok, Some(&result), json, &[], None, None);
                ToolCallPart {
                    call_id: CallKey::of(&id),
                    tool_name: None,
                    call_fingerprint: None,
                    result_fingerprint,
                    traits,
                }
            }
        }
    }
}

/// `mcp.session.id` + `jsonrpc.request.id` of an MCP `tools/call` span (MCP semantic
/// conventions); `None` when either is missing (request ids repeat across sessions).
fn mcp_request(span: &SpanView) -> Option<CallKey> {
    let attrs = &span.attributes;
    if attr_str(attrs, "mcp.method.name") != Some(MCP_TOOLS_CALL) {
        return None;
    }
    let session = attr_str(attrs, "mcp.session.id").filter(|s| !s.is_empty())?;
    let request = match attr(attrs, "jsonrpc.request.id")?.value.as_ref()? {
        ValueView::StringValue(s) if !s.is_empty() => s.as_ref().to_owned(),
        ValueView::IntValue(i) => i.to_string(),
        _ => return None,
    };
    Some(CallKey::of(&format!("{session}\u{0}{request}")))
}
