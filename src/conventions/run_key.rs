//! Run keys (DESIGN §2 "Run key"): which spans form one run, `detection.run_key`.
//!
//! - `trace` (default): the trace_id, lowercase hex.
//! - `attribute`: the value of `detection.run_key_attribute` (span attributes, then resource
//!   attributes), else the trace_id.
//! - `trace_and_agent`: `<trace_id hex>/<agent>`, so the calls of each agent of a multi-agent
//!   trace have their own detectors. The agent is the span's own [`AGENT_KEYS`] value, else
//!   that of its nearest ancestor span seen so far ([`AgentIndex`]); with none known, the
//!   trace_id alone, until a later request brings the agent: the engine then moves the
//!   call to its agent's run ([`AgentIndex::resolve_waiting`], `Registry::rehome`).
//!
//! For compatibility with configurations written before `run_key` existed, an unset
//! `run_key` with a non-empty `run_key_attribute` means `attribute`.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::otlp::view::{attr_str, SpanView};

/// `detection.run_key`: how spans are grouped into runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunKeyMode {
    /// One run per trace.
    #[default]
    Trace,
    /// One run per value of `detection.run_key_attribute` (a session over several traces).
    Attribute,
    /// One run per (trace, agent).
    TraceAndAgent,
}

impl RunKeyMode {
    /// The config spelling: `"trace"`, `"attribute"` or `"trace_and_agent"`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunKeyMode::Trace => "trace",
            RunKeyMode::Attribute => "attribute",
            RunKeyMode::TraceAndAgent => "trace_and_agent",
        }
    }
}

/// Attributes naming the agent of a span, first present wins: `gen_ai.agent.id`, else
/// `gen_ai.agent.name` (GenAI semantic conventions), else `agent.name` (OpenInference, e.g.
/// the OpenAI Agents SDK's `agent` spans).
pub const AGENT_KEYS: &[&str] = &["gen_ai.agent.id", "gen_ai.agent.name", "agent.name"];

/// How many parent links a lookup follows at most (agent trees are a few levels deep; the
/// bound also stops a malformed parent cycle).
const MAX_DEPTH: usize = 64;

/// The run key of `agent`'s calls in the trace `trace_hex`: `<trace_hex>/<agent>`.
pub fn agent_run_key(trace_hex: &str, agent: &str) -> Arc<str> {
    Arc::from(format!("{trace_hex}/{agent}"))
}

/// The agent part of a `trace_and_agent` run key (`<trace_hex>/<agent>`, [`agent_run_key`]);
/// `None` for a key of the trace alone.
pub fn agent_of_run_key(key: &str) -> Option<&str> {
    key.split_once('/').map(|(_, agent)| agent)
}

/// The agent a span names itself (see [`AGENT_KEYS`]); `None` when it names none.
pub fn agent_of<'s>(span: &'s SpanView<'_>) -> Option<&'s str> {
    AGENT_KEYS
        .iter()
        .find_map(|key| attr_str(&span.attributes, key).filter(|v| !v.is_empty()))
}

/// Per trace, each span seen: its parent and the agent it names. Bounded: at most
/// `max_traces` traces (the least recently touched dropped first, about 1 % at a time) and
/// `max_spans_per_trace` spans per trace (further spans of that trace are not recorded;
/// their own agent attribute still counts).
#[derive(Debug)]
pub struct AgentIndex {
    traces: HashMap<Vec<u8>, TraceSpans>,
    max_traces: usize,
    max_spans_per_trace: usize,
    /// Bumped on every record: the recency of a trace.
    clock: u64,
}

#[derive(Debug, Default)]
struct TraceSpans {
    touched: u64,
    spans: HashMap<Vec<u8>, Link>,
    /// Calls keyed by the trace alone, waiting for their agent to be known.
    waiting: Vec<Vec<u8>>,
}

/// The agent of the nearest span named by the parent chain from `parent` (at most
/// [`MAX_DEPTH`] links); `None` when the chain ends first.
fn ancestor_agent(spans: &HashMap<Vec<u8>, Link>, parent: &[u8]) -> Option<Arc<str>> {
    let mut parent = parent;
    for _ in 0..MAX_DEPTH {
        let link = spans.get(parent)?;
        if let Some(agent) = &link.agent {
            return Some(agent.clone());
        }
        parent = link.parent.as_slice();
    }
    None
}

