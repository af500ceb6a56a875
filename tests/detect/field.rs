//! Detection on recorded runs of real agents (issue 29): a selection of `shared/field/` in
//! `tests/fixtures/field/` (README there), scanned with the default config as `loopwatch
//! scan` reads it. The loops a person found in them are caught, by the rule that should
//! catch each, and the legitimate work they contain (edit and re-run the same test, `cd ..`
//! up a tree, successful runs) draws no warning.

use std::path::PathBuf;

use loopwatch::config::Config;
use loopwatch::detector::{Evidence, Severity};
use loopwatch::engine::Engine;

/// One detection as compared here: profile, pattern, severity, call number, evidence.
type Found = (String, &'static str, Severity, Option<usize>, Evidence);

fn detections(run: &str) -> Vec<Found> {
    detections_with(run, &Config::default())
}

fn detections_with(run: &str, config: &Config) -> Vec<Found> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/field")
        .join(run);
    let engine = Engine::from_config(config).expect("config");
    loopwatch::cli::scan::scan(&engine, std::slice::from_ref(&path))
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut found: Vec<Found> = engine
        .registry
        .runs()
        .into_iter()
        .flat_map(|r| r.detections)
        .map(|d| {
            (
                d.profile.name.clone(),
                d.detection.pattern.as_str(),
                d.detection.severity,
                d.detection.call,
                d.detection.evidence,
            )
        })
        .collect();
    found.sort_by(|a, b| (&a.0, a.3).cmp(&(&b.0, b.3)));
    found
}

/// The first warn-or-kill detection of `profile`.
fn first(found: &[Found], profile: &str) -> Option<Found> {
    found
        .iter()
        .find(|d| d.0 == profile && d.2 >= Severity::Warn)
        .cloned()
}

fn warned(found: &[Found]) -> bool {
    found.iter().any(|d| d.2 >= Severity::Warn)
}

#[test]
fn a_volatile_shell_counter_no_longer_hides_a_loop() {
    // `cd fastjson/` 25 times: `/bin/bash: line 13008: cd: fastjson/: No such file or
    // directory`, the counter up by 15 each time. Before: info "progress" ×7, no warning.
    let found = detections("swe-agent/deepseek-chat-v2__fasterxml__jackson-core-729.json");
    let nudge = first(&found, "nudge").expect("warned");
    assert_eq!(
        nudge,
        (
            "nudge".into(),
            "repeated_result",
            Severity::Warn,
            Some(9),
            Evidence::Noise
        )
    );
    // `stop` sees the loop at call 12, but results compared without their noise warn: a
    // kill rests on results compared as recorded, unless `inferred_kills` says otherwise.
    let stop = first(&found, "stop").expect("stop warned");
    assert_eq!(
        (stop.1, stop.2, stop.3),
        ("repeated_result", Severity::Warn, Some(12))
    );
    assert!(found.iter().all(|d| d.2 < Severity::Kill), "{found:?}");
    let config = Config::from_toml("[profiles.stop]\ninferred_kills = true\n").expect("config");
    let found = detections_with(
        "swe-agent/deepseek-chat-v2__fasterxml__jackson-core-729.json",
        &config,
    );
    let stop = first(&found, "stop").expect("killed");
    assert_eq!(
        (stop.1, stop.2, stop.3, stop.4),
        ("repeated_result", Severity::Kill, Some(12), Evidence::Noise)
    );
}

#[test]
fn a_successful_run_is_warned_of_its_noisy_loop_but_not_killed() {
    // `javac …` 20 times, `/bin/bash: line 62215: javac: command not found`, the counter up
    // by 15 each time. The run is labelled resolved (its one edit, at call 3, was the fix;
    // the cost limit submitted it): a loop worth a warning, never a kill by default.
    let found = detections("swe-agent/deepseek-chat-v2__googlecontainertools__jib-4035.json");
    let nudge = first(&found, "nudge").expect("warned");
    assert_eq!(
        (nudge.1, nudge.2, nudge.3, nudge.4),
        ("repeated_result", Severity::Warn, Some(8), Evidence::Noise)
    );
    assert!(found.iter().all(|d| d.2 < Severity::Kill), "{found:?}");
}

