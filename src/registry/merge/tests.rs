use super::*;
use crate::detector::Observation;
use crate::registry::{CallContext, Registry, RegistryConfig};
use std::time::Instant;

fn registry() -> Registry {
    Registry::new(
        vec![crate::detector::ProfileSettings::nudge()],
        RegistryConfig::default(),
    )
}

fn tool(span: u8, parent: u8, start: u64, call: Option<u8>, result: Option<u8>) -> RunEvent {
    RunEvent {
        run_key: Arc::from("r"),
        trace_id: [1; 16].into(),
        span_id: [span; 8].into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 10,
        service_name: None,
        agent_name: None,
        observation: Observation::ToolCall {
            tool_name: Arc::from("t"),
            call_fingerprint: call.map(|c| [c; 32]),
            result_fingerprint: result.map(|r| [r; 32]),
        },
        call: CallContext {
            parent_span_id: if parent == 0 {
                Default::default()
            } else {
                [parent; 8].into()
            },
            completeness: 4,
            without_arguments: call.is_none(),
            ..CallContext::default()
        },
    }
}

fn calls(r: &Registry) -> usize {
    r.run("r").map_or(0, |s| s.tool_calls)
}

fn without_arguments(r: &Registry) -> u64 {
    r.stats()
        .tool_calls_without_arguments
        .load(std::sync::atomic::Ordering::Relaxed)
}

#[test]
fn a_call_traced_twice_counts_without_arguments_only_if_no_span_had_them() {
    let now = Instant::now();
    // Outer span with arguments, inner span (child, same tool) without, in one request
    // (either order in it): one call, with arguments.
    for batch in [
        vec![
            tool(1, 0, 100, Some(7), Some(9)),
            tool(2, 1, 101, None, None),
        ],
        vec![
            tool(2, 1, 101, None, None),
            tool(1, 0, 100, Some(7), Some(9)),
        ],
    ] {
        let r = registry();
        r.observe(batch, now);
        assert_eq!((calls(&r), without_arguments(&r)), (1, 0));
    }
    // The outer span first, the inner one in a later request: absorbed, not counted.
    let r = registry();
    r.observe(vec![tool(1, 0, 100, Some(7), None)], now);
    r.observe(vec![tool(2, 1, 101, None, Some(9))], now);
    assert_eq!((calls(&r), without_arguments(&r)), (1, 0));
    // Neither span captured arguments (content capture off): one call, counted once.
    let r = registry();
    r.observe(vec![tool(1, 0, 100, None, None)], now);
    r.observe(vec![tool(2, 1, 101, None, None)], now);
    r.observe(vec![tool(2, 1, 101, None, None)], now); // an identical re-export
    assert_eq!((calls(&r), without_arguments(&r)), (1, 1));
    // Two separate calls without arguments count twice.
    r.observe(vec![tool(3, 0, 200, None, None)], now);
    assert_eq!((calls(&r), without_arguments(&r)), (2, 2));
    // Documented limit: the inner span alone in an earlier request is placed (and
    // counted) before its outer span brings the arguments.
    let r = registry();
    r.observe(vec![tool(2, 1, 101, None, None)], now);
    r.observe(vec![tool(1, 0, 100, Some(7), None)], now);
    assert_eq!((calls(&r), without_arguments(&r)), (1, 1));
    // The outer copy replacing it is not counted again, with or without arguments.
    let r = registry();
    r.observe(vec![tool(2, 1, 101, None, None)], now);
    r.observe(vec![tool(1, 0, 100, None, None)], now);
    assert_eq!((calls(&r), without_arguments(&r)), (1, 1));
}

fn hop(span: u8, parent: u8, start: u64) -> CallHop {
    CallHop {
        run_key: Arc::from("r"),
        trace_id: [1; 16].into(),
        span_id: [span; 8].into(),
        parent_span_id: [parent; 8].into(),
        start_time_unix_nano: start,
    }
}

