//! From the spans of a request to registry events: conventions, fingerprints, run keys,
//! and the call hops that join a tool call's parts across spans.

use std::sync::Arc;

use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::conventions;
use crate::conventions::event::EventKind;
use crate::conventions::run_key::agent_of_run_key;
use crate::detector::Observation;
use crate::fingerprint::RecentFingerprints;
use crate::otlp::view::SpanView;
#[cfg(doc)]
use crate::registry::Registry;
use crate::registry::{CallHop, RunEvent};

use super::{observe, AgentMove, Engine, EventCounts};

impl Engine {
    /// Events of `spans` (location, span, resource, service.name), for each event the
    /// location and ids of its span, the agent moves, and the call hops of the request
    /// for the registry to apply to tool calls that came before them ([`hops`]).
    #[allow(clippy::type_complexity)]
    pub(super) fn events_of<'a, L>(
        &self,
        spans: impl IntoIterator<Item = (L, &'a SpanView<'a>, Option<&'a Resource>, Option<Arc<str>>)>,
    ) -> (
        Vec<RunEvent>,
        Vec<(L, &'a [u8], &'a [u8])>,
        Vec<AgentMove>,
        Vec<CallHop>,
    ) {
        let spans: Vec<_> = spans.into_iter().collect();
        let moves = self.learn_agents(spans.iter().map(|(_, span, _, _)| *span));
        let hops = self.hops_of(&spans);
        let mut events = Vec::with_capacity(spans.len());
        let mut located = Vec::with_capacity(spans.len());
        // Spans of one trace share one run key allocation, when the key is the trace_id
        // alone (no run-key attribute, no per-agent runs).
        let by_trace = self.options.run_key_attribute.is_none() && self.agents.is_none();
        let mut last_trace: Option<(&[u8], Arc<str>)> = None;
        let mut recent = RecentFingerprints::default();
        // Counted here and added to the shared counters once per request.
        let mut counts = EventCounts::default();
        for (location, span, resource, service_name) in spans {
            counts.spans_seen += 1;
            let extracted = conventions::extract_all_with_recorded_arguments(
                &self.options.custom_conventions,
                span,
            );
            if extracted.is_empty() {
                continue;
            }
            let run_key = match &last_trace {
                Some((trace_id, key)) if *trace_id == span.trace_id => Some(key.clone()),
                _ => {
                    let key = self.run_key(span, resource);
                    if let (Some(key), true) = (&key, by_trace) {
                        last_trace = Some((span.trace_id, key.clone()));
                    }
                    key
                }
            };
            let Some(run_key) = run_key else {
                counts.spans_without_run += 1;
                continue;
            };
            if let Some(agents) = &self.agents {
                if !run_key.contains('/') {
                    // Keyed by its trace alone (an agent key is `<trace>/<agent>`): moved
                    // to its agent's run once a later request brings the agent.
                    let mut agents = agents.lock().unwrap_or_else(|e| e.into_inner());
                    agents.wait_for_agent(span.trace_id, span.span_id);
                }
            }
            // A span that records several calls gives each its own id in the run
            // (`event::call_span_id`); detections name the span (`event::span_of_call`).
            for (index, extracted) in extracted.into_iter().enumerate() {
                match extracted.kind {
                    EventKind::ToolCall(_) => counts.tool_calls += 1,
                    EventKind::ModelResponse(_) => counts.model_responses += 1,
                }
                let (observation, forms) =
                    self.observation(&extracted.kind, span, &recent, self.forms.is_some());
                let call = self.call_context(span, &extracted);
                // Keyed by agent, a call without its own agent attribute names the agent it
                // inherited (run key `<trace>/<agent>`).
                let agent_name = extracted
                    .agent_name
                    .as_deref()
                    .or_else(|| self.agents.as_ref().and(agent_of_run_key(&run_key)))
                    .map(|a| self.names.get(a));
                observe::remember(&mut recent, extracted.kind, &observation);
                let span_id = crate::conventions::event::call_span_id(span.span_id, index);
                if let (Some(kept), Some(forms)) = (&self.forms, forms) {
                    let mut kept = kept.lock().unwrap_or_else(|e| e.into_inner());
                    kept.insert(span_id.to_vec(), forms);
                }
                events.push(RunEvent {
                    run_key: run_key.clone(),
                    trace_id: span.trace_id.into(),
                    span_id,
                    start_time_unix_nano: span.start_time_unix_nano,
                    end_time_unix_nano: span.end_time_unix_nano,
                    service_name: service_name.clone(),
                    agent_name,
                    observation,
                    call,
                });
            }
            located.push((location, span.trace_id, span.span_id));
        }
        counts.add_to(&self.stats);
        self.follow_hops(&hops, &mut events);
        (events, located, moves, hops)
    }

    /// The call hops of a request ([`hops`]), for the engine's index and for
    /// [`Registry::relink`] (tool calls that came before them).
    #[allow(clippy::type_complexity)]
    pub(super) fn hops_of<L>(
        &self,
        spans: &[(L, &SpanView, Option<&Resource>, Option<Arc<str>>)],
    ) -> Vec<CallHop> {
        let mut found = Vec::new();
        for (_, span, resource, _) in spans {
            if span.parent_span_id.is_empty() || !conventions::is_call_hop(span) {
                continue;
            }
            let Some(run_key) = self.run_key(span, *resource) else {
                continue;
            };
            found.push(CallHop {
                run_key,
                trace_id: span.trace_id.into(),
                span_id: span.span_id.into(),
                parent_span_id: span.parent_span_id.into(),
                start_time_unix_nano: span.start_time_unix_nano,
            });
        }
        found
    }

    /// Keeps the request's `hops` in the engine's index, then gives every tool call of
    /// `events` whose parent is a kept hop (of this request or an earlier one) the hop's
    /// parent as its parent ([`crate::registry::CallContext::via_hop`]). One lock per
    /// request; nothing is looked up while no hop was ever seen.
    pub(super) fn follow_hops(&self, hops: &[CallHop], events: &mut [RunEvent]) {
        let mut index = self.hops.lock().unwrap_or_else(|e| e.into_inner());
        for hop in hops {
            index.record(&hop.trace_id, &hop.span_id, &hop.parent_span_id);
        }
        if index.is_empty() {
            return;
        }
        for event in events {
            if !matches!(event.observation, Observation::ToolCall { .. })
                || event.call.parent_span_id.is_empty()
            {
                continue;
            }
            if let Some(parent) = index.parent(&event.trace_id, &event.call.parent_span_id) {
                event.call.parent_span_id = parent.clone();
                event.call.via_hop = true;
            }
        }
    }
}
