//! Model responses from inference spans: what every convention's response reader shares.
//!
//! An inference span has `gen_ai.operation.name` ∈ {`chat`, `text_completion`,
//! `generate_content`}; when that attribute is absent, the span name `chat`, or a name
//! starting `chat ` / `generate_content ` / `text_completion `, or Traceloop's
//! `llm.request.type` ∈ {`chat`, `completion`}, or google-adk 1.x's `call_llm` span.
//!
//! Each convention reads its own output source in its own file, as a [`ResponseReader`];
//! `RESPONSE_READERS` in [`super`] lists them in order and the first whose source is on the
//! span decides (DESIGN §2):
//! 1. [`crate::conventions::frameworks::genai`]: attribute `gen_ai.output.messages`, else the same inside a
//!    `gen_ai.client.inference.operation.details` span event, else `gen_ai.choice` span
//!    events;
//! 2. [`crate::conventions::frameworks::openllmetry`]: `gen_ai.completion.N.content` / `gen_ai.completion.N.tool_calls.M.*`;
//! 3. [`crate::conventions::frameworks::genai`] (google-adk 1.x): `gcp.vertex.agent.llm_response`;
//! 4. [`crate::conventions::legacy::pydantic`] (pydantic-ai v1): attribute `events`, the `gen_ai.choice` ones;
//! 5. [`crate::conventions::legacy::mastra`] (older Mastra exporter): `gen_ai.completion`'s `text` on a
//!    `model_generation` span.
//!
//! Model spans that fail the inference-span test (OpenInference `LLM`, Vercel AI SDK
//! provider calls, Langfuse `generation`s, Logfire's LLM-provider and OpenAI Agents spans,
//! strands 0.1.x `Model invoke`) are read by their convention's reader in the first table.
//!
//! Any tool call in the output → [`ModelResponse::ToolCalls`]; otherwise the text parts
//! joined with `\n` ([`summarize`]). Output not captured (no source, or text parts without
//! content as with pydantic-ai `include_content=False`) → `None`: not an event.

use serde_json::{Map, Value as Json};

use crate::conventions::agent_name;
use crate::conventions::event::{EventKind, ExtractedEvent, ModelResponse};
use crate::otlp::view::{attr_str, SpanView};

/// `gen_ai.operation.name` values of an inference span.
pub const INFERENCE_OPERATIONS: &[&str] = &["chat", "text_completion", "generate_content"];

/// What a reader found on an inference span: `None` = its source is not on the span (the
/// next reader is tried); `Some(None)` = the source is there but holds no captured output
/// (no event, and no later reader is tried); `Some(Some(response))` = the response.
pub type Found = Option<Option<ModelResponse>>;

/// One convention's reader of inference-span output, with the convention label its
/// events carry.
pub struct ResponseReader {
    /// [`ExtractedEvent::convention`] of the responses it reads.
    pub convention: &'static str,
    /// Reads the span's output from this convention's source.
    pub read: fn(&SpanView) -> Found,
}

/// True when the span is an inference span (see module docs).
pub fn is_inference_span(span: &SpanView) -> bool {
    let attrs = &span.attributes;
    if let Some(op) = attr_str(attrs, "gen_ai.operation.name") {
        return INFERENCE_OPERATIONS.contains(&op);
    }
    if matches!(
        attr_str(attrs, "llm.request.type"),
        Some("chat" | "completion")
    ) {
        return true;
    }
    let name: &str = &span.name;
    name == "chat"
        || name == "call_llm"
        || ["chat ", "generate_content ", "text_completion "]
            .iter()
            .any(|p| name.starts_with(p))
}

/// The model response of an inference span, read by the first of `readers` whose source is
/// on it; `None` for other spans and when the output was not captured.
pub fn extract(span: &SpanView, readers: &[ResponseReader]) -> Option<ExtractedEvent> {
    if !is_inference_span(span) {
        return None;
    }
    let (response, convention) = readers
        .iter()
        .find_map(|reader| (reader.read)(span).map(|found| (found, reader.convention)))?;
    Some(ExtractedEvent {
        kind: EventKind::ModelResponse(response?),
        agent_name: agent_name(span),
        convention,
    })
}

/// What an output holds: tool calls, and the texts in order.
#[derive(Default)]
struct Summary {
    tool_calls: bool,
    texts: Vec<String>,
}

/// Reads one output (a message list, a message, a choice, a content-block list) into a
/// response: any tool call → `ToolCalls`; else the texts joined with `\n`; nothing → `None`.
/// Message shapes: GenAI `parts` of `type` `text` (`content`) / `tool_call`; OpenAI-style
/// `content` / `tool_calls`; strands content blocks `[{"text": …}]` / `[{"toolUse": …}]`;
/// google-adk `content.parts` with `text` / `function_call`.
pub fn summarize(output: &Json) -> Option<ModelResponse> {
    let mut summary = Summary::default();
    scan(output, &mut summary, 0);
    if summary.tool_calls {
        Some(ModelResponse::ToolCalls)
    } else if summary.texts.is_empty() {
        None
    } else {
        Some(ModelResponse::Text(summary.texts.join("\n")))
    }
}

