//! Haystack 2.x `ToolInvoker` component spans: one span runs every tool call of the
//! messages it is given, so it yields one tool call per call, in the order of the calls
//! (DESIGN §2 "Several calls on one span").
//!
//! Two tracers write that span:
//! - OpenInference's haystack instrumentor (Arize-ai/openinference
//!   `python/instrumentation/openinference-instrumentation-haystack/src/openinference/
//!   instrumentation/haystack/_wrappers.py`: `_ComponentRunWrapper`, earlier
//!   `_ComponentWrapper` on `Pipeline._run_component`): span `ToolInvoker.run` /
//!   `ToolInvoker.run_async` (before 2025-02 `ToolInvoker ({component name})`),
//!   `openinference.span.kind` = `CHAIN` (`_get_component_type` finds no other kind),
//!   `input.value` = `safe_json_dumps` of the bound `run` arguments and `output.value` of
//!   the returned dict. `safe_json_dumps` is `json.dumps(default=str)`, so each `ChatMessage`
//!   is its dataclass repr inside a JSON string: `{"messages": ["ChatMessage(_role=…,
//!   _content=[ToolCall(tool_name='get_weather', arguments={'city': 'Paris'}, id='call_1',
//!   extra=None)], …)"], …}` and `{"tool_messages": ["ChatMessage(…
//!   _content=[ToolCallResult(result='…', origin=ToolCall(…), error=False)] …)"], "state": …}`.
//! - Haystack's own tracer (deepset-ai/haystack `haystack/core/pipeline/base.py`
//!   `_create_component_span`, `pipeline.py` / `async_pipeline.py` `_run_component`,
//!   `haystack/tracing/utils.py` `coerce_tag_value`): span
//!   `haystack.component.run` with `haystack.component.type` = `ToolInvoker`, and with
//!   content tracing on (`HAYSTACK_CONTENT_TRACING_ENABLED`) `haystack.component.input` / `haystack.component.output` = the JSON
//!   of each message's `to_dict()` (`_to_trace_dict()` in later 2.x):
//!   `{"role": "assistant", "content": [{"tool_call": {"tool_name", "arguments", "id",
//!   "extra"}}]}` (2.9–2.10: `_role` / `_content`), results as `{"tool_call_result":
//!   {"result", "origin", "error"}}`; when the value is not JSON-serialisable `coerce_tag_value`
//!   falls back to `str()` of the whole dict, the dataclass reprs above.
//!
//! The span is recognised by its output: a dict whose first key is `tool_messages` (what `ToolInvoker.run`
//! returns, haystack `haystack/components/tools/tool_invoker.py`, v2.9–v2.x; Haystack 3
//! has no `ToolInvoker` component). The calls are the `ToolCall`s of the input messages in
//! order; each takes the result whose origin has its id (else the same tool name and
//! arguments); `error=True` is a failed call. Without readable input the results' origins
//! are the calls. Tool name `tool_name`, call id `id`, arguments `arguments`, result the
//! `result` (a string: the tool's output as `ToolInvoker` converted it). A result given as a
//! list of content parts, or arguments that are no Python literal, read as not captured.
//!
//! Haystack 3 has no `ToolInvoker`: its `Agent` traces one span per call
//! (deepset-ai/haystack v3.0.0 `haystack/components/agents/tool_calling.py`
//! `_create_tool_span`, `_make_context_bound_invoke`): span `haystack.agent.step.tool`,
//! `haystack.tool.name`, and with content tracing on `haystack.agent.step.tool.input` (the
//! call's arguments) and `haystack.agent.step.tool.output` (the tool's result; a
//! `ToolInvocationError` is written as `{"error": message}`, which a tool could return as
//! well, so it is read as the result), each through `coerce_tag_value` (JSON text, a string
//! as it is). [`extract_step_tool`] reads it as one call (no call id on the span).

use serde_json::Value as Json;

