//! The `/metrics` exposition: every metric registered at scrape time from the live
//! families and the atomics the other modules keep.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use super::{process, Metrics};

use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(String, String)>;

fn counter(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let c: Counter = Counter::default();
    c.inc_by(value);
    registry.register(name, help, c);
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: i64) {
    let g: Gauge = Gauge::default();
    g.set(value);
    registry.register(name, help, g);
}

/// `(info, warn, kill)` counts as `severity`-labelled values.
fn by_severity((info, warn, kill): (u64, u64, u64)) -> Vec<(Labels, u64)> {
    crate::detector::Severity::ALL
        .into_iter()
        .zip([info, warn, kill])
        .map(|(severity, n)| (label("severity", severity.as_str()), n))
        .collect()
}

fn labelled_counter(registry: &mut Registry, name: &str, help: &str, values: Vec<(Labels, u64)>) {
    let family: Family<Labels, Counter> = Family::default();
    for (labels, v) in values {
        family.get_or_create(&labels).inc_by(v);
    }
    registry.register(name, help, family);
}

fn label(k: &str, v: &str) -> Labels {
    vec![(k.to_string(), v.to_string())]
}

/// What [`render`] reads: the live [`Metrics`] and the counters other modules keep. Built by
/// the admin API (or anything else that exposes metrics) from its own state, so this module
/// does not depend on the API.
#[derive(Clone, Copy)]
pub struct MetricSources<'a> {
    pub engine: &'a crate::engine::Engine,
    pub signals: &'a crate::signals::SignalHub,
    pub metrics: &'a Metrics,
    pub receiver_stats: &'a crate::receiver::stats::ReceiverStats,
    /// `None` in detect-only mode (no forward metrics are rendered).
    pub forwarder: Option<&'a crate::forward::stats::ForwarderStats>,
    /// Downstream reachability, when forwarding.
    pub exporter_health: Option<&'a crate::forward::DownstreamHealth>,
    /// Memory limiter and decoded-bytes budget (`None`: not rendered).
    pub limits: Option<&'a crate::ingest::limits::Limits>,
    /// The detection report queue's figures (`None`: not rendered).
    pub reports: Option<ReportQueueFigures>,
    /// `loop detected` lines `[log.sampling]` left out, by severity: info, warn, kill
    /// (`None`: not rendered).
    pub log_lines_suppressed: Option<(u64, u64, u64)>,
}

/// What the detection report queue (`pipeline::reporter`) shows on `/metrics`: passed as
/// figures so this module does not depend on the span path.
#[derive(Clone, Copy, Debug, Default)]
pub struct ReportQueueFigures {
    /// Detections dropped because the queue was full, by severity: info, warn, kill.
    pub dropped: (u64, u64, u64),
    /// Detections waiting for the reporter task.
    pub queued: usize,
}

