//! Helpers of the attack suite (`tests/process/attack_*.rs`, `tests/signals/storm.rs`; issue 31): the real binary with a config
//! file, its peak resident memory, metrics by full line name, tool-call spans that loop,
//! and the real services it is attacked with.

use std::path::Path;
use std::process::{Child, Command};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::Value as Json;

// The signal tests' helpers, for the storm test that reaches attack helpers through this module.
#[allow(unused_imports)]
pub use super::signals::{
    cleanup_sinks, redis_keys, service_up, stream_messages, NATS_ADDR, REDIS_ADDR,
};

/// Taken for its whole length by each attack that keeps both CPUs of a small machine busy
/// (the 32 decoded-cost bomb clients, the soak): they run one after the other, so neither
/// measures its latencies while the other's bombs hold the CPUs.
pub static CPU_HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A `loopwatch serve` child started with a config file, and its listener addresses.
pub struct Server {
    pub child: Child,
    pub grpc: String,
    pub http: String,
    pub admin: String,
    /// Its stderr lines (JSON logs) after the start-up line.
    pub lines: Receiver<String>,
    _dir: tempfile::TempDir,
}

impl Server {
    /// `loopwatch serve` on loopback port 0 forwarding to `downstream` (when given), with
    /// `toml` as its config file (and `env` set).
    pub fn start(
        downstream: Option<std::net::SocketAddr>,
        toml: &str,
        env: &[(&str, &str)],
    ) -> Server {
        Server::start_in(None, downstream, toml, env)
    }

    /// As [`Server::start`], moved into `cgroup` (when given) as soon as it is spawned,
    /// before it reads its config.
    pub fn start_in(
        cgroup: Option<&super::cgroup::MemoryCgroup>,
        downstream: Option<std::net::SocketAddr>,
        toml: &str,
        env: &[(&str, &str)],
    ) -> Server {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("loopwatch.toml");
        std::fs::write(&file, toml).unwrap();
        let mut command: Command = super::serve_process::serve_command(downstream);
        command.arg("--config").arg(&file);
        for (k, v) in env {
            command.env(k, v);
        }
        let (mut child, lines) = super::serve_process::spawn_with_lines(command);
        if let Some(cgroup) = cgroup {
            if let Err(e) = cgroup.add(child.id()) {
                let _ = child.kill();
                panic!("{}: {e}", cgroup.describe());
            }
        }
        let (child, listening, lines) = super::serve_process::wait_listening(child, lines);
        let addr = |name: &str| listening[name].as_str().unwrap().to_owned();
        Server {
            grpc: addr("grpc"),
            http: addr("http"),
            admin: addr("admin"),
            child,
            lines,
            _dir: dir,
        }
    }

    /// Peak resident set size so far, in bytes (`VmHWM`).
    pub fn peak_rss(&self) -> u64 {
        status_kib(self.child.id(), "VmHWM:") * 1024
    }

