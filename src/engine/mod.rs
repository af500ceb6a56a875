//! The detection path shared by `serve` and `scan`: spans of an OTLP request → events
//! (conventions) → fingerprints → registry/detectors → `loop.*` annotation of the spans
//! in this request that complete a detection.

pub mod budget_state;
pub mod delegation_state;
pub mod intern;
pub mod report;
pub mod span_usage;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::annotate::synthetic::synthetic_spans;
use crate::annotate::wire::SpanEdit;
use crate::annotate::{annotate_span, encoded_loop_attributes};
use crate::conventions;
use crate::conventions::event::{EventKind, SplitSpan};
use crate::conventions::run_key::{agent_of_run_key, agent_run_key, AgentIndex};
use crate::detector::budget::SpanFigures;
use crate::detector::{FingerprintRules, Observation};
use crate::engine::budget_state::{BudgetTracker, SpanContext};
use crate::engine::delegation_state::{ActivationSpan, DelegationTracker};
use crate::fingerprint::{FingerprintKey, Fingerprinter, RecentFingerprints};
use crate::otlp::view::{self, SpanView};
use crate::otlp::wire::{WireError, WireRequest};
use crate::otlp::{self, ExportTraceServiceRequest};
use crate::registry::{CallHop, Registry, RunDetection, RunEvent};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;

mod calls;
pub mod conversations;
pub mod hops;
mod observe;
#[cfg(test)]
mod recent_tests;

/// Calls to move out of a run keyed by a trace alone (hex): span_id → their agent's run key.
type AgentMove = (Arc<str>, HashMap<Vec<u8>, Arc<str>>);

/// How spans are grouped into runs and fingerprinted.
#[derive(Clone, Debug, Default)]
pub struct EngineOptions {
    /// Attribute whose value is the run key (span attributes first, then resource
    /// attributes), e.g. `gen_ai.conversation.id`; trace_id where absent or unset.
    pub run_key_attribute: Option<String>,
    /// `detection.run_key = "trace_and_agent"`: runs keyed `<trace_id hex>/<agent>`
    /// ([`crate::conventions::run_key`]); ignored when `run_key_attribute` is set.
    pub run_key_by_agent: bool,
    /// Match calls without captured arguments by tool name alone (off by default: such
    /// calls are invisible to the argument-based patterns).
    pub match_tool_name_without_arguments: bool,
    /// `[[conventions.custom]]` mappings, tried before the built-in conventions.
    pub custom_conventions: Vec<crate::conventions::custom::CustomConvention>,
}

/// Counters of what the engine saw (read by `/metrics`).
#[derive(Debug, Default)]
pub struct EngineStats {
    pub spans_seen: AtomicU64,
    /// Tool-call spans read (every span of a call traced twice; calls without arguments
    /// are counted by the registry, after merging: `RegistryStats`).
    pub tool_calls: AtomicU64,
    pub model_responses: AtomicU64,
    /// Spans whose trace_id is empty, all-zero or not 16 bytes and that have no run-key
    /// attribute: forwarded, never merged into a run.
    pub spans_without_run: AtomicU64,
    pub spans_annotated: AtomicU64,
    /// Synthetic `loop.detected` spans added for detections completed by spans forwarded
    /// earlier ([`crate::annotate::synthetic`]).
    pub synthetic_spans: AtomicU64,
}

/// [`EngineStats`] counts of one request, added to the shared atomics once (an atomic add
/// per span and counter was half a per cent of the server's CPU at 1000 spans per request).
#[derive(Default)]
struct EventCounts {
    spans_seen: u64,
    spans_without_run: u64,
    tool_calls: u64,
    model_responses: u64,
}

impl EventCounts {
    fn add_to(&self, stats: &EngineStats) {
        for (counter, n) in [
            (&stats.spans_seen, self.spans_seen),
            (&stats.spans_without_run, self.spans_without_run),
            (&stats.tool_calls, self.tool_calls),
            (&stats.model_responses, self.model_responses),
        ] {
            if n > 0 {
                counter.fetch_add(n, Ordering::Relaxed);
            }
        }
    }
}

/// What processing one request found.
#[derive(Debug, Default)]
pub struct Processed {
    /// Detections not reported before (any run touched by the request).
    pub detections: Vec<RunDetection>,
    /// How many spans of the request were annotated.
    pub annotated_spans: usize,
    /// How many synthetic `loop.detected` spans were added to the request (detections
    /// completed by spans of earlier requests).
    pub synthetic_spans: usize,
    /// Per `service.name`, the latest end time (ns since the Unix epoch) of the request's
    /// tool calls: how late tool spans arrive (`loopwatch_ingest_lag_seconds`).
    pub latest_tool_end: Vec<(Option<Arc<str>>, u64)>,
}

