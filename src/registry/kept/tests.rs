use super::*;

fn event(span_id: &[u8], parent: &[u8], mcp: Option<CallKey>) -> RunEvent {
    RunEvent {
        run_key: Arc::from("r"),
        trace_id: [3; 16].into(),
        span_id: span_id.into(),
        start_time_unix_nano: 5,
        end_time_unix_nano: 9,
        service_name: Some(Arc::from("svc")),
        agent_name: None,
        observation: Observation::ToolCall {
            tool_name: Arc::from("t"),
            call_fingerprint: Some([1; 32]),
            result_fingerprint: None,
            traits: Default::default(),
        },
        call: CallContext {
            parent_span_id: parent.into(),
            completeness: 5,
            call_id: Some(CallKey::of("call_1")),
            mcp_request: mcp,
            parts: Vec::new(),
            without_arguments: false,
            via_hop: false,
            result_on_sibling: false,
        },
    }
}

fn same(a: &RunEvent, b: &RunEvent) -> bool {
    (
        &a.run_key,
        &a.trace_id,
        &a.span_id,
        a.start_time_unix_nano,
        a.end_time_unix_nano,
        &a.service_name,
        &a.agent_name,
        &a.observation,
        &a.call,
    ) == (
        &b.run_key,
        &b.trace_id,
        &b.span_id,
        b.start_time_unix_nano,
        b.end_time_unix_nano,
        &b.service_name,
        &b.agent_name,
        &b.observation,
        &b.call,
    )
}

fn round_trip(event: &RunEvent) -> KeptEvent {
    let kept = KeptEvent::new(event, KeptEvent::origin_for(event, []));
    assert!(same(&kept.to_run_event(&event.run_key), event), "{event:?}");
    kept
}

#[test]
fn a_kept_event_gives_back_the_event_and_valid_ids_stay_inline() {
    assert_eq!(std::mem::size_of::<KeptEvent>(), 128);
    let key: Arc<str> = Arc::from("r");
    let valid = event(&[1; 8], &[2; 8], None);
    let kept = round_trip(&valid);
    assert!(kept.rare.is_none());
    assert_eq!(
        (kept.span_id(), kept.parent_span_id()),
        (&[1; 8][..], &[2; 8][..])
    );
    // Long and empty ids, an MCP request: kept exactly, in the rare box.
    let odd = event(&[4; 12], b"", Some(CallKey::of("s\0r")));
    let kept_odd = KeptEvent::new(&odd, KeptEvent::origin_for(&odd, [&kept.origin]));
    assert!(
        Arc::ptr_eq(&kept.origin, &kept_odd.origin),
        "same trace, names and tool"
    );
    assert!(same(&kept_odd.to_run_event(&key), &odd));
    let other_agent = RunEvent {
        agent_name: Some(Arc::from("a")),
        ..valid.clone()
    };
    let origin = KeptEvent::origin_for(&other_agent, [&kept.origin]);
    assert!(!Arc::ptr_eq(&kept.origin, &origin));
    assert_eq!(origin.agent_name.as_deref(), Some("a"));
    let other_tool = RunEvent {
        observation: Observation::ToolCall {
            tool_name: Arc::from("u"),
            call_fingerprint: None,
            result_fingerprint: None,
            traits: Default::default(),
        },
        ..valid.clone()
    };
    let origin = KeptEvent::origin_for(&other_tool, [&kept.origin]);
    assert_eq!(origin.tool_name.as_deref(), Some("u"));
}

#[test]
fn observations_and_end_times_come_back_exactly() {
    let base = event(&[1; 8], &[2; 8], None);
    for observation in [
        Observation::TextResponse {
            text_fingerprint: [7; 32],
        },
        Observation::ToolCallResponse,
        Observation::ToolResult {
            tool_name: Arc::from("t"),
            result_fingerprint: [6; 32],
            traits: Default::default(),
        },
        Observation::ToolCall {
            tool_name: Arc::from("t"),
            call_fingerprint: None,
            result_fingerprint: Some([0; 32]),
            traits: Default::default(),
        },
        Observation::ToolCall {
            tool_name: Arc::from(""),
            call_fingerprint: Some([0; 32]),
            result_fingerprint: Some([9; 32]),
            traits: Default::default(),
        },
    ] {
        let kept = round_trip(&RunEvent {
            observation: observation.clone(),
            ..base.clone()
        });
        assert_eq!(kept.observation(), observation);
        assert!(kept.rare.is_none());
    }
    // 40-bit durations inline; an end before the start or later than that, in rare.
    for (start, end, inline) in [
        (5, 5, true),
        (u64::MAX - MAX_DURATION, u64::MAX, true),
        (0, MAX_DURATION + 1, false),
        (9, 5, false),
        (u64::MAX, 0, false),
    ] {
        let kept = round_trip(&RunEvent {
            start_time_unix_nano: start,
            end_time_unix_nano: end,
            ..base.clone()
        });
        assert_eq!(kept.end_time_unix_nano(), end);
        assert_eq!(kept.rare.is_none(), inline, "{start} {end}");
    }
    let mut kept = round_trip(&RunEvent {
        call: CallContext {
            without_arguments: true,
            result_on_sibling: true,
            ..base.call.clone()
        },
        ..base.clone()
    });
    assert!(kept.without_arguments() && kept.result_on_sibling());
    kept.set_without_arguments(false);
    kept.set_result_fingerprint([4; 32], Default::default());
    assert!(!kept.without_arguments());
    assert_eq!(
        (kept.call_fingerprint(), kept.result_fingerprint()),
        (Some(&[1; 32]), Some(&[4; 32]))
    );
}

#[test]
fn a_run_and_its_detectors_fit_their_allocation_classes() {
    // One `Box<RunState>` per run held: at 248 bytes it takes a 256-byte allocator chunk
    // (glibc adds 8 and rounds to 16); 256 more would take 272 (issue 33, idle runs).
    assert_eq!(std::mem::size_of::<crate::detector::Detector>(), 64);
    assert_eq!(
        std::mem::size_of::<super::super::run_state::RunState>(),
        248
    );
}