/// Nesting bound for [`scan`]: outputs are a few levels deep; deeper data is ignored.
const MAX_DEPTH: usize = 16;

fn scan(value: &Json, out: &mut Summary, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match value {
        Json::String(s) => out.texts.push(s.clone()),
        Json::Array(items) => items.iter().for_each(|v| scan(v, out, depth + 1)),
        Json::Object(o) => scan_object(o, out, depth),
        _ => {}
    }
}

fn scan_object(o: &Map<String, Json>, out: &mut Summary, depth: usize) {
    // Input-side messages never count as output.
    if let Some(role) = o.get("role").and_then(Json::as_str) {
        if matches!(role, "user" | "system" | "tool" | "developer") {
            return;
        }
    }
    if let Some(kind) = o.get("type").and_then(Json::as_str) {
        match kind {
            "text" | "output_text" => {
                // Absent content = not captured (pydantic-ai include_content=False).
                if let Some(text) = o
                    .get("content")
                    .or_else(|| o.get("text"))
                    .and_then(Json::as_str)
                {
                    out.texts.push(text.to_owned());
                }
            }
            "tool_call" | "function_call" | "tool_use" | "function" | "server_tool_call" => {
                out.tool_calls = true
            }
            "message" => scan_message_fields(o, out, depth),
            _ => {} // reasoning, tool_call_response, blobs, …: neither text nor a call
        }
        return;
    }
    scan_message_fields(o, out, depth);
}

