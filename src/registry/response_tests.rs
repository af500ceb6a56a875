//! One model response traced twice (`registry_merge`: a response span nested in a span of
//! the same response): the inner span is the response, in any arrival order and batching.

use std::sync::Arc;
use std::time::Instant;

use super::*;
use crate::detector::{Observation, Pattern, ProfileSettings};

fn registry() -> Registry {
    Registry::new(
        vec![ProfileSettings::nudge(), ProfileSettings::stop()],
        RegistryConfig::default(),
    )
}

/// A model response on span `span` (parent `parent`, 0 = root) starting at `start` and
/// ending at `end`: text `text`, or tool calls when `None`.
fn response(span: u8, parent: u8, start: u64, end: u64, text: Option<u8>) -> RunEvent {
    RunEvent {
        run_key: Arc::from("r"),
        trace_id: [1; 16].into(),
        span_id: [span; 8].into(),
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        service_name: None,
        agent_name: None,
        observation: match text {
            Some(t) => Observation::TextResponse {
                text_fingerprint: [t; 32],
            },
            None => Observation::ToolCallResponse,
        },
        call: CallContext {
            parent_span_id: if parent == 0 {
                Default::default()
            } else {
                [parent; 8].into()
            },
            completeness: 4,
            ..CallContext::default()
        },
    }
}

/// `n` calls, each an outer span (10 + i) with an inner span (20 + i) of the same text
/// `text` nested in it; `same_start` starts the inner span with its outer one.
fn doubled(n: u8, text: u8, same_start: bool) -> Vec<RunEvent> {
    (0..n)
        .flat_map(|i| {
            let start = 100 * u64::from(i + 1);
            let inner_start = if same_start { start } else { start + 5 };
            [
                response(10 + i, 0, start, start + 50, Some(text)),
                response(20 + i, 10 + i, inner_start, start + 40, Some(text)),
            ]
        })
        .collect()
}

/// (profile, pattern, completing span, response ordinal) of the run's detections.
fn found(r: &Registry) -> Vec<(String, Pattern, u8, Option<usize>)> {
    r.detections("r")
        .unwrap_or_default()
        .iter()
        .map(|d| {
            (
                d.profile.name.clone(),
                d.detection.pattern,
                d.span_id[0],
                d.detection.response,
            )
        })
        .collect()
}

/// Every order of `events`, each event its own batch, and all at once.
fn arrivals(events: &[RunEvent]) -> Vec<Vec<Vec<RunEvent>>> {
    let mut out = vec![vec![events.to_vec()]];
    let n = events.len();
    // Rotations and reversals of the one-per-batch order: the outer spans first, the
    // inner ones first, interleaved both ways.
    for order in [
        (0..n).collect::<Vec<_>>(),
        (0..n).rev().collect(),
        (0..n)
            .filter(|i| i % 2 == 1)
            .chain((0..n).filter(|i| i % 2 == 0))
            .collect(),
        (0..n)
            .filter(|i| i % 2 == 0)
            .chain((0..n).filter(|i| i % 2 == 1))
            .collect(),
    ] {
        out.push(order.iter().map(|&i| vec![events[i].clone()]).collect());
    }
    out
}

#[test]
fn two_calls_traced_twice_are_two_responses_three_are_a_repeat() {
    let now = Instant::now();
    for same_start in [false, true] {
        for arrival in arrivals(&doubled(2, 7, same_start)) {
            let r = registry();
            for batch in arrival {
                r.observe(batch, now);
            }
            assert_eq!(found(&r), vec![], "same_start {same_start}");
        }
        for arrival in arrivals(&doubled(3, 7, same_start)) {
            let r = registry();
            let mut reported = Vec::new();
            for batch in arrival {
                reported.extend(r.observe(batch, now).into_iter().map(|d| d.span_id[0]));
            }
            // The third call's inner span completes it, as response 3.
            assert_eq!(
                found(&r),
                vec![("nudge".to_owned(), Pattern::RepeatedText, 22, Some(3))],
                "same_start {same_start}"
            );
            assert!(reported.contains(&22), "{reported:?}");
        }
    }
}

#[test]
fn the_inner_span_arriving_first_is_reported_once() {
    // Exporters send a span when it ends: the inner spans first.
    let now = Instant::now();
    let events = doubled(3, 7, false);
    let r = registry();
    let mut reported = Vec::new();
    for i in [1, 0, 3, 2, 5, 4] {
        reported.extend(
            r.observe(vec![events[i].clone()], now)
                .into_iter()
                .map(|d| d.span_id[0]),
        );
    }
    assert_eq!(reported, vec![22]);
}

#[test]
fn only_the_same_response_under_its_own_parent_is_one() {
    let now = Instant::now();
    // A different text, or tool calls, nested in a text response: two responses.
    let r = registry();
    r.observe(
        vec![
            response(10, 0, 100, 150, Some(7)),
            response(20, 10, 105, 140, Some(8)),
            response(11, 0, 200, 250, Some(7)),
            response(21, 11, 205, 240, None),
            response(12, 0, 300, 350, Some(7)),
            response(13, 0, 400, 450, Some(7)),
        ],
        now,
    );
    // 10, 20 (other text: streak 1), 11, 21 (tool calls: reset), 12, 13: no streak of 3.
    assert_eq!(found(&r), vec![]);
    // The same text under another span (siblings, or another trace) is another response.
    let r = registry();
    let mut other_trace = response(21, 10, 120, 130, Some(7));
    other_trace.trace_id = [2; 16].into();
    r.observe(
        vec![
            response(10, 0, 100, 150, Some(7)),
            response(20, 10, 105, 115, Some(7)),
            other_trace,
            response(22, 11, 140, 145, Some(7)),
        ],
        now,
    );
    // 10 is outer (20 in it); 20, the other trace's span and 22 are three responses.
    assert_eq!(
        found(&r),
        vec![("nudge".to_owned(), Pattern::RepeatedText, 22, Some(3))]
    );
}

#[test]
fn a_chain_of_three_spans_is_one_response_in_any_order() {
    let now = Instant::now();
    let chain = |i: u8| {
        let start = 100 * u64::from(i + 1);
        [
            response(10 + i, 0, start, start + 50, Some(7)),
            response(20 + i, 10 + i, start + 5, start + 40, Some(7)),
            response(30 + i, 20 + i, start + 10, start + 30, Some(7)),
        ]
    };
    let two: Vec<RunEvent> = (0..2).flat_map(chain).collect();
    for arrival in arrivals(&two) {
        let r = registry();
        for batch in arrival {
            r.observe(batch, now);
        }
        assert_eq!(found(&r), vec![]);
        let events = r.events("r").unwrap();
        let outer = events
            .iter()
            .filter(|e| e.observation == Observation::OuterResponse)
            .count();
        assert_eq!(outer, 4);
    }
}
