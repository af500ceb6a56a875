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

use crate::annotate::wire::SpanEdit;
use crate::annotate::{annotate_span, encoded_loop_attributes};
use crate::conventions::run_key::AgentIndex;
use crate::detector::{FingerprintRules, Observation};
use crate::engine::budget_state::BudgetTracker;
use crate::engine::delegation_state::DelegationTracker;
use crate::fingerprint::{FingerprintKey, Fingerprinter};
use crate::otlp::view::SpanView;
use crate::otlp::wire::{WireError, WireRequest};
use crate::otlp::{self, ExportTraceServiceRequest};
use crate::registry::{Registry, RunDetection, RunEvent};
use prost::Message;

mod agents;
mod calls;
pub mod conversations;
mod events;
pub mod hops;
mod observe;
#[cfg(test)]
mod recent_tests;
mod synthetic;

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
mod tests;
