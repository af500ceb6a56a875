//! `loopwatch explain`: for each run of recorded requests, the call sequence as each
//! profile saw it, with short ids of arguments and results, where a rule fired and why, and
//! why it did not elsewhere (counts below the thresholds, ignored tools, uncaptured
//! arguments). The requests go through the same engine as `scan`
//! ([`crate::cli::scan::scan`]); the reasons come from the detector's own explanation
//! ([`crate::detector::Detector::explain`]), never from a second copy of the rules.

mod agents;
mod fired;
mod render;

pub use agents::{CycleFigure, DelegationExplanation};
pub use fired::Fired;
pub use render::{render_text, verdict_text};

use std::path::PathBuf;

use serde::Serialize;

use crate::cli::scan::{scan, ScanError};
use crate::detector::explain::{Change, Verdict};
use crate::detector::{CallTraits, Detector, Observation};
use crate::engine::Engine;
use crate::fingerprint::Fingerprint;
use crate::otlp::hex_id;
use crate::registry::RunEvent;

/// One run: its steps per profile, then its budget detections.
#[derive(Clone, Debug, Serialize)]
pub struct RunExplanation {
    pub run_key: String,
    pub service_name: Option<String>,
    pub tool_calls: usize,
    pub profiles: Vec<ProfileExplanation>,
    /// Each set `[budgets]` limit with the run's figure (empty when none is set).
    pub budget_figures: Vec<BudgetFigure>,
    /// `[budgets]` detections of the run (empty when none was set or none passed).
    pub budgets: Vec<Fired>,
    /// Inference spans whose cost could not be found (no recorded cost, no price for their
    /// model): `max_cost_usd` does not see them.
    pub unpriced_model_calls: u64,
    /// The agents the run was handed to and its delegation figures (`None` when it never
    /// was).
    pub delegation: Option<agents::DelegationExplanation>,
}

/// A budget, the run's figure and the limit (durations in ms); `tool` names the busiest
/// tool for `max_calls_per_tool`.
#[derive(Clone, Debug, Serialize)]
pub struct BudgetFigure {
    pub budget: &'static str,
    pub value: u64,
    pub limit: u64,
    pub tool: Option<String>,
}

/// One profile's view of a run.
#[derive(Clone, Debug, Serialize)]
pub struct ProfileExplanation {
    pub profile: String,
    /// The profile's thresholds as `key value` pairs, e.g. `["window", 10]`.
    pub thresholds: Vec<(&'static str, usize)>,
    pub steps: Vec<StepExplanation>,
}

/// One observation of the run and what it did in the profile.
#[derive(Clone, Debug, Serialize)]
pub struct StepExplanation {
    pub span_id: String,
    /// `tool_call`, `text_response`, `tool_call_response`, `tool_result` (the result span
    /// of a call traced on two sibling spans, google-adk 0.1.0–1.1.x `tool_response [name]`:
    /// its result is shown on its call, before it) or `outer_response` (a model-response
    /// span with a span of the same response nested in it: that one is the response).
    pub kind: &'static str,
    /// 1-based ordinal among the run's tool calls (ignored tools and transient errors
    /// included: the number a detection names), or among text responses for
    /// `text_response`.
    pub ordinal: Option<usize>,
    pub tool: Option<String>,
    /// Short fingerprints (16 hex chars of the keyed HMAC, as in `loop.fingerprints`) of the
    /// arguments, the result and a text response; `None` when not captured. The result's
    /// is that of its compared form (`compared_result`), which is the recorded result
    /// whenever nothing was normalised away.
    pub arguments: Option<String>,
    pub result: Option<String>,
    pub text: Option<String>,
    /// The command of a shell tool (when the engine kept the compared forms).
    pub command: Option<String>,
    /// Whether the call changes state: `reads`, `writes`, `moves` (`cd`), or `None` when
    /// not classed.
    pub effect: Option<&'static str>,
    /// The result (or error message) as compared: volatile noise and echoed argument words
    /// replaced (`<n>`, `<time>`, `<arg>`…); `None` for a JSON result or none captured.
    pub compared_result: Option<String>,
    /// The compared result differs from the recorded one.
    pub normalised: bool,
    /// The result counts as an outcome (for repeated_outcome).
    pub outcome: bool,
    /// How the result compares with the one before it with the same arguments: `same`,
    /// `same_but_noise`, `grew` (by the same block: no progress), `changed` (progress).
    pub change: Option<&'static str>,
    /// Earlier calls with these arguments were before a state change with new arguments
    /// (an edit): they were not counted.
    pub reset_by_state_change: bool,
    /// `fired`, `ignored`, `transient`, `no_arguments`, `below_threshold`, `text_streak`,
    /// `tool_call_response`, `result_span`.
    pub verdict: &'static str,
    /// For `below_threshold`: repeated_call, repeated_result, repeated_outcome, near_repeat
    /// and alternating_calls (complete A,B cycles ending the window); for `text_streak`:
    /// repeated_text.
    pub counts: Vec<Count>,
    pub fired: Option<Fired>,
}

/// How far a rule was from firing at a step: `count` against `threshold` (0 = off).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Count {
    pub rule: &'static str,
    pub count: usize,
    pub threshold: usize,
}

