//! Registry unit tests: eviction, caps, dedupe, late spans and replays.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::detector::{Action, Observation, Pattern, ProfileSettings, Severity};

/// One profile where only repeated_call can fire on calls without results: 3 in 10.
fn three_in_ten() -> ProfileSettings {
    ProfileSettings {
        name: "three".into(),
        action: Action::Warn,
        window: 10,
        repeated_call: 3,
        repeated_result: 3,
        alternating_calls: 3,
        cycle: 3,
        max_cycle_period: 3,
        repeated_text: 3,
        ..ProfileSettings::nudge()
    }
}

fn registry(config: RegistryConfig) -> Registry {
    Registry::new(vec![three_in_ten()], config)
}

/// A tool call of `tool` (its fingerprint is the tool byte repeated), no result.
pub(super) fn call(run: &str, span: u64, start: u64, tool: u8) -> RunEvent {
    RunEvent {
        run_key: Arc::from(run),
        trace_id: [7; 16].into(),
        span_id: span.to_be_bytes().into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 1,
        service_name: Some(Arc::from("svc")),
        agent_name: None,
        observation: Observation::ToolCall {
            tool_name: Arc::from(format!("tool{tool}")),
            call_fingerprint: Some([tool; 32]),
            result_fingerprint: None,
            traits: Default::default(),
        },
        call: Default::default(),
    }
}

/// Calls ordered by start time `10·span`.
fn same_calls(run: &str, spans: std::ops::RangeInclusive<u64>) -> Vec<RunEvent> {
    spans.map(|i| call(run, i, 10 * i, 1)).collect()
}

fn span(i: u64) -> Vec<u8> {
    i.to_be_bytes().to_vec()
}

/// (completing span, call ordinal, occurrence) of each detection.
fn shape(detections: &[RunDetection]) -> Vec<(Vec<u8>, Option<usize>, u32)> {
    detections
        .iter()
        .map(|d| (d.span_id.to_vec(), d.detection.call, d.occurrence))
        .collect()
}

#[test]
fn idle_runs_are_evicted_after_the_ttl() {
    let config = RegistryConfig {
        idle_ttl: Duration::from_secs(10),
        ..RegistryConfig::default()
    };
    let r = registry(config);
    let t0 = Instant::now();
    r.observe(same_calls("a", 1..=2), t0);
    r.observe(same_calls("b", 1..=2), t0 + Duration::from_secs(5));
    assert_eq!(r.evict_idle(t0 + Duration::from_secs(10)), 0, "exactly ttl");
    assert_eq!(r.evict_idle(t0 + Duration::from_secs(11)), 1);
    assert!(r.run("a").is_none());
    assert!(r.run("b").is_some());
    assert_eq!(r.stats().runs_evicted_idle.load(Ordering::Relaxed), 1);
    // An evicted run starts over: two more calls are not three.
    let found = r.observe(same_calls("a", 3..=4), t0 + Duration::from_secs(12));
    assert!(found.is_empty());
    assert_eq!(r.run("a").map(|s| s.tool_calls), Some(2));
    // Clock going backwards never evicts.
    assert_eq!(r.evict_idle(t0), 0);
}

#[test]
fn max_runs_evicts_the_least_recently_seen() {
    let config = RegistryConfig {
        max_runs: 3,
        ..RegistryConfig::default()
    };
    let r = registry(config);
    let t0 = Instant::now();
    for (i, key) in ["a", "b", "c"].into_iter().enumerate() {
        r.observe(same_calls(key, 1..=1), t0 + Duration::from_secs(i as u64));
    }
    r.observe(same_calls("a", 2..=2), t0 + Duration::from_secs(3)); // a is fresh again
    r.observe(same_calls("d", 1..=1), t0 + Duration::from_secs(4));
    assert_eq!(r.run_count(), 3);
    assert!(r.run("b").is_none(), "b was the least recently seen");
    for key in ["a", "c", "d"] {
        assert!(r.run(key).is_some(), "{key} kept");
    }
    assert_eq!(r.stats().runs_evicted_capacity.load(Ordering::Relaxed), 1);
    assert_eq!(r.run("a").map(|s| s.tool_calls), Some(2));
    r.observe(same_calls("e", 1..=1), t0 + Duration::from_secs(5));
    assert!(r.run("c").is_none());
    assert_eq!(r.stats().runs_evicted_capacity.load(Ordering::Relaxed), 2);
}

