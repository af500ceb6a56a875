//! What the admin API and the offline scan ask of the registry: approvals, a run's
//! detections, events and repeated calls, and summaries of runs.

use std::sync::Arc;
use std::time::Instant;

use crate::detector::Detector;

use super::run_state::RunState;
use super::{merge, Registry, RepeatedCall, RunDetection, RunEvent, RunSummary, SpanId};

impl Registry {
    /// Approves the run `run_key` (an answer to `require_approval`): every profile forgets
    /// the loops in progress, so the calls that formed them no longer count; call ordinals
    /// and occurrence counts go on. `false` for a run the registry does not hold.
    pub fn approve(&self, run_key: &str) -> bool {
        let Some(mut run) = self.runs.get_mut(run_key) else {
            return false;
        };
        let through = run.events.last().map(|e| {
            let (start, end, span) = e.order_key();
            (start, end, SpanId::from_slice(span))
        });
        if self.held_first(&run) {
            // One observation completes nothing here ([`Registry::held_first`]).
            let key = run.key().clone();
            self.feed(&key, &mut run, 0, &mut Vec::new());
        }
        run.tallies.get_or_insert_default().approved_through = through;
        run.detectors.iter_mut().for_each(Detector::forget_loops);
        true
    }

    /// The current (final) detections of a run, in sequence order; `None` for an unknown run.
    pub fn detections(&self, run_key: &str) -> Option<Vec<RunDetection>> {
        self.runs.get(run_key).map(|r| r.detections.clone())
    }

    /// The kept events of a run in sequence order (span start time), each with the
    /// observation its detectors were fed ([`merge::observation`]: a call traced on two
    /// sibling spans with its result span's result), e.g. for `loopwatch explain`; `None`
    /// for an unknown run.
    pub fn events(&self, run_key: &str) -> Option<Vec<RunEvent>> {
        self.runs.get(run_key).map(|r| {
            (0..r.events.len())
                .map(|index| RunEvent {
                    observation: merge::observation(&r.events, index),
                    ..r.events[index].to_run_event(r.key())
                })
                .collect()
        })
    }

    /// The key of the run holding a span of `trace_id` (lowercase hex): the trace_id itself
    /// when runs are keyed by trace, else the first run (by key) with an event of that trace.
    /// The fallback scans every run's kept events: for admin queries, not the span path.
    pub fn run_key_for_trace(&self, trace_id_hex: &str) -> Option<Arc<str>> {
        if let Some(run) = self.runs.get(trace_id_hex) {
            return Some(run.key().clone());
        }
        let trace_id = hex::decode(trace_id_hex).ok()?;
        let mut keys: Vec<Arc<str>> = self
            .runs
            .iter()
            .filter(|run| run.events.iter().any(|e| e.trace_id() == trace_id))
            .map(|run| run.key().clone())
            .collect();
        keys.sort();
        keys.into_iter().next()
    }

    /// A summary of one run.
    pub fn run(&self, run_key: &str) -> Option<RunSummary> {
        self.runs
            .get(run_key)
            .map(|r| summarize(r.key(), &r, self.epoch))
    }

    /// Summaries of all runs (unordered).
    pub fn runs(&self) -> Vec<RunSummary> {
        self.runs
            .iter()
            .map(|r| summarize(r.key(), &r, self.epoch))
            .collect()
    }

    /// Repeated call fingerprints of a run (hits ≥ 2), most hits first (ties: first step),
    /// with their 1-based tool-call ordinals. `None` for an unknown run.
    pub fn repeated_calls(&self, run_key: &str) -> Option<Vec<RepeatedCall>> {
        let run = self.runs.get(run_key)?;
        let mut by_fingerprint: Vec<RepeatedCall> = Vec::new();
        let mut ordinal = run.forgotten_tool_calls();
        for event in &run.events {
            if let (true, Some(tool_name)) = (event.is_tool_call(), event.tool_name()) {
                ordinal += 1;
                let Some(fp) = event.call_fingerprint() else {
                    continue;
                };
                match by_fingerprint.iter_mut().find(|r| &r.fingerprint == fp) {
                    Some(r) => r.step_indices.push(ordinal),
                    None => by_fingerprint.push(RepeatedCall {
                        fingerprint: *fp,
                        tool_name: tool_name.clone(),
                        step_indices: vec![ordinal],
                    }),
                }
            }
        }
        by_fingerprint.retain(|r| r.step_indices.len() >= 2);
        by_fingerprint.sort_by(|a, b| {
            b.step_indices
                .len()
                .cmp(&a.step_indices.len())
                .then(a.step_indices[0].cmp(&b.step_indices[0]))
        });
        Some(by_fingerprint)
    }
}

pub(super) fn summarize(key: &Arc<str>, run: &RunState, epoch: Instant) -> RunSummary {
    RunSummary {
        run_key: key.clone(),
        service_name: run.service_name(),
        agent_name: run.agent_name(),
        tool_calls: run.events.iter().filter(|e| e.is_tool_call()).count()
            + run.forgotten_tool_calls(),
        detections: run.detections.clone(),
        last_seen: run.last_seen.instant(epoch),
    }
}