fn count(rule: &'static str, count: usize, threshold: usize) -> Count {
    Count {
        rule,
        count,
        threshold,
    }
}

/// Reads `files` as one stream (as `scan` does) and explains every run with a tool call or
/// model response, runs ordered by their first span's start time (ties: run key), then the
/// runs with only budget figures or agent handoffs (by run key), for every
/// profile or only `profile`. The engine should keep every event of a run
/// (`registry.max_events_per_run` at least the run's length), or the explanation starts at
/// the first kept event.
pub fn explain(
    engine: &Engine,
    files: &[PathBuf],
    profile: Option<&str>,
) -> Result<Vec<RunExplanation>, ScanError> {
    scan(engine, files)?;
    let mut runs: Vec<(RunEvent, String)> = engine
        .registry
        .runs()
        .into_iter()
        .filter_map(|r| {
            let first = engine.registry.events(&r.run_key)?.into_iter().next()?;
            Some((first, r.run_key.to_string()))
        })
        .collect();
    runs.sort_by(|(a, ka), (b, kb)| {
        (a.start_time_unix_nano, a.end_time_unix_nano, ka).cmp(&(
            b.start_time_unix_nano,
            b.end_time_unix_nano,
            kb,
        ))
    });
    let mut run_keys: Vec<String> = runs.into_iter().map(|(_, key)| key).collect();
    // Runs with budget figures or handed between agents, without a tool call or model
    // response the registry keeps.
    let mut more: Vec<String> = Vec::new();
    if let Some(budgets) = &engine.budgets {
        more.extend(budgets.run_keys());
    }
    if let Some(delegations) = &engine.delegations {
        more.extend(delegations.run_keys());
    }
    more.retain(|key| !run_keys.contains(key));
    more.sort();
    more.dedup();
    run_keys.extend(more);
    Ok(run_keys
        .into_iter()
        .map(|run_key| explain_run(engine, &run_key, profile))
        .collect())
}

