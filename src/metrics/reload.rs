//! Config reload outcomes (`loopwatch serve` on SIGHUP or a changed config file), named as
//! Prometheus names its own: `loopwatch_config_reloads_total{result}`,
//! `loopwatch_config_last_reload_successful` and
//! `loopwatch_config_last_reload_success_timestamp_seconds`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use prometheus_client::registry::Registry;

/// Counts of config reloads and the state of the last one.
#[derive(Debug)]
pub struct ConfigReloads {
    success: AtomicU64,
    failure: AtomicU64,
    last_successful: AtomicBool,
    /// Unix seconds of the last configuration applied: start-up, then each successful reload.
    last_success_unix: AtomicU64,
}

impl Default for ConfigReloads {
    fn default() -> Self {
        ConfigReloads {
            success: AtomicU64::new(0),
            failure: AtomicU64::new(0),
            last_successful: AtomicBool::new(true),
            last_success_unix: AtomicU64::new(crate::metrics::fleet::now_unix()),
        }
    }
}

impl ConfigReloads {
    /// Records one reload attempt: applied (`ok`) or refused (the old config stays).
    pub fn record(&self, ok: bool) {
        if ok {
            self.success.fetch_add(1, Relaxed);
            self.last_success_unix
                .store(crate::metrics::fleet::now_unix(), Relaxed);
        } else {
            self.failure.fetch_add(1, Relaxed);
        }
        self.last_successful.store(ok, Relaxed);
    }

    /// (successful, failed) reloads so far.
    pub fn counts(&self) -> (u64, u64) {
        (self.success.load(Relaxed), self.failure.load(Relaxed))
    }

    /// Adds the three metrics to `r` (prefixed `loopwatch_` by the caller's registry).
    pub fn register(&self, r: &mut Registry) {
        use prometheus_client::metrics::counter::Counter;
        use prometheus_client::metrics::family::Family;
        use prometheus_client::metrics::gauge::Gauge;
        let reloads: Family<Vec<(String, String)>, Counter> = Family::default();
        for (result, n) in [("success", &self.success), ("failure", &self.failure)] {
            reloads
                .get_or_create(&vec![("result".to_string(), result.to_string())])
                .inc_by(n.load(Relaxed));
        }
        r.register(
            "config_reloads",
            "Config reloads (SIGHUP or a changed config file) by result; a failed one keeps the running config",
            reloads,
        );
        let last: Gauge = Gauge::default();
        last.set(i64::from(self.last_successful.load(Relaxed)));
        r.register(
            "config_last_reload_successful",
            "1 when the last config reload was applied (or none was tried), 0 when it was refused",
            last,
        );
        let at: Gauge = Gauge::default();
        at.set(self.last_success_unix.load(Relaxed) as i64);
        r.register(
            "config_last_reload_success_timestamp_seconds",
            "Unix time the running config was applied (start-up or the last successful reload)",
            at,
        );
    }
}
