//! Which agent a span hands the run to: agent invocations and handoffs, for delegation
//! cycles ([`crate::detector::delegation`]) and the `max_handoffs` budget. Read from the
//! span alone, in one pass over its attributes (every span of a request is asked).
//!
//! | span | agent | source |
//! |---|---|---|
//! | GenAI agent span: `gen_ai.operation.name` = `invoke_agent` (also a span named `invoke_agent {name}` without the attribute) | `gen_ai.agent.name`, else the span-name suffix | GenAI agent spans (semantic-conventions `gen-ai-agent-spans.md`) |
//! | GenAI handoff span: `gen_ai.operation.name` = `agent_handoff` | `gen_ai.handoff.to_agent` | opentelemetry-python-contrib `opentelemetry-instrumentation-openai-agents-v2` `span_processor.py` (`_get_attributes_from_handoff_span_data`) |
//! | `openai-agents-opentelemetry` agent span: `agent.span.type` = `agent` | `agent.name` | its `_map_agent_span` |
//! | `openai-agents-opentelemetry` handoff span: `agent.span.type` = `handoff` | `handoff.to` of its `handoff.executed` event, else `agent.handoff.to` (written when the span starts, before the SDK knows the target: `unknown`) | its `_map_handoff_span`, `_add_handoff_event` |
//! | OpenInference agent span: `openinference.span.kind` = `AGENT` | `agent.name`, else the span name (the openai-agents processor names it after the agent) | openinference semantic conventions; `openai_agents/_processor.py` |
//! | OpenInference openai-agents handoff span: `openinference.span.kind` = `TOOL`, named `handoff to {agent}` | the name's suffix | openinference `openai_agents/_processor.py` (`_get_span_name`) |
//! | a handoff tool: a tool named `transfer_to_{agent}` (OpenAI Agents SDK, LangGraph swarm, AutoGen) in `gen_ai.tool.name`, `tool.name` or the span name `execute_tool {tool}` | the name's suffix | openai-agents-python `handoffs` (`default_tool_name`), langgraph-swarm `create_handoff_tool`, autogen `Handoff` |
//! | google-adk's `transfer_to_agent` tool | its `agent_name` argument (`gen_ai.tool.call.arguments` / `gcp.vertex.agent.tool_call_args`) | adk-python `tools/transfer_to_agent_tool.py` |

use crate::otlp::view::{attr_str, KeyValueView, SpanView, Text, ValueView};

/// How a span hands the run to an agent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Via {
    /// The agent's own invocation span.
    Invocation,
    /// A handoff span or handoff tool call naming the agent it hands to.
    Handoff,
}

/// An agent taking over the run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Activation {
    /// The agent's name as the span gives it.
    pub agent: String,
    pub via: Via,
}

/// The prefix of handoff tools' names.
const TRANSFER_PREFIX: &str = "transfer_to_";

