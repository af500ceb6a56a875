//! `cargo xtask loadgen` runs end to end on loopback: both setups deliver spans, and every
//! span loopwatch acknowledged reached the sink (nothing lost).

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

/// The product's `loopwatch` binary (debug), built by the cargo running these tests: it is
/// another package of the workspace, so cargo does not hand its path to xtask's tests.
/// Built with the product's test targets, so cargo resolves features as `cargo test` does
/// (dev-dependencies included): under `cargo test --workspace` everything is already up to
/// date and cargo answers at once. Without the variables cargo sets for this test process
/// (`CARGO_MANIFEST_DIR`, `CARGO_PKG_*` …): build scripts that watch them (ring's) would run
/// again and rebuild what the outer `cargo test` built. Once per test process.
fn loopwatch_binary() -> &'static PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| env!("CARGO").into());
        let mut build = Command::new(cargo);
        for (name, _) in std::env::vars_os() {
            let name = name.to_string_lossy();
            if [
                "CARGO_MANIFEST_",
                "CARGO_PKG_",
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
            ]
            .iter()
            .any(|set_by_cargo| name.starts_with(set_by_cargo))
            {
                build.env_remove(name.as_ref());
            }
        }
        let out = build
            .args([
                "build",
                "--package",
                "loopwatch",
                "--bin",
                "loopwatch",
                "--tests",
            ])
            .arg("--message-format=json-render-diagnostics")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .expect("cargo runs");
        assert!(
            out.status.success(),
            "cargo build --bin loopwatch --tests: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            // The binary itself, not the test harnesses of the lib and bin named the same.
            .filter(|m| m["target"]["name"] == "loopwatch" && m["target"]["kind"][0] == "bin")
            .filter(|m| m["profile"]["test"] == false)
            .find_map(|m| m["executable"].as_str().map(PathBuf::from))
            .expect("cargo reports the loopwatch executable")
    })
}