/// Renders every metric in the OpenMetrics text format (Prometheus scrapes it;
/// [`crate::metrics::exposition::openmetrics_to_text`] makes the text format 0.0.4 of it).
///
/// Counter names end in `_total` on the wire (the encoder adds the suffix).
///
/// # Errors
/// A formatting error from the encoder (writing to a `String` does not fail in practice).
pub fn render(state: &MetricSources<'_>) -> Result<String, std::fmt::Error> {
    use std::sync::atomic::Ordering::Relaxed;
    let mut r = Registry::with_prefix("loopwatch");
    let rs = &state.receiver_stats;
    counter(
        &mut r,
        "spans_received",
        "Spans accepted by the OTLP receivers",
        rs.accepted_spans(),
    );
    counter(
        &mut r,
        "requests_received",
        "Export requests accepted by the OTLP receivers",
        rs.accepted_requests(),
    );
    counter(
        &mut r,
        "otlp_strings_replaced",
        "OTLP/JSON strings with invalid UTF-8 or a lone surrogate escape read with U+FFFD (the request accepted, with a partial_success warning)",
        rs.replaced_strings(),
    );
    counter(
        &mut r,
        "otlp_json_unknown_fields",
        "Fields in OTLP/JSON requests that OTLP does not define (ignored)",
        rs.otlp_json_unknown_fields.total(),
    );
    use crate::receiver::stats::RejectReason;
    labelled_counter(
        &mut r,
        "spans_rejected",
        "Spans refused by the receivers, by reason",
        RejectReason::ALL
            .iter()
            .map(|reason| (label("reason", reason.as_str()), rs.rejected_spans(*reason)))
            .collect(),
    );
    labelled_counter(
        &mut r,
        "requests_rejected",
        "Export requests refused by the receivers, by reason",
        RejectReason::ALL
            .iter()
            .map(|reason| {
                (
                    label("reason", reason.as_str()),
                    rs.rejected_requests(*reason),
                )
            })
            .collect(),
    );
    let es = &state.engine.stats;
    let engine_counters = [
        ("spans_processed", "Spans read by the detection path", &es.spans_seen),
        ("tool_calls", "Tool-call spans seen", &es.tool_calls),
        (
            "tool_calls_without_arguments",
            "Tool calls whose arguments were not captured on any of their spans, counted once per call after merging (invisible to argument-based patterns)",
            &state.engine.registry.stats().tool_calls_without_arguments,
        ),
        (
            "model_responses",
            "Inference spans with a captured response",
            &es.model_responses,
        ),
        (
            "spans_without_run",
            "Tool/inference spans with an invalid trace_id and no run-key attribute (forwarded, not detected)",
            &es.spans_without_run,
        ),
        (
            "spans_annotated",
            "Spans that received loop.* attributes",
            &es.spans_annotated,
        ),
        (
            "synthetic_spans",
            "Synthetic loop.detected spans forwarded for detections completed by spans forwarded earlier",
            &es.synthetic_spans,
        ),
    ];
    for (name, help, value) in engine_counters {
        counter(&mut r, name, help, value.load(Relaxed));
    }
    r.register(
        "detections",
        "Loop detections by profile, pattern and severity",
        state.metrics.detections.clone(),
    );
    let registry = &state.engine.registry;
    gauge(
        &mut r,
        "runs_active",
        "Runs tracked now",
        registry.run_count() as i64,
    );
    let gs = registry.stats();
    labelled_counter(
        &mut r,
        "runs_evicted",
        "Runs dropped from memory, by cause",
        vec![
            (label("cause", "idle"), gs.runs_evicted_idle.load(Relaxed)),
            (
                label("cause", "capacity"),
                gs.runs_evicted_capacity.load(Relaxed),
            ),
            (label("cause", "bytes"), gs.runs_evicted_bytes.load(Relaxed)),
        ],
    );
    gauge(
        &mut r,
        "runs_state_bytes",
        "Estimated bytes of all run state (registry.max_bytes bounds it)",
        registry.state_bytes() as i64,
    );
    if let Some(reports) = state.reports {
        labelled_counter(
            &mut r,
            "detection_reports_dropped",
            "Detections whose log line and signal were dropped because the report queue was full (least severe first; annotation and counters unaffected), by severity",
            by_severity(reports.dropped),
        );
        gauge(
            &mut r,
            "detection_reports_queued",
            "Detections waiting for the reporter task (log line and signal)",
            reports.queued as i64,
        );
    }
    if let Some(suppressed) = state.log_lines_suppressed {
        labelled_counter(
            &mut r,
            "detection_log_lines_suppressed",
            "loop detected log lines not written by log.sampling (the detections are still annotated, counted and, when warn or kill, signalled), by severity",
            by_severity(suppressed),
        );
    }
    if let Some(limits) = state.limits {
        gauge(
            &mut r,
            "memory_rss_bytes",
            "Resident set size of the process, as the memory limiter last read it",
            limits.memory.rss_bytes() as i64,
        );
        gauge(
            &mut r,
            "memory_soft_limit_bytes",
            "RSS above which new requests are refused (limits.memory_mib - limits.memory_spike_mib); 0 when off",
            limits.memory.soft_limit_bytes().unwrap_or(0) as i64,
        );
        gauge(
            &mut r,
            "decoded_bytes_in_flight",
            "Decompressed request bytes being decoded and processed (limits.max_decoded_bytes_in_flight bounds it)",
            limits.in_flight.in_use_bytes() as i64,
        );
    }
    counter(
        &mut r,
        "duplicate_spans",
        "Spans seen again in their run (exporter retries), counted once",
        gs.duplicate_spans.load(Relaxed),
    );
    if let Some(fs) = &state.forwarder {
        let forward_counters = [
            (
                "spans_forwarded",
                "Spans delivered to the downstream exporter endpoint",
                fs.forwarded_spans(),
            ),
            (
                "requests_forwarded",
                "Requests delivered downstream",
                fs.forwarded_requests(),
            ),
            ("forward_retries", "Retried export attempts", fs.retries()),
            (
                "forward_downstream_rejected_spans",
                "Spans the downstream reported rejecting in an accepted export (OTLP partial_success.rejected_spans)",
                fs.downstream_rejected_spans(),
            ),
        ];
        for (name, help, value) in forward_counters {
            counter(&mut r, name, help, value);
        }
        use crate::forward::stats::DropReason;
        labelled_counter(
            &mut r,
            "spans_dropped",
            "Spans given up on after acceptance, by reason",
            DropReason::ALL
                .iter()
                .map(|d| (label("reason", d.as_str()), fs.dropped_spans(*d)))
                .collect(),
        );
        let forward_gauges = [
            (
                "forward_queue_depth",
                "Requests waiting in the forward queue",
                fs.queue_depth(),
            ),
            (
                "forward_in_flight",
                "Requests in an export RPC now",
                fs.in_flight(),
            ),
            (
                "forward_in_backoff",
                "Requests waiting out a retry backoff (holding no delivery slot)",
                fs.in_backoff(),
            ),
            (
                "forward_pending_spans",
                "Spans accepted and not yet delivered or given up",
                fs.pending_spans(),
            ),
            (
                "forward_pending_bytes",
                "Bytes of the requests accepted and not yet delivered or given up (bounded by exporter.queue.max_bytes)",
                fs.pending_bytes(),
            ),
        ];
        for (name, help, value) in forward_gauges {
            gauge(&mut r, name, help, i64::try_from(value).unwrap_or(i64::MAX));
        }
        counter(
            &mut r,
            "forward_exports",
            "Successful export RPCs (a batch of queued requests is one)",
            fs.exports(),
        );
        gauge(
            &mut r,
            "forward_queue_capacity",
            "Requests the forward queue holds at most (exporter.queue_capacity)",
            state.metrics.forward_queue_capacity.load(Relaxed) as i64,
        );
        gauge(
            &mut r,
            "forward_queue_max_bytes",
            "Bytes the forward queue holds at most (exporter.queue.max_bytes)",
            i64::try_from(state.metrics.forward_queue_max_bytes.load(Relaxed)).unwrap_or(i64::MAX),
        );
        r.register(
            "forward_latency_seconds",
            "Downstream export latency per successful export RPC (one batch of requests)",
            state.metrics.forward_latency.clone(),
        );
    }
    if let Some(health) = state.exporter_health {
        gauge(
            &mut r,
            "exporter_up",
            "1 when the last export attempt or idle probe reached the downstream, else 0",
            health.up(),
        );
    }
    r.register(
        "signals_published",
        "Signals published (warn/kill/require_approval detections of profiles with signals on), by profile and action",
        state.metrics.signals_published.clone(),
    );
    r.register(
        "ingest_lag_seconds",
        "Seconds from the end of a request's latest tool span to its arrival, by service.name",
        state.metrics.ingest_lag.histogram.clone(),
    );
    r.register(
        "approvals",
        "Answers to require_approval signals (POST /v1/runs/{key}/approve or /deny), by decision",
        state.metrics.approvals.clone(),
    );
    let sinks = state.signals.stats();
    let signal_values = sinks
        .iter()
        .flat_map(|s| {
            [
                ("delivered", s.delivered),
                ("failed_attempt", s.failed_attempts),
                ("dropped", s.dropped),
                ("rejected", s.rejected),
                ("coalesced", s.coalesced),
            ]
            .into_iter()
            .map(|(outcome, value)| {
                let labels = vec![
                    ("sink".to_string(), s.sink.to_string()),
                    ("outcome".to_string(), outcome.to_string()),
                ];
                (labels, value)
            })
        })
        .collect();
    labelled_counter(
        &mut r,
        "signals",
        "Signals by sink and outcome",
        signal_values,
    );
    labelled_counter(
        &mut r,
        "signals_dropped",
        "Signals dropped because a sink queue was full, by sink and action (warnings go first)",
        sinks
            .iter()
            .flat_map(|s| {
                [
                    ("warn", s.dropped - s.dropped_kills.min(s.dropped)),
                    ("kill", s.dropped_kills),
                ]
                .map(|(action, value)| {
                    let labels = vec![
                        ("sink".to_string(), s.sink.to_string()),
                        ("action".to_string(), action.to_string()),
                    ];
                    (labels, value)
                })
            })
            .collect(),
    );
    let depth: Family<Labels, Gauge> = Family::default();
    for s in &sinks {
        depth
            .get_or_create(&label("sink", s.sink))
            .set(s.queue_depth as i64);
    }
    r.register("signal_queue_depth", "Signals waiting per sink", depth);
    let listeners = state.metrics.listeners();
    let open: Family<Labels, Gauge> = Family::default();
    for l in &listeners {
        open.get_or_create(&label("listener", l.name))
            .set(l.open.load(Relaxed) as i64);
    }
    r.register("connections_open", "Connections open per listener", open);
    labelled_counter(
        &mut r,
        "connections_evicted",
        "Connections closed to make room for a new client at the listener's max_connections (the one idle longest)",
        listeners
            .iter()
            .map(|l| (label("listener", l.name), l.evicted.load(Relaxed)))
            .collect(),
    );
    render_fleet(&mut r, state.metrics);
    state.metrics.config_reloads.register(&mut r);
    process::register_build_info(&mut r);
    let mut unprefixed = Registry::default();
    process::register_process(&mut unprefixed);
    let mut out = String::new();
    prometheus_client::encoding::text::encode_registry(&mut out, &r)?;
    prometheus_client::encoding::text::encode_registry(&mut out, &unprefixed)?;
    prometheus_client::encoding::text::encode_eof(&mut out)?;
    Ok(out)
}

