//! Logfire's OpenAI Agents SDK integration (`logfire.instrument_openai_agents()`).
//!
//! Logfire wraps the Agents SDK trace provider and opens one Logfire span per SDK span; a
//! function-tool span is named after its message template `Function: {name}` (also in
//! `logfire.msg_template`), and its attributes are the SDK's `FunctionSpanData.export()`
//! without `type`: `name` (the tool), `input` (the model's raw JSON arguments string),
//! `output` (`str()` of the tool's result), `mcp_data`, plus `gen_ai.system` = `openai`.
//! A failed call has Logfire's `error` attribute (the SDK's `{"message", "data"}` error,
//! serialised as JSON) with level `error`; the span status is read first. No call id.
//!
//! Only spans with both the template and `gen_ai.system` = `openai` are claimed, so a
//! user's own span that happens to carry `name` / `input` attributes is left alone.
//! Sources: pydantic/logfire `logfire/_internal/integrations/openai_agents.py`
//! (`LogfireTraceProviderWrapper.create_span`, `attributes_from_span_data`; the
//! `msg_template` form since its Logfire-span rewrite, early 2025) and
//! openai/openai-agents-python `src/agents/tracing/span_data.py` (`FunctionSpanData`).
//!
//! Model responses of the Chat Completions model: a `Chat completion with
//! {gen_ai.request.model!r}` span (`GenerationSpanData.export()`) carries `output`, a list
//! of `ChatCompletionMessage` dicts (`content`, `tool_calls`; openai-agents-python
//! `src/agents/models/openai_chatcompletions.py`), read by [`summarize`]. No
//! `gen_ai.operation.name` is set on it, so no inference-span reader would. (The
//! `Responses API` spans of the Responses model are read by [`crate::conventions::frameworks::logfire_llm`], with
//! those of Logfire's OpenAI instrumentation, which writes the same template.)

use crate::conventions::event::{CallStatus, EventKind, ExtractedEvent, SplitSpan, ToolCall};
use crate::conventions::messages::model_response::summarize;
use crate::conventions::{agent_name, call_status, first_str, json_from_any_value, payload_attr};
use crate::otlp::view::{attr, attr_str, SpanView};

/// Convention label on events from this module.
pub const CONVENTION: &str = "logfire-openai-agents";

/// Logfire's message template (and span name) of an Agents SDK function span.
pub const MSG_TEMPLATE: &str = "Function: {name}";

/// Logfire's message template of an Agents SDK generation span (`GenerationSpanData`).
pub const GENERATION_TEMPLATE: &str = "Chat completion with {gen_ai.request.model!r}";

/// The tool call of a Logfire Agents SDK function span, the model response of its
/// generation span; `None` for other spans and output not captured.
pub fn extract(span: &SpanView) -> Option<ExtractedEvent> {
    let attrs = &span.attributes;
    let template = attr_str(attrs, "logfire.msg_template")?;
    if (template != MSG_TEMPLATE && template != GENERATION_TEMPLATE)
        || attr_str(attrs, "gen_ai.system") != Some("openai")
    {
        return None;
    }
    if template == GENERATION_TEMPLATE {
        let output = attr(attrs, "output").and_then(json_from_any_value)?;
        return Some(ExtractedEvent {
            kind: EventKind::ModelResponse(summarize(&output)?),
            agent_name: agent_name(span),
            convention: CONVENTION,
        });
    }
    let name = first_str(attrs, &["name"])?;
    let mut status = call_status(span);
    if status == CallStatus::Ok {
        if let Some(error) = attr(attrs, "error") {
            let message = json_from_any_value(error)
                .and_then(|e| e.get("message")?.as_str().map(str::to_owned))
                .or_else(|| attr_str(attrs, "error").map(str::to_owned))
                .unwrap_or_default();
            status = CallStatus::Error { message };
        }
    }
    Some(ExtractedEvent {
        kind: EventKind::ToolCall(ToolCall {
            tool_name: name.to_owned(),
            call_id: None,
            arguments: payload_attr(attrs, &["input"]),
            result: payload_attr(attrs, &["output"]),
            status,
            split: SplitSpan::Whole,
        }),
        agent_name: agent_name(span),
        convention: CONVENTION,
    })
}

