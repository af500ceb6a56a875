use super::*;
use crate::detector::{Pattern, Severity};
use std::sync::Arc;

fn detection(pattern: Pattern, severity: Severity, service: &str, run: &str) -> RunDetection {
    let mut d = RunDetection::sample(pattern, &["search"], severity);
    d.service_name = Some(Arc::from(service));
    d.run_key = Arc::from(run);
    d
}

#[test]
fn a_request_of_detections_counts_each_one_under_its_labels() {
    let metrics = Metrics::default();
    let storm = [
        detection(Pattern::RepeatedCall, Severity::Warn, "a", "r1"),
        detection(Pattern::RepeatedCall, Severity::Warn, "a", "r1"),
        detection(Pattern::RepeatedCall, Severity::Warn, "b", "r2"),
        detection(Pattern::Cycle, Severity::Kill, "a", "r1"),
    ];
    metrics.record_detections(&storm);
    metrics.record_detections(&storm[..1]);
    metrics.record_detections(&[]);
    let counts = metrics.detection_counts();
    let of = |pattern, severity, service: &str| {
        counts
            .iter()
            .find(|((_, p, s, svc, _), _)| *p == pattern && *s == severity && svc == service)
            .map(|(_, n)| *n)
    };
    assert_eq!(counts.len(), 3, "{counts:?}");
    assert_eq!(of("repeated_call", "warn", "a"), Some(3));
    assert_eq!(of("repeated_call", "warn", "b"), Some(1));
    assert_eq!(of("cycle", "kill", "a"), Some(1));
    let family = |pattern, severity, service: &str| {
        metrics
            .loop_detections
            .get_or_create(&FleetDetectionLabels {
                service_name: service.into(),
                gen_ai_agent_name: crate::metrics::fleet::UNKNOWN.into(),
                pattern,
                severity,
            })
            .get()
    };
    assert_eq!(family("repeated_call", "warn", "a"), 3);
    assert_eq!(family("repeated_call", "warn", "b"), 1);
    let profile = |pattern, severity| {
        metrics
            .detections
            .get_or_create(&DetectionLabels {
                profile: "nudge".into(),
                pattern,
                severity,
            })
            .get()
    };
    assert_eq!(profile("repeated_call", "warn"), 4);
    assert_eq!(profile("cycle", "kill"), 1);
    // The fleet view: two runs, each a loop run once however many detections; the kill
    // counted under its pattern.
    let mut totals = metrics.fleet.totals();
    totals.sort();
    let unknown = crate::metrics::fleet::UNKNOWN.to_string();
    assert_eq!(
        totals,
        vec![
            ("a".to_string(), unknown.clone(), 1, 1),
            ("b".to_string(), unknown, 1, 1)
        ]
    );
    assert_eq!(metrics.fleet.kills_total().get("cycle"), Some(&1));
}