#[test]
fn duplicates_are_counted_and_never_detected_twice() {
    let r = registry(RegistryConfig::default());
    let now = Instant::now();
    let first = r.observe(same_calls("a", 1..=3), now);
    assert_eq!(shape(&first), vec![(span(3), Some(3), 1)]);
    // An exporter retry of the whole batch, then of one span inside a batch.
    assert!(r.observe(same_calls("a", 1..=3), now).is_empty());
    let mut batch = same_calls("a", 4..=5);
    batch.push(call("a", 2, 20, 1));
    assert!(r.observe(batch, now).is_empty());
    assert_eq!(r.stats().duplicate_spans.load(Ordering::Relaxed), 4);
    assert_eq!(r.run("a").map(|s| s.tool_calls), Some(5));
    let found = r.observe(same_calls("a", 6..=6), now);
    assert_eq!(shape(&found), vec![(span(6), Some(6), 2)]);
}

#[test]
fn a_late_span_replays_and_reports_each_detection_once() {
    let r = registry(RegistryConfig::default());
    let now = Instant::now();
    // Starts 100, 200, 300 → detection completed by 300.
    let at = |span: u64, start: u64| vec![call("a", span, start, 1)];
    let mut reported = Vec::new();
    let mut batch = Vec::new();
    for (s, t) in [(1, 100), (2, 200), (3, 300)] {
        batch.extend(at(s, t));
    }
    reported.push(shape(&r.observe(batch, now)));
    // Each late span shifts the triple back by one; the fourth brings 300 back.
    for (s, t) in [(4, 90), (5, 80), (6, 70)] {
        reported.push(shape(&r.observe(at(s, t), now)));
    }
    assert_eq!(
        reported,
        vec![
            vec![(span(3), Some(3), 1)],
            vec![(span(2), Some(3), 1)], // 90, 100, 200
            vec![(span(1), Some(3), 1)], // 80, 90, 100
            vec![(span(4), Some(3), 1)], // 70, 80, 90 — and 300 again, not re-reported
        ]
    );
    let last = r.detections("a").unwrap_or_default();
    assert_eq!(
        shape(&last),
        vec![(span(4), Some(3), 1), (span(3), Some(6), 2)]
    );
    let members: Vec<Vec<u8>> = last[1].span_ids.iter().map(|id| id.to_vec()).collect();
    assert_eq!(members, vec![span(1), span(2), span(3)]);
    // A retry of the late span changes nothing.
    assert!(r.observe(at(6, 70), now).is_empty());
}

#[test]
fn a_late_span_in_one_request_with_in_order_spans_replays_once() {
    let ordered = registry(RegistryConfig::default());
    let now = Instant::now();
    let all = same_calls("a", 1..=9);
    let whole = ordered.observe(all.clone(), now);
    let late = registry(RegistryConfig::default());
    let mut found = late.observe(all[..4].to_vec(), now);
    found.extend(late.observe(all[5..].to_vec(), now));
    let mut tail = vec![all[4].clone()]; // late, with nothing after it in the request
    tail.reverse();
    found.extend(late.observe(tail, now));
    assert_eq!(
        shape(&whole),
        shape(&ordered.detections("a").unwrap_or_default())
    );
    assert_eq!(
        shape(&late.detections("a").unwrap_or_default()),
        shape(&whole)
    );
    // Each final detection was reported once (a dropped one may have been reported too).
    for d in &whole {
        assert_eq!(
            found
                .iter()
                .filter(|f| f.span_id == d.span_id && f.detection.pattern == d.detection.pattern)
                .count(),
            1
        );
    }
}

#[test]
fn forgetting_events_keeps_ordinals_occurrences_and_detections() {
    let capped = registry(RegistryConfig {
        max_events_per_run: 4,
        ..RegistryConfig::default()
    });
    let full = registry(RegistryConfig::default());
    let now = Instant::now();
    // 2 calls of tool 2, then 10 of tool 1, a call of tool 1 arriving late but within
    // the kept events.
    let mut events: Vec<RunEvent> = (1..=2).map(|i| call("a", i, 10 * i, 2)).collect();
    events.extend(same_calls("a", 3..=12));
    for e in &events {
        if e.span_id[..] != span(11)[..] {
            capped.observe(vec![e.clone()], now);
        }
    }
    capped.observe(vec![events[10].clone()], now); // span 11, after span 12
    full.observe(events.clone(), now);
    let expected = shape(&full.detections("a").unwrap_or_default());
    assert_eq!(
        expected,
        vec![
            (span(5), Some(5), 1),
            (span(8), Some(8), 2),
            (span(11), Some(11), 3)
        ]
    );
    assert_eq!(shape(&capped.detections("a").unwrap_or_default()), expected);
    assert_eq!(capped.run("a").map(|s| s.tool_calls), Some(12));
    // Ordinals count the forgotten calls; only kept events are listed.
    let repeated = capped.repeated_calls("a").unwrap_or_default();
    assert_eq!(repeated.len(), 1);
    assert_eq!(repeated[0].step_indices, vec![9, 10, 11, 12]);
    assert_eq!(capped.stats().events_forgotten.load(Ordering::Relaxed), 8);
    // A span that starts before every kept event is left out and counted.
    assert!(capped.observe(vec![call("a", 99, 1, 1)], now).is_empty());
    assert_eq!(capped.stats().events_forgotten.load(Ordering::Relaxed), 9);
    assert_eq!(shape(&capped.detections("a").unwrap_or_default()), expected);
    // Later detections continue from the same state as the uncapped run.
    let more = same_calls("a", 13..=14);
    assert_eq!(
        shape(&capped.observe(more.clone(), now)),
        shape(&full.observe(more, now))
    );
}