fn loadgen(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .env_remove("RUST_LOG")
        .args(["loadgen", "--json"])
        .args(args)
        .output()
        .expect("xtask loadgen starts");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout: {stdout}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

/// Runs `xtask loadgen bench` with `args` (not pinned: the test machine's CPUs are
/// unknown; no rotel), writing `bench.md` and `bench.json` in `dir`; the JSON report.
fn bench(dir: &std::path::Path, args: &[&[&str]]) -> Value {
    let json = dir.join("bench.json");
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .env_remove("RUST_LOG")
        .env_remove("ROTEL")
        .args(["loadgen", "bench"])
        .args(args.iter().flat_map(|a| a.iter()))
        .args(["--server-cpus", "", "--scaling-cpus", ""])
        .arg("--loopwatch")
        .arg(loopwatch_binary())
        .arg("--out")
        .arg(dir.join("bench.md"))
        .arg("--json")
        .arg(&json)
        .output()
        .expect("xtask loadgen bench starts");
    assert!(
        out.status.success(),
        "exit {:?}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
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

#[test]
fn bench_quick_reports_every_row_and_loopwatch_loses_nothing() {
    // The reduced matrix of `cargo xtask bench --quick`: one client count, one synthetic size,
    // the raw pass-through beside the two others (its default), both worker-thread cells, no
    // rotel; not pinned (the test machine's CPUs are unknown).
    let dir = tempfile::tempdir().unwrap();
    let report = bench(
        dir.path(),
        &[
            &["--quick", "--clients", "4", "--spans", "10"],
            &["--worker-threads", "1,2", "--idle-runs", "1000"],
        ],
    );
    let md = dir.path().join("bench.md");
    let rows = report["rows"].as_array().unwrap();
    let mut seen = Vec::new();
    for row in rows {
        let setup = row["setup"].as_str().unwrap();
        let cell = &row["cell"];
        let key = (
            cell["traffic"].as_str().unwrap().to_string(),
            cell["worker_threads"].as_u64(),
            setup.to_string(),
        );
        let m = &row["median"];
        assert!(m["spans"].as_u64().unwrap() > 0, "no spans sent: {row}");
        assert!(m["spans_per_cpu_second"].as_f64().unwrap() > 0.0, "{row}");
        assert_eq!(m["failed"], 0, "{row}");
        if setup == "loopwatch" {
            assert_eq!(m["lost"], 0, "loopwatch lost spans: {row}");
        }
        seen.push(key);
    }
    let mut expected = Vec::new();
    for traffic in ["corpus", "no_loops", "loop_heavy"] {
        for setup in ["loopwatch", "passthrough", "raw-passthrough"] {
            expected.push((traffic.to_string(), None, setup.to_string()));
        }
    }
    for threads in [1, 2] {
        for setup in ["loopwatch", "passthrough"] {
            expected.push(("corpus".to_string(), Some(threads), setup.to_string()));
        }
    }
    seen.sort();
    expected.sort();
    assert_eq!(seen, expected, "{report}");
    // Loop-heavy traffic is detected and annotated; 0 % traffic is not.
    let annotated = |traffic: &str| {
        rows.iter()
            .find(|r| r["setup"] == "loopwatch" && r["cell"]["traffic"] == traffic)
            .map(|r| r["median"]["annotated"].as_u64().unwrap())
            .unwrap()
    };
    assert!(annotated("loop_heavy") > 0, "{report}");
    assert_eq!(annotated("no_loops"), 0, "{report}");
    let memory = report["memory"].as_array().unwrap();
    assert_eq!(memory.len(), 3, "{report}");
    for m in memory {
        assert!(m["idle_rss_bytes"].as_u64().unwrap() > 0, "{m}");
        assert_eq!(m["runs"], 1000, "{m}");
        assert_eq!(m["lost"], 0, "{m}");
    }
    // The latency step: both setups under the same paced load, half of loopwatch's best
    // closed-loop spans/s from the matrix, for the corpus and 0 % loops traffic.
    let latency = report["latency"].as_array().unwrap();
    let mut seen: Vec<(String, String)> = latency
        .iter()
        .map(|row| {
            assert_eq!(row["max_source"], "matrix", "{row}");
            assert_eq!(row["load_fraction"], 0.5, "{row}");
            assert_eq!(row["rounds"], 1, "{row}");
            let m = &row["median"];
            assert!(m["requests"].as_u64().unwrap() > 0, "{row}");
            assert!(m["p99_ms"].as_f64().unwrap() > 0.0, "{row}");
            assert!(m["p999_ms"].as_f64().unwrap() >= m["p99_ms"].as_f64().unwrap());
            assert!(
                m["achieved_spans_per_second"].as_f64().unwrap() > 0.0,
                "{row}"
            );
            assert_eq!(m["failed"], 0, "{row}");
            assert_eq!(m["lost"], 0, "{row}");
            (
                row["traffic"].as_str().unwrap().to_string(),
                row["setup"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    seen.sort();
    let mut expected: Vec<(String, String)> = ["corpus", "no_loops"]
        .iter()
        .flat_map(|t| ["loopwatch", "passthrough"].map(|s| (t.to_string(), s.to_string())))
        .collect();
    expected.sort();
    assert_eq!(seen, expected, "{report}");
    let offered = |traffic: &str| {
        latency
            .iter()
            .find(|r| r["traffic"] == traffic && r["setup"] == "passthrough")
            .map(|r| r["median"]["offered_spans_per_second"].as_f64().unwrap())
            .unwrap()
    };
    let best = |traffic: &str| {
        rows.iter()
            .filter(|r| {
                r["setup"] == "loopwatch"
                    && r["cell"]["traffic"] == traffic
                    && r["cell"]["worker_threads"].is_null()
            })
            .map(|r| r["median"]["spans_per_second"].as_f64().unwrap())
            .fold(0.0, f64::max)
    };
    for traffic in ["corpus", "no_loops"] {
        assert!(
            (offered(traffic) - best(traffic) / 2.0).abs() < 1e-6,
            "{report}"
        );
    }
    // The markdown has one table line per cell in the floor table, per row in the matrix and
    // per row of the latency step.
    let text = std::fs::read_to_string(&md).unwrap();
    let traffic_lines: Vec<&str> = text
        .lines()
        .filter(|l| {
            l.starts_with("| corpus") || l.starts_with("| 0 %") || l.starts_with("| loop-heavy")
        })
        .collect();
    assert_eq!(traffic_lines.len(), 3 + 9 + 4, "{text}");
    // The floor table comes first: loopwatch against the prost and the raw pass-through,
    // both ratios filled in, rotel's left empty.
    assert!(text.contains("| ×pass | ×raw | ×rotel |"), "{text}");
    for line in &traffic_lines[..3] {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        // ["", traffic, spans/req, clients, lw, pass, raw, rotel, ×pass, ×raw, ×rotel, ""]
        assert_eq!(cells.len(), 12, "{line}");
        for ratio in [cells[8], cells[9]] {
            assert!(ratio.parse::<f64>().is_ok_and(|r| r > 0.0), "{line}");
        }
        assert_eq!((cells[7], cells[10]), ("–", ""), "{line}");
    }
    assert!(text.contains("maximum load (open loop)"), "{text}");
    // Two worker-thread rows and one memory row start with the setup.
    let starting = |setup: &str| text.lines().filter(|l| l.starts_with(setup)).count();
    assert_eq!(starting("| loopwatch |"), 3, "{text}");
}

#[test]
fn bench_latency_probes_the_maximum_when_the_matrix_lacks_the_traffic() {
    // Only corpus cells in the matrix: the 0 % loops latency cell takes its maximum from a
    // closed-loop probe of loopwatch.
    let dir = tempfile::tempdir().unwrap();
    let report = bench(
        dir.path(),
        &[
            &["--quick", "--clients", "2", "--spans", "--worker-threads"],
            &["--idle-runs", "100", "--latency-duration", "300ms"],
            &["--latency-senders", "4", "--latency-load", "0.25"],
        ],
    );
    let latency = report["latency"].as_array().unwrap();
    assert_eq!(latency.len(), 4, "{report}");
    for row in latency {
        let source = if row["traffic"] == "corpus" {
            "matrix"
        } else {
            "probe"
        };
        assert_eq!(row["max_source"], source, "{row}");
        assert_eq!(row["senders"], 4, "{row}");
        assert_eq!(row["load_fraction"], 0.25, "{row}");
        let max = row["loopwatch_max_spans_per_second"].as_f64().unwrap();
        let offered = row["median"]["offered_spans_per_second"].as_f64().unwrap();
        assert!(max > 0.0 && (offered - max / 4.0).abs() < 1e-6, "{row}");
        assert_eq!(row["median"]["lost"], 0, "{row}");
    }
}
