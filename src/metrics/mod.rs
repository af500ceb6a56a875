//! Prometheus metrics (`/metrics`, OpenMetrics text via `prometheus-client`; the admin API
//! turns it into the text format 0.0.4 for clients that do not ask for OpenMetrics,
//! [`crate::metrics::exposition`]).
//!
//! Live metrics (detections, forward latency) are recorded as they happen; counters kept
//! by the other modules as atomics (receiver, forwarder, registry, engine, signal sinks) are
//! read at scrape time.

pub mod exposition;
pub mod fleet;
pub mod ingest_lag;
pub mod process;
pub mod reload;
mod render;
pub use render::{render, MetricSources, ReportQueueFigures};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};

use crate::registry::RunDetection;

/// Labels of `loopwatch_detections_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DetectionLabels {
    pub profile: String,
    pub pattern: &'static str,
    pub severity: &'static str,
}

/// Labels of `loopwatch_signals_published_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SignalLabels {
    pub profile: String,
    /// `warn`, `kill` or `require_approval`.
    pub action: &'static str,
}

/// Labels of `loopwatch_approvals_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApprovalLabels {
    /// `approve` or `deny`.
    pub decision: &'static str,
}

/// Labels of `loopwatch_loop_detections_total`: who looped, how. `service_name` and
/// `gen_ai_agent_name` are the resource/span attributes `service.name` and
/// `gen_ai.agent.name` with dots as underscores (as the Collector's Prometheus exporter
/// writes attribute labels); `unknown` when absent.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FleetDetectionLabels {
    pub service_name: String,
    pub gen_ai_agent_name: String,
    pub pattern: &'static str,
    pub severity: &'static str,
}

/// Metrics recorded as events happen.
pub struct Metrics {
    pub detections: Family<DetectionLabels, Counter>,
    /// Signals handed to the hub (before any sink), by profile and action: what every
    /// sink should eventually deliver, with or without sinks configured.
    pub signals_published: Family<SignalLabels, Counter>,
    /// Answers to `require_approval` signals (`POST /v1/runs/{key}/approve|deny`).
    pub approvals: Family<ApprovalLabels, Counter>,
    /// Seconds from dequeue to the downstream's answer, per delivered request.
    pub forward_latency: Histogram,
    /// How late tool spans arrive, per service ([`ingest_lag`]).
    pub ingest_lag: ingest_lag::IngestLag,
    /// Detections by service, agent, pattern and severity (fleet view).
    pub loop_detections: Family<FleetDetectionLabels, Counter>,
    /// Runs, loop runs and kills per service/agent and time bucket (`/v1/summary`, `/ui`).
    pub fleet: crate::metrics::fleet::Fleet,
    /// `exporter.queue_capacity` when forwarding (0 = detect-only), for the queue-near-full
    /// alert.
    pub forward_queue_capacity: std::sync::atomic::AtomicU64,
    /// `exporter.queue.max_bytes` when forwarding (0 = detect-only), for the same alert.
    pub forward_queue_max_bytes: std::sync::atomic::AtomicU64,
    /// (profile, pattern, severity, service.name, gen_ai.agent.name) → detections, for
    /// self-telemetry (a prometheus-client family cannot be read back).
    detection_counts: std::sync::Mutex<std::collections::BTreeMap<DetectionKey, u64>>,
    signals_published_count: std::sync::atomic::AtomicU64,
    /// Config reloads of `loopwatch serve` ([`reload`]).
    pub config_reloads: reload::ConfigReloads,
    /// Each listener's connection counters (open, evicted to make room).
    listeners: std::sync::Mutex<Vec<std::sync::Arc<crate::net::listen::ListenerStats>>>,
}

impl Metrics {
    /// The connection counters of listener `name` (`receiver.grpc`, `receiver.http`,
    /// `admin`), created and rendered from now on.
    pub fn listener(
        &self,
        name: &'static str,
    ) -> std::sync::Arc<crate::net::listen::ListenerStats> {
        let mut listeners = self.listeners.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(found) = listeners.iter().find(|l| l.name == name) {
            return std::sync::Arc::clone(found);
        }
        let stats = std::sync::Arc::new(crate::net::listen::ListenerStats::new(name));
        listeners.push(std::sync::Arc::clone(&stats));
        stats
    }

