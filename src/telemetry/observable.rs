//! Observable instruments over the process's counters: a cumulative counter or a gauge
//! whose callback reads [`AdminState`] at each collection, as `/metrics` reads it at each
//! scrape, and the small helpers that shape the read values into points.

use std::sync::Arc;

use crate::admin::AdminState;
use opentelemetry::metrics::Meter;
use opentelemetry::KeyValue;

pub(super) type Points = Vec<(u64, Vec<KeyValue>)>;

/// A cumulative counter read from `read` at each collection.
pub(super) fn counter(
    meter: &Meter,
    state: &Arc<AdminState>,
    name: &'static str,
    unit: &'static str,
    description: &'static str,
    read: fn(&AdminState) -> Points,
) {
    let state = state.clone();
    meter
        .u64_observable_counter(name)
        .with_unit(unit)
        .with_description(description)
        .with_callback(move |o| {
            for (value, attributes) in read(&state) {
                o.observe(value, &attributes);
            }
        })
        .build();
}

/// A gauge read from `read` at each collection.
pub(super) fn gauge(
    meter: &Meter,
    state: &Arc<AdminState>,
    name: &'static str,
    unit: &'static str,
    description: &'static str,
    read: fn(&AdminState) -> Points,
) {
    let state = state.clone();
    meter
        .u64_observable_gauge(name)
        .with_unit(unit)
        .with_description(description)
        .with_callback(move |o| {
            for (value, attributes) in read(&state) {
                o.observe(value, &attributes);
            }
        })
        .build();
}

pub(super) fn one(value: u64) -> Points {
    vec![(value, Vec::new())]
}

/// `(info, warn, kill)` counts as points with a `severity` attribute.
pub(super) fn by_severity((info, warn, kill): (u64, u64, u64)) -> Points {
    crate::detector::Severity::ALL
        .into_iter()
        .zip([info, warn, kill])
        .map(|(severity, n)| (n, vec![kv("severity", severity.as_str())]))
        .collect()
}

pub(super) fn kv(key: &'static str, value: &str) -> KeyValue {
    KeyValue::new(key, value.to_string())
}
