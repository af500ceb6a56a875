//! How late tool spans reach loopwatch: `loopwatch_ingest_lag_seconds{service_name}`, the
//! time from the end of a request's latest tool span to its arrival, and one WARN the first
//! time it passes a second. A loop is stopped only once its spans arrive: an SDK that
//! batches spans for seconds (the OpenTelemetry SDK's `OTEL_BSP_SCHEDULE_DELAY`, 5000 ms by
//! default) lets the agent make several more calls after the one that completed it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;

/// Lag past which the WARN is written, in seconds.
pub const WARN_AFTER_SECONDS: f64 = 1.0;

/// Services named in the label at most; later ones are counted as `other`.
pub const MAX_SERVICES: usize = 1000;

/// Labels of `loopwatch_ingest_lag_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LagLabels {
    /// `service.name` of the resource (`unknown` when absent, `other` past
    /// [`MAX_SERVICES`]).
    pub service_name: String,
}

/// The lag histogram per service and the once-only warning.
pub struct IngestLag {
    pub histogram: Family<LagLabels, Histogram>,
    services: Mutex<HashSet<Arc<str>>>,
    warned: AtomicBool,
}

impl Default for IngestLag {
    fn default() -> Self {
        IngestLag {
            histogram: Family::new_with_constructor(|| {
                Histogram::new([0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0])
            }),
            services: Mutex::new(HashSet::new()),
            warned: AtomicBool::new(false),
        }
    }
}

impl IngestLag {
    /// Records, for each (service, latest tool span end in ns since the Unix epoch) of one
    /// request, the lag behind `now_unix_nano`; a span from the future counts as 0.
    pub fn record(&self, latest: &[(Option<Arc<str>>, u64)], now_unix_nano: u64) {
        for (service, end) in latest {
            let lag = now_unix_nano.saturating_sub(*end) as f64 / 1e9;
            let label = self.label(service.as_deref());
            self.histogram
                .get_or_create(&LagLabels {
                    service_name: label.clone(),
                })
                .observe(lag);
            if lag > WARN_AFTER_SECONDS && !self.warned.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    service = %label,
                    lag_seconds = format!("{lag:.1}"),
                    "tool spans arrive {lag:.1} s after they end, so a loop is stopped that much late: \
                     the exporter batches them (OpenTelemetry SDK: OTEL_BSP_SCHEDULE_DELAY, 5000 ms by default); \
                     set it to 100-500 ms, or use the loopwatch client's instrument(), which flushes tool spans at once"
                );
            }
        }
    }

    /// The label of `service`: its name while fewer than [`MAX_SERVICES`] are named.
    fn label(&self, service: Option<&str>) -> String {
        let Some(service) = service else {
            return "unknown".into();
        };
        let mut services = self.services.lock().unwrap_or_else(|e| e.into_inner());
        if services.contains(service) {
            return service.to_owned();
        }
        if services.len() < MAX_SERVICES {
            services.insert(Arc::from(service));
            return service.to_owned();
        }
        "other".into()
    }

    /// Whether the one-time warning was written.
    pub fn warned(&self) -> bool {
        self.warned.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lag_is_per_service_and_capped() {
        let lag = IngestLag::default();
        let now = 10_000_000_000u64;
        lag.record(&[(Some(Arc::from("a")), now - 200_000_000)], now);
        assert!(!lag.warned());
        lag.record(
            &[(None, now - 3_000_000_000), (Some(Arc::from("a")), now + 5)],
            now,
        );
        assert!(lag.warned());
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("lag", "", lag.histogram.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("lag_count{service_name=\"a\"} 2"), "{text}");
        assert!(text.contains("lag_sum{service_name=\"a\"} 0.2"), "{text}");
        assert!(
            text.contains("lag_count{service_name=\"unknown\"} 1"),
            "{text}"
        );
        for i in 0..MAX_SERVICES + 5 {
            lag.label(Some(&format!("s{i}")));
        }
        assert_eq!(lag.label(Some("late")), "other");
        assert_eq!(lag.label(Some("a")), "a");
    }
}