#[cfg(test)]
mod tests {
    use crate::conventions::event::{CallStatus, EventKind, ModelResponse, Payload};
    use crate::conventions::extract;
    use crate::conventions::test_support::*;

    fn function_span(
        extra: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>,
    ) -> opentelemetry_proto::tonic::trace::v1::Span {
        let mut attributes = vec![
            kvs("logfire.msg_template", "Function: {name}"),
            kvs("logfire.msg", "Function: random_number"),
            kvs("logfire.span_type", "span"),
            kvs("name", "random_number"),
            kvs("input", "{}"),
            kvs("gen_ai.system", "openai"),
        ];
        attributes.extend(extra);
        span("Function: {name}", attributes)
    }

    #[test]
    fn function_span_is_a_tool_call() {
        // As in logfire's tests/otel_integrations/test_openai_agents.py (`random_number`).
        let ev = extract(&function_span(vec![kvs("output", "4")])).expect("a tool call");
        assert_eq!(ev.convention, "logfire-openai-agents");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(c.tool_name, "random_number");
        assert_eq!(c.call_id, None);
        assert_eq!(c.arguments, Some(Payload::Text("{}".into())));
        assert_eq!(c.result, Some(Payload::Text("4".into())));
        assert_eq!(c.status, CallStatus::Ok);
    }

    #[test]
    fn error_attribute_is_a_failed_call() {
        let ev = extract(&function_span(vec![kvs(
            "error",
            r#"{"message": "Error running tool", "data": {"tool_name": "random_number", "error": "boom"}}"#,
        )]))
        .expect("a tool call");
        let EventKind::ToolCall(c) = ev.kind else {
            panic!("not a tool call")
        };
        assert_eq!(
            c.status,
            CallStatus::Error {
                message: "Error running tool".into()
            }
        );
    }

    /// `GenerationSpanData` under the Chat Completions model: `output` is
    /// `[message.model_dump()]` (openai-agents-python `models/openai_chatcompletions.py`).
    #[test]
    fn generation_span_output_is_the_response() {
        let generation = |output: &str| {
            let sp = span(
                "Chat completion with {gen_ai.request.model!r}",
                vec![
                    kvs(
                        "logfire.msg_template",
                        "Chat completion with {gen_ai.request.model!r}",
                    ),
                    kvs("gen_ai.system", "openai"),
                    kvs("gen_ai.request.model", "gpt-4o"),
                    kvs("input", r#"[{"role":"user","content":"hi"}]"#),
                    kvs("output", output),
                ],
            );
            extract(&sp).map(|e| {
                assert_eq!(e.convention, "logfire-openai-agents");
                e.kind
            })
        };
        assert_eq!(
            generation(
                r#"[{"content":"Done.","refusal":null,"role":"assistant","audio":null,"function_call":null,"tool_calls":null}]"#
            ),
            Some(EventKind::ModelResponse(ModelResponse::Text(
                "Done.".into()
            )))
        );
        assert_eq!(
            generation(
                r#"[{"content":null,"role":"assistant","tool_calls":[{"id":"c1","function":{"arguments":"{}","name":"f"},"type":"function"}]}]"#
            ),
            Some(EventKind::ModelResponse(ModelResponse::ToolCalls))
        );
        // `tracing.include_data()` off: no output, no event.
        assert_eq!(generation("[]"), None);
    }

    #[test]
    fn other_spans_with_name_and_input_are_not_claimed() {
        // Another Agents SDK span type, and a user span without the OpenAI marker.
        let agent = span(
            "Agent run: {name!r}",
            vec![
                kvs("logfire.msg_template", "Agent run: {name!r}"),
                kvs("name", "agent1"),
                kvs("gen_ai.system", "openai"),
            ],
        );
        assert_eq!(extract(&agent), None);
        let user = span(
            "Function: {name}",
            vec![
                kvs("logfire.msg_template", "Function: {name}"),
                kvs("name", "f"),
                kvs("input", "{}"),
            ],
        );
        assert_eq!(extract(&user), None);
    }
}