fn scan_message_fields(o: &Map<String, Json>, out: &mut Summary, depth: usize) {
    let has_call = |key: &str| match o.get(key) {
        Some(Json::Array(a)) => !a.is_empty(),
        Some(Json::Null) | None => false,
        Some(_) => true,
    };
    if ["tool_calls", "toolUse", "function_call", "functionCall"]
        .iter()
        .any(|k| has_call(k))
    {
        out.tool_calls = true;
        return;
    }
    for key in ["parts", "content", "message", "text"] {
        if let Some(v) = o.get(key) {
            scan(v, out, depth + 1);
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conventions::extract;
    use crate::conventions::test_support::*;
    use crate::otlp::Span;
    use opentelemetry_proto::tonic::common::v1::{
        any_value::Value, AnyValue, ArrayValue, KeyValueList,
    };

    fn response(span: &Span) -> Option<ModelResponse> {
        match extract(span)?.kind {
            EventKind::ModelResponse(r) => Some(r),
            other => panic!("expected a model response, got {other:?}"),
        }
    }

    fn chat(attrs: Vec<opentelemetry_proto::tonic::common::v1::KeyValue>) -> Span {
        let mut all = vec![kvs("gen_ai.operation.name", "chat")];
        all.extend(attrs);
        span("chat scripted-fake", all)
    }

    #[test]
    fn output_messages_text_and_tool_calls() {
        let text = chat(vec![kvs(
            "gen_ai.output.messages",
            r#"[{"role":"assistant","parts":[{"type":"text","content":"a"},{"type":"thinking","content":"x"},{"type":"text","content":"b"}]}]"#,
        )]);
        assert_eq!(response(&text), Some(ModelResponse::Text("a\nb".into())));
        let calls = chat(vec![kvs(
            "gen_ai.output.messages",
            r#"[{"role":"assistant","parts":[{"type":"text","content":"let me"},{"type":"tool_call","id":"c","name":"f","arguments":"{}"}]}]"#,
        )]);
        assert_eq!(response(&calls), Some(ModelResponse::ToolCalls));
    }

    #[test]
    fn structured_output_messages() {
        let part = AnyValue {
            value: Some(Value::KvlistValue(KeyValueList {
                values: vec![kvs("type", "text"), kvs("content", "42")],
            })),
        };
        let message = AnyValue {
            value: Some(Value::KvlistValue(KeyValueList {
                values: vec![
                    kvs("role", "assistant"),
                    kv(
                        "parts",
                        AnyValue {
                            value: Some(Value::ArrayValue(ArrayValue { values: vec![part] })),
                        },
                    ),
                ],
            })),
        };
        let list = AnyValue {
            value: Some(Value::ArrayValue(ArrayValue {
                values: vec![message],
            })),
        };
        let sp = span(
            "generate_content m",
            vec![kv("gen_ai.output.messages", list)],
        );
        assert_eq!(response(&sp), Some(ModelResponse::Text("42".into())));
    }

    #[test]
    fn content_not_captured_is_no_event() {
        let sp = chat(vec![kvs(
            "gen_ai.output.messages",
            r#"[{"role":"assistant","parts":[{"type":"text"}]}]"#,
        )]);
        assert_eq!(extract(&sp), None);
        assert_eq!(extract(&chat(vec![])), None);
    }

    #[test]
    fn strands_choice_events() {
        let mut sp = span("chat", vec![kvs("gen_ai.operation.name", "chat")]);
        sp.events = vec![
            event(
                "gen_ai.user.message",
                vec![kvs("content", r#"[{"text": "do it"}]"#)],
            ),
            event(
                "gen_ai.choice",
                vec![
                    kvs("finish_reason", "end_turn"),
                    kvs("message", r#"[{"text": "giving up."}]"#),
                ],
            ),
        ];
        assert_eq!(
            response(&sp),
            Some(ModelResponse::Text("giving up.".into()))
        );
        sp.events[1] = event(
            "gen_ai.choice",
            vec![kvs(
                "message",
                r#"[{"toolUse": {"toolUseId": "c1", "name": "f", "input": {}}}]"#,
            )],
        );
        assert_eq!(response(&sp), Some(ModelResponse::ToolCalls));
    }

    /// Semantic Kernel .NET `ModelDiagnostics.SetCompletionResponse`: one `gen_ai.choice`
    /// event per choice, the choice JSON in `gen_ai.event.content`.
    #[test]
    fn semantic_kernel_dotnet_choice_event() {
        let choice = |content: &str| {
            let mut sp = span("chat gpt-4o", vec![kvs("gen_ai.operation.name", "chat")]);
            sp.events = vec![event(
                "gen_ai.choice",
                vec![kvs("gen_ai.event.content", content)],
            )];
            response(&sp)
        };
        assert_eq!(
            choice(
                r#"{"index":0,"message":{"role":"assistant","name":null,"content":"I cannot find it.","tool_calls":[]},"tool_calls":[],"finish_reason":"Stop"}"#
            ),
            Some(ModelResponse::Text("I cannot find it.".into()))
        );
        assert_eq!(
            choice(
                r#"{"index":0,"message":{"role":"assistant","name":null,"content":null,"tool_calls":[{"id":"c1","function":{"name":"Weather-get","arguments":{"city":"Paris"}},"type":"function"}]},"tool_calls":[{"id":"c1","function":{"name":"Weather-get","arguments":{"city":"Paris"}},"type":"function"}],"finish_reason":"ToolCalls"}"#
            ),
            Some(ModelResponse::ToolCalls)
        );
        // Text completion: the message is the text.
        assert_eq!(
            choice(r#"{"index":0,"message":"42","finish_reason":null}"#),
            Some(ModelResponse::Text("42".into()))
        );
    }

    #[test]
    fn operation_details_event() {
        let mut sp = span("chat", vec![kvs("gen_ai.operation.name", "chat")]);
        sp.events = vec![event(
            "gen_ai.client.inference.operation.details",
            vec![kvs(
                "gen_ai.output.messages",
                r#"[{"role": "assistant", "parts": [{"type": "text", "content": "done"}], "finish_reason": "end_turn"}]"#,
            )],
        )];
        assert_eq!(response(&sp), Some(ModelResponse::Text("done".into())));
    }

    #[test]
    fn openai_style_and_openllmetry_and_adk_legacy() {
        let mut sp = chat(vec![]);
        sp.events = vec![event(
            "gen_ai.choice",
            vec![kvs(
                "message",
                r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c"}]}"#,
            )],
        )];
        assert_eq!(response(&sp), Some(ModelResponse::ToolCalls));

        let tl = span(
            "openai.chat",
            vec![
                kvs("llm.request.type", "chat"),
                kvs("gen_ai.completion.0.role", "assistant"),
                kvs("gen_ai.completion.0.content", "hello"),
            ],
        );
        let ev = extract(&tl).expect("response");
        assert_eq!(ev.convention, "openllmetry");
        assert_eq!(
            ev.kind,
            EventKind::ModelResponse(ModelResponse::Text("hello".into()))
        );

        let adk = span(
            "call_llm",
            vec![kvs(
                "gcp.vertex.agent.llm_response",
                r#"{"content":{"parts":[{"function_call":{"name":"f","args":{}}}],"role":"model"}}"#,
            )],
        );
        assert_eq!(response(&adk), Some(ModelResponse::ToolCalls));
    }

    #[test]
    fn non_inference_operations_ignored() {
        let sp = span(
            "invoke_agent a",
            vec![
                kvs("gen_ai.operation.name", "invoke_agent"),
                kvs(
                    "gen_ai.output.messages",
                    r#"[{"role":"assistant","parts":[{"type":"text","content":"x"}]}]"#,
                ),
            ],
        );
        assert_eq!(extract(&sp), None);
    }
}