/// The fleet view's counters: runs started and loop runs per service/agent, kills by
/// pattern, detections per service/agent/pattern/severity.
fn render_fleet(r: &mut Registry, metrics: &Metrics) {
    let group = |service: &str, agent: &str| {
        vec![
            ("service_name".to_string(), service.to_string()),
            ("gen_ai_agent_name".to_string(), agent.to_string()),
        ]
    };
    let totals = metrics.fleet.totals();
    labelled_counter(
        r,
        "runs_started",
        "Agent runs seen, by service.name and gen_ai.agent.name",
        totals
            .iter()
            .map(|(s, a, runs, _)| (group(s, a), *runs))
            .collect(),
    );
    labelled_counter(
        r,
        "loop_runs",
        "Runs with a warn or kill detection, by service.name and gen_ai.agent.name",
        totals
            .iter()
            .map(|(s, a, _, loops)| (group(s, a), *loops))
            .collect(),
    );
    labelled_counter(
        r,
        "kills",
        "Kill detections (stop profile) by pattern",
        metrics
            .fleet
            .kills_total()
            .into_iter()
            .map(|(pattern, n)| (label("pattern", &pattern), n))
            .collect(),
    );
    r.register(
        "loop_detections",
        "Loop detections by service.name, gen_ai.agent.name, pattern and severity",
        metrics.loop_detections.clone(),
    );
}
