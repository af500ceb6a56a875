//! One test per preset (`preset = "NAME"` in a profile), each on a run where the guard's
//! documented behaviour is known (`shared/PRESETS.md`): the detection comes at the call
//! where that guard fires, and not before.

use std::sync::Arc;

use loopwatch::config::Config;
use loopwatch::detector::{detect_all, Observation, Pattern, ProfileSettings, Severity};

fn preset(name: &str) -> Arc<ProfileSettings> {
    let config = Config::from_toml(&format!("[profiles.p]\npreset = \"{name}\"\n")).unwrap();
    let profile = config
        .profiles()
        .unwrap()
        .into_iter()
        .find(|p| p.name == "p")
        .expect("profile p");
    Arc::new(profile)
}

/// A call of `tool` with argument id `arg` and result id `result` (`None`: not captured).
fn call(tool: &str, arg: u8, result: Option<u8>) -> Observation {
    Observation::ToolCall {
        tool_name: Arc::from(tool),
        call_fingerprint: Some([arg; 32]),
        result_fingerprint: result.map(|r| [r; 32]),
    }
}

fn text(t: &str) -> Observation {
    Observation::TextResponse {
        text_fingerprint: loopwatch::fingerprint::text_fingerprint(t),
    }
}

/// (1-based call or response ordinal, pattern, count, severity) of every detection.
fn fired(
    profile: &Arc<ProfileSettings>,
    run: &[Observation],
) -> Vec<(usize, Pattern, usize, Severity)> {
    detect_all(profile, run)
        .into_iter()
        .map(|d| {
            (
                d.call.or(d.response).unwrap(),
                d.pattern,
                d.count,
                d.severity,
            )
        })
        .collect()
}

#[test]
fn pydantic_ai_harness_5_in_10_same_result_3_alternation_3_monologue_3() {
    let p = preset("pydantic-ai-harness");
    // exact repetition: read 5 times among 9 calls (results not captured)
    let mut run = Vec::new();
    for i in 0..5 {
        run.push(call("read", 1, None));
        if i < 4 {
            run.push(call("other", 10 + i, None));
        }
    }
    assert_eq!(
        fired(&p, &run),
        [(9, Pattern::RepeatedCall, 5, Severity::Warn)]
    );
    // error cycle: the same call, the same error, 3 times
    let run = vec![call("fetch", 1, Some(9)); 3];
    assert_eq!(
        fired(&p, &run),
        [(3, Pattern::RepeatedResult, 3, Severity::Warn)]
    );
    // alternation: 3 cycles
    let run: Vec<_> = (0..6)
        .map(|i| call(["a", "b"][i % 2], (i % 2) as u8, None))
        .collect();
    assert_eq!(
        fired(&p, &run),
        [(6, Pattern::AlternatingCalls, 3, Severity::Warn)]
    );
    // monologue: 3 identical text-only responses
    let run = vec![text("I will now"), text("i will  NOW"), text("I will now")];
    assert_eq!(
        fired(&p, &run),
        [(3, Pattern::RepeatedText, 3, Severity::Warn)]
    );
    // no generic cycle: A,B,C × 4 is not reported
    let run: Vec<_> = (0..12)
        .map(|i| call("t", (i % 3) as u8, Some(i as u8)))
        .collect();
    assert_eq!(fired(&p, &run), []);
}

#[test]
fn sliding_window_4_in_10_and_nothing_else() {
    let p = preset("sliding-window");
    // the same call with the same result: the guard ignores results, fires on the 4th
    let run = vec![call("search", 1, Some(2)); 4];
    assert_eq!(
        fired(&p, &run),
        [(4, Pattern::RepeatedCall, 4, Severity::Warn)]
    );
    // 4 occurrences spread over more than 10 calls: never
    let mut run = Vec::new();
    for i in 0..4 {
        run.push(call("search", 1, None));
        for j in 0..3 {
            run.push(call("other", 10 + 3 * i + j, None));
        }
    }
    assert_eq!(fired(&p, &run), []);
    // alternation and text are off
    let run: Vec<_> = (0..6)
        .map(|i| call(["a", "b"][i % 2], (i % 2) as u8, None))
        .collect();
    assert_eq!(fired(&p, &run), []);
    assert_eq!(fired(&p, &[text("x"), text("x"), text("x")]), []);
}

