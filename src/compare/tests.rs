//! Tests of the comparison layer: the shared built-in patterns, results without noise,
//! effects and shell arguments in normal form.

use super::*;

#[test]
fn every_comparer_shares_one_compiled_builtin_set() {
    let (a, b) = (Comparer::default(), Comparer::default());
    let (a, b) = (a.builtin.expect("on by default"), b.builtin.expect("on"));
    assert!(Arc::ptr_eq(&a, &b));
    let off = Comparer::new(&CompareConfig {
        builtin_volatile_patterns: false,
        ..CompareConfig::default()
    });
    assert!(off.builtin.is_none());
    // the shared set is the built-in one
    assert_eq!(
        a.apply("took 1234 ms"),
        PatternSet::builtin().apply("took 1234 ms")
    );
    assert_ne!(a.apply("took 1234 ms"), "took 1234 ms");
}

#[test]
fn results_lose_noise_and_echoed_arguments() {
    let c = Comparer::default();
    let text = |t: &str| Payload::Text(t.to_string());
    let a = c.arguments("bash", Some(&text(r#"{"command": "cd fastjson/"}"#)), None);
    let b = c.arguments(
        "bash",
        Some(&text(r#"{"command": "cd  fastjson2/"}"#)),
        None,
    );
    let ra = c.result(
        "/bin/bash: line 13008: cd: fastjson/: No such file",
        &a.words,
        None,
        false,
    );
    let rb = c.result(
        "/bin/bash: line 13023: cd: fastjson2/: No such file",
        &b.words,
        None,
        false,
    );
    assert_eq!(ra.text, rb.text);
    assert!(ra.noise);
    assert_eq!(a.effect, Some(CommandEffect::Moves));
    assert!(c.is_outcome(&ra.text, false, a.effect));
    let plain = c.result("No matches found", &[], None, false);
    assert!(matches!(plain.text, Cow::Borrowed(_)) && !plain.noise);
}

#[test]
fn a_success_keeps_its_identifiers_and_echoed_words_unless_it_reads_as_a_failure() {
    let c = Comparer::default();
    let words = |args: &str| {
        c.arguments("tool", Some(&Payload::Text(args.into())), None)
            .words
    };
    let (alice, bob) = (words(r#"{"user": "alice"}"#), words(r#"{"user": "bob"}"#));
    // Two answers to two questions: not one outcome.
    let a = c.result("User alice is active", &alice, None, false);
    let b = c.result("User bob is active", &bob, None, false);
    assert_ne!(a.text, b.text);
    // One failure for two arguments: one outcome, as a result or as an error.
    for error in [false, true] {
        let a = c.result("User alice not found", &alice, None, error);
        let b = c.result("User bob not found", &bob, None, error);
        assert_eq!(a.text, b.text, "error: {error}");
    }
    // A fresh id in a success is information; in a failure, noise. Other noise (times,
    // counters) goes either way.
    let queued = |id: &str| {
        format!(
            "Email queued with id {id} at 2026-12-05 10:00:0{}",
            &id[..1]
        )
    };
    let (x, y) = (
        "0b6f4a2e-1c3d-4e5f-8a9b-0c1d2e3f4a5b",
        "1c7f4a2e-1c3d-4e5f-8a9b-0c1d2e3f4a5b",
    );
    let (qx, qy) = (queued(x), queued(y));
    let (rx, ry) = (
        c.result(&qx, &[], None, false),
        c.result(&qy, &[], None, false),
    );
    assert_ne!(rx.text, ry.text);
    assert!(
        rx.text.contains(x) && !rx.text.contains("10:00"),
        "{}",
        rx.text
    );
    assert!(rx.noise);
    let failed = |id: &str| format!("request id: {id} failed: rate limited");
    let (fx, fy) = (failed(x), failed(y));
    assert_eq!(
        c.result(&fx, &[], None, false).text,
        c.result(&fy, &[], None, false).text
    );
    assert_eq!(
        c.result(&fx, &[], None, true).text,
        c.result(&fy, &[], None, true).text
    );
    // SWE-agent's answer for a search that finds nothing reads as a failure.
    assert!(is_failure(r#"No matches found for "x" in /repo"#));
}

#[test]
fn effects_by_name_command_and_config() {
    let c = Comparer::default();
    let effect = |tool: &str, args: &str| {
        c.arguments(tool, Some(&Payload::Text(args.into())), None)
            .effect
    };
    assert_eq!(effect("edit", "edit 1:1"), Some(CommandEffect::Writes));
    assert_eq!(effect("open", "open a.java"), Some(CommandEffect::Reads));
    assert_eq!(
        effect("bash", r#"{"command": "sed -i s/a/b/ f"}"#),
        Some(CommandEffect::Writes)
    );
    assert_eq!(
        effect("bash", r#"{"command": "pytest"}"#),
        Some(CommandEffect::Reads)
    );
    let config = ToolCompare {
        mutating: Some(true),
        ..ToolCompare::default()
    };
    let empty = Payload::Text("{}".into());
    assert_eq!(
        c.arguments("poll", Some(&empty), Some(&config)).effect,
        Some(CommandEffect::Writes)
    );
    let structured = Payload::Json(serde_json::json!({"command": "rm -rf build"}));
    assert_eq!(
        c.arguments("bash", Some(&structured), None).effect,
        Some(CommandEffect::Writes)
    );
    let off = Comparer::new(&CompareConfig {
        mutation_heuristics: false,
        ..CompareConfig::default()
    });
    assert_eq!(
        off.arguments("edit", Some(&Payload::Text("x".into())), None)
            .effect,
        None
    );
}

#[test]
fn shell_arguments_in_normal_form_only_when_asked() {
    let on = Comparer::new(&CompareConfig {
        shell_normalise: true,
        ..CompareConfig::default()
    });
    let args = r#"{"command": "cd /repo &&  pytest  -x", "timeout": 30}"#;
    let normal = on.argument_text("bash", args, None);
    assert_eq!(
        normal,
        on.argument_text("bash", r#"{"command":"pytest -x","timeout":30}"#, None)
    );
    let off = Comparer::default();
    assert!(matches!(
        off.argument_text("bash", args, None),
        Cow::Borrowed(_)
    ));
}
