//! `GET /v1/runs/{run_key}?limit=N`: one run's drill-down (docs/api.md, "One run"): its
//! kept events in order with times, tool names and short fingerprints (never argument,
//! result or text content), what each did in each profile (the `loopwatch explain`
//! verdict), every detection with its occurrence and `loop.reason`, and a link per trace
//! to the user's tracing UI when `[ui] trace_url` is set.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};

use crate::admin::{is_looping, AdminState};
use crate::annotate::reason;
use crate::conventions::event::span_of_call;
use crate::engine::report::DetectionRecord;
use crate::net::api_error::{json_error as error, ApiPath, ApiQuery};
use crate::otlp::hex_id;
use crate::registry::RunDetection;

/// Steps listed when the query sets no `limit`.
pub const DEFAULT_STEP_LIMIT: usize = 1000;

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub(crate) struct RunQuery {
    limit: Option<usize>,
}

/// `GET /v1/runs/{run_key}` → `{"data": RunDetail}`.
#[derive(Serialize, Deserialize, Debug)]
pub struct RunDetail {
    pub run_key: String,
    pub service_name: Option<String>,
    pub agent_name: Option<String>,
    /// Tool calls of the run, forgotten ones (past `registry.max_events_per_run`) included.
    pub tool_calls: usize,
    /// Seconds since the run's last span arrived.
    pub idle_seconds: f64,
    /// True with a warn or kill detection (as `/v1/runs`).
    pub looping: bool,
    /// The traces of the run's kept events, in the order first seen.
    pub traces: Vec<TraceLink>,
    /// Kept events not listed because of `limit` (the oldest are left out).
    pub steps_omitted: usize,
    /// The kept events, in sequence order (span start time), at most `limit` (default
    /// [`DEFAULT_STEP_LIMIT`]).
    pub steps: Vec<Step>,
    /// Every detection of the run in sequence order, then its `[budgets]` detections.
    pub detections: Vec<DetectionDetail>,
}

/// A trace of the run and its link in the user's tracing UI (`[ui] trace_url`; `null`
/// when unset).
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
pub struct TraceLink {
    /// 32 lowercase hex characters.
    pub trace_id: String,
    pub url: Option<String>,
}

/// One kept event of the run.
#[derive(Serialize, Deserialize, Debug)]
pub struct Step {
    /// 1-based position among the kept events.
    pub index: usize,
    /// `tool_call`, `text_response`, `tool_call_response` (a model response that asked for
    /// tool calls), `tool_result` (a call's result on a span of its own) or
    /// `outer_response` (a response traced twice; the nested span counts).
    pub kind: String,
    /// 1-based ordinal among the run's tool calls (forgotten ones included), as
    /// `/v1/traces/{trace_id}/loops` numbers steps; `null` for other kinds.
    pub call: Option<usize>,
    pub trace_id: String,
    /// The span (16 hex chars; the span of a call when one span records several).
    pub span_id: String,
    /// Span start and end, ns since the Unix epoch.
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub tool_name: Option<String>,
    /// Short fingerprints (16 hex chars, as `loop.fingerprints`) of the arguments, the
    /// result and a text response; `null` when not captured.
    pub arguments: Option<String>,
    pub result: Option<String>,
    pub text: Option<String>,
    /// Positions in `detections` of the detections this step is one of the calls of.
    pub detections: Vec<usize>,
    /// Profile name → what the step did there, in words (`loopwatch explain`'s verdict:
    /// `FIRED …`, `below threshold: repeated_call 2/3, …`, `ignored by [[tools]] …`).
    pub verdicts: BTreeMap<String, String>,
}

/// A detection with why it fired.
#[derive(Serialize, Deserialize, Debug)]
pub struct DetectionDetail {
    #[serde(flatten)]
    pub record: DetectionRecord,
    /// The `loop.reason` sentence, e.g. "fetch_url returned the same result 3 times in a
    /// row for the same arguments".
    pub reason: String,
    /// End of the completing span, ns since the Unix epoch.
    pub time_unix_nano: u64,
    /// Spans of the calls that formed it (16 hex chars each), in start order.
    pub span_ids: Vec<String>,
    /// True for a `[budgets]` detection.
    pub budget: bool,
}

fn detail(d: &RunDetection, budget: bool) -> DetectionDetail {
    DetectionDetail {
        record: DetectionRecord::from(d),
        reason: reason(d),
        time_unix_nano: d.time_unix_nano,
        span_ids: d.span_ids.iter().map(|s| hex_id(s)).collect(),
        budget,
    }
}

