//! google-adk 0.1.0–1.1.x: each call is a `tool_call [t]` span (arguments) and, after it
//! under the same parent, a `tool_response [t]` span (result).
use super::*;
use crate::detector::{Observation, Pattern, ProfileSettings};
use crate::registry::{CallContext, Registry, RegistryConfig};
use std::sync::atomic::Ordering;
use std::time::Instant;

/// The agent span every tool span of the run is a child of.
const PARENT: u8 = 9;

fn registry() -> Registry {
    Registry::new(
        vec![ProfileSettings::nudge(), ProfileSettings::stop()],
        RegistryConfig::default(),
    )
}

fn span(span: u8, start: u64, observation: Observation) -> RunEvent {
    RunEvent {
        run_key: Arc::from("r"),
        trace_id: [1; 16].into(),
        span_id: [span; 8].into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 10,
        service_name: None,
        agent_name: None,
        observation,
        call: CallContext {
            parent_span_id: [PARENT; 8].into(),
            completeness: 5,
            ..CallContext::default()
        },
    }
}

/// `tool_call [tool]` with arguments `args`.
fn call(id: u8, start: u64, tool: &str, args: u8) -> RunEvent {
    let mut event = span(
        id,
        start,
        Observation::ToolCall {
            tool_name: Arc::from(tool),
            call_fingerprint: Some([args; 32]),
            result_fingerprint: None,
        },
    );
    event.call.result_on_sibling = true;
    event
}

/// `tool_response [tool]` with result `result`.
fn result(id: u8, start: u64, tool: &str, result: u8) -> RunEvent {
    span(
        id,
        start,
        Observation::ToolResult {
            tool_name: Arc::from(tool),
            result_fingerprint: [result; 32],
        },
    )
}

/// Three pairs of `t`: call i (span 10 + i) at 100·i, its result (span 20 + i) 20 ns
/// later; arguments and results from `args` and `results`.
fn pairs(args: [u8; 3], results: [u8; 3]) -> Vec<RunEvent> {
    (0..3u8)
        .flat_map(|i| {
            let start = 100 * u64::from(i + 1);
            [
                call(11 + i, start, "t", args[usize::from(i)]),
                result(21 + i, start + 20, "t", results[usize::from(i)]),
            ]
        })
        .collect()
}

/// (profile, pattern, completing span, call ordinal) of the run's detections.
fn found(r: &Registry) -> Vec<(String, Pattern, u8, Option<usize>)> {
    r.detections("r")
        .unwrap_or_default()
        .iter()
        .map(|d| {
            (
                d.profile.name.clone(),
                d.detection.pattern,
                d.span_id[0],
                d.detection.call,
            )
        })
        .collect()
}

fn permutations(n: usize) -> Vec<Vec<usize>> {
    if n == 0 {
        return vec![vec![]];
    }
    let mut out = Vec::new();
    for rest in permutations(n - 1) {
        for at in 0..=rest.len() {
            let mut p = rest.clone();
            p.insert(at, n - 1);
            out.push(p);
        }
    }
    out
}

fn repeated_result_at_call_3() -> Vec<(String, Pattern, u8, Option<usize>)> {
    vec![("nudge".into(), Pattern::RepeatedResult, 13, Some(3))]
}

#[test]
fn each_call_takes_the_result_of_its_sibling_in_any_arrival_order() {
    let now = Instant::now();
    let looping = pairs([7, 7, 7], [8, 8, 8]);
    let healthy = pairs([1, 2, 3], [8, 8, 8]);
    for order in permutations(6) {
        // One span per request, in this order.
        for (events, want) in [(&looping, repeated_result_at_call_3()), (&healthy, vec![])] {
            let r = registry();
            let mut reported = Vec::new();
            for &i in &order {
                reported.extend(r.observe(vec![events[i].clone()], now));
            }
            assert_eq!(found(&r), want, "order {order:?}");
            assert_eq!(reported.len(), want.len(), "order {order:?}: reported");
            assert_eq!(r.run("r").unwrap().tool_calls, 3, "order {order:?}");
            assert_eq!(
                r.stats()
                    .tool_calls_without_arguments
                    .load(Ordering::Relaxed),
                0
            );
        }
    }
    // Batched: all in one request, calls then results, results then calls, and the
    // pairs split over requests with the response of a pair before its call.
    let batchings: [&[&[usize]]; 5] = [
        &[&[0, 1, 2, 3, 4, 5]],
        &[&[0, 2, 4], &[1, 3, 5]],
        &[&[1, 3, 5], &[0, 2, 4]],
        &[&[0, 1, 3], &[2, 5], &[4]],
        &[&[5, 4], &[3, 2, 1, 0]],
    ];
    for batches in batchings {
        let r = registry();
        for batch in batches {
            r.observe(batch.iter().map(|&i| looping[i].clone()).collect(), now);
        }
        assert_eq!(found(&r), repeated_result_at_call_3(), "{batches:?}");
    }
}

