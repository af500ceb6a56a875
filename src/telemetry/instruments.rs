//! The instruments self-telemetry exports: every `/metrics` instrument under its OTel name
//! and unit, with the attributes its labels become.

use std::sync::Arc;

use super::observable::{by_severity, counter, gauge, kv, one};
use crate::admin::AdminState;
use opentelemetry::metrics::Meter;

/// The `/metrics` instruments, under OTel names.
pub(super) fn register(meter: &Meter, s: &Arc<AdminState>) {
    use crate::forward::stats::DropReason;
    use crate::receiver::stats::RejectReason;
    use std::sync::atomic::Ordering::Relaxed;
    counter(
        meter,
        s,
        "loopwatch.spans.received",
        "{span}",
        "Spans accepted by the OTLP receivers",
        |s| one(s.receiver_stats.accepted_spans()),
    );
    counter(
        meter,
        s,
        "loopwatch.requests.received",
        "{request}",
        "Export requests accepted by the OTLP receivers",
        |s| one(s.receiver_stats.accepted_requests()),
    );
    counter(
        meter,
        s,
        "loopwatch.spans.rejected",
        "{span}",
        "Spans refused by the receivers, by reason",
        |s| {
            RejectReason::ALL
                .iter()
                .map(|r| {
                    (
                        s.receiver_stats.rejected_spans(*r),
                        vec![kv("reason", r.as_str())],
                    )
                })
                .collect()
        },
    );
    counter(
        meter,
        s,
        "loopwatch.spans.processed",
        "{span}",
        "Spans read by the detection path",
        |s| one(s.engine.stats.spans_seen.load(Relaxed)),
    );
    counter(
        meter,
        s,
        "loopwatch.tool_calls",
        "{call}",
        "Tool-call spans seen",
        |s| one(s.engine.stats.tool_calls.load(Relaxed)),
    );
    counter(
        meter,
        s,
        "loopwatch.tool_calls.without_arguments",
        "{call}",
        "Tool calls whose arguments were not captured",
        |s| {
            one(s
                .engine
                .registry
                .stats()
                .tool_calls_without_arguments
                .load(Relaxed))
        },
    );
    counter(
        meter,
        s,
        "loopwatch.model_responses",
        "{response}",
        "Inference spans with a captured response",
        |s| one(s.engine.stats.model_responses.load(Relaxed)),
    );
    counter(
        meter,
        s,
        "loopwatch.spans.annotated",
        "{span}",
        "Spans that received loop.* attributes",
        |s| one(s.engine.stats.spans_annotated.load(Relaxed)),
    );
    counter(
        meter,
        s,
        "loopwatch.spans.synthetic",
        "{span}",
        "Synthetic loop.detected spans forwarded for detections completed by spans forwarded earlier",
        |s| one(s.engine.stats.synthetic_spans.load(Relaxed)),
    );
    counter(
        meter,
        s,
        "loopwatch.detections",
        "{detection}",
        "Loop detections by profile, pattern, severity, service.name and gen_ai.agent.name",
        |s| {
            s.metrics
                .detection_counts()
                .into_iter()
                .map(|((profile, pattern, severity, service, agent), n)| {
                    (
                        n,
                        vec![
                            kv("profile", &profile),
                            kv("pattern", pattern),
                            kv("severity", severity),
                            kv("service.name", &service),
                            kv("gen_ai.agent.name", &agent),
                        ],
                    )
                })
                .collect()
        },
    );
    gauge(
        meter,
        s,
        "loopwatch.runs.active",
        "{run}",
        "Runs tracked now",
        |s| one(s.engine.registry.run_count() as u64),
    );
    gauge(
        meter,
        s,
        "loopwatch.runs.state_bytes",
        "By",
        "Estimated bytes of all run state (registry.max_bytes bounds it)",
        |s| one(s.engine.registry.state_bytes()),
    );
    gauge(
        meter,
        s,
        "loopwatch.memory.rss",
        "By",
        "Resident set size of the process, as the memory limiter last read it",
        |s| {
            s.limits
                .as_ref()
                .map_or_else(Vec::new, |l| one(l.memory.rss_bytes()))
        },
    );
    gauge(
        meter,
        s,
        "loopwatch.memory.soft_limit",
        "By",
        "RSS above which new requests are refused (limits.memory_mib - limits.memory_spike_mib); 0 when off",
        |s| {
            s.limits.as_ref().map_or_else(Vec::new, |l| {
                one(l.memory.soft_limit_bytes().unwrap_or(0))
            })
        },
    );
    gauge(
        meter,
        s,
        "loopwatch.decoded_bytes.in_flight",
        "By",
        "Decompressed request bytes being decoded and processed",
        |s| {
            s.limits
                .as_ref()
                .map_or_else(Vec::new, |l| one(l.in_flight.in_use_bytes()))
        },
    );
    counter(
        meter,
        s,
        "loopwatch.runs.evicted",
        "{run}",
        "Runs dropped from memory, by cause",
        |s| {
            let g = s.engine.registry.stats();
            vec![
                (g.runs_evicted_idle.load(Relaxed), vec![kv("cause", "idle")]),
                (
                    g.runs_evicted_capacity.load(Relaxed),
                    vec![kv("cause", "capacity")],
                ),
                (
                    g.runs_evicted_bytes.load(Relaxed),
                    vec![kv("cause", "bytes")],
                ),
            ]
        },
    );
    counter(
        meter,
        s,
        "loopwatch.runs.started",
        "{run}",
        "Agent runs seen, by service.name and gen_ai.agent.name",
        |s| {
            s.metrics
                .fleet
                .totals()
                .into_iter()
                .map(|(svc, agent, runs, _)| {
                    (
                        runs,
                        vec![kv("service.name", &svc), kv("gen_ai.agent.name", &agent)],
                    )
                })
                .collect()
        },
    );
    counter(
        meter,
        s,
        "loopwatch.loop_runs",
        "{run}",
        "Runs with a warn or kill detection, by service.name and gen_ai.agent.name",
        |s| {
            s.metrics
                .fleet
                .totals()
                .into_iter()
                .map(|(svc, agent, _, loops)| {
                    (
                        loops,
                        vec![kv("service.name", &svc), kv("gen_ai.agent.name", &agent)],
                    )
                })
                .collect()
        },
    );
    counter(
        meter,
        s,
        "loopwatch.kills",
        "{detection}",
        "Kill detections by pattern",
        |s| {
            s.metrics
                .fleet
                .kills_total()
                .into_iter()
                .map(|(pattern, n)| (n, vec![kv("pattern", &pattern)]))
                .collect()
        },
    );
    counter(
        meter,
        s,
        "loopwatch.spans.forwarded",
        "{span}",
        "Spans delivered to the downstream exporter endpoint",
        |s| {
            s.forwarder
                .as_ref()
                .map_or_else(Vec::new, |f| one(f.forwarded_spans()))
        },
    );
    counter(
        meter,
        s,
        "loopwatch.spans.dropped",
        "{span}",
        "Spans given up on after acceptance, by reason",
        |s| {
            s.forwarder.as_ref().map_or_else(Vec::new, |f| {
                DropReason::ALL
                    .iter()
                    .map(|d| (f.dropped_spans(*d), vec![kv("reason", d.as_str())]))
                    .collect()
            })
        },
    );
    gauge(
        meter,
        s,
        "loopwatch.forward.queue.depth",
        "{request}",
        "Requests waiting in the forward queue",
        |s| {
            s.forwarder
                .as_ref()
                .map_or_else(Vec::new, |f| one(f.queue_depth()))
        },
    );
    gauge(
        meter,
        s,
        "loopwatch.forward.pending.bytes",
        "By",
        "Bytes of the requests accepted and not yet delivered or given up",
        |s| {
            s.forwarder
                .as_ref()
                .map_or_else(Vec::new, |f| one(f.pending_bytes()))
        },
    );
    gauge(
        meter,
        s,
        "loopwatch.forward.queue.capacity",
        "{request}",
        "Requests the forward queue holds at most",
        |s| {
            s.forwarder.as_ref().map_or_else(Vec::new, |_| {
                one(s.metrics.forward_queue_capacity.load(Relaxed))
            })
        },
    );
    counter(
        meter,
        s,
        "loopwatch.signals.published",
        "{signal}",
        "Signals published (warn/kill detections of profiles with signals on)",
        |s| one(s.metrics.signals_published_total()),
    );
    counter(
        meter,
        s,
        "loopwatch.signals",
        "{signal}",
        "Signals by sink and outcome",
        |s| {
            s.signals
                .stats()
                .iter()
                .flat_map(|st| {
                    [
                        ("delivered", st.delivered),
                        ("failed_attempt", st.failed_attempts),
                        ("dropped", st.dropped),
                        ("rejected", st.rejected),
                    ]
                    .map(|(outcome, n)| (n, vec![kv("sink", st.sink), kv("outcome", outcome)]))
                })
                .collect()
        },
    );
    counter(
        meter,
        s,
        "loopwatch.detection_reports.dropped",
        "{detection}",
        "Detections whose log line and signal were dropped because the report queue was full (least severe first), by severity",
        |s| {
            s.reports
                .as_ref()
                .map_or_else(Vec::new, |queue| by_severity(queue.dropped()))
        },
    );
    counter(
        meter,
        s,
        "loopwatch.detection_log_lines.suppressed",
        "{line}",
        "loop detected log lines not written by log.sampling (the detections are still annotated, counted and, when warn or kill, signalled), by severity",
        |s| {
            s.log_sampling
                .as_ref()
                .map_or_else(Vec::new, |sampler| by_severity(sampler.left_out()))
        },
    );
    counter(
        meter,
        s,
        "loopwatch.signals.dropped",
        "{signal}",
        "Signals dropped because a sink queue was full, by sink and action (warnings go first)",
        |s| {
            s.signals
                .stats()
                .iter()
                .flat_map(|st| {
                    [
                        ("warn", st.dropped - st.dropped_kills.min(st.dropped)),
                        ("kill", st.dropped_kills),
                    ]
                    .map(|(action, n)| (n, vec![kv("sink", st.sink), kv("action", action)]))
                })
                .collect()
        },
    );
    gauge(
        meter,
        s,
        "loopwatch.signal.queue.depth",
        "{signal}",
        "Signals waiting per sink",
        |s| {
            s.signals
                .stats()
                .iter()
                .map(|st| (st.queue_depth, vec![kv("sink", st.sink)]))
                .collect()
        },
    );
}
