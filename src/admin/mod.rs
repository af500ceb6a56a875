//! HTTP admin API (DESIGN §7, axum): run queries, signals, Prometheus metrics and health.
//!
//! - `GET /v1/traces/{trace_id}/loops` → `{"data":[{"fingerprint","hits","step_indices","tool_name"}]}`
//! - `GET /v1/runs?looping=true&service=…&agent=…&limit=N` → recent runs with their detections
//! - `GET /v1/runs/{run_key}` → one run's steps, detections and trace links ([`run_detail`])
//! - `GET /v1/summary` → runs, loop runs, loop rate, detections by pattern, per service and agent
//! - `GET /v1/fleet?service=…&agent=…` → the fleet view of the matching (service, agent) groups
//! - `GET /v1/signals?trace_id=…&since=…` → recent signals
//! - `GET /ui` → the built-in fleet page ([`crate::admin::ui`]), `POST /ui/login`, `POST /ui/logout`
//!
//! With `admin.auth_token` set, [`access::protect`] guards every route but the probes and
//! the login form: the bearer token, or a `/ui` session cookie ([`session`]) for reads.
//! - `GET /metrics` (OpenMetrics or Prometheus text 0.0.4, by `Accept`), `GET /healthz` (alive), `GET /readyz` (local state
//!   only: serving, listeners up, forward queue below its high-water mark)

pub mod access;
pub mod run_detail;
pub mod session;
pub mod ui;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::engine::report::DetectionRecord;
use crate::engine::Engine;
use crate::forward::stats::ForwarderStats;
use crate::metrics::Metrics;
use crate::net::api_error::{json_error as error, ApiQuery};
use crate::receiver::stats::ReceiverStats;
use crate::registry::RunSummary;
use crate::signals::SignalHub;

/// What the admin handlers read.
#[derive(Clone)]
pub struct AdminState {
    pub engine: Arc<Engine>,
    pub signals: SignalHub,
    pub metrics: Arc<Metrics>,
    pub receiver_stats: Arc<ReceiverStats>,
    pub forwarder: Option<Arc<ForwarderStats>>,
    /// The forward queue (for readiness), when forwarding.
    pub forward_queue: Option<crate::forward::ForwardQueue>,
    /// Downstream reachability (`loopwatch_exporter_up`), when forwarding.
    pub exporter_health: Option<Arc<crate::forward::DownstreamHealth>>,
    /// False once shutdown began or a listener stopped.
    pub ready: Arc<AtomicBool>,
    /// `[limits]` state, for its gauges.
    pub limits: Option<Arc<crate::ingest::limits::Limits>>,
    /// Detections waiting for the reporter task (its drops are a counter).
    pub reports: Option<Arc<crate::pipeline::reporter::ReportQueue>>,
    /// `[log.sampling]` (its left-out lines are a counter).
    pub log_sampling: Option<Arc<crate::pipeline::log_sampling::DetectionLogSampler>>,
    /// The admin token and the `/ui` login sessions, when `admin.auth_token` is set.
    pub auth: Option<Arc<access::AdminAuth>>,
    /// `[ui] trace_url`: links from a run to its traces.
    pub trace_url: Option<crate::net::trace_url::TraceUrl>,
}

impl AdminState {
    /// The counters and live metrics `/metrics` renders.
    pub fn metric_sources(&self) -> crate::metrics::MetricSources<'_> {
        crate::metrics::MetricSources {
            engine: &self.engine,
            signals: &self.signals,
            metrics: &self.metrics,
            receiver_stats: &self.receiver_stats,
            forwarder: self.forwarder.as_deref(),
            exporter_health: self.exporter_health.as_deref(),
            limits: self.limits.as_deref(),
            reports: self
                .reports
                .as_deref()
                .map(|queue| crate::metrics::ReportQueueFigures {
                    dropped: queue.dropped(),
                    queued: queue.len(),
                }),
            log_lines_suppressed: self.log_sampling.as_deref().map(|s| s.left_out()),
        }
    }
}

/// The admin router.
pub fn router(state: AdminState) -> Router {
    Router::new()
        .route("/v1/traces/{trace_id}/loops", get(trace_loops))
        .route("/v1/runs", get(runs))
        .route("/v1/runs/{run_key}", get(run_detail::run_detail))
        .route("/v1/summary", get(summary))
        .route("/v1/fleet", get(fleet))
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .merge(crate::admin::ui::router())
        .with_state(state.clone())
        .merge(crate::signals::http::router(state.signals.clone()))
        .merge(crate::guard::http::router(crate::guard::http::GuardState {
            engine: state.engine.clone(),
            approvals: crate::guard::approval::Approvals {
                signals: Some(state.signals.clone()),
                metrics: state.metrics.clone(),
            },
        }))
}

