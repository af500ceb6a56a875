//! Loop classes that recorded agent runs showed (docs/field.md), each as synthetic traces of
//! several agents and tools, not as the recorded files: the class is caught wherever it
//! occurs, and the legitimate work that looks like it stays quiet. Default config unless a
//! test says otherwise.

use crate::support::spans::*;
use loopwatch::config::Config;
use loopwatch::engine::Engine;
use serde_json::json;

/// (profile, call number, pattern, severity) of every detection of `scenario` (oracle
/// format) under `config`.
fn detections(config: &str, scenario: &serde_json::Value) -> Vec<(String, u64, String, String)> {
    let engine = Engine::from_config(&Config::from_toml(config).expect("config")).unwrap();
    let mut request = scenario_request(scenario, [9; 16], false);
    engine.process(&mut request, std::time::Instant::now());
    let found = engine
        .registry
        .detections(&hex::encode([9u8; 16]))
        .unwrap_or_default();
    let mut out = Vec::new();
    for profile in ["nudge", "stop"] {
        for (call, _, pattern, _, _, severity) in keys_of(&found, profile) {
            out.push((profile.to_string(), call.unwrap_or(0), pattern, severity));
        }
    }
    out
}

/// Words that differ in letters (edits that differ only in digits are one edit again).
const WORDS: [&str; 7] = ["alpha", "beta", "gamma", "delta", "eps", "zeta", "eta"];

/// One call per model response.
fn run(calls: Vec<serde_json::Value>) -> serde_json::Value {
    json!({"responses": calls.into_iter().map(|c| json!({"calls": [c]})).collect::<Vec<_>>()})
}

fn warn(call: u64, pattern: &str) -> (String, u64, String, String) {
    ("nudge".into(), call, pattern.into(), "warn".into())
}

/// A shell agent whose prose is run as a command: every retry is worded differently and
/// bash answers with one of two errors, by turns (the line counter changing each time).
fn prose_as_command(calls: usize) -> serde_json::Value {
    let words = [
        "First", "It", "There", "The", "We", "Now", "Let", "Maybe", "Still",
    ];
    run((0..calls)
        .map(|i| {
            let result = if i % 2 == 0 {
                format!(
                    "/bin/bash: line {}: unexpected EOF while looking for matching `''\n/bin/bash: line {}: syntax error: unexpected end of file",
                    1000 + 15 * i,
                    1001 + 15 * i
                )
            } else {
                format!(
                    "/bin/bash: line {}: DISCUSSION: command not found",
                    1000 + 15 * i
                )
            };
            json!({
                "tool": "bash",
                "args": {"command": format!("DISCUSSION\n{} we should look at attempt {i} again", words[i % words.len()])},
                "result": result,
            })
        })
        .collect())
}

#[test]
fn two_errors_by_turns_for_varied_commands_warn_at_the_sixth_call() {
    // Before: six calls of one outcome were needed, and these alternate, so nothing fired.
    assert_eq!(
        detections("", &prose_as_command(6)),
        [warn(6, "repeated_outcome")]
    );
    assert_eq!(detections("", &prose_as_command(5)), []);
    // `stop` needs twelve, and kills only on results compared as recorded: these were
    // equal only without their line counters, so it warns.
    let stop: Vec<_> = detections("", &prose_as_command(12))
        .into_iter()
        .filter(|d| d.0 == "stop")
        .collect();
    assert_eq!(
        stop,
        [("stop".into(), 12, "repeated_outcome".into(), "warn".into())]
    );
    // One outcome only, as before the key.
    let one = "[profiles.nudge]\nrepeated_outcome_forms = 1\n[profiles.stop]\nrepeated_outcome_forms = 1\n";
    assert_eq!(detections(one, &prose_as_command(12)), []);
}

#[test]
fn a_booking_refused_two_ways_for_changed_arguments_warns() {
    // A customer-service agent retries a change with other flights and payment methods;
    // the policy answers one of two refusals.
    let refusals = [
        "Error: the reservation cannot be modified: basic economy flights cannot be changed",
        "Error: payment method not found in the user profile",
    ];
    let scenario = run((0..6)
        .map(|i| {
            json!({
                "tool": "update_reservation_flights",
                "args": {"reservation_id": "4WQ150", "flight": format!("HAT{}", 100 + i), "payment_id": format!("card_{}", i % 3)},
                "result": refusals[(i / 2 + i) % 2].to_string(),
            })
        })
        .collect());
    assert_eq!(detections("", &scenario), [warn(6, "repeated_outcome")]);
}

