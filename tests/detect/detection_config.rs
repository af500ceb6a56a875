//! Detection a platform team can tune (issue 7): each key changes the answers exactly as
//! documented, on the cases written for it (`tests/fixtures/cases`, C03 and C12), both
//! through `loopwatch scan --config` and through the running server (OTLP/gRPC in, the
//! run's detections out); invalid combinations are start-up errors naming the key.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::support::spans::loopwatch;
use loopwatch::config::Config;

/// (call, pattern, count, severity) of one detection.
type Answer = (u64, String, u64, String);
/// Per (trace_id hex, profile): the detections in order.
type Answers = BTreeMap<(String, String), Vec<Answer>>;

const TRACE_A: &str = "c0030000000000000000000000000003";
const TRACE_B: &str = "c2030000000000000000000000000023";
const C12: &str = "c00c000000000000000000000000000c";

fn case_dir(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/cases")
        .join(case)
}

fn answer(call: u64, pattern: &str, count: u64, severity: &str) -> Answer {
    (call, pattern.into(), count, severity.into())
}

fn answers(entries: &[(&str, &str, Vec<Answer>)]) -> Answers {
    entries
        .iter()
        .filter(|(_, _, list)| !list.is_empty())
        .map(|(trace, profile, list)| ((trace.to_string(), profile.to_string()), list.clone()))
        .collect()
}

/// `loopwatch scan --config F --format json CASE/`.
fn by_scan(config: &str, case: &str) -> Answers {
    let mut got = Answers::new();
    for d in support::spans::scan_json(config, &case_dir(case)) {
        got.entry((
            d["trace_id"].as_str().unwrap().to_string(),
            d["profile"].as_str().unwrap().to_string(),
        ))
        .or_default()
        .push(answer(
            d["call"].as_u64().unwrap(),
            d["pattern"].as_str().unwrap(),
            d["count"].as_u64().unwrap(),
            d["severity"].as_str().unwrap(),
        ));
    }
    got
}

/// The case's `.pb` requests sent to a running server configured with `config`; the
/// detections of each trace read back from its registry.
fn by_server(config: &str, case: &str) -> Answers {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let server = support::server::start_with_toml(config).await;
        let mut files: Vec<PathBuf> = std::fs::read_dir(case_dir(case))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "pb"))
            .collect();
        files.sort();
        let requests: Vec<_> = files.iter().map(|f| support::spans::read_pb(f)).collect();
        support::server::export_all(server.grpc_addr, &requests).await;
        let mut got = Answers::new();
        for trace in [TRACE_A, TRACE_B, C12] {
            let mut detections = server.engine.registry.detections(trace).unwrap_or_default();
            if let Some(budgets) = &server.engine.budgets {
                detections.extend(budgets.detections(trace));
            }
            for d in detections {
                got.entry((trace.to_string(), d.profile.name.clone()))
                    .or_default()
                    .push(answer(
                        d.detection.call.unwrap() as u64,
                        d.detection.pattern.as_str(),
                        d.detection.count as u64,
                        d.detection.severity.as_str(),
                    ));
            }
        }
        server.shutdown().await.unwrap();
        got
    })
}

fn check(config: &str, case: &str, expected: &Answers) {
    assert_eq!(&by_scan(config, case), expected, "scan, config:\n{config}");
    assert_eq!(
        &by_server(config, case),
        expected,
        "server, config:\n{config}"
    );
}

fn c03_nudge_default() -> Vec<Answer> {
    [9, 21, 33, 45]
        .map(|c| answer(c, "repeated_result", 3, "warn"))
        .to_vec()
}

#[test]
fn c03_defaults_unchanged() {
    check(
        "",
        "C03_long_period_stuck_call",
        &answers(&[(TRACE_A, "nudge", c03_nudge_default())]),
    );
}

#[test]
fn c03_escalate_after_3_on_nudge_kills_the_third_detection_of_trace_a() {
    // Trace B's stuck call is 5 calls apart: nudge (window 10) never sees 3 of them, so
    // escalation alone has nothing to escalate there.
    let config = "[profiles.nudge]\nescalate_after = 3\n";
    let nudge = vec![
        answer(9, "repeated_result", 3, "warn"),
        answer(21, "repeated_result", 3, "warn"),
        answer(33, "repeated_result", 3, "kill"),
        answer(45, "repeated_result", 3, "kill"),
    ];
    check(
        config,
        "C03_long_period_stuck_call",
        &answers(&[(TRACE_A, "nudge", nudge)]),
    );
}

