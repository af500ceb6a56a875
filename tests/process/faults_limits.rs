//! Fault tests of the resource limits (issue 9, items 3 and 8), on real `loopwatch serve`
//! processes over loopback: gzip bombs of millions of empty spans, thousands of HTTP/2
//! streams that never finish, and the memory limiter; each asserts the refusal, that the
//! process still serves, and its peak resident set (`VmHWM` of `/proc/<pid>/status`).
//!
//! Peak RSS figures are printed (`cargo test --test process faults_limits:: -- --nocapture`).

use crate::support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Child;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::uri::PathAndQuery;
use loopwatch::forward::{ExportBody, RawBytesCodec};
use loopwatch::ingest::{AcceptError, Admission, IncomingRequest, SpanSink};
use loopwatch::receiver::grpc::{GrpcReceiver, EXPORT_PATH};
use loopwatch::receiver::rpc_status::retry_delay;
use loopwatch::receiver::{ReceiverOptions, ReceiverStats, RejectReason};
use tonic::codec::CompressionEncoding;
use tonic::transport::Channel;
use tonic::Code;

/// Empty spans in one bomb: 8 M, two bytes each on the wire (16 MB, inside the 16 MiB
/// receive limit), 15.6 KB gzipped.
const BOMB_SPANS: usize = 8_000_000;

/// A running `loopwatch serve` (detect-only), killed on drop.
struct Serve {
    child: Child,
    grpc: SocketAddr,
    http: SocketAddr,
    admin: SocketAddr,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(env: &[(&str, &str)]) -> Serve {
    let mut command = support::serve_process::serve_command(None);
    for (k, v) in env {
        command.env(k, v);
    }
    let (child, listening, _lines) = support::serve_process::spawn_until_listening(command);
    let addr = |name: &str| -> SocketAddr {
        listening[name]
            .as_str()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("{name} address in {listening}"))
    };
    Serve {
        grpc: addr("grpc"),
        http: addr("http"),
        admin: addr("admin"),
        child,
    }
}

impl Serve {
    /// A field of `/proc/<pid>/status` in KiB (`VmHWM`, `VmRSS`).
    fn status_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_else(|e| panic!("process gone? {e}"));
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("{field} in {status}"))
    }

    fn peak_rss_mib(&self) -> u64 {
        self.status_kib("VmHWM") / 1024
    }

    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    fn metrics(&self) -> String {
        let url = format!("http://{}/metrics", self.admin);
        runtime().block_on(async {
            reqwest::get(url)
                .await
                .unwrap_or_else(|e| panic!("{e}"))
                .text()
                .await
                .unwrap_or_default()
        })
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `ExportTraceServiceRequest { resource_spans: [{ scope_spans: [{ spans: [Span{}; n] }] }] }`
/// written directly (a prost request of 8 M spans would itself take gigabytes).
fn empty_spans_request(n: usize) -> Vec<u8> {
    let mut scope = Vec::with_capacity(2 * n);
    for _ in 0..n {
        scope.extend_from_slice(&[0x12, 0x00]); // ScopeSpans.spans (2), empty Span
    }
    let mut resource = Vec::with_capacity(scope.len() + 8);
    resource.push(0x12); // ResourceSpans.scope_spans (2)
    prost::encoding::encode_varint(scope.len() as u64, &mut resource);
    resource.extend_from_slice(&scope);
    let mut request = Vec::with_capacity(resource.len() + 8);
    request.push(0x0a); // ExportTraceServiceRequest.resource_spans (1)
    prost::encoding::encode_varint(resource.len() as u64, &mut request);
    request.extend_from_slice(&resource);
    request
}

/// One span holding `n` empty attributes (`Span.attributes`, field 9, two bytes each).
fn empty_attributes_request(n: usize) -> Vec<u8> {
    let mut span = Vec::with_capacity(2 * n);
    for _ in 0..n {
        span.extend_from_slice(&[0x4a, 0x00]);
    }
    let mut scope = vec![0x12]; // ScopeSpans.spans (2)
    prost::encoding::encode_varint(span.len() as u64, &mut scope);
    scope.extend_from_slice(&span);
    let mut resource = vec![0x12]; // ResourceSpans.scope_spans (2)
    prost::encoding::encode_varint(scope.len() as u64, &mut resource);
    resource.extend_from_slice(&scope);
    let mut request = vec![0x0a]; // ExportTraceServiceRequest.resource_spans (1)
    prost::encoding::encode_varint(resource.len() as u64, &mut request);
    request.extend_from_slice(&resource);
    request
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes).unwrap_or_else(|e| panic!("{e}"));
    enc.finish().unwrap_or_else(|e| panic!("{e}"))
}