#[test]
fn a_new_answer_or_work_in_between_is_no_streak() {
    // Five searches find nothing, the sixth finds something: no loop (each outcome of the
    // six must come at least twice).
    let mut calls: Vec<_> = (0..5)
        .map(|i| json!({"tool": "search_code", "args": {"query": format!("term{i}")}, "result": "No matches found in the repository"}))
        .collect();
    calls.push(json!({"tool": "search_code", "args": {"query": "parse_config"}, "result": "src/config.rs:12: fn parse_config(text: &str)"}));
    assert_eq!(detections("", &run(calls)), []);
    // Edit, test, edit, test…: the test fails one of two ways, but each edit is work and
    // its acknowledgement is no outcome, so no six outcomes come in a row.
    let calls: Vec<_> = (0..12)
        .map(|i| {
            if i % 2 == 0 {
                json!({"tool": "str_replace_editor", "args": {"path": "src/lib.rs", "old_str": WORDS[i / 2], "new_str": WORDS[i / 2 + 1]}, "result": "The file src/lib.rs has been edited."})
            } else {
                let failures = [
                    "FAILED tests/test_parse.py::test_empty - AssertionError",
                    "FAILED tests/test_parse.py::test_unicode - KeyError",
                ];
                let failure = failures[(i / 2) % 2];
                json!({"tool": "run_tests", "args": {"path": "tests/"}, "result": failure})
            }
        })
        .collect();
    assert_eq!(detections("", &run(calls)), []);
    // Three different outcomes by turns are not two.
    let errors = [
        "Error: connection refused by host",
        "Error: 404 page not found here",
        "Error: certificate expired for host",
    ];
    let calls: Vec<_> = (0..9)
        .map(|i| {
            let error = errors[i % 3];
            json!({"tool": "fetch_url", "args": {"url": format!("http://127.0.0.1/p{i}")}, "result": error})
        })
        .collect();
    assert_eq!(detections("", &run(calls.clone())), []);
    let three = "[profiles.nudge]\nrepeated_outcome_forms = 3\n";
    assert_eq!(
        detections(three, &run(calls)),
        [warn(6, "repeated_outcome")]
    );
}

/// test, edit, test, edit, test: a shell agent whose edits are `sed -i` commands given as
/// `edits[i]`; the test fails the same way each time.
fn edit_and_retry(edits: &[&str]) -> serde_json::Value {
    let test = json!({"tool": "bash", "args": {"command": "python -m pytest tests/test_config.py -q"}, "result": "FAILED tests/test_config.py::test_timeout - AssertionError: expected 10, got 5\n1 failed"});
    let mut calls = vec![test.clone()];
    for edit in edits {
        calls.push(json!({"tool": "bash", "args": {"command": edit}, "result": ""}));
        calls.push(test.clone());
    }
    run(calls)
}

#[test]
fn the_same_edit_at_a_shifted_line_is_the_same_edit_again() {
    // The same change applied where the line now is (12, then 14): one edit again, so the
    // unchanged test result after it counts, as after no edit at all.
    let shifted = edit_and_retry(&[
        "sed -i '12s/timeout = 5/timeout = 10/' app/config.py",
        "sed -i '14s/timeout = 5/timeout = 10/' app/config.py",
    ]);
    assert_eq!(detections("", &shifted), [warn(5, "repeated_result")]);
    // Two different edits are debugging: the same failure after each is what the agent
    // wanted to see.
    let different = edit_and_retry(&[
        "sed -i '12s/timeout = 5/timeout = 10/' app/config.py",
        "sed -i 's/return self.default/return self.value/' app/config.py",
    ]);
    assert_eq!(detections("", &different), []);
}

/// `find` in one directory after another, every answer empty: six near repeats.
fn find_everywhere() -> serde_json::Value {
    run(["/usr", "/opt", "/srv", "/home", "/var", "/etc"]
        .iter()
        .map(|dir| {
            json!({
                "tool": "bash",
                "args": {"command": format!("find {dir} -name \"*.java\" -type f")},
                "result": "",
            })
        })
        .collect())
}