use crate::conventions::event::{
    CallStatus, EventKind, ExtractedEvent, Payload, SplitSpan, ToolCall,
};
use crate::conventions::wrappers::python_literal;
use crate::conventions::{call_status, first_str, payload_attr};
use crate::otlp::view::{attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "haystack";

/// Haystack's own component span.
const COMPONENT_SPAN: &str = "haystack.component.run";

/// Haystack 3's per-call span.
const STEP_TOOL_SPAN: &str = "haystack.agent.step.tool";

/// The tool call of a Haystack 3 `haystack.agent.step.tool` span (see module docs); `None`
/// for any other span.
pub fn extract_step_tool(span: &SpanView) -> Option<ExtractedEvent> {
    if span.name != STEP_TOOL_SPAN {
        return None;
    }
    let attrs = &span.attributes;
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(ToolCall {
            tool_name: first_str(attrs, &["haystack.tool.name"])?.to_owned(),
            call_id: None,
            arguments: payload_attr(attrs, &["haystack.agent.step.tool.input"]),
            result: payload_attr(attrs, &["haystack.agent.step.tool.output"]),
            status: call_status(span),
            split: SplitSpan::Whole,
        }),
        agent_name: None,
        convention: CONVENTION,
    })
}

/// The tool calls of a `ToolInvoker` component span, in order; `None` for any other span.
pub fn extract_calls(span: &SpanView) -> Option<Vec<ExtractedEvent>> {
    let attrs = &span.attributes;
    let (input, output) = if span.name == COMPONENT_SPAN {
        (
            attr_str(attrs, "haystack.component.input"),
            attr_str(attrs, "haystack.component.output")?,
        )
    } else if attr_str(attrs, "openinference.span.kind") == Some("CHAIN") {
        (
            attr_str(attrs, "input.value"),
            attr_str(attrs, "output.value")?,
        )
    } else {
        return None;
    };
    if !is_tool_invoker_output(output) {
        return None;
    }
    let (_, mut results) = message_contents(output, "tool_messages")?;
    let calls = input
        .and_then(|text| message_contents(text, "messages"))
        .map(|(calls, _)| calls)
        .filter(|calls| !calls.is_empty())
        .unwrap_or_else(|| results.iter().filter_map(|r| r.origin.clone()).collect());
    let failed = call_status(span);
    let events = calls
        .into_iter()
        .map(|call| {
            let result = take_result(&mut results, &call);
            let (status, result) = match result {
                Some(ToolResult {
                    result,
                    error: true,
                    ..
                }) => (
                    CallStatus::Error {
                        message: result.as_ref().map_or_else(String::new, text_of),
                    },
                    result,
                ),
                Some(found) => (CallStatus::Ok, found.result),
                // No result for it: the component failed, or the result was not captured.
                None => (failed.clone(), None),
            };
            ExtractedEvent {
                kind: EventKind::ToolCall(ToolCall {
                    tool_name: call.name,
                    call_id: call.id,
                    arguments: call.arguments.map(Payload::Json),
                    result: result.map(payload),
                    status,
                    split: SplitSpan::Whole,
                }),
                agent_name: None,
                convention: CONVENTION,
            }
        })
        .collect();
    Some(events)
}

/// True for the text of a `ToolInvoker` result: a dict whose first key is `tool_messages`
/// (`run` returns `{"tool_messages": …, "state": …}`, `{"tool_messages": …}` before 2.10),
/// as JSON or as its Python repr. Only the start is looked at: other components' outputs
/// (an agent's whole conversation) can be long.
fn is_tool_invoker_output(output: &str) -> bool {
    let rest = output.trim_start();
    let Some(rest) = rest.strip_prefix('{') else {
        return false;
    };
    let rest = rest.trim_start();
    rest.starts_with("\"tool_messages\"") || rest.starts_with("'tool_messages'")
}

/// A Haystack `ToolCall`.
#[derive(Clone, Debug, PartialEq)]
struct Call {
    name: String,
    arguments: Option<Json>,
    id: Option<String>,
}

/// A Haystack `ToolCallResult`.
#[derive(Clone, Debug, PartialEq)]
struct ToolResult {
    result: Option<Json>,
    origin: Option<Call>,
    error: bool,
}

/// The first result of `call` in `results`, taken out: the one whose origin has the call's
/// id, else (no id) the first whose origin is the same tool with the same arguments.
fn take_result(results: &mut Vec<ToolResult>, call: &Call) -> Option<ToolResult> {
    let position = results.iter().position(|r| {
        r.origin.as_ref().is_some_and(|origin| match &call.id {
            Some(id) => origin.id.as_ref() == Some(id),
            None => origin.name == call.name && origin.arguments == call.arguments,
        })
    })?;
    Some(results.remove(position))
}