#[test]
fn results_pair_by_tool_and_parent_and_a_result_alone_is_no_call() {
    let now = Instant::now();
    // Parallel calls: a and b pairs in turn, three rounds (ADK's merged
    // `tool_response` span yields no event); `a` returns the same each time, `b` not:
    // `a` warns at its third call (call 5), so `b`'s results, arriving between, were
    // never `a`'s.
    let mut events = Vec::new();
    for round in 0..3u8 {
        let start = 1000 * u64::from(round + 1);
        events.push(call(10 + round, start, "a", 1));
        events.push(result(20 + round, start + 20, "a", 5));
        events.push(call(30 + round, start + 40, "b", 2));
        events.push(result(40 + round, start + 60, "b", 6 + round));
    }
    events.reverse();
    let r = registry();
    r.observe(events, now);
    assert_eq!(
        found(&r),
        vec![("nudge".into(), Pattern::RepeatedResult, 12, Some(5))]
    );
    // A result whose call is not in the run (a before_tool_callback answered, or its
    // span is still to come) is no call; a call without its result (live mode) is a
    // call without a result.
    let r = registry();
    r.observe(vec![result(1, 100, "a", 5), result(2, 200, "a", 5)], now);
    assert_eq!(r.run("r").unwrap().tool_calls, 0);
    r.observe(vec![call(3, 300, "a", 1)], now);
    let events = r.events("r").unwrap();
    assert_eq!(
        events[2].observation,
        Observation::ToolCall {
            tool_name: Arc::from("a"),
            call_fingerprint: Some([1; 32]),
            result_fingerprint: None,
        }
    );
    assert_eq!(r.run("r").unwrap().tool_calls, 1);
    // A result under another parent or of another tool is not the call's.
    let mut other_parent = result(4, 310, "a", 5);
    other_parent.call.parent_span_id = [3; 8].into();
    r.observe(vec![other_parent, result(5, 320, "b", 5)], now);
    assert_eq!(r.events("r").unwrap()[2].observation, events[2].observation);
    // Its own result arriving (in a later request) completes it.
    r.observe(vec![result(6, 330, "a", 5)], now);
    assert!(matches!(
        r.events("r").unwrap()[2].observation,
        Observation::ToolCall {
            result_fingerprint: Some(fp),
            ..
        } if fp == [5; 32]
    ));
}

#[test]
fn a_re_exported_result_span_is_a_duplicate_and_moves_keep_the_pairs() {
    let now = Instant::now();
    let r = registry();
    let looping = pairs([7, 7, 7], [8, 8, 8]);
    r.observe(looping.clone(), now);
    r.observe(looping.clone(), now);
    assert_eq!(r.stats().duplicate_spans.load(Ordering::Relaxed), 6);
    assert_eq!(found(&r), repeated_result_at_call_3());
    // Moved to another run (an agent found later), as the engine does: the same.
    let moves: std::collections::HashMap<Vec<u8>, Arc<str>> = looping
        .iter()
        .map(|e| (e.span_id.to_vec(), Arc::from("r2")))
        .collect();
    r.rehome("r", &moves, now);
    let moved: Vec<_> = r
        .detections("r2")
        .unwrap()
        .iter()
        .map(|d| (d.detection.pattern, d.span_id[0]))
        .collect();
    assert_eq!(moved, vec![(Pattern::RepeatedResult, 13)]);
}
