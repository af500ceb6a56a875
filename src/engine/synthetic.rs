//! Events the engine adds beside the spans it reads: budget and delegation detections,
//! and synthetic spans for detections completed by spans of earlier requests.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use opentelemetry_proto::tonic::resource::v1::Resource;

use crate::annotate::synthetic::synthetic_spans;
use crate::conventions;
use crate::conventions::event::{EventKind, SplitSpan};
use crate::detector::budget::SpanFigures;
use crate::engine::budget_state::SpanContext;
use crate::engine::delegation_state::ActivationSpan;
use crate::otlp::view::SpanView;
use crate::registry::RunDetection;

#[cfg(doc)]
use super::place_detections;
use super::{span_usage, Engine};

impl Engine {
    /// Synthetic spans for the detections completed by spans of earlier requests
    /// (`elsewhere`, from [`place_detections`]); counted in `synthetic_spans`.
    pub(super) fn synthetic_for(
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
    pub(super) fn add_budgets<'a, L: Clone>(
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
    pub(super) fn add_delegations<'a, L: Clone>(
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
}
