//! Which run a span belongs to: the run-key attribute or trace_id, with the span's agent
//! under `run_key_by_agent`, and moving calls once their agent becomes known.

use std::sync::Arc;
use std::time::Instant;

use crate::conventions::run_key::agent_run_key;
#[cfg(doc)]
use crate::conventions::run_key::AgentIndex;
use crate::otlp;
use crate::otlp::view::{self, SpanView};
use crate::registry::RunDetection;

use super::{AgentMove, Engine};

impl Engine {
    /// With `run_key_by_agent`: records every span of a request in the agent index (all
    /// first, so a span finds ancestors sent with it in any order), then returns the calls
    /// placed earlier under their trace alone whose agent is now known.
    pub(super) fn learn_agents<'a>(
        &self,
        spans: impl Iterator<Item = &'a SpanView<'a>>,
    ) -> Vec<AgentMove> {
        let Some(agents) = &self.agents else {
            return Vec::new();
        };
        let mut agents = agents.lock().unwrap_or_else(|e| e.into_inner());
        let mut traces: Vec<&[u8]> = Vec::new();
        for span in spans {
            agents.record(span);
            traces.push(span.trace_id);
        }
        traces.sort_unstable();
        traces.dedup();
        let mut moves = Vec::new();
        for trace in traces {
            let resolved = agents.resolve_waiting(trace);
            if resolved.is_empty() || !otlp::is_valid_trace_id(trace) {
                continue;
            }
            let from = otlp::hex_id(trace);
            let to = resolved
                .into_iter()
                .map(|(span_id, agent)| (span_id, agent_run_key(&from, &agent)))
                .collect();
            moves.push((Arc::from(from), to));
        }
        moves
    }

    /// Moves the calls of `moves` to their agents' runs; the detections that finds.
    pub(super) fn rehome(&self, moves: Vec<AgentMove>, now: Instant) -> Vec<RunDetection> {
        moves
            .into_iter()
            .flat_map(|(from, to)| self.registry.rehome(&from, &to, now))
            .collect()
    }

    /// The run key of a span: the configured attribute's value, else the trace_id hex,
    /// followed by `/<agent>` with `run_key_by_agent` when the span's agent is known
    /// ([`AgentIndex::agent`]); `None` when nothing identifies a run (invalid trace_id and
    /// no attribute).
    pub(super) fn run_key(
        &self,
        span: &SpanView,
        resource: Option<&opentelemetry_proto::tonic::resource::v1::Resource>,
    ) -> Option<Arc<str>> {
        if let Some(attribute) = &self.options.run_key_attribute {
            let value = view::attr_str(&span.attributes, attribute)
                .or_else(|| resource.and_then(|r| otlp::attr_str(&r.attributes, attribute)));
            if let Some(v) = value.filter(|v| !v.is_empty()) {
                return Some(Arc::from(v));
            }
        }
        if !otlp::is_valid_trace_id(span.trace_id) {
            return None;
        }
        let trace = otlp::hex_id(span.trace_id);
        let agent = self
            .agents
            .as_ref()
            .and_then(|agents| agents.lock().unwrap_or_else(|e| e.into_inner()).agent(span));
        Some(match agent {
            Some(agent) => agent_run_key(&trace, &agent),
            None => Arc::from(trace),
        })
    }
}