#[test]
fn a_late_hop_merges_only_the_tool_call_under_it_into_its_parent() {
    let now = Instant::now();
    // Two sequential identical calls, each client span (1, 4) → hop (2, 5) → server
    // span (3, 6); the server spans carry the result the client spans lack.
    let spans = || {
        vec![
            tool(1, 0, 100, Some(7), None),
            tool(3, 2, 102, Some(7), Some(9)),
            tool(4, 0, 200, Some(7), None),
            tool(6, 5, 202, Some(7), Some(9)),
        ]
    };
    for hops in [
        vec![hop(2, 1, 101), hop(5, 4, 201)],
        vec![hop(5, 4, 201), hop(2, 1, 101)],
    ] {
        let r = registry();
        r.observe(spans(), now);
        assert_eq!(calls(&r), 4, "no hop known yet: four spans, four calls");
        r.relink(&hops);
        assert_eq!(calls(&r), 2, "one call per client span");
        let run = r.runs.get("r").unwrap();
        let ids: Vec<&[u8]> = run.events.iter().map(|e| e.span_id()).collect();
        assert_eq!(ids, [&[1; 8][..], &[4; 8][..]]);
        assert!(run
            .events
            .iter()
            .all(|e| e.result_fingerprint() == Some(&[9; 32])));
        // Applying a hop again changes nothing.
        drop(run);
        r.relink(&hops);
        assert_eq!(calls(&r), 2);
    }
    // A hop before its outer span: the child takes the hop's parent, and the outer
    // span arriving later absorbs it; a hop is followed once, never twice.
    let r = registry();
    r.observe(vec![tool(3, 2, 102, Some(7), Some(9))], now);
    r.relink(&[hop(2, 1, 101)]);
    r.relink(&[hop(1, 8, 99)]);
    assert_eq!(r.runs.get("r").unwrap().events[0].parent_span_id(), [1; 8]);
    r.observe(vec![tool(1, 0, 100, Some(7), None)], now);
    assert_eq!(calls(&r), 1);
    // A hop whose parent is no tool call in the run merges nothing.
    let r = registry();
    r.observe(
        vec![
            tool(3, 2, 102, Some(7), Some(9)),
            tool(4, 0, 200, Some(7), None),
        ],
        now,
    );
    r.relink(&[hop(2, 8, 101)]);
    assert_eq!(calls(&r), 2);
}

#[test]
fn late_outer_span_replaces_its_inner_span_and_is_filled_from_it() {
    let r = registry();
    let now = Instant::now();
    // Inner (child of span 1) first, carrying the result; the outer has none.
    r.observe(vec![tool(2, 1, 101, Some(7), Some(9))], now);
    assert_eq!(calls(&r), 1);
    r.observe(vec![tool(1, 0, 100, Some(7), None)], now);
    assert_eq!(calls(&r), 1, "one call");
    let run = r.runs.get("r").unwrap();
    assert_eq!(
        run.events[0].span_id(),
        [1; 8],
        "the outer span is the call"
    );
    assert_eq!(
        run.events[0].observation(),
        Observation::ToolCall {
            tool_name: Arc::from("t"),
            call_fingerprint: Some([7; 32]),
            result_fingerprint: Some([9; 32]),
        }
    );
}

#[test]
fn unfinished_snapshot_is_replaced_identical_copy_is_a_duplicate() {
    let r = registry();
    let now = Instant::now();
    let mut snapshot = tool(1, 0, 100, Some(7), None);
    snapshot.end_time_unix_nano = 0;
    snapshot.call.completeness = 1;
    r.observe(vec![snapshot], now);
    let finished = tool(1, 0, 100, Some(7), Some(9));
    r.observe(vec![finished.clone()], now);
    r.observe(vec![finished], now);
    assert_eq!(calls(&r), 1);
    assert_eq!(
        r.stats()
            .duplicate_spans
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
    let run = r.runs.get("r").unwrap();
    assert_eq!(run.events[0].end_time_unix_nano(), 110);
}

#[test]
fn unclaimed_message_parts_are_bounded() {
    let r = registry();
    let now = Instant::now();
    let parts = (0..MAX_PENDING_PARTS + 10)
        .map(|i| ToolCallPart {
            call_id: CallKey::of(&format!("c{i}")),
            tool_name: Some(Arc::from("t")),
            call_fingerprint: Some([1; 32]),
            result_fingerprint: None,
        })
        .collect();
    let response = RunEvent {
        observation: Observation::ToolCallResponse,
        call: CallContext {
            parts,
            ..CallContext::default()
        },
        ..tool(9, 0, 1, None, None)
    };
    r.observe(vec![response], now);
    assert_eq!(r.runs.get("r").unwrap().calls.len(), MAX_PENDING_PARTS);
    // The newest parts are kept and fill a call that arrives later.
    let mut late = tool(3, 0, 50, None, None);
    late.call.call_id = Some(CallKey::of(&format!("c{}", MAX_PENDING_PARTS + 9)));
    r.observe(vec![late], now);
    let run = r.runs.get("r").unwrap();
    let call = run.events.iter().find(|e| e.span_id() == [3; 8]).unwrap();
    assert!(matches!(
        call.observation(),
        Observation::ToolCall {
            call_fingerprint: Some(_),
            ..
        }
    ));
}
