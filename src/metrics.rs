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

/// Metrics recorded as events happen.
pub struct Metrics {
    pub detections: Family<DetectionLabels, Counter>,
    /// Seconds from dequeue to the downstream's answer, per delivered request.
    pub forward_latency: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            detections: Family::default(),
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
}