async fn channel(addr: SocketAddr) -> Channel {
    Channel::from_shared(format!("http://{addr}"))
        .unwrap_or_else(|e| panic!("{e}"))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect: {e}"))
}

/// Sends `bytes` as the Export body, gzip-compressed by the client.
async fn export_raw(ch: &Channel, bytes: Bytes) -> Result<(), tonic::Status> {
    let mut grpc = tonic::client::Grpc::new(ch.clone())
        .send_compressed(CompressionEncoding::Gzip)
        .max_encoding_message_size(64 << 20);
    grpc.ready()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    grpc.unary(
        tonic::Request::new(ExportBody::from(bytes)),
        PathAndQuery::from_static(EXPORT_PATH),
        RawBytesCodec,
    )
    .await
    .map(|_| ())
}

/// A valid one-span request.
fn small_request() -> Bytes {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![7; 16],
                    span_id: vec![1; 8],
                    name: "work".into(),
                    ..Span::default()
                }],
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    };
    Bytes::from(prost::Message::encode_to_vec(&request))
}

/// Peak RSS allowed under three concurrent bombs. Each costs at most its 16 MB
/// decompressed body (held by tonic's decoder and once more as the request's bytes) plus
/// the span views up to `max_spans_per_request` (100 000 × ~350 B = 35 MB); three at once
/// stay under 3 × 70 MB on top of the idle process (~20 MB in a debug build). Before the
/// cap one bomb took 2.09 GB and three 4.18 GB.
const BOMB_PEAK_RSS_MIB: u64 = 256;

#[test]
fn gzip_bombs_of_8m_empty_spans_are_refused_and_memory_stays_bounded() {
    let mut server = serve(&[]);
    let body = empty_spans_request(BOMB_SPANS);
    assert!(body.len() <= 16 << 20, "{} bytes", body.len());
    let gz = gzip(&body);
    assert!(gz.len() < 20_000, "bomb is {} bytes gzipped", gz.len());
    let idle = server.peak_rss_mib();
    let rt = runtime();
    // One over gRPC: RESOURCE_EXHAUSTED without RetryInfo (the same request would be
    // refused again), naming the key.
    let ch = rt.block_on(channel(server.grpc));
    let status = rt
        .block_on(export_raw(&ch, Bytes::from(body.clone())))
        .err()
        .unwrap_or_else(|| panic!("bomb accepted"));
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("max_spans_per_request"),
        "{}",
        status.message()
    );
    assert_eq!(retry_delay(status.details()), None);
    let one = server.peak_rss_mib();
    // One over HTTP, gzip as sent by the attacker: 413.
    let response = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("http://{}/v1/traces", server.http))
            .header("content-type", "application/x-protobuf")
            .header("content-encoding", "gzip")
            .body(gz.clone())
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    });
    assert_eq!(response.status(), http::StatusCode::PAYLOAD_TOO_LARGE);
    // Three at once.
    let statuses = rt.block_on(async {
        let sends = (0..3).map(|_| {
            let body = Bytes::from(body.clone());
            let addr = server.grpc;
            async move { export_raw(&channel(addr).await, body).await }
        });
        futures::future::join_all(sends).await
    });
    for status in statuses {
        let code = status.err().map(|s| s.code());
        assert_eq!(code, Some(Code::ResourceExhausted));
    }
    let three = server.peak_rss_mib();
    println!(
        "peak RSS: idle {idle} MiB, after one gRPC bomb {one} MiB, after HTTP + three concurrent {three} MiB"
    );
    assert!(server.alive(), "process died");
    rt.block_on(export_raw(&ch, small_request()))
        .unwrap_or_else(|s| panic!("still serving: {s}"));
    assert!(
        three < BOMB_PEAK_RSS_MIB,
        "peak RSS {three} MiB ≥ {BOMB_PEAK_RSS_MIB} MiB"
    );
    // Five bombs refused: each for its span count, except that one of the three at once
    // may be refused first for the decoded bytes in flight (three 16 MB bodies pass the
    // 3/4 of the budget that large requests may hold), retryably and counted as such.
    let metrics = server.metrics();
    let rejected = |reason: &str| {
        let line = format!("loopwatch_requests_rejected_total{{reason=\"{reason}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(line.as_str()))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {line}in\n{metrics}"))
    };
    let (spans, in_flight) = (rejected("too_many_spans"), rejected("in_flight_limit"));
    assert!(
        spans + in_flight == 5 && spans >= 3,
        "too_many_spans {spans}, in_flight_limit {in_flight}"
    );
}