#[test]
fn c03_run_scope_on_stop_kills_both_traces() {
    let config = "[profiles.stop]\nrepeated_result_scope = \"run\"\n";
    check(
        config,
        "C03_long_period_stuck_call",
        &answers(&[
            (TRACE_A, "nudge", c03_nudge_default()),
            (
                TRACE_A,
                "stop",
                vec![
                    answer(21, "repeated_result", 6, "kill"),
                    answer(45, "repeated_result", 6, "kill"),
                ],
            ),
            (
                TRACE_B,
                "stop",
                vec![answer(26, "repeated_result", 6, "kill")],
            ),
        ]),
    );
}

#[test]
fn c03_escalation_and_run_scope_together() {
    let config =
        "[profiles.nudge]\nescalate_after = 3\n[profiles.stop]\nrepeated_result_scope = \"run\"\n";
    check(
        config,
        "C03_long_period_stuck_call",
        &answers(&[
            (
                TRACE_A,
                "nudge",
                vec![
                    answer(9, "repeated_result", 3, "warn"),
                    answer(21, "repeated_result", 3, "warn"),
                    answer(33, "repeated_result", 3, "kill"),
                    answer(45, "repeated_result", 3, "kill"),
                ],
            ),
            (
                TRACE_A,
                "stop",
                vec![
                    answer(21, "repeated_result", 6, "kill"),
                    answer(45, "repeated_result", 6, "kill"),
                ],
            ),
            (
                TRACE_B,
                "stop",
                vec![answer(26, "repeated_result", 6, "kill")],
            ),
        ]),
    );
}

#[test]
fn c12_defaults_unchanged() {
    check(
        "",
        "C12_rate_limit_backoff",
        &answers(&[
            (
                C12,
                "nudge",
                vec![
                    answer(3, "repeated_result", 3, "warn"),
                    answer(6, "repeated_result", 3, "warn"),
                ],
            ),
            (C12, "stop", vec![answer(6, "repeated_result", 6, "kill")]),
        ]),
    );
}

#[test]
fn c12_transient_errors_are_never_no_progress() {
    // The 429s no longer count as the same result: no repeated_result, no kill; the five
    // identical calls are still reported, as progress (info).
    let config = "[[tools]]\nmatch = \"web_*\"\ntransient_errors = \"429|(?i)rate limit\"\n";
    check(
        config,
        "C12_rate_limit_backoff",
        &answers(&[(C12, "nudge", vec![answer(5, "repeated_call", 5, "info")])]),
    );
    // a regex that does not match the message changes nothing
    let other = "[[tools]]\nmatch = \"web_*\"\ntransient_errors = \"timed out\"\n";
    assert_eq!(
        by_scan(other, "C12_rate_limit_backoff"),
        by_scan("", "C12_rate_limit_backoff")
    );
}

#[test]
fn c12_ignored_tool_and_per_tool_thresholds() {
    let ignore = "[[tools]]\nmatch = \"web_search\"\nignore = true\n";
    check(ignore, "C12_rate_limit_backoff", &Answers::new());
    // first match wins: the ignore entry after a threshold entry never applies; the
    // override applies to every profile (stop: 4 instead of 6)
    let first_wins = "[[tools]]\nmatch = \"web_*\"\nrepeated_result = 4\n[[tools]]\nmatch = \"*\"\nignore = true\n";
    check(
        first_wins,
        "C12_rate_limit_backoff",
        &answers(&[
            (C12, "nudge", vec![answer(4, "repeated_result", 4, "warn")]),
            (C12, "stop", vec![answer(4, "repeated_result", 4, "kill")]),
        ]),
    );
    // limited to stop: nudge keeps its answers
    let stop_only = "[[tools]]\nmatch = \"web_search\"\nignore = true\nprofiles = [\"stop\"]\n";
    check(
        stop_only,
        "C12_rate_limit_backoff",
        &answers(&[(
            C12,
            "nudge",
            vec![
                answer(3, "repeated_result", 3, "warn"),
                answer(6, "repeated_result", 3, "warn"),
            ],
        )]),
    );
}