/// The tool calls and tool results of the message list under `key` of a JSON object, each
/// message a repr string or a `to_dict()` object; or, when `text` is not JSON, of the
/// dataclass reprs in it. `None` when nothing in it could be read.
fn message_contents(text: &str, key: &str) -> Option<(Vec<Call>, Vec<ToolResult>)> {
    let Ok(value) = serde_json::from_str::<Json>(text) else {
        return Some(repr::contents(text));
    };
    let messages = value.get(key)?.as_array()?;
    let (mut calls, mut results) = (Vec::new(), Vec::new());
    for message in messages {
        match message {
            Json::String(repr) => {
                let (c, r) = repr::contents(repr);
                calls.extend(c);
                results.extend(r);
            }
            Json::Object(_) => dict_contents(message, &mut calls, &mut results),
            _ => {}
        }
    }
    Some((calls, results))
}

/// The `tool_call` and `tool_call_result` parts of a message's `to_dict()`.
fn dict_contents(message: &Json, calls: &mut Vec<Call>, results: &mut Vec<ToolResult>) {
    let content = message.get("content").or_else(|| message.get("_content"));
    for part in content.and_then(Json::as_array).into_iter().flatten() {
        if let Some(call) = part.get("tool_call").and_then(dict_call) {
            calls.push(call);
        } else if let Some(result) = part.get("tool_call_result") {
            results.push(ToolResult {
                result: result.get("result").cloned(),
                origin: result.get("origin").and_then(dict_call),
                error: result.get("error").and_then(Json::as_bool) == Some(true),
            });
        }
    }
}

fn dict_call(call: &Json) -> Option<Call> {
    Some(Call {
        name: call.get("tool_name")?.as_str()?.to_owned(),
        arguments: call.get("arguments").cloned(),
        id: call.get("id").and_then(Json::as_str).map(str::to_owned),
    })
}

fn payload(value: Json) -> Payload {
    match value {
        Json::String(s) => Payload::Text(s),
        other => Payload::Json(other),
    }
}

