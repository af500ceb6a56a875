//! `loopwatch explain` as a platform engineer runs it on a recorded trace: the call
//! sequence with short ids, where a rule fired and why, and why not elsewhere.

use std::path::Path;
use std::process::Command;

use crate::support::spans::*;
use prost::Message;

/// A fixed key, so the short ids in the expected lines are stable.
const CONFIG: &str = "[detection]\nfingerprint_key = \"explain-test\"\n";

fn explain(dir: &Path, config: &str, extra: &[&str]) -> String {
    let config_file = dir.join("loopwatch.toml");
    std::fs::write(&config_file, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_loopwatch"))
        .env_remove("RUST_LOG")
        .arg("explain")
        .arg("--config")
        .arg(&config_file)
        .args(extra)
        .arg(dir.join("trace"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Writes `scenario` (oracle format) as one OTLP request under `dir/trace/`.
fn record(dir: &Path, scenario: &serde_json::Value) {
    let trace = dir.join("trace");
    std::fs::create_dir_all(&trace).unwrap();
    let request = scenario_request(scenario, [0x11; 16], false);
    std::fs::write(trace.join("req-0001.pb"), request.encode_to_vec()).unwrap();
}

fn scenario(name: &str) -> serde_json::Value {
    read_json(
        &fixtures()
            .join("oracle/scenarios")
            .join(format!("{name}.json")),
    )
}

/// A temp dir whose `trace/` holds the recorded request of `tests/fixtures/cases/<case>`.
fn case_trace(case: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace");
    std::fs::create_dir_all(&trace).unwrap();
    let recorded = fixtures().join("cases").join(case).join("req-0001.pb");
    std::fs::copy(recorded, trace.join("req-0001.pb")).unwrap();
    dir
}

fn lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

#[test]
fn a_repeated_result_fires_on_the_third_call_and_stop_stays_below() {
    let dir = case_trace("C02_langchain_mcp_double_capture");
    let out = explain(dir.path(), CONFIG, &[]);
    // The ticket id is an argument echoed in the result, but the result is a success that
    // does not read as a failure: the id is its answer, compared as recorded (no
    // "compared as" line).
    assert_eq!(lines(&out), [
        "run c0020000000000000000000000000002  service turn2-bugs  3 tool call(s)",
        "  profile nudge: window 10, repeated_call 5, repeated_result 3, repeated_outcome 6, near_repeat 6, alternating_calls 3, cycle 3, max_cycle_period 3, repeated_text 3, delegation_cycle 3",
        "    call 1   lookup_ticket  args e266dca5  result abfdb64c  below threshold: repeated_call 1/5, repeated_result 1/3",
        "    call 2   lookup_ticket  args e266dca5  result abfdb64c  below threshold: repeated_call 2/5, repeated_result 2/3, repeated_outcome 2/6",
        "    call 3   lookup_ticket  args e266dca5  result abfdb64c  FIRED repeated_result warn on span 620000000000001e (occurrence 1): lookup_ticket returned the same result 3 times in a row for the same arguments",
        "  profile stop: window 20, repeated_call 10, repeated_result 6, repeated_outcome 12, near_repeat 0, alternating_calls 6, cycle 6, max_cycle_period 3, repeated_text 6, delegation_cycle 6",
        "    call 1   lookup_ticket  args e266dca5  result abfdb64c  below threshold: repeated_call 1/10, repeated_result 1/6",
        "    call 2   lookup_ticket  args e266dca5  result abfdb64c  below threshold: repeated_call 2/10, repeated_result 2/6, repeated_outcome 2/12",
        "    call 3   lookup_ticket  args e266dca5  result abfdb64c  below threshold: repeated_call 3/10, repeated_result 3/6, repeated_outcome 3/12",
    ]);
}

#[test]
fn a_repeated_call_with_changing_results_is_progress() {
    let dir = tempfile::tempdir().unwrap();
    record(dir.path(), &scenario("s04_same_call_changing_result_x5"));
    let out = explain(dir.path(), CONFIG, &["--profile", "nudge"]);
    assert_eq!(lines(&out), [
        "run 11111111111111111111111111111111  service scenario-agent  5 tool call(s)",
        "  profile nudge: window 10, repeated_call 5, repeated_result 3, repeated_outcome 6, near_repeat 6, alternating_calls 3, cycle 3, max_cycle_period 3, repeated_text 3, delegation_cycle 3",
        "    call 1   read_file  args e41e7524  result 9c0e089d  below threshold: repeated_call 1/5, repeated_result 1/3",
        "    call 2   read_file  args e41e7524  result 90a4d0db  below threshold: repeated_call 2/5, repeated_result 1/3 (result changed: progress)",
        "    call 3   read_file  args e41e7524  result 4ecfbc5a  below threshold: repeated_call 3/5, repeated_result 1/3 (result changed: progress)",
        "    call 4   read_file  args e41e7524  result 26188554  below threshold: repeated_call 4/5, repeated_result 1/3 (result changed: progress)",
        "    call 5   read_file  args e41e7524  result ec232e33  FIRED repeated_call info on span 000000000000000a (occurrence 1): read_file was called 5 times with the same arguments in the last 10 tool calls, but the results changed (progress, not a loop)",
    ]);
}

#[test]
fn an_ignored_tool_is_shown_out_of_the_sequence_with_its_call_number() {
    let dir = tempfile::tempdir().unwrap();
    let call = |tool: &str, result: &str| serde_json::json!({"calls": [{"tool": tool, "args": {"path": "a.py"}, "result": result}]});
    record(
        dir.path(),
        &serde_json::json!({"responses": [
            call("read_file", "same"),
            call("wait_for_build", "pending"),
            call("read_file", "same"),
            call("wait_for_build", "pending"),
            call("wait_for_build", "pending"),
            call("read_file", "same"),
        ]}),
    );
    let config = format!("{CONFIG}[[tools]]\nmatch = \"wait_*\"\nignore = true\n");
    let out = explain(dir.path(), &config, &["--profile", "nudge"]);
    assert_eq!(lines(&out), [
        "run 11111111111111111111111111111111  service scenario-agent  6 tool call(s)",
        "  profile nudge: window 10, repeated_call 5, repeated_result 3, repeated_outcome 6, near_repeat 6, alternating_calls 3, cycle 3, max_cycle_period 3, repeated_text 3, delegation_cycle 3",
        "    call 1   read_file       args e41e7524  result 91c3d7ea  below threshold: repeated_call 1/5, repeated_result 1/3",
        "    call 2   wait_for_build  args ff43dd53  result 122fb4c6  ignored by [[tools]] (removed from the sequence)",
        "    call 3   read_file       args e41e7524  result 91c3d7ea  below threshold: repeated_call 2/5, repeated_result 2/3",
        "    call 4   wait_for_build  args ff43dd53  result 122fb4c6  ignored by [[tools]] (removed from the sequence)",
        "    call 5   wait_for_build  args ff43dd53  result 122fb4c6  ignored by [[tools]] (removed from the sequence)",
        "    call 6   read_file       args e41e7524  result 91c3d7ea  FIRED repeated_result warn on span 000000000000000c (occurrence 1): read_file returned the same result 3 times in a row for the same arguments",
    ]);
    // Without the rule, the poller's third identical answer is the loop, and it consumes
    // the window: read_file's third call then starts over.
    let unruled = explain(dir.path(), CONFIG, &["--profile", "nudge"]);
    assert_eq!(lines(&unruled)[6..], [
        "    call 5   wait_for_build  args ff43dd53  result 122fb4c6  FIRED repeated_result warn on span 000000000000000a (occurrence 1): wait_for_build returned the same result 3 times in a row for the same arguments",
        "    call 6   read_file       args e41e7524  result 91c3d7ea  below threshold: repeated_call 1/5, repeated_result 1/3",
    ]);
    // JSON: the same steps as records.
    let json = explain(
        dir.path(),
        &config,
        &["--profile", "nudge", "--format", "json"],
    );
    let runs: serde_json::Value = serde_json::from_str(&json).unwrap();
    let steps = runs[0]["profiles"][0]["steps"].as_array().unwrap();
    let verdicts: Vec<&str> = steps
        .iter()
        .filter(|s| s["kind"] == "tool_call")
        .map(|s| s["verdict"].as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts,
        [
            "below_threshold",
            "ignored",
            "below_threshold",
            "ignored",
            "ignored",
            "fired"
        ]
    );
    assert_eq!(
        steps[1]["counts"][0],
        serde_json::json!({"rule": "repeated_call", "count": 1, "threshold": 5})
    );
    let fired = &steps.last().unwrap()["fired"];
    assert_eq!(fired["pattern"], "repeated_result");
    assert_eq!(fired["severity"], "warn");
}

#[test]
fn budgets_show_the_figures_against_the_limits_and_where_one_was_passed() {
    let dir = case_trace("C12_rate_limit_backoff");
    let config = format!(
        "{CONFIG}[budgets]\nmax_tool_calls = 4\nmax_calls_per_tool = 10\nmax_duration = \"10m\"\nmax_tokens = 1000\n"
    );
    let out = explain(dir.path(), &config, &[]);
    let tail: Vec<&str> = lines(&out).into_iter().rev().take(2).rev().collect();
    assert_eq!(tail, [
        "  budgets: max_tool_calls 6/4, max_calls_per_tool 6/10 (web_search), max_duration 62010/600000 ms, max_tokens 0/1000",
        "    FIRED budget_exceeded warn on span 6c00000000000005: budget max_tool_calls exceeded: 5 tool calls (limit 4)",
    ]);
    // Budgets are per run: a --profile view leaves them out.
    let nudge = explain(dir.path(), &config, &["--profile", "nudge"]);
    assert!(!nudge.contains("budget"), "{nudge}");
}

#[test]
fn an_unknown_profile_is_an_error_naming_the_known_ones() {
    let dir = tempfile::tempdir().unwrap();
    record(dir.path(), &scenario("s04_same_call_changing_result_x5"));
    let config_file = dir.path().join("loopwatch.toml");
    std::fs::write(&config_file, CONFIG).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_loopwatch"))
        .args(["explain", "--profile", "nope"])
        .arg(dir.path().join("trace"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("unknown profile \"nope\"; known profiles: nudge, stop"),
        "{stderr}"
    );
}

#[test]
fn an_adk_result_span_gives_its_call_the_result_and_is_no_call() {
    // google-adk 0.1.0–1.1.x: `tool_call [get_weather]` then `tool_response [get_weather]`
    // per call; three parallel calls, so ADK's merged `tool_response` span too (no step).
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace");
    std::fs::create_dir_all(&trace).unwrap();
    let file = "adk_0_1_parallel_merged_tool_response.json";
    std::fs::copy(fixtures().join("shapes").join(file), trace.join(file)).unwrap();
    let out = explain(dir.path(), CONFIG, &["--profile", "nudge"]);
    assert_eq!(lines(&out)[..8], [
        "run a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1  service probe  3 tool call(s)",
        "  profile nudge: window 10, repeated_call 5, repeated_result 3, repeated_outcome 6, near_repeat 6, alternating_calls 3, cycle 3, max_cycle_period 3, repeated_text 3, delegation_cycle 3",
        "    call 1   get_weather  args 11f64daf  result e9b7cbce  below threshold: repeated_call 1/5, repeated_result 1/3",
        "    result   get_weather  args -         result e9b7cbce  result span of the call before it (no call of its own)",
        "    call 2   get_weather  args 11f64daf  result e9b7cbce  below threshold: repeated_call 2/5, repeated_result 2/3",
        "    result   get_weather  args -         result e9b7cbce  result span of the call before it (no call of its own)",
        "    call 3   get_weather  args 11f64daf  result e9b7cbce  FIRED repeated_result warn on span a1a1a1a100000007 (occurrence 1): get_weather returned the same result 3 times in a row for the same arguments",
        "    result   get_weather  args -         result e9b7cbce  result span of the call before it (no call of its own)",
    ]);
}

#[test]
fn a_response_traced_twice_counts_on_its_inner_span() {
    // pydantic-ai's `chat gpt-4o` span with Logfire's `Chat Completion with …` span of the
    // same response nested in it, three calls.
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace");
    std::fs::create_dir_all(&trace).unwrap();
    let file = "response_nested_pydantic_ai_logfire_openai.json";
    std::fs::copy(fixtures().join("shapes").join(file), trace.join(file)).unwrap();
    let out = explain(dir.path(), CONFIG, &["--profile", "nudge"]);
    let outer = "    response traced twice  the span of it nested in this one is the response (not counted)";
    let steps = &lines(&out)[2..8];
    for (i, step) in steps.iter().enumerate() {
        match i % 2 {
            0 => assert_eq!(*step, outer),
            _ => assert!(
                step.starts_with(&format!("    text {}   response ", i / 2 + 1)),
                "{step}"
            ),
        }
    }
    assert!(lines(&out)[7].contains("FIRED repeated_text warn on span a1a1a1a100000007"));
}

#[test]
fn a_failure_is_compared_without_its_echo_and_noise() {
    let dir = tempfile::tempdir().unwrap();
    let calls: Vec<_> = (0..3)
        .map(|i| {
            serde_json::json!({"calls": [{
                "tool": "bash",
                "args": {"command": "cat missing.txt"},
                "result": format!("/bin/bash: line {}: cat: missing.txt: No such file or directory", 40 + i),
            }]})
        })
        .collect();
    record(dir.path(), &serde_json::json!({ "responses": calls }));
    let out = explain(dir.path(), CONFIG, &["--profile", "nudge"]);
    let compared: Vec<&str> = lines(&out)
        .into_iter()
        .filter(|l| l.trim_start().starts_with("compared as"))
        .collect();
    assert_eq!(
        compared,
        ["        compared as \"/bin/bash: line <n>: <arg>: <arg>: No such file or directory\""; 3],
        "{out}"
    );
    assert!(out.contains("FIRED repeated_result warn"), "{out}");
}
