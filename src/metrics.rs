//! Prometheus metrics (`/metrics`, text exposition format via `prometheus-client`).
//!
//! Live metrics (detections, forward latency) are recorded as they happen; counters kept
//! by the other modules as atomics (receiver, forwarder, registry, engine, signal sinks) are
//! read at scrape time.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

use crate::registry::RunDetection;

/// Labels of `loopwatch_detections_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DetectionLabels {
    pub profile: String,
    pub pattern: String,
    pub severity: String,
}

/// Labels of `loopwatch_signals_published_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignalLabels {
    pub profile: String,
    /// `warn` or `kill`.
    pub action: String,
}

/// Metrics recorded as events happen.
pub struct Metrics {
    pub detections: Family<DetectionLabels, Counter>,
    /// Signals handed to the hub (before any sink), by profile and action: what every
    /// sink should eventually deliver, with or without sinks configured.
    pub signals_published: Family<SignalLabels, Counter>,
    /// Seconds from dequeue to the downstream's answer, per delivered request.
    pub forward_latency: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            detections: Family::default(),
            signals_published: Family::default(),
            forward_latency: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
        }
    }
}

impl Metrics {
    /// Counts a detection under its profile, pattern and severity.
    pub fn record_detection(&self, d: &RunDetection) {
        self.detections
            .get_or_create(&DetectionLabels {
                profile: d.profile.name.clone(),
                pattern: d.detection.pattern.as_str().into(),
                severity: d.detection.severity.as_str().into(),
            })
            .inc();
    }

    /// Counts a signal handed to the hub.
    pub fn record_signal(&self, signal: &crate::signals::Signal) {
        self.signals_published
            .get_or_create(&SignalLabels {
                profile: signal.profile.clone(),
                action: signal.action.clone(),
            })
            .inc();
    }
}

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

/// Renders every metric in the OpenMetrics text format (Prometheus scrapes it).
///
/// Counter names end in `_total` on the wire (the encoder adds the suffix).
pub fn render(state: &crate::api::AdminState) -> Result<String, std::fmt::Error> {
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
            "Tool calls whose arguments were not captured (invisible to argument-based patterns)",
            &es.tool_calls_without_arguments,
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
        ],
    );
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
        gauge(
            &mut r,
            "forward_queue_depth",
            "Requests waiting in the forward queue",
            fs.queue_depth() as i64,
        );
        r.register(
            "forward_latency_seconds",
            "Downstream export latency per delivered request",
            state.metrics.forward_latency.clone(),
        );
    }
    r.register(
        "signals_published",
        "Signals published (warn/kill detections of profiles with signals on), by profile and action",
        state.metrics.signals_published.clone(),
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
    let depth: Family<Labels, Gauge> = Family::default();
    for s in &sinks {
        depth
            .get_or_create(&label("sink", s.sink))
            .set(s.queue_depth as i64);
    }
    r.register("signal_queue_depth", "Signals waiting per sink", depth);
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &r)?;
    Ok(out)
}