#[derive(Debug)]
struct Link {
    parent: Vec<u8>,
    agent: Option<Arc<str>>,
}

impl AgentIndex {
    /// An empty index with these bounds (each at least 1).
    pub fn new(max_traces: usize, max_spans_per_trace: usize) -> Self {
        AgentIndex {
            traces: HashMap::new(),
            max_traces: max_traces.max(1),
            max_spans_per_trace: max_spans_per_trace.max(1),
            clock: 0,
        }
    }

    /// Records `span` (its parent, and the agent it names). A span recorded again keeps
    /// the agent it named before unless this copy names one. Spans without a span_id are
    /// not recorded.
    pub fn record(&mut self, span: &SpanView) {
        if span.span_id.is_empty() {
            return;
        }
        self.clock += 1;
        if !self.traces.contains_key(span.trace_id) && self.traces.len() >= self.max_traces {
            self.evict();
        }
        let trace = self.traces.entry(span.trace_id.to_vec()).or_default();
        trace.touched = self.clock;
        let agent = agent_of(span).map(Arc::from);
        if let Some(link) = trace.spans.get_mut(span.span_id) {
            if agent.is_some() {
                link.agent = agent;
            }
            return;
        }
        if trace.spans.len() < self.max_spans_per_trace {
            trace.spans.insert(
                span.span_id.to_vec(),
                Link {
                    parent: span.parent_span_id.to_vec(),
                    agent,
                },
            );
        }
    }

    /// The agent of `span`: its own, else that of the nearest recorded ancestor that names
    /// one; `None` when the chain ends (a parent not recorded yet, or the root) first.
    pub fn agent(&self, span: &SpanView) -> Option<Arc<str>> {
        if let Some(own) = agent_of(span) {
            return Some(Arc::from(own));
        }
        let trace = self.traces.get(span.trace_id)?;
        ancestor_agent(&trace.spans, span.parent_span_id)
    }

    /// Notes that the call of `span_id` was keyed by its trace alone (no agent known yet):
    /// [`AgentIndex::resolve_waiting`] reports it once its agent is known. At most
    /// `max_spans_per_trace` spans wait per trace; the trace must be recorded.
    pub fn wait_for_agent(&mut self, trace_id: &[u8], span_id: &[u8]) {
        let cap = self.max_spans_per_trace;
        if let Some(trace) = self.traces.get_mut(trace_id) {
            if trace.waiting.len() < cap {
                trace.waiting.push(span_id.to_vec());
            }
        }
    }

    /// The waiting spans of `trace_id` whose agent is now known (their own, or an
    /// ancestor's recorded since), with it; they stop waiting.
    pub fn resolve_waiting(&mut self, trace_id: &[u8]) -> Vec<(Vec<u8>, Arc<str>)> {
        let Some(trace) = self.traces.get_mut(trace_id) else {
            return Vec::new();
        };
        let mut resolved = Vec::new();
        let spans = &trace.spans;
        trace.waiting.retain(|span_id| {
            let agent = spans.get(span_id).and_then(|link| match &link.agent {
                Some(agent) => Some(agent.clone()),
                None => ancestor_agent(spans, &link.parent),
            });
            match agent {
                Some(agent) => {
                    resolved.push((span_id.clone(), agent));
                    false
                }
                None => true,
            }
        });
        resolved
    }

    /// Number of traces held.
    pub fn trace_count(&self) -> usize {
        self.traces.len()
    }