/// The activation a span records, if any.
pub fn activation(span: &SpanView) -> Option<Activation> {
    let keys = Keys::of(&span.attributes)?;
    let handoff = |agent: &str| {
        (!agent.is_empty() && agent != "unknown").then(|| Activation {
            agent: agent.to_owned(),
            via: Via::Handoff,
        })
    };
    match keys.operation {
        Some("invoke_agent") => {
            let agent = keys
                .agent_name
                .filter(|a| !a.is_empty())
                .or_else(|| span.name.strip_prefix("invoke_agent ").map(str::trim))?;
            return (!agent.is_empty()).then(|| Activation {
                agent: agent.to_owned(),
                via: Via::Invocation,
            });
        }
        Some("agent_handoff") => return handoff(keys.handoff_to?),
        Some("execute_tool") | None => {}
        Some(_) => return None,
    }
    match keys.span_type {
        Some("agent") => {
            let agent = keys.oa_agent_name.filter(|a| !a.is_empty())?;
            return Some(Activation {
                agent: agent.to_owned(),
                via: Via::Invocation,
            });
        }
        Some("handoff") => {
            let executed = span
                .events
                .iter()
                .filter(|e| e.name == "handoff.executed")
                .find_map(|e| attr_str(&e.attributes, "handoff.to"));
            return handoff(executed.or(keys.oa_handoff_to)?);
        }
        _ => {}
    }
    if keys.operation.is_none() && span.name.starts_with("invoke_agent ") {
        let agent = span.name["invoke_agent ".len()..].trim();
        return (!agent.is_empty()).then(|| Activation {
            agent: agent.to_owned(),
            via: Via::Invocation,
        });
    }
    match keys.openinference_kind {
        Some("TOOL") => {
            if let Some(agent) = span.name.strip_prefix("handoff to ") {
                return handoff(agent.trim());
            }
        }
        Some("AGENT") => {
            let agent = keys.oa_agent_name.unwrap_or(&*span.name).trim();
            return (!agent.is_empty()).then(|| Activation {
                agent: agent.to_owned(),
                via: Via::Invocation,
            });
        }
        _ => {}
    }
    let tool = keys
        .tool_name
        .or_else(|| span.name.strip_prefix("execute_tool ").map(str::trim))?;
    if tool == "transfer_to_agent" {
        // google-adk: the target is an argument.
        let args = keys.arguments?;
        let agent = serde_json::from_str::<serde_json::Value>(args.as_str()).ok()?;
        return handoff(agent.get("agent_name")?.as_str()?);
    }
    handoff(tool.strip_prefix(TRANSFER_PREFIX)?)
}

/// The attributes [`activation`] reads, found in one pass.
#[derive(Default)]
struct Keys<'a> {
    operation: Option<&'a str>,
    agent_name: Option<&'a str>,
    handoff_to: Option<&'a str>,
    span_type: Option<&'a str>,
    oa_agent_name: Option<&'a str>,
    oa_handoff_to: Option<&'a str>,
    openinference_kind: Option<&'a str>,
    tool_name: Option<&'a str>,
    /// Read as text only for `transfer_to_agent` (every tool span has arguments).
    arguments: Option<&'a Text<'a>>,
}