fn kind(observation: &crate::detector::Observation) -> &'static str {
    use crate::detector::Observation as O;
    match observation {
        O::ToolCall { .. } => "tool_call",
        O::TextResponse { .. } => "text_response",
        O::ToolCallResponse => "tool_call_response",
        O::ToolResult { .. } => "tool_result",
        O::OuterResponse => "outer_response",
    }
}

/// 404 for a run loopwatch does not hold (never seen, or evicted).
pub(crate) async fn run_detail(
    State(state): State<AdminState>,
    ApiPath(run_key): ApiPath<String>,
    ApiQuery(query): ApiQuery<RunQuery>,
) -> Response {
    let engine = &state.engine;
    let registry = &engine.registry;
    let (Some(summary), Some(events)) = (registry.run(&run_key), registry.events(&run_key)) else {
        return error(StatusCode::NOT_FOUND, &format!("unknown run {run_key:?}"));
    };
    let mut detections: Vec<DetectionDetail> = summary
        .detections
        .iter()
        .map(|d| detail(d, false))
        .collect();
    if let Some(budgets) = &engine.budgets {
        detections.extend(budgets.detections(&run_key).iter().map(|d| detail(d, true)));
    }
    // Verdicts per profile, by span id (the explanation reads the events again: a span
    // arriving in between is listed without one).
    let mut verdicts: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
    let explained = crate::cli::explain::explain_run(engine, &run_key, None);
    for profile in explained.profiles {
        for step in &profile.steps {
            verdicts.entry(step.span_id.clone()).or_default().insert(
                profile.profile.clone(),
                crate::cli::explain::verdict_text(step),
            );
        }
    }
    // Span id → the detections it is one of the calls of.
    let mut members: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (n, d) in detections.iter().enumerate() {
        for span in &d.span_ids {
            members.entry(span.clone()).or_default().push(n);
        }
    }
    let short = |fp: &crate::fingerprint::Fingerprint| engine.fingerprint_key.short(fp);
    let kept_calls = events
        .iter()
        .filter(|e| matches!(e.observation, crate::detector::Observation::ToolCall { .. }))
        .count();
    let mut ordinal = summary.tool_calls.saturating_sub(kept_calls);
    let mut traces: Vec<TraceLink> = Vec::new();
    let trace_url = state.trace_url.as_ref();
    let mut steps = Vec::with_capacity(events.len());
    for (i, event) in events.iter().enumerate() {
        let trace_id = hex_id(&event.trace_id);
        if !traces.iter().any(|t| t.trace_id == trace_id) {
            traces.push(TraceLink {
                url: trace_url.map(|t| t.for_trace(&trace_id)),
                trace_id: trace_id.clone(),
            });
        }
        let span = span_of_call(&event.span_id);
        let span_hex = hex_id(span);
        let mut step = Step {
            index: i + 1,
            kind: kind(&event.observation).to_string(),
            call: None,
            trace_id,
            span_id: span_hex.clone(),
            start_time_unix_nano: event.start_time_unix_nano,
            end_time_unix_nano: event.end_time_unix_nano,
            tool_name: None,
            arguments: None,
            result: None,
            text: None,
            detections: members.get(&span_hex).cloned().unwrap_or_default(),
            verdicts: verdicts.remove(&hex_id(&event.span_id)).unwrap_or_default(),
        };
        use crate::detector::Observation as O;
        match &event.observation {
            O::ToolCall {
                tool_name,
                call_fingerprint,
                result_fingerprint,
                ..
            } => {
                ordinal += 1;
                step.call = Some(ordinal);
                step.tool_name = Some(tool_name.to_string());
                step.arguments = call_fingerprint.as_ref().map(short);
                step.result = result_fingerprint.as_ref().map(short);
            }
            O::ToolResult {
                tool_name,
                result_fingerprint,
                ..
            } => {
                step.tool_name = Some(tool_name.to_string());
                step.result = Some(short(result_fingerprint));
            }
            O::TextResponse { text_fingerprint } => step.text = Some(short(text_fingerprint)),
            O::ToolCallResponse | O::OuterResponse => {}
        }
        steps.push(step);
    }
    let limit = query.limit.unwrap_or(DEFAULT_STEP_LIMIT);
    let steps_omitted = steps.len().saturating_sub(limit);
    steps.drain(..steps_omitted);
    Json(crate::admin::Data {
        data: RunDetail {
            run_key: summary.run_key.to_string(),
            service_name: summary.service_name.as_deref().map(str::to_string),
            agent_name: summary.agent_name.as_deref().map(str::to_string),
            tool_calls: summary.tool_calls,
            idle_seconds: summary.last_seen.elapsed().as_secs_f64(),
            looping: is_looping(&summary),
            traces,
            steps_omitted,
            steps,
            detections,
        },
    })
    .into_response()
}