fn text_of(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Haystack's dataclass reprs (`ToolCall(tool_name='…', arguments={…}, id='…')`,
/// `ToolCallResult(result='…', origin=ToolCall(…), error=False)`) read from text that may
/// hold anything else around them (`ChatMessage(…)`, a dict repr): Python string literals
/// are skipped whole, so a name inside a string is never a constructor.
mod repr {
    use super::{python_literal, Call, Json, ToolResult};

    /// The top-level `ToolCall` and `ToolCallResult` constructors in `text`, in order (the
    /// `origin` of a result is not a call of its own).
    pub(super) fn contents(text: &str) -> (Vec<Call>, Vec<ToolResult>) {
        let bytes = text.as_bytes();
        let (mut calls, mut results) = (Vec::new(), Vec::new());
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            if b == b'\'' || b == b'"' {
                i = skip_string(bytes, i);
            } else if is_ident_start(b) && (i == 0 || !is_ident(bytes[i - 1])) {
                let start = i;
                while i < bytes.len() && is_ident(bytes[i]) {
                    i += 1;
                }
                let name = &text[start..i];
                if matches!(name, "ToolCall" | "ToolCallResult") && bytes.get(i) == Some(&b'(') {
                    // Resumed where the constructor's reading ended, read or not: every
                    // byte is looked at a bounded number of times, whatever the text.
                    match constructor(text, i, true) {
                        Ok((fields, end)) => {
                            i = end;
                            if name == "ToolCall" {
                                calls.extend(call(&fields));
                            } else {
                                results.push(result(&fields));
                            }
                        }
                        Err(stopped) => i = stopped.max(i + 1),
                    }
                }
            } else {
                i += 1;
            }
        }
        (calls, results)
    }

    /// A constructor's keyword arguments: a literal's text, or a nested constructor's.
    enum Field<'t> {
        Literal(&'t str),
        Nested(Vec<(&'t str, Field<'t>)>),
    }

    fn call(fields: &[(&str, Field)]) -> Option<Call> {
        let literal = |key: &str| {
            fields.iter().find_map(|(k, v)| match v {
                Field::Literal(text) if *k == key => python_literal(text),
                _ => None,
            })
        };
        let Some(Json::String(name)) = literal("tool_name") else {
            return None;
        };
        Some(Call {
            name,
            arguments: literal("arguments"),
            id: match literal("id") {
                Some(Json::String(id)) => Some(id),
                _ => None,
            },
        })
    }

    fn result(fields: &[(&str, Field)]) -> ToolResult {
        let mut found = ToolResult {
            result: None,
            origin: None,
            error: false,
        };
        for (key, value) in fields {
            match (*key, value) {
                ("result", Field::Literal(text)) => found.result = python_literal(text),
                ("origin", Field::Nested(origin)) => found.origin = call(origin),
                ("error", Field::Literal(text)) => found.error = text.trim() == "True",
                _ => {}
            }
        }
        found
    }

    /// The keyword arguments of the constructor whose `(` is at `open`, and the index after
    /// its `)`; else the index where reading stopped (not closed, or not `key=value`
    /// pairs). A value may be a nested `ToolCall(…)` (a result's `origin`) only when
    /// `nested` (one level: deeper text is a literal, so nesting never recurses further).
    fn constructor(text: &str, open: usize, nested: bool) -> Result<Constructed<'_>, usize> {
        let bytes = text.as_bytes();
        let mut fields = Vec::new();
        let mut i = open + 1;
        loop {
            i = skip_blank(bytes, i);
            match bytes.get(i) {
                None => return Err(i),
                Some(b')') => return Ok((fields, i + 1)),
                Some(b',') => {
                    i += 1;
                    continue;
                }
                Some(_) => {}
            }
            let key_start = i;
            while i < bytes.len() && is_ident(bytes[i]) {
                i += 1;
            }
            let key = &text[key_start..i];
            i = skip_blank(bytes, i);
            if key.is_empty() || bytes.get(i) != Some(&b'=') {
                return Err(i);
            }
            i = skip_blank(bytes, i + 1);
            let value_start = i;
            while i < bytes.len() && is_ident(bytes[i]) {
                i += 1;
            }
            if nested && &text[value_start..i] == "ToolCall" && bytes.get(i) == Some(&b'(') {
                let (inner, end) = constructor(text, i, false)?;
                fields.push((key, Field::Nested(inner)));
                i = end;
            } else {
                let end = value_end(bytes, value_start)?;
                fields.push((key, Field::Literal(text[value_start..end].trim())));
                i = end;
            }
        }
    }

    /// A constructor's keyword arguments and the index after its `)`.
    type Constructed<'t> = (Vec<(&'t str, Field<'t>)>, usize);

    /// The index of the `,` or `)` that ends the value starting at `i` (brackets balanced,
    /// strings skipped); else the index where it stopped (an unmatched `]` / `}`, or the
    /// end).
    fn value_end(bytes: &[u8], mut i: usize) -> Result<usize, usize> {
        let mut depth = 0usize;
        while i < bytes.len() {
            match bytes[i] {
                b'\'' | b'"' => {
                    i = skip_string(bytes, i);
                    continue;
                }
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' if depth > 0 => depth -= 1,
                b')' | b',' if depth == 0 => return Ok(i),
                b']' | b'}' => return Err(i),
                _ => {}
            }
            i += 1;
        }
        Err(i)
    }

    /// The index after the Python string literal whose quote is at `i` (backslash escapes
    /// skipped; an unclosed string runs to the end).
    fn skip_string(bytes: &[u8], i: usize) -> usize {
        let quote = bytes[i];
        let mut j = i + 1;
        while j < bytes.len() {
            match bytes[j] {
                b'\\' => j += 2,
                b if b == quote => return j + 1,
                _ => j += 1,
            }
        }
        bytes.len()
    }

    fn skip_blank(bytes: &[u8], mut i: usize) -> usize {
        while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        i
    }

    fn is_ident_start(b: u8) -> bool {
        b.is_ascii_alphabetic() || b == b'_'
    }

    fn is_ident(b: u8) -> bool {
        b.is_ascii_alphanumeric() || b == b'_'
    }
}

#[cfg(test)]
mod tests;