    fn listeners(&self) -> Vec<std::sync::Arc<crate::net::listen::ListenerStats>> {
        self.listeners
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// (profile, pattern, severity, service.name, gen_ai.agent.name).
pub type DetectionKey = (String, &'static str, &'static str, String, String);

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            detections: Family::default(),
            signals_published: Family::default(),
            approvals: Family::default(),
            forward_latency: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            ingest_lag: Default::default(),
            loop_detections: Family::default(),
            fleet: crate::metrics::fleet::Fleet::default(),
            forward_queue_capacity: Default::default(),
            forward_queue_max_bytes: Default::default(),
            detection_counts: Default::default(),
            signals_published_count: Default::default(),
            config_reloads: Default::default(),
            listeners: Default::default(),
        }
    }
}

impl Metrics {
    /// Counts the detections of one request: `loopwatch_detections_total`,
    /// `loopwatch_loop_detections_total`, the fleet view and the self-telemetry counts.
    /// Grouped by label set first, so a request of many detections of one run (a loop
    /// storm) looks each counter up once instead of once per detection.
    pub fn record_detections(&self, detections: &[RunDetection]) {
        if detections.is_empty() {
            return;
        }
        // (profile, pattern, severity, service.name, gen_ai.agent.name) → detections.
        type Group<'a> = (
            &'a str,
            &'static str,
            &'static str,
            Option<&'a str>,
            Option<&'a str>,
        );
        let mut groups: foldhash::HashMap<Group, u64> = Default::default();
        for d in detections {
            let key = (
                d.profile.name.as_str(),
                d.detection.pattern.as_str(),
                d.detection.severity.as_str(),
                d.service_name.as_deref(),
                d.agent_name.as_deref(),
            );
            *groups.entry(key).or_default() += 1;
        }
        self.fleet
            .observe_detections(detections, crate::metrics::fleet::now_unix());
        // Labelled as the fleet view counts them: past `fleet::MAX_GROUPS` groups, `other`.
        let groups: Vec<_> = groups
            .into_iter()
            .map(|((profile, pattern, severity, service, agent), n)| {
                let (service, agent) = self.fleet.group_names(service, agent);
                ((profile, pattern, severity, service, agent), n)
            })
            .collect();
        let mut counts = self
            .detection_counts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for ((profile, pattern, severity, service, agent), n) in groups {
            self.detections
                .get_or_create(&DetectionLabels {
                    profile: profile.to_string(),
                    pattern,
                    severity,
                })
                .inc_by(n);
            self.loop_detections
                .get_or_create(&FleetDetectionLabels {
                    service_name: service.clone(),
                    gen_ai_agent_name: agent.clone(),
                    pattern,
                    severity,
                })
                .inc_by(n);
            let key = (profile.to_string(), pattern, severity, service, agent);
            *counts.entry(key).or_default() += n;
        }
    }

    /// Detections so far by (profile, pattern, severity, service.name, gen_ai.agent.name).
    pub fn detection_counts(&self) -> Vec<(DetectionKey, u64)> {
        let counts = self
            .detection_counts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        counts.iter().map(|(k, v)| (k.clone(), *v)).collect()
    }

    /// Signals handed to the hub so far.
    pub fn signals_published_total(&self) -> u64 {
        self.signals_published_count
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Counts an answer to a `require_approval` signal: `decision` is `approve` or `deny`.
    pub fn record_approval(&self, decision: &'static str) {
        self.approvals
            .get_or_create(&ApprovalLabels { decision })
            .inc();
    }

    /// Counts a signal handed to the hub.
    pub fn record_signal(&self, profile: &str, action: crate::detector::Action) {
        self.signals_published
            .get_or_create(&SignalLabels {
                profile: profile.to_string(),
                action: action.as_str(),
            })
            .inc();
        self.signals_published_count
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests;