#[test]
fn c12_budgets_fire_once_each_with_their_figures() {
    // 6 calls of web_search, 1 s apart then backing off (…, 15 s, 31 s, 63 s)
    let config = "[budgets]\nmax_tool_calls = 4\nmax_calls_per_tool = 2\nmax_duration = \"10s\"\naction = \"kill\"\n";
    check(
        config,
        "C12_rate_limit_backoff",
        &answers(&[
            (
                C12,
                "nudge",
                vec![
                    answer(3, "repeated_result", 3, "warn"),
                    answer(6, "repeated_result", 3, "warn"),
                ],
            ),
            (C12, "stop", vec![answer(6, "repeated_result", 6, "kill")]),
            (
                C12,
                "budgets",
                vec![
                    // web_search called 3 times (limit 2)
                    answer(3, "budget_exceeded", 3, "kill"),
                    // the run has lasted 14.01 s (limit 10 s): count is the figure in ms
                    answer(4, "budget_exceeded", 14010, "kill"),
                    // 5 tool calls (limit 4)
                    answer(5, "budget_exceeded", 5, "kill"),
                ],
            ),
        ]),
    );
}

/// `check-config F` fails, and its error names `key`.
fn rejected(config: &str, key: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, config).unwrap();
    for command in ["check-config", "scan"] {
        let mut c = loopwatch();
        match command {
            "scan" => c
                .args(["scan", "--config"])
                .arg(&file)
                .arg(case_dir("C12_rate_limit_backoff")),
            _ => c.arg(command).arg(&file),
        };
        let out = c.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{command} accepted:\n{config}");
        assert!(
            stderr.contains(key),
            "{command}: {key} not named in: {stderr}"
        );
    }
    let err = Config::from_toml(config).expect_err("invalid").to_string();
    assert!(err.contains(key), "{key} not named in: {err}");
}

#[test]
fn invalid_combinations_are_start_up_errors_naming_the_key() {
    rejected(
        "[profiles.nudge]\nescalate_after = 1\n",
        "profiles.nudge.escalate_after",
    );
    rejected(
        "[[tools]]\nmatch = \"read_[file\"\nignore = true\n",
        "tools[0].match",
    );
    rejected(
        "[[tools]]\nmatch = \"a\"\n[[tools]]\nmatch = \"b\"\ntransient_errors = \"429 (\"\n",
        "tools[1].transient_errors",
    );
    rejected(
        "[[tools]]\nmatch = \"a\"\nrepeated_call = 11\n",
        "tools[0].repeated_call",
    );
    rejected(
        "[[tools]]\nmatch = \"a\"\nprofiles = [\"stop\"]\nvolatile_keys = [\"page\"]\n",
        "tools[0].profiles",
    );
    rejected("[[tools]]\nmatch = \"a\"\nsometimes = true\n", "sometimes");
    rejected(
        "[profiles.stop]\nmax_cycle_period = 9\n",
        "profiles.stop.max_cycle_period",
    );
    rejected(
        "[profiles.stop]\nrepeated_result_scope = \"forever\"\n",
        "profiles.stop.repeated_result_scope",
    );
    rejected(
        "[profiles.mine]\npreset = \"nope\"\n",
        "profiles.mine.preset",
    );
    rejected("[profiles.nudge]\nwindwo = 3\n", "profiles.nudge.windwo");
    rejected("[budgets]\nmax_tool_calls = -1\n", "budgets.max_tool_calls");
    rejected(
        "[budgets]\nmax_duration = \"-5m\"\n",
        "budgets.max_duration",
    );
    rejected("[budgets]\naction = \"stop\"\n", "budgets.action");
    rejected("[log.sampling]\ntick = \"0s\"\n", "log.sampling.tick");
    rejected("[log.sampling]\nevery = 3\n", "every");
    // with run scope, repeated_result may exceed the window
    Config::from_toml("[profiles.nudge]\nrepeated_result_scope = \"run\"\nrepeated_result = 30\n")
        .expect("valid");
}
