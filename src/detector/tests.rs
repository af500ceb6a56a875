//! Detector state-machine tests and helpers shared by the pattern tests.

use super::*;

fn fp(n: u8) -> Fingerprint {
    [n; 32]
}

/// A window record: observation `index`, `tool`, argument id `arg`, result id `result`.
pub(crate) fn rec(index: usize, tool: &str, arg: u8, result: u8) -> CallRecord {
    CallRecord {
        fingerprint: fp(arg),
        result: Some(result_key(&fp(result))),
        tool_name: tool.into(),
        index: u32::try_from(index).expect("a test index fits"),
        rule: 0,
        traits: CallTraits::default(),
    }
}

/// A record whose result was not captured.
pub(crate) fn rec_no_result(index: usize, tool: &str, arg: u8) -> CallRecord {
    CallRecord {
        result: None,
        ..rec(index, tool, arg, 0)
    }
}

fn call(tool: &str, arg: u8, result: Option<u8>) -> Observation {
    Observation::ToolCall {
        tool_name: tool.into(),
        call_fingerprint: Some(fp(arg)),
        result_fingerprint: result.map(fp),
        traits: CallTraits::default(),
    }
}

fn text(t: &str) -> Observation {
    Observation::TextResponse {
        text_fingerprint: crate::fingerprint::text_fingerprint(t),
    }
}

fn nudge() -> Arc<ProfileSettings> {
    Arc::new(ProfileSettings::nudge())
}

#[test]
fn repeated_result_then_consumption_then_recurrence() {
    let obs: Vec<_> = (0..7).map(|_| call("read", 1, Some(9))).collect();
    let got = detect_all(&nudge(), &obs);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].pattern, Pattern::RepeatedResult);
    assert_eq!(got[0].members, vec![0, 1, 2]);
    assert_eq!(got[0].call, Some(3));
    assert_eq!(got[0].severity, Severity::Warn);
    assert_eq!(got[0].window, 10);
    assert_eq!(got[0].fingerprints, vec![fp(1)]);
    // the first three are consumed: the loop must build up again
    assert_eq!(got[1].members, vec![3, 4, 5]);
    assert_eq!(got[1].call, Some(6));
}

#[test]
fn polling_with_changing_results_is_info() {
    let obs: Vec<_> = (0..5).map(|i| call("poll", 1, Some(i))).collect();
    let got = detect_all(&nudge(), &obs);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].pattern, Pattern::RepeatedCall);
    assert_eq!(got[0].count, 5);
    assert_eq!(got[0].severity, Severity::Info);
    let stop = Arc::new(ProfileSettings::stop());
    let obs: Vec<_> = (0..10).map(|_| call("poll", 1, None)).collect();
    let got = detect_all(&stop, &obs);
    assert_eq!(got.len(), 1);
    assert_eq!(
        (got[0].pattern, got[0].severity),
        (Pattern::RepeatedCall, Severity::Kill)
    );
}

#[test]
fn calls_without_arguments_count_ordinals_but_take_no_slot() {
    let hidden = Observation::ToolCall {
        tool_name: "read".into(),
        call_fingerprint: None,
        result_fingerprint: Some(fp(9)),
        traits: Default::default(),
    };
    let obs = vec![
        call("read", 1, Some(9)),
        hidden.clone(),
        call("read", 1, Some(9)),
        hidden,
        call("read", 1, Some(9)),
    ];
    let got = detect_all(&nudge(), &obs);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].call, Some(5));
    assert_eq!(got[0].members, vec![0, 2, 4]);
}

#[test]
fn window_bounds_what_is_seen() {
    // a, then 9 distinct calls, then a twice: the first a has left the 10-call window
    let mut obs = vec![call("a", 1, Some(0))];
    obs.extend((0..9).map(|i| call("x", 10 + i, Some(0))));
    obs.push(call("a", 1, Some(0)));
    obs.push(call("a", 1, Some(0)));
    assert!(detect_all(&nudge(), &obs).is_empty());
    obs.push(call("a", 1, Some(0)));
    let got = detect_all(&nudge(), &obs);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].members, vec![10, 11, 12]);
}

