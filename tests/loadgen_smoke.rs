//! `loopwatch-loadgen` runs end to end on loopback: both setups deliver spans, and every
//! span loopwatch acknowledged reached the sink (nothing lost).

use std::process::Command;

use serde_json::Value;

fn loadgen(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_loopwatch-loadgen"))
        .env_remove("RUST_LOG")
        .arg("--json")
        .args(args)
        .output()
        .expect("loopwatch-loadgen starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn u(report: &Value, setup: &str, key: &str) -> u64 {
    report[setup][key]
        .as_u64()
        .unwrap_or_else(|| panic!("{setup}.{key} in {report}"))
}

fn assert_nothing_lost(report: &Value) {
    for setup in ["loopwatch", "passthrough"] {
        let sent = u(report, setup, "spans_sent");
        assert!(sent > 0, "{setup} sent no spans: {report}");
        assert_eq!(u(report, setup, "spans_at_sink"), sent, "{setup}: {report}");
        assert_eq!(u(report, setup, "failed"), 0, "{setup}: {report}");
        assert!(
            report[setup]["spans_per_second"].as_f64().unwrap() > 0.0,
            "{report}"
        );
    }
    assert_eq!(
        u(report, "loopwatch", "engine_spans_seen"),
        u(report, "loopwatch", "spans_sent"),
        "loopwatch processed a different number of spans than it acknowledged: {report}"
    );
    assert_eq!(report["lost_spans"], Value::Bool(false), "{report}");
}

#[test]
fn one_second_run_delivers_every_span_in_both_setups() {
    let report = loadgen(&["--duration", "1s", "--concurrency", "2"]);
    assert_nothing_lost(&report);
    assert_eq!(report["concurrency"], 2);
    assert!(report["throughput_ratio"].as_f64().unwrap() > 0.0);
}

#[test]
fn request_bound_sends_the_same_requests_to_both_setups_and_loops_are_annotated() {
    // One client, a request budget and a generous duration: both setups get exactly the
    // same sequence (the corpus in order, starting with a stuck-repeat run), so their span
    // counts match and loopwatch annotates the completing spans of the detected loops.
    let report = loadgen(&[
        "--requests",
        "50",
        "--concurrency",
        "1",
        "--duration",
        "300s",
    ]);
    assert_nothing_lost(&report);
    assert_eq!(u(&report, "loopwatch", "requests"), 50);
    assert_eq!(u(&report, "passthrough", "requests"), 50);
    assert_eq!(
        u(&report, "loopwatch", "spans_sent"),
        u(&report, "passthrough", "spans_sent")
    );
    let corpus_requests = report["corpus_requests"].as_u64().unwrap();
    assert!(corpus_requests >= 46, "{report}");
    assert!(
        u(&report, "loopwatch", "spans_annotated") > 0,
        "no loop annotated over the corpus: {report}"
    );
}