/// [`Processed::latest_tool_end`] of `events`.
fn latest_tool_ends(events: &[RunEvent]) -> Vec<(Option<Arc<str>>, u64)> {
    let mut latest: Vec<(Option<Arc<str>>, u64)> = Vec::new();
    for event in events {
        if !matches!(event.observation, Observation::ToolCall { .. }) {
            continue;
        }
        match latest.iter_mut().find(|(s, _)| *s == event.service_name) {
            Some((_, end)) => *end = (*end).max(event.end_time_unix_nano),
            None => latest.push((event.service_name.clone(), event.end_time_unix_nano)),
        }
    }
    latest
}

/// Extraction, fingerprinting and detection over a [`Registry`].
pub struct Engine {
    pub registry: Registry,
    pub fingerprinter: Fingerprinter,
    pub fingerprint_key: FingerprintKey,
    pub options: EngineOptions,
    pub stats: EngineStats,
    /// `[[tools]]` volatile keys and transient errors (empty: none).
    /// Swapped whole by a config reload ([`Engine::reload_detection`]).
    pub tool_fingerprints: arc_swap::ArcSwap<FingerprintRules>,
    /// `[budgets]`, when any budget is set.
    pub budgets: Option<BudgetTracker>,
    /// Delegation cycles and the `max_handoffs` budget (`None` when no profile sets
    /// `delegation_cycle` and no handoff budget is set).
    pub delegations: Option<DelegationTracker>,
    /// Tool, agent and service names shared by every event that carries them.
    pub names: crate::engine::intern::Interner,
    /// Span → parent → agent links, with `run_key_by_agent` ([`crate::conventions::run_key`]).
    agents: Option<Mutex<AgentIndex>>,
    /// Message parts of the conversations read so far, by trace ([`conversations`]).
    conversations: conversations::Conversations,
    /// Call hops seen so far ([`hops`]).
    hops: Mutex<hops::HopIndex>,
    /// How calls are compared ([`crate::compare`]); from `[detection]`.
    pub comparer: crate::compare::Comparer,
    /// The compared forms of each call, by event span_id, when [`Engine::keep_forms`] asked
    /// for them (`loopwatch explain`); `None` otherwise.
    forms: Option<Mutex<HashMap<Vec<u8>, observe::CallForms>>>,
}

/// What processing one request read from its bytes found.
#[derive(Debug)]
pub struct WireProcessed {
    /// The request to forward, as pieces to send back to back: the received bytes when no
    /// span was annotated, else slices of them around the bytes that change (the
    /// annotated spans' `loop.*` attributes and event appended in place, the enclosing
    /// length prefixes; [`crate::annotate::wire::rewrite_pieces`]), then any synthetic
    /// `loop.detected` spans (appended `resource_spans`: protobuf concatenation).
    pub pieces: Vec<bytes::Bytes>,
    /// Detections and annotation count, as [`Engine::process`] reports them.
    pub processed: Processed,
    /// Number of spans in the request to forward (synthetic spans included).
    pub spans: u64,
}

impl WireProcessed {
    /// The request to forward as one buffer (the pieces joined; no copy for one piece).
    pub fn bytes(&self) -> bytes::Bytes {
        crate::annotate::wire::joined(&self.pieces)
    }

    /// Length of the request to forward, in bytes (the pieces' lengths summed).
    pub fn forwarded_len(&self) -> usize {
        self.pieces.iter().map(bytes::Bytes::len).sum()
    }
}

impl Engine {
    pub fn new(
        registry: Registry,
        fingerprinter: Fingerprinter,
        fingerprint_key: FingerprintKey,
        options: EngineOptions,
    ) -> Self {
        // The index holds at most as many traces as the registry holds runs, and as many
        // spans per trace as it keeps events per run.
        let agents = (options.run_key_by_agent && options.run_key_attribute.is_none()).then(|| {
            let limits = registry.config();
            Mutex::new(AgentIndex::new(limits.max_runs, limits.max_events_per_run))
        });
        let delegations = DelegationTracker::new(
            &registry.profiles(),
            0,
            crate::detector::budget::BudgetAction::Warn,
            registry.config().max_runs,
        );
        Engine {
            registry,
            fingerprinter,
            fingerprint_key,
            options,
            stats: EngineStats::default(),
            tool_fingerprints: arc_swap::ArcSwap::from_pointee(FingerprintRules::default()),
            budgets: None,
            delegations,
            names: crate::engine::intern::Interner::default(),
            agents,
            conversations: conversations::Conversations::default(),
            hops: Mutex::default(),
            comparer: crate::compare::Comparer::default(),
            forms: None,
        }
    }