#[test]
fn empty_span_ids_and_equal_start_times_never_panic() {
    let r = registry(RegistryConfig::default());
    let now = Instant::now();
    assert!(r.observe(Vec::new(), now).is_empty());
    // Empty span ids: the dedupe key is the span_id, so only the first counts.
    let empty: Vec<RunEvent> = (0..5)
        .map(|i| RunEvent {
            span_id: Default::default(),
            ..call("e", 0, i, 1)
        })
        .collect();
    assert!(r.observe(empty, now).is_empty());
    assert_eq!(r.stats().duplicate_spans.load(Ordering::Relaxed), 4);
    assert_eq!(r.run("e").map(|s| s.tool_calls), Some(1));
    // Equal start and end times: ordered by span_id whatever the arrival order.
    let tied = |i: u64, tool: u8| RunEvent {
        start_time_unix_nano: 5,
        end_time_unix_nano: 5,
        ..call("t", i, 0, tool)
    };
    for i in (1..=6).rev() {
        r.observe(vec![tied(i, 1 + (i % 2) as u8)], now);
    }
    let reverse = r.detections("t").unwrap_or_default();
    let r2 = registry(RegistryConfig::default());
    r2.observe((1..=6).map(|i| tied(i, 1 + (i % 2) as u8)).collect(), now);
    let in_order = r2.detections("t").unwrap_or_default();
    assert_eq!(shape(&reverse), shape(&in_order));
    assert_eq!(in_order.len(), 1);
    // A B A B A: the third A completes repeated_call before alternating can.
    assert_eq!(in_order[0].detection.pattern, Pattern::RepeatedCall);
    assert_eq!(in_order[0].span_id.to_vec(), span(5));
    assert_eq!(in_order[0].detection.severity, Severity::Warn);
    // Zero times and u64::MAX times.
    r.observe(vec![call("z", 1, 0, 1), call("z", 2, u64::MAX - 1, 1)], now);
    assert_eq!(r.run("z").map(|s| s.tool_calls), Some(2));
}

#[test]
fn a_run_that_loops_for_ever_keeps_a_bounded_detection_list() {
    let capped = registry(RegistryConfig {
        max_events_per_run: 4,
        ..RegistryConfig::default()
    });
    let now = Instant::now();
    let mut reported = 0;
    for i in 3..=400 {
        reported += capped.observe(same_calls("a", i..=i), now).len();
    }
    // every detection was reported once, but only a bounded tail is kept
    assert!(reported > 100, "reported {reported}");
    let kept = capped.detections("a").unwrap_or_default();
    assert!(kept.len() <= 4 + 4, "kept {}", kept.len());
    // occurrences keep counting across what was dropped
    let last = kept.last().expect("detections kept");
    assert!(last.occurrence as usize > kept.len(), "{}", last.occurrence);
}

#[test]
fn max_bytes_evicts_the_least_recently_seen_and_counts_by_cause() {
    let t0 = Instant::now();
    // Measure one run of 10 calls, then allow a little over three of them.
    let probe = registry(RegistryConfig::default());
    probe.observe(same_calls("probe", 1..=10), t0);
    let one_run = probe.state_bytes();
    assert!(one_run > 0);
    let r = registry(RegistryConfig {
        max_bytes: one_run * 3 + one_run / 2,
        ..RegistryConfig::default()
    });
    for (i, key) in ["a", "b", "c"].into_iter().enumerate() {
        r.observe(same_calls(key, 1..=10), t0 + Duration::from_secs(i as u64));
    }
    assert_eq!(r.state_bytes(), 3 * one_run);
    r.observe(same_calls("a", 11..=11), t0 + Duration::from_secs(3)); // a is fresh again
    r.observe(same_calls("d", 1..=10), t0 + Duration::from_secs(4));
    assert!(r.run("b").is_none(), "b was the least recently seen");
    for key in ["a", "c", "d"] {
        assert!(r.run(key).is_some(), "{key} kept");
    }
    assert_eq!(r.stats().runs_evicted_bytes.load(Ordering::Relaxed), 1);
    assert_eq!(r.stats().runs_evicted_capacity.load(Ordering::Relaxed), 0);
    assert!(r.state_bytes() <= one_run * 3 + one_run / 2);
    // Idle eviction gives the bytes back.
    let evicted = r.evict_idle(
        t0 + Duration::from_secs(4) + Duration::from_secs(600) + Duration::from_secs(1),
    );
    assert_eq!(evicted, 3);
    assert_eq!(r.state_bytes(), 0);
    assert_eq!(r.run_count(), 0);
}

