//! The standard `process_*` metrics of a Prometheus client (CPU seconds, resident and
//! virtual memory, open and maximum file descriptors, start time), read from `/proc` with
//! the `procfs` crate, and `loopwatch_build_info`. On other systems the process metrics
//! are left out.

use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

/// `loopwatch_build_info{version, revision}` = 1: the crate version and the git revision
/// it was built from (`unknown` when built outside a git checkout).
pub fn register_build_info(registry: &mut Registry) {
    let info: Family<Vec<(String, String)>, Gauge> = Family::default();
    info.get_or_create(&vec![
        ("version".to_owned(), env!("CARGO_PKG_VERSION").to_owned()),
        ("revision".to_owned(), env!("LOOPWATCH_REVISION").to_owned()),
    ])
    .set(1);
    registry.register(
        "build_info",
        "Build of the running loopwatch: version and git revision (value 1)",
        info,
    );
}

/// Registers the `process_*` metrics on an unprefixed `registry`, read now. Nothing is
/// registered where `/proc/self` cannot be read.
#[cfg(target_os = "linux")]
pub fn register_process(registry: &mut Registry) {
    let Ok(me) = procfs::process::Process::myself() else {
        return;
    };
    if let Ok(stat) = me.stat() {
        let ticks = procfs::ticks_per_second() as f64;
        registry.register(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            ConstCounter::new((stat.utime + stat.stime) as f64 / ticks),
        );
        registry.register(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes",
            ConstGauge::new(i64::try_from(stat.vsize).unwrap_or(i64::MAX)),
        );
        let page = procfs::page_size();
        registry.register(
            "process_resident_memory_bytes",
            "Resident memory size in bytes",
            ConstGauge::new(i64::try_from(stat.rss.saturating_mul(page)).unwrap_or(i64::MAX)),
        );
        if let Ok(boot) = procfs::boot_time_secs() {
            registry.register(
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                ConstGauge::new(i64::try_from(boot + stat.starttime / ticks as u64).unwrap_or(0)),
            );
        }
    }
    if let Ok(fds) = me.fd_count() {
        registry.register(
            "process_open_fds",
            "Number of open file descriptors",
            ConstGauge::new(i64::try_from(fds).unwrap_or(i64::MAX)),
        );
    }
    if let Ok(limits) = me.limits() {
        if let procfs::process::LimitValue::Value(max) = limits.max_open_files.soft_limit {
            registry.register(
                "process_max_fds",
                "Maximum number of open file descriptors",
                ConstGauge::new(i64::try_from(max).unwrap_or(i64::MAX)),
            );
        }
    }
}

/// No `/proc` here: no process metrics.
#[cfg(not(target_os = "linux"))]
pub fn register_process(_registry: &mut Registry) {}