/// One repeated call fingerprint of a run.
#[derive(Serialize, Deserialize, Debug, PartialEq, Eq)]
pub struct LoopEntry {
    /// External fingerprint: lowercase hex HMAC-SHA256 under `fingerprint_key` (DESIGN §3).
    pub fingerprint: String,
    pub hits: usize,
    /// Ascending 1-based tool-call ordinals (start order).
    pub step_indices: Vec<usize>,
    pub tool_name: String,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct Data<T> {
    pub data: T,
}

/// Whether `id` is a trace id as W3C Trace Context and OTLP spell it: 32 hex characters
/// (either case: OTLP/JSON and `traceparent` readers accept both).
fn is_trace_id(id: &str) -> bool {
    id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `400` for an id that is not 32 hex characters (no trace could have it), `404` for a
/// well-formed id no run has.
async fn trace_loops(
    State(state): State<AdminState>,
    trace_id: Result<Path<String>, axum::extract::rejection::PathRejection>,
) -> Response {
    let trace_id = match trace_id {
        Ok(Path(id)) => id,
        Err(rejection) => return error(rejection.status(), &rejection.body_text()),
    };
    if !is_trace_id(&trace_id) {
        return error(
            StatusCode::BAD_REQUEST,
            &format!("trace id {trace_id:?} is not 32 hex characters"),
        );
    }
    let registry = &state.engine.registry;
    let key = registry.run_key_for_trace(&trace_id.to_ascii_lowercase());
    match key.and_then(|key| registry.repeated_calls(&key)) {
        None => error(StatusCode::NOT_FOUND, &format!("unknown trace {trace_id}")),
        Some(calls) => Json(Data {
            data: calls
                .into_iter()
                .map(|c| LoopEntry {
                    fingerprint: state.engine.fingerprint_key.hex(&c.fingerprint),
                    hits: c.step_indices.len(),
                    step_indices: c.step_indices,
                    tool_name: c.tool_name.to_string(),
                })
                .collect::<Vec<_>>(),
        })
        .into_response(),
    }
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct RunsQuery {
    looping: Option<bool>,
    /// Only runs of this `service.name` (`unknown`: runs without one).
    service: Option<String>,
    /// Only runs of this agent name (`unknown`: runs without one).
    agent: Option<String>,
    limit: Option<usize>,
}

/// True when `name` (absent = `unknown`) is `wanted`, or nothing is wanted.
fn name_matches(wanted: Option<&str>, name: Option<&str>) -> bool {
    wanted.is_none_or(|w| w == name.unwrap_or(crate::metrics::fleet::UNKNOWN))
}

/// A run as `/v1/runs` lists it.
#[derive(Serialize, Deserialize, Debug)]
pub struct ApiRun {
    pub run_key: String,
    pub service_name: Option<String>,
    pub agent_name: Option<String>,
    pub tool_calls: usize,
    /// Seconds since the run's last span arrived.
    pub idle_seconds: f64,
    pub looping: bool,
    pub detections: Vec<DetectionRecord>,
}

/// A run loops when it has a warn or kill detection (info = progress).
pub(crate) fn is_looping(run: &RunSummary) -> bool {
    run.detections
        .iter()
        .any(|d| d.detection.severity != crate::detector::Severity::Info)
}

async fn runs(State(state): State<AdminState>, ApiQuery(query): ApiQuery<RunsQuery>) -> Response {
    let mut runs = state.engine.registry.runs();
    runs.sort_by_key(|r| std::cmp::Reverse(r.last_seen));
    let limit = query.limit.unwrap_or(100);
    let data: Vec<ApiRun> = runs
        .iter()
        .filter(|r| query.looping.is_none_or(|l| is_looping(r) == l))
        .filter(|r| name_matches(query.service.as_deref(), r.service_name.as_deref()))
        .filter(|r| name_matches(query.agent.as_deref(), r.agent_name.as_deref()))
        .take(limit)
        .map(|r| ApiRun {
            run_key: r.run_key.to_string(),
            service_name: r.service_name.as_deref().map(str::to_string),
            agent_name: r.agent_name.as_deref().map(str::to_string),
            tool_calls: r.tool_calls,
            idle_seconds: r.last_seen.elapsed().as_secs_f64(),
            looping: is_looping(r),
            detections: r.detections.iter().map(DetectionRecord::from).collect(),
        })
        .collect();
    Json(Data { data }).into_response()
}

/// Loop counts of a group of runs.
#[derive(Serialize, Deserialize, Debug, Default, PartialEq)]
pub struct LoopRate {
    pub runs: usize,
    pub loop_runs: usize,
    /// loop_runs / runs (0 when there are no runs).
    pub loop_rate: f64,
}

impl LoopRate {
    fn add(&mut self, looping: bool) {
        self.runs += 1;
        self.loop_runs += usize::from(looping);
        self.loop_rate = self.loop_runs as f64 / self.runs as f64;
    }
}

/// `/v1/summary`.
#[derive(Serialize, Deserialize, Debug, Default)]
pub struct Summary {
    #[serde(flatten)]
    pub total: LoopRate,
    /// Detections by pattern (all profiles, all severities).
    pub detections_by_pattern: BTreeMap<String, usize>,
    /// Detections by severity.
    pub detections_by_severity: BTreeMap<String, usize>,
    pub by_service: BTreeMap<String, LoopRate>,
    pub by_agent: BTreeMap<String, LoopRate>,
    /// Runs, loop runs and loop rate per service and agent for the last window and the
    /// one before, per one-minute bucket, and kills by reason ([`crate::metrics::fleet`]).
    #[serde(default)]
    pub fleet: crate::metrics::fleet::FleetView,
}

async fn summary(State(state): State<AdminState>) -> Json<Summary> {
    let mut s = Summary::default();
    for run in state.engine.registry.runs() {
        let looping = is_looping(&run);
        s.total.add(looping);
        s.by_service
            .entry(run.service_name.as_deref().unwrap_or("unknown").to_string())
            .or_default()
            .add(looping);
        s.by_agent
            .entry(run.agent_name.as_deref().unwrap_or("unknown").to_string())
            .or_default()
            .add(looping);
        for d in &run.detections {
            *s.detections_by_pattern
                .entry(d.detection.pattern.as_str().into())
                .or_default() += 1;
            *s.detections_by_severity
                .entry(d.detection.severity.as_str().into())
                .or_default() += 1;
        }
    }
    let now = crate::metrics::fleet::now_unix();
    let fleet = &state.metrics.fleet;
    fleet.sample(&state.engine.registry, now);
    s.fleet = fleet.view(now);
    Json(s)
}

/// `/v1/fleet?service=…&agent=…`: the fleet view ([`crate::metrics::fleet::FleetView`]) of
/// the groups matching both (either absent = any).
async fn fleet(
    State(state): State<AdminState>,
    ApiQuery(filter): ApiQuery<FleetQuery>,
) -> Json<crate::metrics::fleet::FleetView> {
    let now = crate::metrics::fleet::now_unix();
    let fleet = &state.metrics.fleet;
    fleet.sample(&state.engine.registry, now);
    Json(fleet.view_of(
        now,
        &crate::metrics::fleet::GroupFilter {
            service: filter.service,
            agent: filter.agent,
        },
    ))
}

#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct FleetQuery {
    service: Option<String>,
    agent: Option<String>,
}

/// OpenMetrics when the `Accept` header asks for it (Prometheus does), else the Prometheus
/// text format 0.0.4 ([`crate::metrics::exposition`]).
async fn metrics(State(state): State<AdminState>, headers: header::HeaderMap) -> Response {
    let accept = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok());
    let format = crate::metrics::exposition::negotiate(accept);
    match crate::metrics::render(&state.metric_sources()) {
        Ok(text) => {
            let body = match format {
                crate::metrics::exposition::Format::OpenMetrics => text,
                crate::metrics::exposition::Format::Text => {
                    crate::metrics::exposition::openmetrics_to_text(&text)
                }
            };
            (
                [
                    (header::CONTENT_TYPE, format.content_type()),
                    (header::VARY, "Accept"),
                ],
                body,
            )
                .into_response()
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// Share of the forward queue's slots in use, or of its byte bound held, at which `/readyz`
/// answers 503 (90 %).
pub const READY_QUEUE_HIGH_WATER: f64 = 0.9;

/// Readiness from local state only (issue 10): not shutting down, every listener serving,
/// the persistent queue (if any) able to write (issue 31), and the forward queue below
/// [`READY_QUEUE_HIGH_WATER`]. Downstream reachability is the
/// `loopwatch_exporter_up` gauge instead, so a collector outage does not take every
/// sidecar out of its Service.
async fn readyz(State(state): State<AdminState>) -> Response {
    if !state.ready.load(Ordering::Relaxed) {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "not serving (shutting down or a listener stopped)",
        );
    }
    if let Some(queue) = &state.forward_queue {
        if let Some(fault) = queue.storage_fault() {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!(
                    "persistent forward queue cannot write ({fault}); requests are refused (retryable) until it heals, tried every second"
                ),
            );
        }
        let used = queue.len() as f64 / queue.capacity().max(1) as f64;
        if used >= READY_QUEUE_HIGH_WATER {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!(
                    "forward queue {} of {} slots in use (high-water mark {:.0} %)",
                    queue.len(),
                    queue.capacity(),
                    READY_QUEUE_HIGH_WATER * 100.0
                ),
            );
        }
        let held = queue.pending_bytes() as f64 / queue.max_bytes().max(1) as f64;
        if held >= READY_QUEUE_HIGH_WATER {
            return error(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!(
                    "forward queue holds {} of {} bytes (high-water mark {:.0} %)",
                    queue.pending_bytes(),
                    queue.max_bytes(),
                    READY_QUEUE_HIGH_WATER * 100.0
                ),
            );
        }
    }
    (StatusCode::OK, "ready\n").into_response()
}