#[test]
fn the_same_error_for_different_arguments_is_a_loop() {
    // Prose run as a command, retyped 58 times: the same `unexpected EOF` every time.
    let found = detections("swe-agent/doubao-pro-128k__apache__dubbo-9187.json");
    let nudge = first(&found, "nudge").expect("warned");
    assert_eq!(
        (nudge.1, nudge.2, nudge.3),
        ("repeated_outcome", Severity::Warn, Some(8))
    );
    let stop = first(&found, "stop").expect("killed");
    assert_eq!((stop.1, stop.3), ("repeated_outcome", Some(14)));
    // `search_dir "<term>"` for 40 terms, each `No matches found for "<term>" in /repo`:
    // the term is the argument echoed, masked before the outcomes are compared.
    let found = detections("swe-agent/doubao-pro-128k__fasterxml__jackson-core-973.json");
    let nudge = first(&found, "nudge").expect("warned");
    assert_eq!((nudge.1, nudge.3), ("repeated_outcome", Some(40)));
}

#[test]
fn a_result_growing_by_the_same_block_is_no_progress() {
    // `edit 1:1` prepends the same 13 lines at each call; the file view grows by them.
    // Before: info "progress" ×9.
    let found = detections("swe-agent/deepseek-coder-v2__fasterxml__jackson-databind-1650.json");
    let nudge = first(&found, "nudge").expect("warned");
    assert_eq!(
        nudge,
        (
            "nudge".into(),
            "repeated_call",
            Severity::Warn,
            Some(7),
            Evidence::Growth
        )
    );
}

#[test]
fn near_identical_commands_with_the_same_empty_answer_warn() {
    // `find /usr -name "java"`, `find /opt -name "java"`, … all empty; from call 30,
    // `find /var/lib -name "java*"`, `find /run …`, … six in a row by call 36 (nudge's
    // near_repeat is 6: five different arguments with one answer are quiet, scenario s15).
    let found = detections("swe-agent/doubao-pro-128k__fasterxml__jackson-core-980.json");
    let nudge = first(&found, "nudge").expect("warned");
    assert_eq!(
        (nudge.1, nudge.2, nudge.3),
        ("near_repeat", Severity::Warn, Some(36))
    );
    assert!(
        found.iter().all(|d| d.2 < Severity::Kill),
        "near repeats never kill by default: {found:?}"
    );
}

#[test]
fn the_judged_loops_of_successful_and_failed_runs_warn() {
    let sympy = detections("mini-swe-agent/sympy__sympy-15976.json");
    assert_eq!(
        first(&sympy, "nudge").map(|d| (d.1, d.3)),
        Some(("repeated_result", Some(21)))
    );
    let tau = detections("tau-bench/airline-task09-trial2.json");
    assert_eq!(
        first(&tau, "nudge").map(|d| (d.1, d.3)),
        Some(("repeated_result", Some(21)))
    );
}

#[test]
fn edit_and_retry_and_walking_a_tree_are_work() {
    for run in [
        // edit (sed -i) → re-run the same check → same output, twice
        "mini-swe-agent/matplotlib__matplotlib-22719.json",
        "mini-swe-agent/pylint-dev__pylint-6528.json",
        // `cd X` / `ls -F` down a tree, then `cd ..` three times (empty results)
        "swe-agent/deepseek-chat-v2__googlecontainertools__jib-4144.json",
    ] {
        let found = detections(run);
        assert!(!warned(&found), "{run}: {found:?}");
    }
}

#[test]
fn successful_runs_draw_nothing() {
    for run in [
        "mini-swe-agent/scikit-learn__scikit-learn-14629.json",
        "mini-swe-agent/sympy__sympy-16766.json",
        "tau-bench/airline-task24-trial1.json",
        "tau-bench/airline-task45-trial0.json",
    ] {
        assert_eq!(detections(run), vec![], "{run}");
    }
}
