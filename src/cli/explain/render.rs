//! The text form of `loopwatch explain` ([`render_text`]) and the verdict line of one step
//! ([`verdict_text`], which the run detail API also shows).

use super::{agents, RunExplanation, StepExplanation};

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
    let mut line = format!("{head}{}", verdict_text(step));
    if let (true, Some(compared)) = (step.normalised, &step.compared_result) {
        let shown: String = compared.chars().take(160).collect();
        line.push_str(&format!("\n        compared as {shown:?}"));
    }
    line
}

/// What a step did in its profile, in words: `FIRED <pattern> <severity> on span <id>
/// (occurrence N): <reason>`, `below threshold: repeated_call 2/3, …`, `ignored by
/// [[tools]] …` and so on, then `[writes state]` / `[moves state]` for a call that changes
/// state (the verdict part of a `loopwatch explain` line).
pub fn verdict_text(step: &StepExplanation) -> String {
    let same_calls = step.counts.first().map_or(0, |c| c.count);
    let counts = |prefix: &str| {
        let parts: Vec<String> = step
            .counts
            .iter()
            .filter_map(|c| {
                let (rule, n) = (c.rule, c.count);
                match (rule, c.threshold) {
                    // Alternation, outcomes and near repeats are shown once under way.
                    ("alternating_calls" | "repeated_outcome" | "near_repeat", _) if n < 2 => None,
                    ("repeated_outcome" | "near_repeat", 0) => None,
                    (_, 0) => Some(format!("{rule} off")),
                    ("repeated_result", t) if step.result.is_none() => {
                        Some(format!("{rule} -/{t} (no result captured)"))
                    }
                    ("repeated_result", t) => Some(match step.change {
                        Some("grew") => {
                            format!("{rule} {n}/{t} (result grew by the same block: no progress)")
                        }
                        _ if n < same_calls => {
                            format!("{rule} {n}/{t} (result changed: progress)")
                        }
                        Some("same_but_noise") => {
                            format!("{rule} {n}/{t} (same result once noise is removed)")
                        }
                        _ => format!("{rule} {n}/{t}"),
                    }),
                    ("repeated_call", t) if step.reset_by_state_change => Some(format!(
                        "{rule} {n}/{t} (counted since the last state change: edit and retry)"
                    )),
                    (_, t) => Some(format!("{rule} {n}/{t}")),
                }
            })
            .collect();
        format!("{prefix}{}", parts.join(", "))
    };
    let verdict = match (step.verdict, &step.fired) {
        ("fired", Some(f)) => format!(
            "FIRED {} {} on span {} (occurrence {}): {}",
            f.pattern, f.severity, f.span_id, f.occurrence, f.reason
        ),
        ("ignored", _) => "ignored by [[tools]] (removed from the sequence)".to_string(),
        ("transient", _) => {
            "transient error (transient_errors): counts toward no pattern".to_string()
        }
        ("no_arguments", _) => "arguments not captured (part of no pattern)".to_string(),
        ("below_threshold", _) => counts("below threshold: "),
        ("text_streak", _) => counts("below threshold: "),
        ("tool_call_response", _) => "(text streak reset)".to_string(),
        ("result_span", _) => "result span of the call before it (no call of its own)".to_string(),
        ("outer_response", _) => {
            "the span of it nested in this one is the response (not counted)".to_string()
        }
        (other, _) => other.to_string(),
    };
    let mut line = verdict;
    if let Some(effect) = step.effect.filter(|e| *e != "reads") {
        line.push_str(&format!(" [{effect} state]"));
    }
    line
}