    /// Drops the least recently touched traces: about 1 % of the cap, at least one.
    fn evict(&mut self) {
        let batch = (self.max_traces / 100).max(1);
        let mut by_age: Vec<(u64, Vec<u8>)> = self
            .traces
            .iter()
            .map(|(id, t)| (t.touched, id.clone()))
            .collect();
        by_age.sort_unstable();
        for (_, id) in by_age.into_iter().take(batch) {
            self.traces.remove(&id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::Span;
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};

    fn span(id: u8, parent: u8, agent: Option<(&str, &str)>) -> Span {
        Span {
            trace_id: vec![7; 16],
            span_id: vec![id; 8],
            parent_span_id: if parent == 0 { vec![] } else { vec![parent; 8] },
            attributes: agent
                .map(|(key, value)| KeyValue {
                    key: key.into(),
                    value: Some(AnyValue {
                        value: Some(Value::StringValue(value.into())),
                    }),
                    ..Default::default()
                })
                .into_iter()
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_nearest_ancestor_naming_an_agent_wins() {
        let mut index = AgentIndex::new(10, 100);
        let root = span(1, 0, Some(("gen_ai.agent.name", "orchestrator")));
        let sub = span(2, 1, Some(("gen_ai.agent.id", "researcher-1")));
        let chat = span(3, 2, None);
        let tool = span(4, 3, None);
        let sibling = span(5, 1, None);
        for s in [&root, &sub, &chat] {
            index.record(&SpanView::from(s));
        }
        assert_eq!(
            index.agent(&SpanView::from(&tool)).as_deref(),
            Some("researcher-1")
        );
        assert_eq!(
            index.agent(&SpanView::from(&sibling)).as_deref(),
            Some("orchestrator")
        );
        // The span's own attribute wins over any ancestor.
        let own = span(6, 3, Some(("agent.name", "writer")));
        assert_eq!(
            index.agent(&SpanView::from(&own)).as_deref(),
            Some("writer")
        );
        // gen_ai.agent.id wins over gen_ai.agent.name on one span.
        let mut both = span(8, 0, Some(("gen_ai.agent.name", "named")));
        both.attributes
            .extend(span(9, 0, Some(("gen_ai.agent.id", "id-1"))).attributes);
        assert_eq!(agent_of(&SpanView::from(&both)), Some("id-1"));
    }

    #[test]
    fn an_unseen_ancestor_gives_no_agent_until_it_is_recorded() {
        let mut index = AgentIndex::new(10, 100);
        let tool = span(4, 3, None);
        let chat = span(3, 2, None);
        index.record(&SpanView::from(&tool));
        index.record(&SpanView::from(&chat));
        assert_eq!(
            index.agent(&SpanView::from(&tool)),
            None,
            "span 2 not seen yet"
        );
        index.record(&SpanView::from(&span(
            2,
            0,
            Some(("gen_ai.agent.name", "late")),
        )));
        assert_eq!(index.agent(&SpanView::from(&tool)).as_deref(), Some("late"));
    }

    #[test]
    fn waiting_calls_resolve_once_their_agent_arrives() {
        let mut index = AgentIndex::new(10, 100);
        let tool = span(4, 3, None);
        index.record(&SpanView::from(&tool));
        index.record(&SpanView::from(&span(3, 2, None)));
        index.wait_for_agent(&tool.trace_id, &tool.span_id);
        assert_eq!(index.resolve_waiting(&tool.trace_id), vec![]);
        index.record(&SpanView::from(&span(
            2,
            0,
            Some(("gen_ai.agent.name", "late")),
        )));
        assert_eq!(
            index.resolve_waiting(&tool.trace_id),
            vec![(tool.span_id.clone(), Arc::from("late"))]
        );
        assert_eq!(
            index.resolve_waiting(&tool.trace_id),
            vec![],
            "reported once"
        );
    }

    #[test]
    fn parent_cycles_and_bounds_are_safe() {
        let mut index = AgentIndex::new(2, 2);
        index.record(&SpanView::from(&span(1, 2, None)));
        index.record(&SpanView::from(&span(2, 1, None)));
        assert_eq!(
            index.agent(&SpanView::from(&span(3, 1, None))),
            None,
            "a cycle ends"
        );
        index.record(&SpanView::from(&span(
            3,
            0,
            Some(("gen_ai.agent.name", "a")),
        )));
        assert_eq!(
            index.agent(&SpanView::from(&span(4, 3, None))),
            None,
            "the third span of a trace is not recorded"
        );
        for t in 0..5u8 {
            let mut other = span(1, 0, Some(("gen_ai.agent.name", "x")));
            other.trace_id = vec![t; 16];
            index.record(&SpanView::from(&other));
        }
        assert_eq!(index.trace_count(), 2);
    }
}
