//! The `loopwatch` binary as a user runs it: scan, check-config, serve + replay, SIGTERM.

use crate::support;

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::spans::*;

/// Runs `command`, asserts it exits 0 (showing its stderr otherwise), returns its output.
fn succeeds(command: &mut Command) -> std::process::Output {
    let out = command.output().unwrap();
    assert!(
        out.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Runs `command`, asserts it exits non-zero, returns its stderr.
fn fails(command: &mut Command) -> String {
    let out = command.output().unwrap();
    assert!(!out.status.success(), "{command:?} should fail");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn scan_json_gives_expected_detections_for_every_corpus_run() {
    for (run, expected) in corpus_expected() {
        let dir = fixtures().join("corpus").join(&run);
        let out = succeeds(loopwatch().args(["scan", "--format", "json"]).arg(&dir));
        let detections: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
        for profile in ["nudge", "stop"] {
            let got: Vec<Key> = detections
                .iter()
                .filter(|d| d["profile"] == profile)
                .map(key_of)
                .collect();
            assert_eq!(got, expected_keys(&expected, profile), "{run} {profile}");
        }
        for d in &detections {
            assert_eq!(d["trace_id"].as_str().unwrap().len(), 32);
            assert_eq!(d["span_id"].as_str().unwrap().len(), 16);
            assert!(d["occurrence"].as_u64().unwrap() >= 1);
        }
    }
}

#[test]
fn scan_several_paths_form_one_stream_and_profile_filters() {
    let base = fixtures().join("corpus/pydantic-ai/v5-batch4/s1_stuck_repeat");
    let mut files: Vec<_> = corpus_files("pydantic-ai/v5-batch4/s1_stuck_repeat", "pb");
    files.reverse(); // arrival order must not matter
    let out = succeeds(
        loopwatch()
            .args(["scan", "--format", "json", "--profile", "stop"])
            .args(&files),
    );
    let detections: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(detections.len(), 1);
    assert_eq!(detections[0]["pattern"], "repeated_result");
    assert_eq!(detections[0]["call"], 6);
    assert_eq!(detections[0]["severity"], "kill");
    // the table format names the pattern too
    let out = loopwatch().arg("scan").arg(&base).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.starts_with("TRACE_ID"), "{text}");
    assert_eq!(text.matches("repeated_result").count(), 3, "{text}");
}

#[test]
fn scan_without_loops_exits_zero_and_errors_exit_nonzero() {
    let healthy = fixtures().join("corpus/pydantic-ai/v5-default/s4_healthy");
    let out = succeeds(loopwatch().args(["scan", "--format", "json"]).arg(&healthy));
    assert_eq!(
        serde_json::from_slice::<Vec<serde_json::Value>>(&out.stdout)
            .unwrap()
            .len(),
        0
    );

    let err = fails(loopwatch().args(["scan", "/nonexistent/loopwatch"]));
    assert!(err.contains("/nonexistent/loopwatch"), "{err}");

    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("req-0001.pb");
    std::fs::write(&bad, b"\xff\xff\xff garbage").unwrap();
    let err = fails(loopwatch().arg("scan").arg(&bad));
    assert!(
        err.contains("req-0001.pb") && err.contains("protobuf"),
        "{err}"
    );

    let err = fails(
        loopwatch()
            .args(["scan", "--profile", "nope"])
            .arg(&healthy),
    );
    assert!(err.contains("nope"), "{err}");
}

#[test]
fn check_config_accepts_the_example_and_names_bad_keys() {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let out = succeeds(loopwatch().arg("check-config").arg(&example));
    assert!(String::from_utf8_lossy(&out.stdout).contains("profile nudge"));

    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[receiver]\ngrpc_lisen = \"0.0.0.0:4317\"\n", "grpc_lisen"),
        (
            "[profiles.nudge]\nrepeated_call = 1\n",
            "profiles.nudge.repeated_call",
        ),
        ("[profiles.stop]\nwindow = 8\n", "profiles.stop"),
        (
            "[profiles.nudge]\nalternating_calls = 6\n",
            "profiles.nudge.alternating_calls",
        ),
        (
            "[profiles.nudge]\nrepeated_result = 11\n",
            "profiles.nudge.repeated_result",
        ),
        (
            "[exporter]\nendpoint = \"not a url\"\n",
            "exporter.endpoint",
        ),
        ("[server]\nworker_threads = 5000\n", "server.worker_threads"),
    ];
    for (text, key) in cases {
        let file = dir.path().join("c.toml");
        std::fs::write(&file, text).unwrap();
        let err = fails(loopwatch().arg("check-config").arg(&file));
        assert!(err.contains(key), "{text}: error {err:?} should name {key}");
    }
    // env overrides are checked too
    let file = dir.path().join("ok.toml");
    std::fs::write(&file, "").unwrap();
    let err = fails(
        loopwatch()
            .arg("check-config")
            .arg(&file)
            .env("LOOPWATCH_PROFILES__NUDGE__WINDOW", "4"),
    );
    assert!(err.contains("profiles.nudge"), "{err}");
}