/// `n` empty `ResourceSpans` entries (`ExportTraceServiceRequest.resource_spans`, field 1,
/// two bytes each): 7 M are 14 MB, 13.6 KB gzipped.
fn empty_resource_spans_request(n: usize) -> Vec<u8> {
    [0x0a, 0x00].repeat(n)
}

/// Bombs of empty values: 8 M empty attributes of one span, and 7 M empty `resource_spans`
/// entries (issue D1: kept uncounted, three at once took the peak RSS from 19 MB to
/// 1.7 GB), each refused for `max_values_per_request` over gRPC and HTTP.
#[test]
fn gzip_bombs_of_empty_values_are_refused_and_memory_stays_bounded() {
    let bombs = [
        ("8 M-attribute", empty_attributes_request(BOMB_SPANS)),
        (
            "7 M-resource_spans",
            empty_resource_spans_request(7_000_000),
        ),
    ];
    for (what, body) in bombs {
        let mut server = serve(&[]);
        let gz = gzip(&body);
        assert!(
            gz.len() < 20_000,
            "{what} bomb is {} bytes gzipped",
            gz.len()
        );
        let idle = server.peak_rss_mib();
        let rt = runtime();
        let status = rt
            .block_on(async { export_raw(&channel(server.grpc).await, Bytes::from(body)).await })
            .err()
            .unwrap_or_else(|| panic!("{what} bomb accepted"));
        assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
        assert!(
            status.message().contains("max_values_per_request"),
            "{}",
            status.message()
        );
        let response = rt.block_on(async {
            reqwest::Client::new()
                .post(format!("http://{}/v1/traces", server.http))
                .header("content-type", "application/x-protobuf")
                .header("content-encoding", "gzip")
                .body(gz)
                .send()
                .await
                .unwrap_or_else(|e| panic!("{e}"))
        });
        assert_eq!(response.status(), http::StatusCode::PAYLOAD_TOO_LARGE);
        let peak = server.peak_rss_mib();
        println!("peak RSS: idle {idle} MiB, after two {what} bombs {peak} MiB");
        assert!(server.alive(), "process died");
        // One bomb: its 16 MB body twice (tonic's buffer, the request bytes) and at most
        // 1 000 000 values of ~64 bytes, with the vector's doubling: under 160 MiB.
        assert!(peak < 160, "{what}: peak RSS {peak} MiB");
    }
}