    /// Runs detection over every span of `request` and annotates, in place, the spans of
    /// this request that complete a new detection. A detection completed by a span of an
    /// earlier request (late re-ordering) gets a synthetic `loop.detected` span appended
    /// to `request` instead ([`crate::annotate::synthetic`]).
    pub fn process(&self, request: &mut ExportTraceServiceRequest, now: Instant) -> Processed {
        let mut views = Vec::new();
        for (r, resource_spans) in request.resource_spans.iter().enumerate() {
            let resource = resource_spans.resource.as_ref();
            let service_name: Option<Arc<str>> =
                otlp::service_name(resource).map(|s| self.names.get(s));
            for (s, scope_spans) in resource_spans.scope_spans.iter().enumerate() {
                for (i, span) in scope_spans.spans.iter().enumerate() {
                    views.push((
                        (r, s, i),
                        SpanView::from(span),
                        resource,
                        service_name.clone(),
                    ));
                }
            }
        }
        let spans: Vec<_> = views
            .iter()
            .map(|(location, view, resource, service_name)| {
                (*location, view, *resource, service_name.clone())
            })
            .collect();
        let (events, mut located, moves, hops) = self.events_of(spans.iter().cloned());
        let mut detections = self.rehome(moves, now);
        detections.extend(self.registry.relink(&hops));
        let latest_tool_end = latest_tool_ends(&events);
        detections.extend(self.registry.observe(events, now));
        self.add_budgets(&spans, &mut located, &mut detections, now);
        self.add_delegations(&spans, &mut located, &mut detections, now);
        let (completed_here, elsewhere) = place_detections(&detections, located);
        let synthetic = self.synthetic_for(&elsewhere);
        let mut annotated_spans = 0;
        for (location, here) in completed_here {
            let (r, s, i) = location;
            let span = &mut request.resource_spans[r].scope_spans[s].spans[i];
            annotate_span(span, &here, &|fp| self.fingerprint_key.short(fp));
            annotated_spans += 1;
        }
        self.stats
            .spans_annotated
            .fetch_add(annotated_spans as u64, Ordering::Relaxed);
        let synthetic_spans = synthetic.len();
        request.resource_spans.extend(synthetic);
        Processed {
            detections,
            annotated_spans,
            synthetic_spans,
            latest_tool_end,
        }
    }

    /// Synthetic spans for the detections completed by spans of earlier requests
    /// (`elsewhere`, from [`place_detections`]); counted in `synthetic_spans`.
    fn synthetic_for(
        &self,
        elsewhere: &[&RunDetection],
    ) -> Vec<opentelemetry_proto::tonic::trace::v1::ResourceSpans> {
        if elsewhere.is_empty() {
            return Vec::new(); // the common case
        }
        let synthetic = synthetic_spans(elsewhere, &|fp| self.fingerprint_key.short(fp));
        self.stats
            .synthetic_spans
            .fetch_add(synthetic.len() as u64, Ordering::Relaxed);
        synthetic
    }