#[test]
fn check_config_reports_every_error_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(
        &file,
        "[profiles.nudge]\nrepeated_call = 1\n[exporter]\nendpoint = \"not a url\"\n[server]\nworker_threads = 5000\n",
    )
    .unwrap();
    let err = fails(loopwatch().arg("check-config").arg(&file));
    for key in [
        "profiles.nudge.repeated_call",
        "exporter.endpoint",
        "server.worker_threads",
    ] {
        assert!(err.contains(key), "{err}");
    }
    assert!(err.contains(": 3 error(s)"), "{err}");
}

#[test]
fn check_config_warns_of_a_variable_spelled_with_single_underscores() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ok.toml");
    std::fs::write(&file, "").unwrap();
    let out = succeeds(
        loopwatch()
            .arg("check-config")
            .arg(&file)
            .env("LOOPWATCH_EXPORTER_ENDPOINT", "http://collector:4317")
            .env("LOOPWATCH_SERVICE_HOST", "10.0.0.1"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        stderr.lines().collect::<Vec<_>>(),
        [
            "warning: LOOPWATCH_EXPORTER_ENDPOINT is not read: config keys in the environment \
          separate levels with `__`; did you mean LOOPWATCH_EXPORTER__ENDPOINT \
          (exporter.endpoint)?"
        ],
    );
}

/// Starts `loopwatch serve` on free ports; returns the child and its gRPC address.
fn spawn_serve() -> (
    std::process::Child,
    String,
    std::sync::mpsc::Receiver<String>,
) {
    let command = support::serve_process::serve_command(None);
    let (child, listening, lines) = support::serve_process::spawn_until_listening(command);
    let grpc = listening["grpc"].as_str().unwrap().to_string();
    (child, grpc, lines)
}

fn sigterm(child: &std::process::Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

#[test]
fn serve_then_replay_logs_the_detection_and_sigterm_exits_zero() {
    let (mut child, grpc, lines) = spawn_serve();
    let run = fixtures().join("corpus/pydantic-ai/v5-default/s1_stuck_repeat");
    let out = succeeds(
        loopwatch()
            .args(["replay", "--endpoint", &format!("http://{grpc}")])
            .arg(&run),
    );
    // the folder holds req-0001.pb and its JSON twin: one request is sent
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.starts_with("sent 1 request(s)"), "{stdout}");
    let mut detections = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while detections.len() < 3 && Instant::now() < deadline {
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(100)) {
            if line.contains("loop detected") {
                detections.push(serde_json::from_str::<serde_json::Value>(&line).unwrap());
            }
        }
    }
    let summary: Vec<(String, String)> = detections
        .iter()
        .map(|d| {
            (
                d["fields"]["profile"].as_str().unwrap().to_string(),
                d["fields"]["pattern"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        summary.iter().filter(|(p, _)| p == "nudge").count(),
        2,
        "{summary:?}"
    );
    assert_eq!(
        summary.iter().filter(|(p, _)| p == "stop").count(),
        1,
        "{summary:?}"
    );
    assert!(summary
        .iter()
        .all(|(_, pattern)| pattern == "repeated_result"));
    sigterm(&child);
    let status = child.wait().unwrap();
    assert!(status.success(), "exit status after SIGTERM: {status:?}");
}

/// Stderr lines of `lines` until `done` holds for the collected ones or 10 s pass.
fn collect_lines(
    lines: &std::sync::mpsc::Receiver<String>,
    done: impl Fn(&[serde_json::Value]) -> bool,
) -> Vec<serde_json::Value> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !done(&got) && Instant::now() < deadline {
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(100)) {
            // `--log-format json`: every line is one JSON object.
            got.push(serde_json::from_str::<serde_json::Value>(&line).expect(&line));
        }
    }
    got
}