impl<'a> Keys<'a> {
    /// The keys, or `None` as soon as one shows the span hands to no agent (an inference
    /// or other operation, an OpenInference kind other than `TOOL` / `AGENT`): most spans
    /// are model or tool spans, and this runs for every span of every request.
    fn of(attributes: &'a [KeyValueView<'a>]) -> Option<Self> {
        let mut keys = Keys::default();
        for kv in attributes {
            // Keys compared as bytes, and only the values of the keys read are read as text
            // (`Text`: checked as UTF-8 when read).
            let key = kv.key.as_bytes();
            // Every key read starts with one of these letters; most attributes do not.
            if !matches!(key.first(), Some(b'g' | b'a' | b'o' | b't')) {
                continue;
            }
            if matches!(
                key,
                b"gen_ai.tool.call.arguments" | b"gcp.vertex.agent.tool_call_args"
            ) {
                if let (None, Some(ValueView::StringValue(value))) = (
                    keys.arguments,
                    kv.value.as_ref().and_then(|v| v.value.as_ref()),
                ) {
                    keys.arguments = Some(value);
                }
                continue;
            }
            let slot = match key {
                b"gen_ai.operation.name" => &mut keys.operation,
                b"gen_ai.agent.name" => &mut keys.agent_name,
                b"gen_ai.handoff.to_agent" => &mut keys.handoff_to,
                b"agent.span.type" => &mut keys.span_type,
                b"agent.name" => &mut keys.oa_agent_name,
                b"agent.handoff.to" => &mut keys.oa_handoff_to,
                b"gen_ai.tool.name" | b"tool.name" => &mut keys.tool_name,
                b"openinference.span.kind" => &mut keys.openinference_kind,
                _ => continue,
            };
            let Some(ValueView::StringValue(value)) =
                kv.value.as_ref().and_then(|v| v.value.as_ref())
            else {
                continue;
            };
            let value: &'a str = value;
            if slot.is_none() {
                *slot = Some(value);
            }
            let other_operation = key == b"gen_ai.operation.name"
                && !matches!(value, "invoke_agent" | "agent_handoff" | "execute_tool");
            let other_kind =
                key == b"openinference.span.kind" && !matches!(value, "TOOL" | "AGENT");
            if other_operation || other_kind {
                return None;
            }
        }
        Some(keys)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conventions::test_support::{event, kvs, span};

    fn read(s: &crate::otlp::Span) -> Option<(String, Via)> {
        activation(&SpanView::from(s)).map(|a| (a.agent, a.via))
    }

    #[test]
    fn invocations() {
        let genai = span(
            "invoke_agent triage",
            vec![
                kvs("gen_ai.operation.name", "invoke_agent"),
                kvs("gen_ai.agent.name", "Triage"),
            ],
        );
        assert_eq!(read(&genai), Some(("Triage".into(), Via::Invocation)));
        let by_name = span("invoke_agent billing", vec![]);
        assert_eq!(read(&by_name), Some(("billing".into(), Via::Invocation)));
        let oa = span(
            "agent: Billing Agent",
            vec![
                kvs("agent.span.type", "agent"),
                kvs("agent.name", "Billing Agent"),
            ],
        );
        assert_eq!(read(&oa), Some(("Billing Agent".into(), Via::Invocation)));
        // Other operations are not.
        let chat = span("chat gpt-4o", vec![kvs("gen_ai.operation.name", "chat")]);
        assert_eq!(read(&chat), None);
    }

    #[test]
    fn handoffs() {
        let mut oa = span(
            "handoff: Triage Agent -> unknown",
            vec![
                kvs("agent.span.type", "handoff"),
                kvs("agent.handoff.from", "Triage Agent"),
                kvs("agent.handoff.to", "unknown"),
            ],
        );
        assert_eq!(read(&oa), None, "the target is not known yet");
        oa.events = vec![event(
            "handoff.executed",
            vec![
                kvs("handoff.from", "Triage Agent"),
                kvs("handoff.to", "Billing Agent"),
            ],
        )];
        assert_eq!(read(&oa), Some(("Billing Agent".into(), Via::Handoff)));
        let contrib = span(
            "agent_handoff",
            vec![
                kvs("gen_ai.operation.name", "agent_handoff"),
                kvs("gen_ai.handoff.to_agent", "Billing"),
            ],
        );
        assert_eq!(read(&contrib), Some(("Billing".into(), Via::Handoff)));
        let tool = span(
            "execute_tool transfer_to_billing_agent",
            vec![kvs("gen_ai.operation.name", "execute_tool")],
        );
        assert_eq!(read(&tool), Some(("billing_agent".into(), Via::Handoff)));
        let oi = span(
            "transfer_to_math_expert",
            vec![
                kvs("openinference.span.kind", "TOOL"),
                kvs("tool.name", "transfer_to_math_expert"),
            ],
        );
        assert_eq!(read(&oi), Some(("math_expert".into(), Via::Handoff)));
        let oi_handoff = span(
            "handoff to Billing Agent",
            vec![kvs("openinference.span.kind", "TOOL")],
        );
        assert_eq!(
            read(&oi_handoff),
            Some(("Billing Agent".into(), Via::Handoff))
        );
        let adk = span(
            "execute_tool transfer_to_agent",
            vec![
                kvs("gen_ai.operation.name", "execute_tool"),
                kvs("gen_ai.tool.name", "transfer_to_agent"),
                kvs(
                    "gcp.vertex.agent.tool_call_args",
                    r#"{"agent_name": "billing"}"#,
                ),
            ],
        );
        assert_eq!(read(&adk), Some(("billing".into(), Via::Handoff)));
        // An ordinary tool is no handoff.
        let get = span(
            "execute_tool get_weather",
            vec![kvs("gen_ai.operation.name", "execute_tool")],
        );
        assert_eq!(read(&get), None);
    }
}