#[test]
fn text_streak_reset_by_calls_and_ordinals() {
    let obs = vec![
        text("done"),
        text("done"),
        Observation::ToolCallResponse,
        call("a", 1, Some(0)),
        text("done"),
        text("done"),
        text("done"),
    ];
    let got = detect_all(&nudge(), &obs);
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].pattern, Pattern::RepeatedText);
    assert_eq!(got[0].response, Some(5));
    assert_eq!(got[0].call, None);
    assert_eq!(got[0].members, vec![4, 5, 6]);
    assert_eq!(got[0].count, 3);
    assert!(got[0].tool_names.is_empty());
    // a bare tool call (no response span) resets the streak too
    let obs = vec![
        text("x"),
        text("x"),
        call("a", 1, None),
        text("x"),
        text("x"),
    ];
    assert!(detect_all(&nudge(), &obs).is_empty());
}

#[test]
fn priority_prefers_repeated_result_over_repeated_call() {
    let obs: Vec<_> = (0..5)
        .map(|_| call("a", 1, None))
        .chain([call("a", 1, Some(3))])
        .collect();
    let settings = Arc::new(ProfileSettings {
        repeated_result: 2,
        ..ProfileSettings::nudge()
    });
    let got = detect_all(&settings, &obs);
    // 5 calls without results: repeated_call at 5; then the sixth starts over
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].pattern, Pattern::RepeatedCall);
    let obs: Vec<_> = (0..2).map(|_| call("a", 1, Some(3))).collect();
    assert_eq!(
        detect_all(&settings, &obs)[0].pattern,
        Pattern::RepeatedResult
    );
}

#[test]
fn degenerate_settings_never_panic() {
    let zero = Arc::new(ProfileSettings {
        window: 0,
        repeated_call: 0,
        repeated_result: 0,
        alternating_calls: 0,
        cycle: 0,
        max_cycle_period: usize::MAX,
        repeated_text: 0,
        ..ProfileSettings::nudge()
    });
    let obs = vec![call("a", 1, Some(1)), text("t"), call("b", 2, None)];
    // every threshold 0: every pattern off
    assert!(detect_all(&zero, &obs).is_empty());
    let huge = Arc::new(ProfileSettings {
        window: 4,
        cycle: usize::MAX,
        max_cycle_period: usize::MAX,
        alternating_calls: usize::MAX,
        ..ProfileSettings::nudge()
    });
    let obs: Vec<_> = (0..8).map(|i| call("a", (i % 3) as u8, Some(0))).collect();
    assert!(detect_all(&huge, &obs).is_empty());
    // A history as long as usize allows: room for what arrives, no overflow; a hint too
    // large to allocate reserves nothing and the detector still works.
    let mut detector = Detector::new(huge.clone());
    detector.reserve_calls(usize::MAX);
    assert_eq!(detector.history.capacity(), 0);
    assert!(obs.iter().all(|o| detector.observe(o).is_none()));
    let mut detector = Detector::new(huge);
    detector.reserve_calls(5);
    assert_eq!(detector.history.capacity(), 5);
}

#[test]
fn a_four_call_cycle_is_caught_past_the_window_by_both_profiles() {
    // read → edit → test → check, the same arguments each round (results change)
    let round = ["read", "edit", "test", "check"];
    let obs: Vec<_> = (0..24)
        .map(|i| call(round[i % 4], (i % 4) as u8, Some(i as u8)))
        .collect();
    for (base, first_call) in [
        (ProfileSettings::nudge(), 12),
        (ProfileSettings::stop(), 24),
    ] {
        let default = Arc::new(base.clone());
        assert!(
            detect_all(&default, &obs).is_empty(),
            "{}: period 4 is off by default (max_cycle_period 3)",
            base.name
        );
        let settings = Arc::new(ProfileSettings {
            max_cycle_period: 4,
            ..base
        });
        let got = detect_all(&settings, &obs);
        assert_eq!(got[0].pattern, Pattern::Cycle, "{}", settings.name);
        assert_eq!(got[0].call, Some(first_call));
        assert_eq!(got[0].members.len(), first_call);
        assert_eq!(got[0].severity, Severity::Info); // results changed: progress
    }
}