    /// Resident set size now, in bytes (`VmRSS`).
    pub fn rss(&self) -> u64 {
        status_kib(self.child.id(), "VmRSS:") * 1024
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// The stderr lines written so far (since the last call).
    pub fn drain_lines(&self) -> Vec<String> {
        self.lines.try_iter().collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A `/proc/<pid>/status` value in KiB.
fn status_kib(pid: u32, key: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(key)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

/// The value of the metric line `name` (its labels included, e.g.
/// `loopwatch_signals_dropped_total{sink="redis",action="kill"}`) in `/metrics`; 0 when the
/// line is absent.
pub async fn metric(admin: &str, name: &str) -> f64 {
    let body = super::serve_process::scrape(admin).await;
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// A name unique to this process and call.
pub fn unique(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{name}_{}_{}",
        std::process::id(),
        nanos % 1_000_000_000_000
    )
}

/// Call `call` (0-based) of run `run`: a GenAI `execute_tool` span of tool `search` with the
/// same arguments every time (a loop), in its own trace; 1 s apart.
pub fn tool_call(run: u64, call: u64) -> Span {
    let mut trace_id = vec![0x5a; 8];
    trace_id.extend_from_slice(&run.to_be_bytes());
    let start = 1_700_000_000_000_000_000 + call * 1_000_000_000;
    Span {
        trace_id,
        span_id: (run << 16 | call).to_be_bytes().to_vec(),
        name: "execute_tool search".into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 1_000_000,
        attributes: vec![
            super::spans::kv("gen_ai.operation.name", super::spans::s("execute_tool")),
            super::spans::kv("gen_ai.tool.name", super::spans::s("search")),
            super::spans::kv(
                "gen_ai.tool.call.arguments",
                super::spans::s(r#"{"q":"the same thing"}"#),
            ),
        ],
        ..Span::default()
    }
}

/// Spans of request `n` of size `spans`, with fresh 8-byte span ids (`n * spans ..`), in
/// one trace per request: the "good client" of the attacks, whose every span is checked at
/// the downstream.
pub fn good_request(n: u64, spans: u64) -> ExportTraceServiceRequest {
    super::spans::request_of(
        (n * spans..(n + 1) * spans)
            .map(|id| Span {
                trace_id: [&[0x60u8; 8][..], &n.to_be_bytes()].concat(),
                span_id: id.to_be_bytes().to_vec(),
                name: "chat".into(),
                ..Span::default()
            })
            .collect(),
    )
}

/// Empty attributes of the largest decode bomb a test sends to be accepted: under
/// `limits.max_values_per_request` (1 000 000) with room for the resource and scope entries
/// around its span, which count against the same cap.
pub const ACCEPTED_BOMB_ATTRIBUTES: usize = 999_000;

/// A request of one span holding `attributes` empty attributes: ~2 bytes each on the wire,
/// tens once decoded (the decoded-cost attack of issue 31 item 1).
pub fn empty_attributes_request(attributes: usize) -> Vec<u8> {
    use prost::Message;
    // Encoded by hand: building a million KeyValues to encode them would cost the test
    // what the attack costs the server.
    let mut span = Vec::with_capacity(attributes * 2 + 64);
    prost::encoding::bytes::encode(1, &vec![0x61u8; 16], &mut span);
    prost::encoding::bytes::encode(2, &vec![0x62u8; 8], &mut span);
    for _ in 0..attributes {
        span.extend_from_slice(&[9 << 3 | 2, 0]);
    }
    let mut scope = Vec::with_capacity(span.len() + 8);
    prost::encoding::bytes::encode(2, &span, &mut scope);
    let mut resource = Vec::with_capacity(scope.len() + 8);
    prost::encoding::bytes::encode(2, &scope, &mut resource);
    let mut request = Vec::with_capacity(resource.len() + 8);
    prost::encoding::bytes::encode(1, &resource, &mut request);
    debug_assert!(ExportTraceServiceRequest::decode(request.as_slice()).is_ok());
    request
}

/// Parses one JSON log line.
pub fn log_line(line: &str) -> Option<Json> {
    serde_json::from_str(line).ok()
}

/// Whether `path` is on a filesystem of its own (a mount point).
pub fn is_mount_point(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap_or_default()
        .lines()
        .any(|l| l.split_whitespace().nth(1) == path.to_str())
}

/// POSTs `body` (OTLP/protobuf) to `/v1/traces` until accepted, waiting out retryable
/// refusals (429, 503, or the connection closed on a refusal sent before the body was read
/// whole) 200 ms apart as an OTLP exporter does; the refusals it met. Panics on any other
/// answer, or when not accepted within `patience`.
pub async fn post_until_accepted(http: &str, body: Vec<u8>, patience: Duration) -> u32 {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + patience;
    let mut refusals = 0;
    loop {
        let response = client
            .post(format!("http://{http}/v1/traces"))
            .header("content-type", "application/x-protobuf")
            .body(body.clone())
            .send()
            .await;
        match response.map(|r| r.status().as_u16()) {
            Ok(200) => return refusals,
            Ok(429 | 503) | Err(_) => refusals += 1,
            Ok(other) => panic!("refused for good: {other}"),
        }
        assert!(Instant::now() < deadline, "never accepted");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Exports `request` over gRPC until accepted, waiting out `UNAVAILABLE` and
/// `RESOURCE_EXHAUSTED` 100 ms apart as an OTLP exporter does; the refusals it met. Panics
/// on any other code, or when not accepted within `patience`.
pub async fn export_until_accepted(
    client: &mut TraceServiceClient<tonic::transport::Channel>,
    request: &ExportTraceServiceRequest,
    patience: Duration,
) -> u32 {
    export_retrying(client, request, patience).await.1
}

/// [`export_until_accepted`], also giving the accepting response (its `partial_success`).
pub async fn export_retrying(
    client: &mut TraceServiceClient<tonic::transport::Channel>,
    request: &ExportTraceServiceRequest,
    patience: Duration,
) -> (ExportTraceServiceResponse, u32) {
    let deadline = Instant::now() + patience;
    let mut refusals = 0;
    loop {
        match client.export(request.clone()).await {
            Ok(response) => return (response.into_inner(), refusals),
            Err(status)
                if matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::ResourceExhausted
                ) =>
            {
                refusals += 1
            }
            Err(status) => panic!("refused for good: {status}"),
        }
        assert!(Instant::now() < deadline, "never accepted");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
