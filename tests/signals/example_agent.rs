//! A real agent, really stopped: runs `examples/stop-a-looping-agent` (a pydantic-ai agent
//! looping on a failing tool, exporting OTLP/gRPC) against loopwatch started in-process,
//! once per signal sink (Redis, NATS), and checks that
//! - the agent's watcher received the `stop` profile's kill signal and cancelled the run
//!   within two tool calls of the detection;
//! - the downstream OTLP server received the span annotated `loop.profile = "stop"`,
//!   `loop.severity = "kill"`;
//! - (Redis) the kill flag `<key_prefix><trace_id>` holds that same signal.
//!
//! The Python side lives in one virtualenv under `CARGO_TARGET_TMPDIR/example-venv`, created
//! once and reused while `requirements.txt` is unchanged (its SHA-256 is the marker).
//! Needs `python3` ≥ 3.11 with `venv` (or `$PYTHON`) and PyPI access; Redis and NATS as
//! the other signal tests (skipped when unreachable, a failure when `CI` is set).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use crate::support::downstream::Downstream;
use crate::support::signals::{
    fast_retry, service_up, unique, NATS_ADDR, NATS_URL, REDIS_ADDR, REDIS_URL,
};
use loopwatch::config::Config;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::Value as Json;
use sha2::{Digest, Sha256};

/// Longest the agent may run: pip is done by then, the agent itself needs a few seconds.
const AGENT_TIMEOUT: Duration = Duration::from_secs(180);
/// Longest the annotated span may take to reach the downstream after the agent exited.
const DOWNSTREAM_TIMEOUT: Duration = Duration::from_secs(30);
/// Marker file inside the venv: SHA-256 of the requirements it was installed from.
const MARKER: &str = ".requirements-sha256";

fn example_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/stop-a-looping-agent")
}

/// The venv's interpreter, creating/refreshing the venv the first time it is asked for.
/// One venv for every test of this binary (OnceLock) and, across processes sharing the
/// target directory, a lock directory ([`DirLock`]) around the check-and-install.
async fn venv_python() -> PathBuf {
    static VENV: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    tokio::task::spawn_blocking(|| VENV.get_or_init(prepare_venv).clone())
        .await
        .expect("venv setup task")
        .unwrap_or_else(|e| panic!("example venv: {e}"))
}