#[test]
fn keelwave_any_call_seen_twice() {
    let p = preset("keelwave");
    // A, B, A: the repetition is reported at its second occurrence
    let run = vec![
        call("a", 1, Some(1)),
        call("b", 2, Some(2)),
        call("a", 1, Some(1)),
    ];
    assert_eq!(
        fired(&p, &run),
        [(3, Pattern::RepeatedCall, 2, Severity::Warn)]
    );
    // far apart (50 calls) still counts
    let mut run = vec![call("a", 1, None)];
    run.extend((0..50).map(|i| call("x", 10 + i, None)));
    run.push(call("a", 1, None));
    assert_eq!(
        fired(&p, &run),
        [(52, Pattern::RepeatedCall, 2, Severity::Warn)]
    );
}

#[test]
fn pydantic_deep_3_identical_and_alternation_3() {
    let p = preset("pydantic-deep");
    let run = vec![call("ls", 1, None); 3];
    assert_eq!(
        fired(&p, &run),
        [(3, Pattern::RepeatedCall, 3, Severity::Warn)]
    );
    // documented difference: its `repeated` needs 3 *consecutive* identical calls and its
    // `alternating` waits for the 6th call of A,B,A,B,A,B; ours counts 3 of the last 6
    // calls, so A,B,A,B,A already fires at call 5 (one call earlier, same loop)
    let run: Vec<_> = (0..6)
        .map(|i| call(["a", "b"][i % 2], (i % 2) as u8, None))
        .collect();
    assert_eq!(
        fired(&p, &run),
        [(5, Pattern::RepeatedCall, 3, Severity::Warn)]
    );
    // noop: the same call returning the same result 3 times
    let run = vec![call("read", 1, Some(4)); 3];
    assert_eq!(
        fired(&p, &run),
        [(3, Pattern::RepeatedResult, 3, Severity::Warn)]
    );
    // two identical calls are fine
    assert_eq!(fired(&p, &[call("ls", 1, None), call("ls", 1, None)]), []);
}

#[test]
fn praisonai_no_progress_warns_at_4_and_halts_at_8_mutating_tools_at_3() {
    let p = preset("praisonai");
    // the same read with the same result, other (distinct) calls in between
    let mut run = Vec::new();
    for i in 0..8u8 {
        run.push(call("read_file", 1, Some(7)));
        run.push(call("write_file", 100 + i, Some(i)));
    }
    assert_eq!(
        fired(&p, &run),
        [
            (7, Pattern::RepeatedResult, 4, Severity::Warn),
            (15, Pattern::RepeatedResult, 4, Severity::Kill)
        ]
    );
    // a mutating tool repeated 3 times (results not captured)
    let run = vec![call("bash", 5, None); 3];
    assert_eq!(
        fired(&p, &run),
        [(3, Pattern::RepeatedCall, 3, Severity::Warn)]
    );
    // an idempotent one only at 5
    let run = vec![call("list_files", 5, None); 5];
    assert_eq!(
        fired(&p, &run),
        [(5, Pattern::RepeatedCall, 5, Severity::Warn)]
    );
}

#[test]
fn a_preset_key_can_be_overridden() {
    let config =
        Config::from_toml("[profiles.p]\npreset = \"pydantic-deep\"\naction = \"kill\"\n").unwrap();
    let p = config
        .profiles()
        .unwrap()
        .into_iter()
        .find(|p| p.name == "p")
        .unwrap();
    assert_eq!(p.repeated_call, 3);
    let run = vec![call("ls", 1, None); 3];
    assert_eq!(
        fired(&Arc::new(p), &run),
        [(3, Pattern::RepeatedCall, 3, Severity::Kill)]
    );
}