#[test]
fn a_run_larger_than_max_bytes_alone_is_kept() {
    let r = registry(RegistryConfig {
        max_bytes: 1,
        ..RegistryConfig::default()
    });
    let t0 = Instant::now();
    r.observe(same_calls("a", 1..=3), t0);
    assert!(r.run("a").is_some());
    r.observe(same_calls("b", 1..=3), t0 + Duration::from_secs(1));
    assert!(r.run("a").is_none());
    assert!(
        r.run("b").is_some(),
        "the run being updated is never evicted"
    );
    assert_eq!(r.stats().runs_evicted_bytes.load(Ordering::Relaxed), 1);
}

#[test]
fn run_state_estimate_grows_with_kept_events() {
    let r = registry(RegistryConfig::default());
    let t0 = Instant::now();
    r.observe(same_calls("a", 1..=10), t0);
    let ten = r.state_bytes();
    r.observe(same_calls("a", 11..=100), t0);
    let hundred = r.state_bytes();
    // Per kept call: the event, its ids and dedupe entry (a few hundred bytes).
    let per_call = (hundred - ten) / 90;
    assert!((150..1500).contains(&per_call), "{per_call} bytes per call");
}

#[test]
fn runs_share_one_origin_per_tool_and_name_the_first_service_and_agent_past_the_list() {
    let r = registry(RegistryConfig::default());
    let now = Instant::now();
    // Tools 0..=39 with no names (more origins than the list holds), then names.
    let mut events: Vec<RunEvent> = (0..40)
        .map(|i| RunEvent {
            service_name: None,
            ..call("r", i, 10 * i, i as u8)
        })
        .collect();
    events.push(RunEvent {
        service_name: None,
        agent_name: Some(Arc::from("agent")),
        ..call("r", 40, 400, 0)
    });
    events.push(call("r", 41, 410, 1));
    events.push(RunEvent {
        service_name: Some(Arc::from("later")),
        agent_name: Some(Arc::from("later")),
        ..call("r", 42, 420, 1)
    });
    r.observe(events, now);
    let summary = r.run("r").unwrap();
    assert_eq!(summary.service_name.as_deref(), Some("svc"));
    assert_eq!(summary.agent_name.as_deref(), Some("agent"));
    assert_eq!(summary.tool_calls, 43);
    let listed = r.runs.get("r").unwrap().origins.len();
    assert_eq!(listed, kept::MAX_ORIGINS + 2);
    // A second call of a listed tool shares its origin.
    r.observe(vec![call("r", 50, 500, 1), call("r", 51, 510, 1)], now);
    let run = r.runs.get("r").unwrap();
    let last = &run.events[run.events.len() - 2..];
    assert!(Arc::ptr_eq(&last[0].origin, &last[1].origin));
    assert_eq!(last[0].tool_name().map(|t| &**t), Some("tool1"));
}

#[test]
fn a_run_arriving_in_one_request_is_made_room_for_once_and_exactly() {
    let r = registry(RegistryConfig::default());
    let t0 = Instant::now();
    r.observe(same_calls("ten", 1..=10), t0);
    r.observe(same_calls("one", 1..=1), t0);
    assert_eq!(r.runs.get("ten").unwrap().events.capacity(), 10);
    assert_eq!(r.runs.get("one").unwrap().events.capacity(), 1);
    // A later request of three adds exactly its three (more than the eighth it would
    // otherwise grow by).
    r.observe(same_calls("ten", 11..=13), t0);
    assert_eq!(r.runs.get("ten").unwrap().events.capacity(), 13);
    // One more grows by an eighth, as single inserts always did.
    r.observe(same_calls("ten", 14..=14), t0);
    let grown = 13 + 13 / 8 + 1;
    assert_eq!(r.runs.get("ten").unwrap().events.capacity(), grown);
    // A retried request (every span a duplicate) inserts nothing and reserves nothing.
    r.observe(same_calls("ten", 1..=14), t0);
    assert_eq!(r.runs.get("ten").unwrap().events.len(), 14);
    assert_eq!(r.runs.get("ten").unwrap().events.capacity(), grown);
}