#[test]
fn escalation_and_run_scope_in_the_detector() {
    let settings = Arc::new(ProfileSettings {
        escalate_after: 2,
        repeated_result_scope: ResultScope::Run,
        ..ProfileSettings::nudge()
    });
    // the same failing call every 6th call: never 3 in a window of 10 … but in the run
    let obs: Vec<_> = (0..36)
        .map(|i| match i % 6 {
            0 => call("bash", 1, Some(9)),
            _ => call("other", 10 + i as u8, None),
        })
        .collect();
    assert!(detect_all(&nudge(), &obs).is_empty());
    let got: Vec<_> = detect_all(&settings, &obs)
        .into_iter()
        .map(|d| (d.call, d.pattern, d.severity))
        .collect();
    assert_eq!(
        got,
        [
            (Some(13), Pattern::RepeatedResult, Severity::Warn),
            (Some(31), Pattern::RepeatedResult, Severity::Kill)
        ]
    );
}

#[test]
fn reserving_calls_allocates_once_up_to_the_history_and_changes_no_detection() {
    let settings = nudge();
    let history = settings.history();
    let obs: Vec<_> = (0..history as u8 + 5)
        .map(|i| call("read", i % 2, Some(1)))
        .collect();
    let mut hinted = Detector::new(settings.clone());
    hinted.reserve_calls(obs.len());
    // A call joins a full history before the oldest leaves: one slot more.
    assert_eq!(
        hinted.history.capacity(),
        history + 1,
        "capped at the history"
    );
    let mut plain = Detector::new(settings.clone());
    let mut seen = (Vec::new(), Vec::new());
    for o in &obs {
        seen.0
            .extend(hinted.observe(o).map(|d| (d.pattern, d.members)));
        seen.1
            .extend(plain.observe(o).map(|d| (d.pattern, d.members)));
        assert_eq!(hinted.history.capacity(), history + 1, "never grown again");
    }
    assert!(!seen.0.is_empty());
    assert_eq!(seen.0, seen.1);
    let mut small = Detector::new(settings);
    small.reserve_calls(1);
    assert_eq!(small.history.capacity(), 1, "a one-call run holds one slot");
}

#[test]
fn call_numbers_count_every_call_and_transient_errors_count_toward_no_pattern() {
    let mut transient = call("fetch", 2, Some(5));
    if let Observation::ToolCall { traits, .. } = &mut transient {
        *traits = CallTraits::with_flags(CallTraits::ERROR | CallTraits::TRANSIENT);
    }
    // three identical 429s between identical reads: no repeated_result of their own, no
    // break of the reads' streak, and the completing read is call 6, as counted in the trace
    let obs = vec![
        call("read", 1, Some(9)),
        transient.clone(),
        call("read", 1, Some(9)),
        transient.clone(),
        transient,
        call("read", 1, Some(9)),
    ];
    let got = detect_all(&nudge(), &obs);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].pattern, got[0].call, got[0].members.clone()),
        (Pattern::RepeatedResult, Some(6), vec![0, 2, 5])
    );
}

#[test]
fn edit_and_retry_is_work_the_same_edit_again_is_not() {
    let edit = |arg: u8, shape: u16| {
        let mut traits = CallTraits::with_flags(CallTraits::WRITES);
        traits.set_shape(shape);
        Observation::ToolCall {
            tool_name: "edit".into(),
            call_fingerprint: Some(fp(arg)),
            result_fingerprint: Some(fp(0)),
            traits,
        }
    };
    let test = || call("bash", 1, Some(7));
    // new edits between the same test: debugging
    let new_edits = vec![
        test(),
        edit(2, 20),
        test(),
        edit(3, 30),
        test(),
        edit(4, 40),
        test(),
    ];
    assert_eq!(detect_all(&nudge(), &new_edits), vec![]);
    // the same edit again (another line number: the same shape): a loop
    let same_edit = vec![test(), edit(2, 20), test(), edit(3, 20), test()];
    let got = detect_all(&nudge(), &same_edit);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        (got[0].pattern, got[0].call),
        (Pattern::RepeatedResult, Some(5))
    );
    // with mutation_resets off, edits change nothing
    let off = Arc::new(ProfileSettings {
        mutation_resets: false,
        ..ProfileSettings::nudge()
    });
    assert_eq!(detect_all(&off, &new_edits)[0].call, Some(5));
}

#[test]
fn a_window_record_is_88_bytes() {
    // 104 bytes before results were kept by their first 16 bytes and the index as a u32:
    // a 10-call window then fits the allocator's per-thread cache (under 1 KiB).
    assert_eq!(std::mem::size_of::<CallRecord>(), 88);
    let fingerprint = fp(7);
    assert_eq!(result_key(&fingerprint), [7; 16]);
}