fn prepare_venv() -> Result<PathBuf, String> {
    let requirements = example_dir().join("requirements.txt");
    let wanted = hex::encode(Sha256::digest(
        std::fs::read(&requirements).map_err(|e| format!("{}: {e}", requirements.display()))?,
    ));
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    std::fs::create_dir_all(tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
    let venv = tmp.join("example-venv");
    let python = venv.join("bin").join("python");

    let _lock = DirLock::acquire(tmp.join("example-venv.lock"))?;

    let installed = std::fs::read_to_string(venv.join(MARKER)).unwrap_or_default();
    if installed.trim() == wanted && python.exists() {
        return Ok(python);
    }
    if venv.exists() {
        std::fs::remove_dir_all(&venv).map_err(|e| format!("{}: {e}", venv.display()))?;
    }
    let base = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
    run_loudly(
        std::process::Command::new(&base)
            .args(["-m", "venv"])
            .arg(&venv),
        &format!("{base} -m venv (Debian/Ubuntu: apt-get install python3-venv)"),
    )?;
    run_loudly(
        std::process::Command::new(&python)
            .args([
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                "-r",
            ])
            .arg(&requirements),
        "pip install -r examples/stop-a-looping-agent/requirements.txt",
    )?;
    std::fs::write(venv.join(MARKER), &wanted).map_err(|e| format!("marker: {e}"))?;
    Ok(python)
}

/// A cross-process lock: a directory, created atomically, removed on drop. Another
/// holder's lock older than [`DirLock::STALE`] is taken to be left by a crashed process and
/// broken. (`File::lock` would do, but is newer than the crate's MSRV.)
struct DirLock(PathBuf);

impl DirLock {
    /// Older than this, a lock is stale (a venv install takes well under a minute).
    const STALE: Duration = Duration::from_secs(600);
    /// Longest wait for another process's install.
    const WAIT: Duration = Duration::from_secs(900);

    fn acquire(path: PathBuf) -> Result<DirLock, String> {
        let deadline = std::time::Instant::now() + Self::WAIT;
        loop {
            match std::fs::create_dir(&path) {
                Ok(()) => return Ok(DirLock(path)),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let age = std::fs::metadata(&path)
                        .and_then(|m| m.modified())
                        .ok()
                        .and_then(|t| t.elapsed().ok());
                    if age.is_some_and(|age| age > Self::STALE) {
                        let _ = std::fs::remove_dir(&path);
                        continue;
                    }
                    if std::time::Instant::now() > deadline {
                        return Err(format!(
                            "{} still held after {:?}; remove it if no test is running",
                            path.display(),
                            Self::WAIT
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => return Err(format!("{}: {e}", path.display())),
            }
        }
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Runs `command`; on failure returns its whole stdout and stderr.
fn run_loudly(command: &mut std::process::Command, what: &str) -> Result<(), String> {
    let output = command
        .output()
        .map_err(|e| format!("{what}: could not start: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}):\n--- stdout\n{}\n--- stderr\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

fn test_config(downstream: std::net::SocketAddr) -> Config {
    let mut config = Config::default();
    config.receiver.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.receiver.http_listen = "127.0.0.1:0".parse().unwrap();
    config.admin.listen = "127.0.0.1:0".into();
    config.exporter.endpoint = Some(format!("http://{downstream}"));
    config.shutdown.drain_timeout = Duration::from_secs(5);
    config.signals.retry = fast_retry();
    config
}

/// The `stop` profile's repeated_result threshold (6 by default).
fn stop_threshold(config: &Config) -> usize {
    config
        .profiles()
        .expect("profiles")
        .into_iter()
        .find(|p| p.name == "stop")
        .expect("built-in stop profile")
        .repeated_result
}

/// What `agent.py` printed as its last stdout line.
struct Outcome {
    trace_id: String,
    tool_calls: usize,
    cancelled: bool,
    reason: String,
    signal: Json,
}

async fn run_agent(python: &Path, args: &[String]) -> Outcome {
    let mut command = tokio::process::Command::new(python);
    command
        .current_dir(example_dir())
        .arg("agent.py")
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONUNBUFFERED", "1")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    let child = command.spawn().expect("start agent.py");
    let output = tokio::time::timeout(AGENT_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("agent.py did not finish within {AGENT_TIMEOUT:?}"))
        .expect("agent.py output");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "agent.py failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    let last = stdout.lines().last().unwrap_or_default();
    let json: Json = serde_json::from_str(last).unwrap_or_else(|e| {
        panic!("agent.py's last stdout line is not JSON ({e}):\n{stdout}\n--- stderr\n{stderr}")
    });
    Outcome {
        trace_id: json["trace_id"].as_str().expect("trace_id").to_owned(),
        tool_calls: json["tool_calls"].as_u64().expect("tool_calls") as usize,
        cancelled: json["cancelled"].as_bool().expect("cancelled"),
        reason: json["reason"].as_str().expect("reason").to_owned(),
        signal: json["signal"].clone(),
    }
}

fn attr(span: &Span, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone())
        .and_then(|v| v.value)
}

/// Waits for the span of `trace_id` annotated by the `stop` profile with a kill.
async fn annotated_kill_span(downstream: &Downstream, trace_id: &str) -> Option<Span> {
    let deadline = tokio::time::Instant::now() + DOWNSTREAM_TIMEOUT;
    loop {
        let found = downstream.spans().into_iter().find(|s| {
            hex::encode(&s.trace_id) == trace_id
                && attr(s, "loop.detected") == Some(Value::BoolValue(true))
                && attr(s, "loop.profile") == Some(Value::StringValue("stop".into()))
                && attr(s, "loop.severity") == Some(Value::StringValue("kill".into()))
        });
        if found.is_some() || tokio::time::Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The checks both sinks share; returns the outcome for sink-specific ones.
async fn check_stopped(
    sink: &str,
    downstream: &Downstream,
    config: Config,
    watcher_args: Vec<String>,
) -> Outcome {
    let threshold = stop_threshold(&config);
    let python = venv_python().await;
    let server = loopwatch::server::start(config)
        .await
        .expect("loopwatch starts");
    let mut args = vec![
        "--otlp-endpoint".to_owned(),
        format!("http://{}", server.grpc_addr),
        "--service-name".to_owned(),
        format!("stop-a-looping-agent-{sink}"),
    ];
    args.extend(watcher_args);
    let outcome = run_agent(&python, &args).await;
    eprintln!(
        "example agent ({sink} sink): {} tool calls before it stopped (stop threshold {threshold}); cancelled={}; reason: {}",
        outcome.tool_calls, outcome.cancelled, outcome.reason
    );

    assert!(
        outcome.cancelled,
        "the agent was not cancelled: {}",
        outcome.reason
    );
    assert!(
        (threshold..=threshold + 2).contains(&outcome.tool_calls),
        "{} tool calls; the kill fires at call {threshold} and must land within 2 more",
        outcome.tool_calls
    );
    let signal = &outcome.signal;
    assert_eq!(signal["action"], "kill", "{signal}");
    assert_eq!(signal["profile"], "stop", "{signal}");
    assert_eq!(signal["pattern"], "repeated_result", "{signal}");
    assert_eq!(signal["trace_id"], outcome.trace_id.as_str(), "{signal}");
    assert_eq!(signal["count"], threshold, "{signal}");
    assert_eq!(signal["tool_names"], serde_json::json!(["fetch_url"]));
    assert_eq!(outcome.reason, signal["message"].as_str().expect("message"));

    let span = annotated_kill_span(downstream, &outcome.trace_id)
        .await
        .unwrap_or_else(|| {
            panic!(
                "no span of trace {} annotated loop.profile=stop, loop.severity=kill reached the downstream ({} spans arrived)",
                outcome.trace_id,
                downstream.spans().len()
            )
        });
    assert_eq!(
        attr(&span, "loop.pattern"),
        Some(Value::StringValue("repeated_result".into()))
    );
    assert_eq!(
        attr(&span, "gen_ai.tool.name"),
        Some(Value::StringValue("fetch_url".into()))
    );
    assert_eq!(
        signal["span_ids"].as_array().and_then(|ids| ids.last()),
        Some(&Json::String(hex::encode(&span.span_id))),
        "the signal's last span is the annotated one"
    );
    server.shutdown().await.expect("clean shutdown");
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_kill_signal_stops_the_agent() {
    if !service_up(REDIS_ADDR).await {
        return;
    }
    let (downstream, downstream_addr) = Downstream::start(false).await;
    let channel = unique("loopwatch:example:signals");
    let key_prefix = format!("{}:", unique("loopwatch:example:kill"));
    let mut config = test_config(downstream_addr);
    config.signals.redis.url = Some(REDIS_URL.to_owned());
    config.signals.redis.channel = channel.clone();
    config.signals.redis.key_prefix = key_prefix.clone();
    let watcher = vec![
        "--signals".to_owned(),
        "redis".to_owned(),
        "--redis-url".to_owned(),
        REDIS_URL.to_owned(),
        "--redis-channel".to_owned(),
        channel,
    ];
    let outcome = check_stopped("redis", &downstream, config, watcher).await;

    let client = redis::Client::open(REDIS_URL).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis connection");
    let key = format!("{key_prefix}{}", outcome.trace_id);
    let flag: Option<String> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("GET");
    let _: i64 = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("DEL");
    let flag = flag.unwrap_or_else(|| panic!("no kill flag at {key}"));
    let flag: Json = serde_json::from_str(&flag).expect("the flag holds JSON");
    assert_eq!(flag["action"], "kill", "{flag}");
    assert_eq!(flag["trace_id"], outcome.trace_id.as_str(), "{flag}");
    assert_eq!(
        flag, outcome.signal,
        "the flag holds the signal the agent received"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_kill_signal_stops_the_agent() {
    if !service_up(NATS_ADDR).await {
        return;
    }
    let (downstream, downstream_addr) = Downstream::start(false).await;
    let subject_prefix = format!("{}.signals", unique("loopwatch_example"));
    let mut config = test_config(downstream_addr);
    config.signals.nats.url = Some(NATS_URL.to_owned());
    config.signals.nats.subject_prefix = subject_prefix.clone();
    config.signals.nats.jetstream = false;
    let watcher = vec![
        "--signals".to_owned(),
        "nats".to_owned(),
        "--nats-url".to_owned(),
        NATS_URL.to_owned(),
        "--nats-subject-prefix".to_owned(),
        subject_prefix,
    ];
    let outcome = check_stopped("nats", &downstream, config, watcher).await;
    assert_eq!(outcome.signal["service_name"], "stop-a-looping-agent-nats");
}