#[test]
fn the_arguments_simhash_is_computed_only_while_a_profile_uses_near_repeat() {
    let near = |found: &[(String, u64, String, String)]| {
        found.iter().filter(|d| d.2 == "near_repeat").count()
    };
    // Default: nudge warns at the sixth near repeat.
    let default = Engine::from_config(&Config::default()).unwrap();
    assert!(default.comparer.near_signatures());
    assert_eq!(near(&detections("", &find_everywhere())), 1);
    // Off in every profile: no SimHash, no near_repeat.
    let off = "[profiles.nudge]\nnear_repeat = 0\n";
    let engine = Engine::from_config(&Config::from_toml(off).unwrap()).unwrap();
    assert!(!engine.comparer.near_signatures());
    assert_eq!(near(&detections(off, &find_everywhere())), 0);
    // A [[tools]] entry alone turns it on, for the tools it matches.
    let by_tool = "[profiles.nudge]\nnear_repeat = 0\n[[tools]]\nmatch = \"bash\"\nnear_repeat = 4\nprofiles = [\"nudge\"]\n";
    let engine = Engine::from_config(&Config::from_toml(by_tool).unwrap()).unwrap();
    assert!(engine.comparer.near_signatures());
    let found = detections(by_tool, &find_everywhere());
    let found: Vec<_> = found.iter().filter(|d| d.2 == "near_repeat").collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        (found[0].0.as_str(), found[0].3.as_str()),
        ("nudge", "warn")
    );
    assert!(
        found[0].1 < 6,
        "earlier than the default's sixth call: {found:?}"
    );
    // A reload turns it on and off again.
    let engine = Engine::from_config(&Config::from_toml(off).unwrap()).unwrap();
    engine.reload_detection(&Config::default()).unwrap();
    assert!(engine.comparer.near_signatures());
    engine
        .reload_detection(&Config::from_toml(off).unwrap())
        .unwrap();
    assert!(!engine.comparer.near_signatures());
}

/// Bulk work across different arguments whose answers differ only in what masking would take
/// out (a fresh id, the argument echoed back) stays quiet; the same failure for each
/// argument still warns.
#[test]
fn bulk_work_with_one_answer_per_argument_is_no_loop_but_one_failure_is() {
    let people = [
        "alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi",
    ];
    let ids = [
        "0b6f4a2e-1c3d-4e5f-8a9b-0c1d2e3f4a5b",
        "1a2b3c4d-5e6f-4a1b-9c2d-3e4f5a6b7c8d",
        "2c3d4e5f-6a7b-4c8d-8e9f-0a1b2c3d4e5f",
        "3d4e5f6a-7b8c-4d9e-9f0a-1b2c3d4e5f6a",
        "4e5f6a7b-8c9d-4e0f-8a1b-2c3d4e5f6a7b",
        "5f6a7b8c-9d0e-4f1a-9b2c-3d4e5f6a7b8c",
        "6a7b8c9d-0e1f-4a2b-8c3d-4e5f6a7b8c9d",
        "7b8c9d0e-1f2a-4b3c-9d4e-5f6a7b8c9d0e",
    ];
    let emails = run(people
        .iter()
        .zip(ids)
        .map(|(who, id)| {
            json!({
                "tool": "send_email",
                "args": {"to": format!("{who}@example.com"), "subject": "Your March invoice"},
                "result": format!("Email queued with id {id}"),
            })
        })
        .collect());
    assert_eq!(detections("", &emails), [], "one email per recipient");
    let lookup = |answer: &str| {
        run(people
            .iter()
            .map(|who| {
                json!({
                    "tool": "lookup_user",
                    "args": {"user": who},
                    "result": answer.replace("{who}", who),
                })
            })
            .collect())
    };
    assert_eq!(
        detections("", &lookup("User {who} is active, last login today")),
        [],
        "one answer per user"
    );
    let missing = detections(
        "",
        &lookup("No matches found for user {who} in the directory"),
    );
    assert_eq!(
        missing.first(),
        Some(&warn(6, "repeated_outcome")),
        "{missing:?}"
    );
}

/// A hostile tool name is detected as any other but kept cut to 256 bytes in what the
/// detection carries (signals, the API, `loop.*` attributes), not copied whole.
#[test]
fn a_huge_tool_name_is_kept_cut() {
    let name = "t".repeat(300_000);
    let calls = run((0..3)
        .map(|_| json!({"tool": name, "args": {"q": "same"}, "result": "same answer"}))
        .collect());
    let engine = Engine::from_config(&Config::default()).unwrap();
    let mut request = scenario_request(&calls, [9; 16], false);
    engine.process(&mut request, std::time::Instant::now());
    let found = engine.registry.detections(&hex::encode([9u8; 16])).unwrap();
    let first = found.first().expect("the loop is detected");
    assert_eq!(first.detection.pattern.as_str(), "repeated_result");
    let kept = &first.detection.tool_names[0];
    assert_eq!(kept.len(), loopwatch::engine::intern::MAX_NAME_BYTES);
    assert!(kept.starts_with("ttt") && kept.ends_with('…'));
}
