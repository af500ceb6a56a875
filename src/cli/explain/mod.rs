//! `loopwatch explain`: for each run of recorded requests, the call sequence as each
//! profile saw it, with short ids of arguments and results, where a rule fired and why, and
//! why it did not elsewhere (counts below the thresholds, ignored tools, uncaptured
//! arguments). The requests go through the same engine as `scan`
//! ([`crate::cli::scan::scan`]); the reasons come from the detector's own explanation
//! ([`crate::detector::Detector::explain`]), never from a second copy of the rules.

mod agents;
mod fired;

pub use agents::{CycleFigure, DelegationExplanation};
pub use fired::Fired;

use std::path::PathBuf;

use serde::Serialize;

use crate::cli::scan::{scan, ScanError};
use crate::detector::explain::Verdict;
use crate::detector::{Detector, Observation};
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
    /// 1-based ordinal among the tool calls the profile counts (ignored tools excluded),
    /// or among text responses for `text_response`.
    pub ordinal: Option<usize>,
    pub tool: Option<String>,
    /// Short fingerprints (16 hex chars of the keyed HMAC, as in `loop.fingerprints`) of the
    /// arguments, the result and a text response; `None` when not captured.
    pub arguments: Option<String>,
    pub result: Option<String>,
    pub text: Option<String>,
    /// `fired`, `ignored`, `no_arguments`, `below_threshold`, `text_streak`,
    /// `tool_call_response`, `result_span`.
    pub verdict: &'static str,
    /// For `below_threshold`: repeated_call, repeated_result and alternating_calls
    /// (complete A,B cycles ending the window); for `text_streak`: repeated_text.
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
                    verdict: "",
                    counts: Vec::new(),
                    fired: None,
                };
                match &event.observation {
                    Observation::ToolCall {
                        tool_name,
                        call_fingerprint,
                        result_fingerprint,
                    } => {
                        line.tool = Some(tool_name.to_string());
                        line.arguments = call_fingerprint.as_ref().map(short);
                        line.result = result_fingerprint.as_ref().map(short);
                        if step.verdict != Verdict::Ignored {
                            calls += 1;
                            line.ordinal = Some(calls);
                        }
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
                    } => {
                        line.kind = "tool_result";
                        line.tool = Some(tool_name.to_string());
                        line.result = Some(short(result_fingerprint));
                    }
                }
                line.verdict = match step.verdict {
                    Verdict::Fired => "fired",
                    Verdict::Ignored => "ignored",
                    Verdict::NoArguments => "no_arguments",
                    Verdict::BelowThreshold {
                        same_calls,
                        repeated_call,
                        same_results,
                        repeated_result,
                        alternations,
                        alternating_calls,
                    } => {
                        line.counts = vec![
                            count("repeated_call", same_calls, repeated_call),
                            count("repeated_result", same_results, repeated_result),
                            count("alternating_calls", alternations, alternating_calls),
                        ];
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

/// The human-readable form: per run a header, per profile its thresholds and one line per
/// tool call (`call N  TOOL  args ID  result ID  ` then the verdict; `call -` for an
/// ignored tool) and text response, then budget detections. Ids are the first 8 hex chars
/// of the short fingerprints. Responses that requested tool calls are left out (they only
/// reset the text streak; the JSON form has them).
pub fn render_text(runs: &[RunExplanation]) -> String {
    let mut out = String::new();
    for run in runs {
        out.push_str(&format!("run {}", run.run_key));
        if let Some(service) = &run.service_name {
            out.push_str(&format!("  service {service}"));
        }
        out.push_str(&format!("  {} tool call(s)\n", run.tool_calls));
        for profile in &run.profiles {
            let thresholds: Vec<String> = profile
                .thresholds
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            out.push_str(&format!(
                "  profile {}: {}\n",
                profile.profile,
                thresholds.join(", ")
            ));
            let tool_width = profile
                .steps
                .iter()
                .filter_map(|s| s.tool.as_deref().map(|t| t.chars().count()))
                .max()
                .unwrap_or(0);
            // Responses that requested tool calls only reset the text streak: JSON only.
            for step in profile
                .steps
                .iter()
                .filter(|s| s.kind != "tool_call_response")
            {
                out.push_str("    ");
                out.push_str(step_line(step, tool_width).trim_end());
                out.push('\n');
            }
        }
        if !run.budget_figures.is_empty() {
            let figures: Vec<String> = run
                .budget_figures
                .iter()
                .map(|f| {
                    if f.budget == "max_cost_usd" {
                        let unpriced = match run.unpriced_model_calls {
                            0 => String::new(),
                            n => format!(" ({n} model call(s) without a price)"),
                        };
                        return format!(
                            "{} {}/{}{unpriced}",
                            f.budget,
                            crate::detector::cost::dollars(f.value),
                            crate::detector::cost::dollars(f.limit)
                        );
                    }
                    let unit = if f.budget == "max_duration" {
                        " ms"
                    } else {
                        ""
                    };
                    let tool = f
                        .tool
                        .as_deref()
                        .map(|t| format!(" ({t})"))
                        .unwrap_or_default();
                    format!("{} {}/{}{unit}{tool}", f.budget, f.value, f.limit)
                })
                .collect();
            out.push_str(&format!("  budgets: {}\n", figures.join(", ")));
        }
        for fired in &run.budgets {
            out.push_str(&format!(
                "    FIRED budget_exceeded {} on span {}: {}\n",
                fired.severity, fired.span_id, fired.reason
            ));
        }
        if let Some(delegation) = &run.delegation {
            agents::render_text(delegation, &mut out);
        }
    }
    if runs.is_empty() {
        out.push_str("(no runs with tool calls or model responses)\n");
    }
    out
}

fn step_line(step: &StepExplanation, tool_width: usize) -> String {
    let id = |s: &Option<String>| {
        s.as_deref()
            .map_or_else(|| "-".to_string(), |s| s.chars().take(8).collect())
    };
    let ordinal = step
        .ordinal
        .map_or_else(|| "-".to_string(), |n| n.to_string());
    let head = match step.kind {
        "tool_call" => format!(
            "call {ordinal:<3} {:<tool_width$}  args {:<8}  result {:<8}  ",
            step.tool.as_deref().unwrap_or(""),
            id(&step.arguments),
            id(&step.result),
        ),
        "text_response" => format!("text {ordinal:<3} response {}  ", id(&step.text)),
        "tool_result" => format!(
            "{:<9}{:<tool_width$}  args {:<8}  result {:<8}  ",
            "result",
            step.tool.as_deref().unwrap_or(""),
            "-",
            id(&step.result),
        ),
        "outer_response" => "response traced twice  ".to_string(),
        _ => "model requested tool calls  ".to_string(),
    };
    format!("{head}{}", verdict_text(step))
}

/// What a step did in its profile, in words: `FIRED <pattern> <severity> on span <id>
/// (occurrence N): <reason>`, `below threshold: repeated_call 2/3, …`, `ignored by
/// [[tools]] …` and so on (the verdict part of a `loopwatch explain` line).
pub fn verdict_text(step: &StepExplanation) -> String {
    let same_calls = step.counts.first().map_or(0, |c| c.count);
    let counts = |prefix: &str| {
        let parts: Vec<String> = step
            .counts
            .iter()
            .filter_map(|c| {
                let (rule, n) = (c.rule, c.count);
                match (rule, c.threshold) {
                    // Alternation is shown once it is under way (two cycles).
                    ("alternating_calls", _) if n < 2 => None,
                    (_, 0) => Some(format!("{rule} off")),
                    ("repeated_result", t) if step.result.is_none() => {
                        Some(format!("{rule} -/{t} (no result captured)"))
                    }
                    ("repeated_result", t) if n < same_calls => {
                        Some(format!("{rule} {n}/{t} (result changed: progress)"))
                    }
                    (_, t) => Some(format!("{rule} {n}/{t}")),
                }
            })
            .collect();
        format!("{prefix}{}", parts.join(", "))
    };
    match (step.verdict, &step.fired) {
        ("fired", Some(f)) => format!(
            "FIRED {} {} on span {} (occurrence {}): {}",
            f.pattern, f.severity, f.span_id, f.occurrence, f.reason
        ),
        ("ignored", _) => "ignored by [[tools]] (removed from the sequence)".to_string(),
        ("no_arguments", _) => "arguments not captured (part of no pattern)".to_string(),
        ("below_threshold", _) => counts("below threshold: "),
        ("text_streak", _) => counts("below threshold: "),
        ("tool_call_response", _) => "(text streak reset)".to_string(),
        ("result_span", _) => "result span of the call before it (no call of its own)".to_string(),
        ("outer_response", _) => {
            "the span of it nested in this one is the response (not counted)".to_string()
        }
        (other, _) => other.to_string(),
    }
}