/// One HTTP/2 frame.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = payload.len() as u32;
    let mut out = vec![(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// HPACK block of literal headers without indexing, new names, no Huffman (RFC 7541 §6.2.2).
fn hpack(headers: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        assert!(name.len() < 127 && value.len() < 127);
        out.push(0x00);
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.push(value.len() as u8);
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// Peak RSS allowed after 20 000 never-finished streams on one connection: the server
/// runs at most `max_concurrent_streams` (250) of them and refuses the rest, so the cost
/// is a few hundred pending requests, not 20 000 (11 → 198 MB before the stream limit).
const STREAMS_PEAK_RSS_MIB: u64 = 96;

#[test]
fn twenty_thousand_unfinished_streams_keep_memory_bounded() {
    let mut server = serve(&[]);
    let idle = server.peak_rss_mib();
    let mut tcp = TcpStream::connect(server.grpc).unwrap_or_else(|e| panic!("{e}"));
    tcp.set_nodelay(true).ok();
    // Drain whatever the server answers (SETTINGS, RST_STREAM, GOAWAY).
    let mut reader = tcp.try_clone().unwrap_or_else(|e| panic!("{e}"));
    let drained = std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let mut total = 0usize;
        while let Ok(n) = reader.read(&mut buf) {
            if n == 0 {
                break;
            }
            total += n;
        }
        total
    });
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(0x4, 0, 0, &[])); // SETTINGS
    out.extend(frame(0x4, 0x1, 0, &[])); // SETTINGS ack
    let path = EXPORT_PATH;
    let authority = server.grpc.to_string();
    let block = hpack(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", &authority),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ]);
    let mut sent = 0u32;
    for i in 0..20_000u32 {
        // HEADERS with END_HEADERS, never END_STREAM: the request body never comes.
        out.extend(frame(0x1, 0x4, 2 * i + 1, &block));
        if out.len() > 256 * 1024 {
            if tcp.write_all(&out).is_err() {
                break; // the server closed the connection (GOAWAY): also bounded
            }
            out.clear();
        }
        sent = i + 1;
    }
    let _ = tcp.write_all(&out);
    std::thread::sleep(Duration::from_secs(1));
    let peak = server.peak_rss_mib();
    println!("peak RSS: idle {idle} MiB, after {sent} unfinished streams {peak} MiB");
    assert!(server.alive(), "process died");
    // Still serving others.
    let rt = runtime();
    rt.block_on(async { export_raw(&channel(server.grpc).await, small_request()).await })
        .unwrap_or_else(|s| panic!("still serving: {s}"));
    assert!(
        peak < STREAMS_PEAK_RSS_MIB,
        "peak RSS {peak} MiB ≥ {STREAMS_PEAK_RSS_MIB} MiB"
    );
    let _ = tcp.shutdown(std::net::Shutdown::Both);
    let _ = drained.join();
}

#[test]
fn over_the_memory_limit_requests_are_refused_retryably_and_counted() {
    // A 1 MiB limit: any process is above it, so every request is refused.
    let mut server = serve(&[("LOOPWATCH_LIMITS__MEMORY_MIB", "1")]);
    let rt = runtime();
    let status = rt
        .block_on(async { export_raw(&channel(server.grpc).await, small_request()).await })
        .err()
        .unwrap_or_else(|| panic!("accepted over the memory limit"));
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert_eq!(retry_delay(status.details()), Some(Duration::from_secs(1)));
    let response = rt.block_on(async {
        reqwest::Client::new()
            .post(format!("http://{}/v1/traces", server.http))
            .header("content-type", "application/x-protobuf")
            .body(small_request().to_vec())
            .send()
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    });
    assert_eq!(response.status(), http::StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    assert!(server.alive());
    let metrics = server.metrics();
    assert!(
        metrics.contains("loopwatch_requests_rejected_total{reason=\"memory_limit\"} 2"),
        "{metrics}"
    );
    let soft = metrics
        .lines()
        .find_map(|l| l.strip_prefix("loopwatch_memory_soft_limit_bytes "))
        .map(str::to_owned);
    assert_eq!(soft.as_deref(), Some("838876"), "1 MiB less 20 % of it");
}

/// A sink whose decoded-bytes budget never frees up.
struct BudgetExhausted;

impl SpanSink for BudgetExhausted {
    fn reserve_decoded(
        &self,
        _bytes: usize,
    ) -> futures::future::BoxFuture<'_, loopwatch::ingest::limits::DecodedBytes> {
        Box::pin(futures::future::pending())
    }

    fn accept(&self, _: Admission, _: IncomingRequest) -> Result<(), AcceptError> {
        panic!("nothing may be accepted without the budget")
    }
}

#[tokio::test]
async fn over_the_decoded_bytes_budget_requests_wait_then_are_refused_retryably() {
    let stats = Arc::new(ReceiverStats::default());
    let options = ReceiverOptions::default();
    let sink: Arc<dyn SpanSink> = Arc::new(BudgetExhausted);
    let grpc = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let http = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let (grpc_addr, http_addr) = (
        grpc.local_addr().unwrap_or_else(|e| panic!("{e}")),
        http.local_addr().unwrap_or_else(|e| panic!("{e}")),
    );
    let receiver = GrpcReceiver::new(sink.clone(), options.clone(), stats.clone());
    tokio::spawn(receiver.serve(grpc, futures::future::pending()));
    tokio::spawn(loopwatch::receiver::serve_http(
        http,
        sink,
        options,
        stats.clone(),
        futures::future::pending(),
    ));
    let status = export_raw(&channel(grpc_addr).await, small_request())
        .await
        .err()
        .unwrap_or_else(|| panic!("accepted"));
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(status.message().contains("decoded bytes"), "{status:?}");
    assert_eq!(retry_delay(status.details()), Some(Duration::from_secs(1)));
    let response = reqwest::Client::new()
        .post(format!("http://{http_addr}/v1/traces"))
        .header("content-type", "application/x-protobuf")
        .body(small_request().to_vec())
        .send()
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(response.status(), http::StatusCode::SERVICE_UNAVAILABLE);
    assert!(response.headers().contains_key("retry-after"));
    assert_eq!(stats.rejected_requests(RejectReason::InFlightLimit), 2);
}

/// The key a config error names, or `None` when the config loads.
fn key_of(text: &str) -> Option<String> {
    match loopwatch::config::Config::from_toml(text) {
        Err(loopwatch::config::ConfigError::Key { key, .. }) => Some(key),
        Err(other) => panic!("{other}"),
        Ok(_) => None,
    }
}

#[test]
fn defaults_load_and_bad_values_name_their_key() {
    let config = loopwatch::config::Config::from_toml("").unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        config.limits,
        loopwatch::ingest::limits::LimitsConfig::default()
    );
    assert_eq!(config.limits.max_spans_per_request, 100_000);
    assert_eq!(
        key_of("[limits]\nmax_spans_per_request = 0").as_deref(),
        Some("limits.max_spans_per_request")
    );
    assert_eq!(
        key_of("[limits]\nmax_values_per_request = 0").as_deref(),
        Some("limits.max_values_per_request")
    );
    assert_eq!(
        key_of("[limits]\nmax_decoded_bytes_in_flight = 1000").as_deref(),
        Some("limits.max_decoded_bytes_in_flight")
    );
    assert_eq!(
        key_of("[limits]\nmemory_mib = 100\nmemory_spike_mib = 100").as_deref(),
        Some("limits.memory_spike_mib")
    );
    assert_eq!(
        key_of("[limits]\nmemory_check_interval = \"0s\"").as_deref(),
        Some("limits.memory_check_interval")
    );
    assert_eq!(
        key_of("[registry]\nmax_bytes = 0").as_deref(),
        Some("registry.max_bytes")
    );
    assert_eq!(key_of("[limits]\nmemory_mib = 512"), None);
}