fn message(line: &serde_json::Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or("")
}

#[test]
fn log_sampling_from_env_leaves_out_lines_past_initial_and_counts_them() {
    // One line per severity and tick, none thereafter: the stuck run's second nudge warn
    // is left out, its kill is still written (kills are sampled apart from warns).
    let mut command = support::serve_process::serve_command(None);
    command
        .env("LOOPWATCH_LOG__SAMPLING__INITIAL", "1")
        .env("LOOPWATCH_LOG__SAMPLING__THEREAFTER", "0");
    let (mut child, listening, lines) = support::serve_process::spawn_until_listening(command);
    let grpc = listening["grpc"].as_str().unwrap().to_string();
    let admin = listening["admin"].as_str().unwrap().to_string();
    let run = fixtures().join("corpus/pydantic-ai/v5-default/s1_stuck_repeat");
    succeeds(
        loopwatch()
            .args(["replay", "--endpoint", &format!("http://{grpc}")])
            .arg(&run),
    );
    let runtime = tokio::runtime::Runtime::new().unwrap();
    // All three detections are counted once the sampler has seen the third.
    let deadline = Instant::now() + Duration::from_secs(10);
    let metrics = loop {
        let text = runtime.block_on(support::serve_process::scrape(&admin));
        if text.contains(r#"loopwatch_detection_log_lines_suppressed_total{severity="warn"} 1"#)
            || Instant::now() > deadline
        {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    for expected in [
        r#"loopwatch_detection_log_lines_suppressed_total{severity="warn"} 1"#,
        r#"loopwatch_detection_log_lines_suppressed_total{severity="kill"} 0"#,
        r#"loopwatch_detections_total{profile="nudge",pattern="repeated_result",severity="warn"} 2"#,
    ] {
        assert!(metrics.contains(expected), "{expected} not in:\n{metrics}");
    }
    sigterm(&child);
    let lines = collect_lines(&lines, |got| {
        got.iter().any(|l| message(l).contains("loopwatch stopped"))
    });
    let detections: Vec<(&str, u64)> = lines
        .iter()
        .filter(|l| message(l).starts_with("loop detected:"))
        .map(|l| {
            (
                l["fields"]["severity"].as_str().unwrap(),
                l["fields"]["occurrence"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(detections.len(), 2, "{lines:#?}");
    assert!(detections.contains(&("warn", 1)), "{detections:?}");
    assert!(detections.contains(&("kill", 1)), "{detections:?}");
    // The shutdown summary names what was left out.
    let summary: Vec<_> = lines
        .iter()
        .filter(|l| message(l).starts_with("loop detected lines not written"))
        .map(|l| {
            (
                l["fields"]["severity"].as_str(),
                l["fields"]["count"].as_u64(),
            )
        })
        .collect();
    assert_eq!(summary, vec![(Some("warn"), Some(1))], "{lines:#?}");
    assert!(child.wait().unwrap().success());
}

/// The status of an empty OTLP/JSON request posted to `path` of the HTTP receiver `http`.
async fn post_empty_request(http: &str, path: &str) -> u16 {
    reqwest::Client::new()
        .post(format!("http://{http}{path}"))
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

#[tokio::test]
async fn the_http_receiver_serves_the_configured_traces_path_only() {
    // `--traces-url-path`, then `LOOPWATCH_RECEIVER__TRACES_URL_PATH`.
    let mut by_flag = support::serve_process::serve_command(None);
    by_flag.args(["--traces-url-path", "/otlp/v1/traces"]);
    let mut by_env = support::serve_process::serve_command(None);
    by_env.env("LOOPWATCH_RECEIVER__TRACES_URL_PATH", "/custom");
    for (command, path) in [(by_flag, "/otlp/v1/traces"), (by_env, "/custom")] {
        let (mut child, listening, _lines) = support::serve_process::spawn_until_listening(command);
        let http = listening["http"].as_str().unwrap().to_string();
        let statuses = (
            post_empty_request(&http, path).await,
            post_empty_request(&http, "/v1/traces").await,
        );
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(statuses, (200, 404), "{path}");
    }
}

#[test]
fn a_traces_url_path_without_a_leading_slash_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, "[receiver]\ntraces_url_path = \"v1/traces\"\n").unwrap();
    let err = fails(loopwatch().arg("check-config").arg(&file));
    assert!(
        err.contains("receiver.traces_url_path") && err.contains("must start with `/`"),
        "{err}"
    );
    std::fs::write(&file, "").unwrap();
    let err = fails(
        loopwatch()
            .arg("check-config")
            .arg(&file)
            .env("LOOPWATCH_RECEIVER__TRACES_URL_PATH", "/{signal}"),
    );
    assert!(err.contains("receiver.traces_url_path"), "{err}");
}

#[test]
fn a_webhook_secret_without_a_url_is_refused_and_a_url_without_a_secret_warned() {
    // check-config and serve both refuse a secret that signs nothing, naming the key and
    // never echoing the secret.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, "[signals.webhook]\nsecret = \"s3cr3t-value\"\n").unwrap();
    let err = fails(loopwatch().arg("check-config").arg(&file));
    assert!(
        err.contains("signals.webhook.secret is set but signals.webhook.url is not"),
        "{err}"
    );
    assert!(!err.contains("s3cr3t-value"), "{err}");
    let mut serve = support::serve_process::serve_command(None);
    serve.env("LOOPWATCH_SIGNALS__WEBHOOK__SECRET", "s3cr3t-value");
    let err = fails(&mut serve);
    assert!(err.contains("signals.webhook.secret"), "{err}");
    assert!(!err.contains("s3cr3t-value"), "{err}");

    // A url without a secret starts, with one warning before the listening line; with a
    // secret, none.
    for (secret, warnings) in [(None, 1), (Some("s3cr3t-value"), 0)] {
        let mut serve = support::serve_process::serve_command(None);
        serve.env("LOOPWATCH_SIGNALS__WEBHOOK__URL", "http://127.0.0.1:9/hook");
        if let Some(secret) = secret {
            serve.env("LOOPWATCH_SIGNALS__WEBHOOK__SECRET", secret);
        }
        let mut child = serve
            .stderr(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut before_listening = Vec::new();
        for line in std::io::BufRead::lines(stderr).map_while(Result::ok) {
            if line.contains("loopwatch listening") {
                break;
            }
            before_listening.push(line);
        }
        let _ = child.kill();
        let _ = child.wait();
        let warned = before_listening
            .iter()
            .filter(|l| l.contains("signals.webhook.secret is not set"))
            .count();
        assert_eq!(warned, warnings, "secret {secret:?}: {before_listening:#?}");
        if warnings == 1 {
            let line = before_listening
                .iter()
                .find(|l| l.contains("signals.webhook.secret is not set"))
                .unwrap();
            let line: serde_json::Value = serde_json::from_str(line).unwrap();
            assert_eq!(line["level"], "WARN", "{line}");
        }
    }
}

#[test]
fn signal_sinks_unreachable_at_start_up_are_reported_before_any_signal() {
    // Ports with nothing listening on them.
    let closed = || {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let mut command = support::serve_process::serve_command(None);
    command
        .env(
            "LOOPWATCH_SIGNALS__REDIS__URL",
            format!("redis://127.0.0.1:{}", closed()),
        )
        .env(
            "LOOPWATCH_SIGNALS__NATS__URL",
            format!("nats://127.0.0.1:{}", closed()),
        );
    // Every line from the start: the check may finish before the listening line.
    let (mut child, lines) = support::serve_process::spawn_with_lines(command);
    let mut reported = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(15);
    while reported.len() < 2 && Instant::now() < deadline {
        let Ok(line) = lines.recv_timeout(Duration::from_millis(200)) else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(&line).unwrap();
        let message = v["fields"]["message"].as_str().unwrap_or_default();
        if message.starts_with("signal sink unreachable at start-up") {
            assert_eq!(v["level"], "WARN", "{line}");
            reported.insert(v["fields"]["sink"].as_str().unwrap().to_string());
        }
    }
    sigterm(&child);
    let _ = child.wait();
    assert_eq!(
        reported.into_iter().collect::<Vec<_>>(),
        ["nats", "redis"],
        "no traffic was sent: each down sink is reported at start-up"
    );
}