    /// Every span with a run key adds its figures (times, tool call, tokens) to its run's
    /// budgets; the budget detections completed are added to `detections`, and their spans
    /// to `located` (when not there already).
    #[allow(clippy::type_complexity)]
    fn add_budgets<'a, L: Clone>(
        &self,
        spans: &[(L, &'a SpanView<'a>, Option<&'a Resource>, Option<Arc<str>>)],
        located: &mut Vec<(L, &'a [u8], &'a [u8])>,
        detections: &mut Vec<RunDetection>,
        now: Instant,
    ) {
        let Some(budgets) = &self.budgets else {
            return;
        };
        for (location, span, resource, service_name) in spans {
            let Some(run_key) = self.run_key(span, *resource) else {
                continue;
            };
            let extracted = conventions::extract_all_with_recorded_arguments(
                &self.options.custom_conventions,
                span,
            );
            // The result span of a call traced on two sibling spans is no second call; a
            // span that records several calls counts each.
            let mut tools: smallvec::SmallVec<[Option<&str>; 1]> = extracted
                .iter()
                .filter_map(|e| match &e.kind {
                    EventKind::ToolCall(call) if call.split != SplitSpan::Result => {
                        Some(Some(call.tool_name.as_str()))
                    }
                    _ => None,
                })
                .collect();
            if tools.is_empty() {
                tools.push(None);
            }
            let context = SpanContext {
                run_key: &run_key,
                trace_id: span.trace_id,
                span_id: span.span_id,
                service_name: service_name.clone(),
                agent_name: extracted
                    .first()
                    .and_then(|e| e.agent_name.as_deref())
                    .map(Arc::from),
            };
            let mut found = Vec::new();
            // Tokens and cost once per span.
            let usage = span_usage::model_usage(span);
            let cost = usage.and_then(|u| u.cost(budgets.prices()));
            for (i, tool_name) in tools.into_iter().enumerate() {
                let first = i == 0;
                let figures = SpanFigures {
                    start_time_unix_nano: span.start_time_unix_nano,
                    end_time_unix_nano: span.end_time_unix_nano,
                    tool_name,
                    tokens: usage.filter(|_| first).map_or(0, |u| u.tokens()),
                    cost_micro_usd: cost.filter(|_| first).map_or(0, |(micro, _)| micro),
                    unpriced: first && cost.is_none() && usage.is_some_and(|u| u.tokens() > 0),
                };
                found.extend(budgets.observe(&context, figures, now));
            }
            let (trace_id, span_id) = (span.trace_id, span.span_id);
            if !found.is_empty()
                && !located
                    .iter()
                    .any(|(_, t, s)| *t == trace_id && *s == span_id)
            {
                located.push((location.clone(), trace_id, span_id));
            }
            detections.extend(found);
        }
    }

    /// Every span that hands its run to an agent ([`conventions::agents`]) adds that
    /// activation to its run's delegation state; the `delegation_cycle` and `max_handoffs`
    /// detections completed are added to `detections`, and their spans of this request to
    /// `located`. Runs are traces here even under `run_key = "trace_and_agent"` (a cycle is
    /// between agents).
    #[allow(clippy::type_complexity)]
    fn add_delegations<'a, L: Clone>(
        &self,
        spans: &[(L, &'a SpanView<'a>, Option<&'a Resource>, Option<Arc<str>>)],
        located: &mut Vec<(L, &'a [u8], &'a [u8])>,
        detections: &mut Vec<RunDetection>,
        now: Instant,
    ) {
        let Some(tracker) = &self.delegations else {
            return;
        };
        let mut found = Vec::new();
        for (_, span, resource, service_name) in spans {
            let Some(activation) = conventions::agents::activation(span) else {
                continue;
            };
            let Some(mut run_key) = self.run_key(span, *resource) else {
                continue;
            };
            if self.agents.is_some() {
                if let Some((trace, _)) = run_key.split_once('/') {
                    run_key = Arc::from(trace);
                }
            }
            let context = ActivationSpan {
                run_key: &run_key,
                trace_id: span.trace_id,
                span_id: span.span_id,
                start_time_unix_nano: span.start_time_unix_nano,
                end_time_unix_nano: span.end_time_unix_nano,
                service_name: service_name.clone(),
            };
            found.extend(tracker.observe(&context, &activation.agent, now));
        }
        for detection in &found {
            let here = spans.iter().find(|(_, s, _, _)| {
                s.trace_id == &detection.trace_id[..] && s.span_id == &detection.span_id[..]
            });
            if let Some((location, span, _, _)) = here {
                let (trace_id, span_id) = (span.trace_id, span.span_id);
                if !located
                    .iter()
                    .any(|(_, t, s)| *t == trace_id && *s == span_id)
                {
                    located.push((location.clone(), trace_id, span_id));
                }
            }
        }
        detections.extend(found);
    }

    /// [`Engine::process`] over a request read from its bytes: the same events and
    /// detections; the spans that complete a detection are annotated in the bytes
    /// (same attributes and event as [`annotate_span`] writes), synthetic spans are
    /// appended as encoded `resource_spans` entries, and a request with neither is
    /// returned byte for byte.
    pub fn process_wire(
        &self,
        request: WireRequest,
        now: Instant,
    ) -> Result<WireProcessed, WireError> {
        let spans = request.span_count();
        // Only the run-key attribute is read from resources (service.name is read already).
        let keys: Vec<&str> = self
            .options
            .run_key_attribute
            .as_deref()
            .into_iter()
            .collect();
        let resources = (0..request.resources.len())
            .map(|r| request.resource(r, &keys))
            .collect::<Result<Vec<_>, _>>()?;
        // Shared with every other request of the same service (interned).
        let services: Vec<Option<Arc<str>>> = request
            .resources
            .iter()
            .map(|r| r.service_name.as_deref().map(|s| self.names.get(s)))
            .collect();
        let inputs = request.spans().iter().map(|wire| {
            (
                wire.range.clone(),
                &wire.span,
                resources.get(wire.resource),
                services[wire.resource].clone(),
            )
        });
        let inputs: Vec<_> = inputs.collect();
        let (events, mut located, moves, hops) = self.events_of(inputs.iter().cloned());
        let mut detections = self.rehome(moves, now);
        detections.extend(self.registry.relink(&hops));
        let latest_tool_end = latest_tool_ends(&events);
        detections.extend(self.registry.observe(events, now));
        self.add_budgets(&inputs, &mut located, &mut detections, now);
        self.add_delegations(&inputs, &mut located, &mut detections, now);
        let (completed_here, elsewhere) = place_detections(&detections, located);
        let synthetic = self.synthetic_for(&elsewhere);
        let views = request.spans();
        let edits: Vec<SpanEdit> = completed_here
            .into_iter()
            .filter_map(|(range, here)| {
                let short = |fp: &crate::fingerprint::Fingerprint| self.fingerprint_key.short(fp);
                let (attributes, detection_time) = encoded_loop_attributes(&here, &short)?;
                // Spans are in byte order: the view of the span being edited.
                let view = views
                    .binary_search_by_key(&range.start, |wire| wire.range.start)
                    .ok()
                    .map(|i| &views[i].span);
                // The event sits at the edited span's own end, as `annotate_span` puts it
                // (the detection's time unless a copy of the span with another end time
                // completed it); every edited span has a view.
                let time = view.map_or(detection_time, |view| view.end_time_unix_nano);
                let edit = SpanEdit::adding_encoded_with_event(
                    range,
                    &attributes,
                    crate::annotate::EVENT_NAME,
                    time,
                );
                Some(match view {
                    Some(view) => edit.without_absent_removals(view),
                    None => edit,
                })
            })
            .collect();
        let annotated_spans = edits.len();
        let mut pieces = if edits.is_empty() {
            vec![request.bytes.clone()]
        } else {
            crate::annotate::wire::rewrite_pieces(&request.bytes, &edits)?
        };
        let synthetic_spans = synthetic.len();
        if synthetic_spans > 0 {
            // Appending encoded `resource_spans` entries to a request's bytes appends them
            // to its list (protobuf concatenation): the received bytes stay untouched.
            let appended = ExportTraceServiceRequest {
                resource_spans: synthetic,
            };
            pieces.push(bytes::Bytes::from(appended.encode_to_vec()));
        }
        self.stats
            .spans_annotated
            .fetch_add(annotated_spans as u64, Ordering::Relaxed);
        Ok(WireProcessed {
            pieces,
            processed: Processed {
                detections,
                annotated_spans,
                synthetic_spans,
                latest_tool_end,
            },
            spans: spans + synthetic_spans as u64,
        })
    }

    /// Events of `spans` (location, span, resource, service.name), for each event the
    /// location and ids of its span, the agent moves, and the call hops of the request
    /// for the registry to apply to tool calls that came before them ([`hops`]).
    #[allow(clippy::type_complexity)]
    fn events_of<'a, L>(
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
    fn hops_of<L>(
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
    fn follow_hops(&self, hops: &[CallHop], events: &mut [RunEvent]) {
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

    /// With `run_key_by_agent`: records every span of a request in the agent index (all
    /// first, so a span finds ancestors sent with it in any order), then returns the calls
    /// placed earlier under their trace alone whose agent is now known.
    fn learn_agents<'a>(&self, spans: impl Iterator<Item = &'a SpanView<'a>>) -> Vec<AgentMove> {
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
    fn rehome(&self, moves: Vec<AgentMove>, now: Instant) -> Vec<RunDetection> {
        moves
            .into_iter()
            .flat_map(|(from, to)| self.registry.rehome(&from, &to, now))
            .collect()
    }

    /// The run key of a span: the configured attribute's value, else the trace_id hex,
    /// followed by `/<agent>` with `run_key_by_agent` when the span's agent is known
    /// ([`AgentIndex::agent`]); `None` when nothing identifies a run (invalid trace_id and
    /// no attribute).
    fn run_key(
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

/// `gen_ai.usage.input_tokens` + `gen_ai.usage.output_tokens` of an inference span
/// (`gen_ai.operation.name` = `chat` / `text_completion` / `generate_content`); 0 for any
/// other span (agent spans often repeat their children's totals).
#[cfg(test)]
fn inference_tokens(span: &SpanView) -> u64 {
    span_usage::model_usage(span).map_or(0, |usage| usage.tokens())
}

/// Where `detections` land: the spans of `located` (location, trace_id, span_id) that
/// complete one, each with the detections it completes, and the detections completed by a
/// span of an earlier request (in detection order). Looks each span up in a map keyed by
/// (trace_id, span_id) instead of matching every span against every detection.
fn place_detections<'d, L>(
    detections: &'d [RunDetection],
    located: Vec<(L, &[u8], &[u8])>,
) -> (Vec<(L, Vec<&'d RunDetection>)>, Vec<&'d RunDetection>) {
    if detections.is_empty() {
        return (Vec::new(), Vec::new());
    }
    // (trace_id, span_id) → the detections that span completes, and whether it is here.
    type BySpan<'a, 'd> = foldhash::HashMap<(&'a [u8], &'a [u8]), (Vec<&'d RunDetection>, bool)>;
    let mut by_span: BySpan = BySpan::default();
    for d in detections {
        by_span
            .entry((d.trace_id.as_slice(), d.span_id.as_slice()))
            .or_default()
            .0
            .push(d);
    }
    let mut here = Vec::new();
    for (location, trace_id, span_id) in located {
        if let Some((completed, placed)) = by_span.get_mut(&(trace_id, span_id)) {
            *placed = true;
            here.push((location, completed.clone()));
        }
    }
    let elsewhere = detections
        .iter()
        .filter(|d| !by_span[&(d.trace_id.as_slice(), d.span_id.as_slice())].1)
        .collect();
    (here, elsewhere)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::test_support::kv;
    use opentelemetry_proto::tonic::common::v1::any_value::Value;

    #[test]
    fn tokens_count_on_inference_spans_only() {
        let usage = vec![
            kv("gen_ai.usage.input_tokens", Value::IntValue(120)),
            kv(
                "gen_ai.usage.output_tokens",
                Value::StringValue("30".into()),
            ),
        ];
        let mut chat = otlp::Span {
            attributes: usage.clone(),
            ..Default::default()
        };
        chat.attributes.push(kv(
            "gen_ai.operation.name",
            Value::StringValue("chat".into()),
        ));
        assert_eq!(inference_tokens(&SpanView::from(&chat)), 150);
        let mut agent = otlp::Span {
            attributes: usage,
            ..Default::default()
        };
        agent.attributes.push(kv(
            "gen_ai.operation.name",
            Value::StringValue("invoke_agent".into()),
        ));
        assert_eq!(
            inference_tokens(&SpanView::from(&agent)),
            0,
            "agent totals would count twice"
        );
        let mut negative = chat.clone();
        negative.attributes[0] = kv("gen_ai.usage.input_tokens", Value::IntValue(-5));
        assert_eq!(inference_tokens(&SpanView::from(&negative)), 30);
    }

    #[test]
    fn request_counts_reach_the_shared_counters() {
        use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
        let engine = Engine::from_config(&crate::config::Config::default()).expect("default");
        let text = |s: &str| Value::StringValue(s.into());
        let tool = |trace: u8, id: u8| otlp::Span {
            trace_id: vec![trace; 16],
            span_id: vec![id; 8],
            attributes: vec![
                kv("gen_ai.operation.name", text("execute_tool")),
                kv("gen_ai.tool.name", text("search")),
                kv("gen_ai.tool.call.arguments", text(r#"{"q":1}"#)),
            ],
            ..Default::default()
        };
        let spans = vec![
            tool(1, 1),
            tool(1, 2),
            // A tool call without a valid trace_id (and no run-key attribute): no run.
            tool(0, 3),
            // Not an event at all.
            otlp::Span {
                trace_id: vec![1; 16],
                span_id: vec![4; 8],
                name: "plain".into(),
                ..Default::default()
            },
        ];
        let mut request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans,
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        for round in 1..=2 {
            engine.process(&mut request, Instant::now());
            let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
            assert_eq!(load(&engine.stats.spans_seen), 4 * round);
            assert_eq!(load(&engine.stats.tool_calls), 2 * round);
            assert_eq!(load(&engine.stats.spans_without_run), round);
            assert_eq!(load(&engine.stats.model_responses), 0);
        }
    }
}