/// One run, explained for every profile or only `profile`: the kept events the engine's
/// registry holds replayed through fresh detectors of each profile (so a run that forgot
/// events past `registry.max_events_per_run`, or was approved, is explained from its first
/// kept event with fresh counts), its budgets and its agent handoffs. A run the engine
/// does not know comes back with no steps. Read by `loopwatch explain` and the admin API's
/// run drill-down (`GET /v1/runs/{run_key}`).
pub fn explain_run(engine: &Engine, run_key: &str, profile: Option<&str>) -> RunExplanation {
    let short = |fp: &Fingerprint| engine.fingerprint_key.short(fp);
    let run_key = run_key.to_string();
    let events = engine.registry.events(&run_key).unwrap_or_default();
    let detections = engine.registry.detections(&run_key).unwrap_or_default();
    let summary = engine.registry.run(&run_key);
    let mut profiles = Vec::new();
    for (index, settings) in engine.registry.profiles().iter().enumerate() {
        if profile.is_some_and(|p| p != settings.name) {
            continue;
        }
        let mut detector = Detector::new(settings.clone());
        let (mut calls, mut texts) = (0, 0);
        let steps = events
            .iter()
            .map(|event| {
                let step = detector.explain(&event.observation);
                let mut line = StepExplanation {
                    span_id: hex_id(&event.span_id),
                    kind: "tool_call",
                    ordinal: None,
                    tool: None,
                    arguments: None,
                    result: None,
                    text: None,
                    command: None,
                    effect: None,
                    compared_result: None,
                    normalised: false,
                    outcome: false,
                    change: None,
                    reset_by_state_change: false,
                    verdict: "",
                    counts: Vec::new(),
                    fired: None,
                };
                match &event.observation {
                    Observation::ToolCall {
                        tool_name,
                        call_fingerprint,
                        result_fingerprint,
                        traits,
                    } => {
                        line.tool = Some(tool_name.to_string());
                        line.arguments = call_fingerprint.as_ref().map(short);
                        line.result = result_fingerprint.as_ref().map(short);
                        line.outcome = traits.has(CallTraits::OUTCOME);
                        if let Some(forms) = engine.forms_of(&event.span_id) {
                            line.command = forms.command;
                            line.effect = forms.effect;
                            line.compared_result = forms.compared_result;
                            line.normalised = forms.normalised;
                        }
                        calls += 1;
                        line.ordinal = Some(calls);
                    }
                    Observation::TextResponse { text_fingerprint } => {
                        texts += 1;
                        line.kind = "text_response";
                        line.ordinal = Some(texts);
                        line.text = Some(short(text_fingerprint));
                    }
                    Observation::ToolCallResponse => line.kind = "tool_call_response",
                    Observation::OuterResponse => line.kind = "outer_response",
                    Observation::ToolResult {
                        tool_name,
                        result_fingerprint,
                        ..
                    } => {
                        line.kind = "tool_result";
                        line.tool = Some(tool_name.to_string());
                        line.result = Some(short(result_fingerprint));
                    }
                }
                line.verdict = match step.verdict {
                    Verdict::Fired => "fired",
                    Verdict::Ignored => "ignored",
                    Verdict::Transient => "transient",
                    Verdict::NoArguments => "no_arguments",
                    Verdict::BelowThreshold {
                        same_calls,
                        repeated_call,
                        same_results,
                        repeated_result,
                        same_outcomes,
                        repeated_outcome,
                        near_repeats,
                        near_repeat,
                        alternations,
                        alternating_calls,
                        change,
                        reset_by_state_change,
                    } => {
                        line.counts = vec![
                            count("repeated_call", same_calls, repeated_call),
                            count("repeated_result", same_results, repeated_result),
                            count("repeated_outcome", same_outcomes, repeated_outcome),
                            count("near_repeat", near_repeats, near_repeat),
                            count("alternating_calls", alternations, alternating_calls),
                        ];
                        line.change = match change {
                            Change::Unknown => None,
                            Change::Same => Some("same"),
                            Change::SameButNoise => Some("same_but_noise"),
                            Change::Grew => Some("grew"),
                            Change::Changed => Some("changed"),
                        };
                        line.reset_by_state_change = reset_by_state_change;
                        "below_threshold"
                    }
                    Verdict::TextStreak {
                        streak,
                        repeated_text,
                    } => {
                        line.counts = vec![count("repeated_text", streak, repeated_text)];
                        "text_streak"
                    }
                    Verdict::ToolCallResponse => "tool_call_response",
                    Verdict::ResultSpan => "result_span",
                    Verdict::OuterResponse => "outer_response",
                };
                line.fired = step.detection.as_ref().and_then(|found| {
                    detections
                        .iter()
                        .find(|d| {
                            d.profile_index == index
                                && d.span_id[..] == event.span_id[..]
                                && d.detection.pattern == found.pattern
                        })
                        .map(Fired::from)
                });
                line
            })
            .collect();
        profiles.push(ProfileExplanation {
            profile: settings.name.clone(),
            thresholds: vec![
                ("window", settings.window),
                ("repeated_call", settings.repeated_call),
                ("repeated_result", settings.repeated_result),
                ("repeated_outcome", settings.repeated_outcome),
                ("near_repeat", settings.near_repeat),
                ("alternating_calls", settings.alternating_calls),
                ("cycle", settings.cycle),
                ("max_cycle_period", settings.max_cycle_period),
                ("repeated_text", settings.repeated_text),
                ("delegation_cycle", settings.delegation_cycle),
            ],
            steps,
        });
    }
    // Budgets are per run, not per profile: shown when no --profile narrows the view.
    let (budget_figures, budgets) = match (&engine.budgets, profile) {
        (Some(budgets), None) => (
            budgets
                .standing(&run_key)
                .into_iter()
                .map(|e| BudgetFigure {
                    budget: e.budget.as_str(),
                    value: e.value,
                    limit: e.limit,
                    tool: e.tool.map(|t| t.to_string()),
                })
                .collect(),
            budgets
                .detections(&run_key)
                .iter()
                .map(Fired::from)
                .collect(),
        ),
        _ => (Vec::new(), Vec::new()),
    };
    let unpriced_model_calls = match (&engine.budgets, profile) {
        (Some(budgets), None) if budgets.budgets().max_cost_usd > 0.0 => budgets.unpriced(&run_key),
        _ => 0,
    };
    let delegation = agents::explain(engine, &run_key, profile);
    RunExplanation {
        service_name: summary
            .as_ref()
            .and_then(|s| s.service_name.as_deref().map(str::to_string)),
        tool_calls: summary.map_or(0, |s| s.tool_calls),
        run_key,
        profiles,
        budget_figures,
        budgets,
        unpriced_model_calls,
        delegation,
    }
}
