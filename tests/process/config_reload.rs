//! Hot reload of the detection config against the real binary: `loopwatch serve --config
//! FILE` applies changed profiles when the file changes and on SIGHUP, names the settings
//! that need a restart, and keeps the running config when the new file is bad.

use std::process::Command;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use crate::support::serve_process;
use crate::support::spans::*;

/// Stderr lines (JSON) until one whose message contains `needle` arrives (returned with
/// every line before it), or panics after 15 s.
fn until(lines: &Receiver<String>, needle: &str) -> Vec<serde_json::Value> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while Instant::now() < deadline {
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(100)) {
            let v: serde_json::Value = serde_json::from_str(&line).expect(&line);
            let found = message(&v).contains(needle);
            got.push(v);
            if found {
                return got;
            }
        }
    }
    panic!("no line with {needle:?} within 15 s; got {got:#?}");
}

fn message(line: &serde_json::Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or("")
}

/// `(profile, occurrence)` of the `loop detected` lines among `lines`.
fn detections(lines: &[serde_json::Value]) -> Vec<(String, u64)> {
    lines
        .iter()
        .filter(|l| message(l).contains("loop detected"))
        .map(|l| {
            (
                l["fields"]["profile"].as_str().unwrap().to_string(),
                l["fields"]["occurrence"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Replays the pydantic-ai run that calls `fetch_url` six times with the same result.
fn replay(grpc: &str) {
    let run = fixtures().join("corpus/pydantic-ai/v5-default/s1_stuck_repeat");
    let out = loopwatch()
        .args(["replay", "--endpoint", &format!("http://{grpc}")])
        .arg(&run)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
}

/// The value of the sample `name` (with its labels, as written) on `/metrics`.
fn sample(admin: &str, name: &str) -> f64 {
    let text = tokio::runtime::Runtime::new()
        .unwrap()
        .block_on(serve_process::scrape(admin));
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics:\n{text}"))
}

fn signal(child: &std::process::Child, name: &str) {
    let status = Command::new("kill")
        .args([&format!("-{name}"), &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn profiles_reload_on_file_change_and_sighup_and_a_bad_file_keeps_the_running_config() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("loopwatch.toml");
    std::fs::write(&file, "[profiles.nudge]\nenabled = false\n").unwrap();
    let mut command = serve_process::serve_command(None);
    command.arg("--config").arg(&file);
    let (mut child, listening, lines) = serve_process::spawn_until_listening(command);
    let grpc = listening["grpc"].as_str().unwrap().to_string();
    let admin = listening["admin"].as_str().unwrap().to_string();
    assert_eq!(
        listening["profiles"].as_str(),
        Some("stop(kill)"),
        "{listening}"
    );

    // Only `stop` runs: one kill at the sixth call.
    replay(&grpc);
    let got = until(&lines, "loop detected");
    assert_eq!(detections(&got), [("stop".to_string(), 1)]);

    // The file changes: nudge back on (applied), a registry limit changed (named as
    // needing a restart).
    let good = "[profiles.nudge]\nrepeated_result = 3\n[registry]\nidle_ttl = \"5m\"\n";
    std::fs::write(&file, good).unwrap();
    let got = until(&lines, "config reloaded");
    assert!(
        got.iter()
            .any(|l| message(l).contains("config file changed: reloading")),
        "{got:#?}"
    );
    let got = until(&lines, "take effect only after a restart");
    let warning = got.last().unwrap();
    assert_eq!(warning["level"], "WARN");
    assert!(
        message(warning).ends_with(": registry.idle_ttl"),
        "{warning}"
    );
    assert_eq!(
        sample(&admin, "loopwatch_config_reloads_total{result=\"success\"}"),
        1.0
    );

    // The run in progress is judged under the new profiles on its next request (the same
    // spans again: duplicates, so nothing new but the adoption): nudge's two warnings,
    // and stop's kill is not reported a second time.
    replay(&grpc);
    let mut found = Vec::new();
    while found.len() < 2 {
        found.extend(detections(&until(&lines, "loop detected")));
    }
    assert_eq!(
        found,
        [("nudge".to_string(), 1), ("nudge".to_string(), 2)],
        "{found:?}"
    );

    // A bad file: refused, the running config stays, the failure is counted.
    std::fs::write(&file, "[profiles.nudge]\nrepeated_result = \"three\"\n").unwrap();
    let got = until(&lines, "config reload failed");
    let error = got.last().unwrap();
    assert_eq!(error["level"], "ERROR");
    assert!(
        message(error).contains("the running config stays")
            && message(error).contains("profiles.nudge.repeated_result"),
        "{error}"
    );
    assert_eq!(
        sample(&admin, "loopwatch_config_reloads_total{result=\"failure\"}"),
        1.0
    );
    assert_eq!(
        sample(&admin, "loopwatch_config_last_reload_successful"),
        0.0
    );

    // Fixed again, then SIGHUP with the file unchanged: each is one more reload.
    std::fs::write(&file, good).unwrap();
    until(&lines, "config reloaded");
    signal(&child, "HUP");
    let got = until(&lines, "config reloaded");
    assert!(
        got.iter().any(|l| message(l).contains("SIGHUP: reloading")),
        "{got:#?}"
    );
    assert_eq!(
        sample(&admin, "loopwatch_config_reloads_total{result=\"success\"}"),
        3.0
    );
    assert_eq!(
        sample(&admin, "loopwatch_config_last_reload_successful"),
        1.0
    );

    signal(&child, "TERM");
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
}
