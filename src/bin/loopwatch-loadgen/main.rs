//! `loopwatch-loadgen`: loopback throughput of loopwatch next to a plain OTLP pass-through.
//!
//! In one process it starts a counting OTLP/gRPC sink, then measures, one after the other:
//! - **loopwatch**: `loopwatch::server::start` with `exporter.endpoint` = the sink
//!   (decode → detect → annotate → forward);
//! - **passthrough**: a tonic `TraceService` server that forwards each decoded request with
//!   a tonic client to the sink (decode + re-encode, nothing else).
//!
//! K concurrent clients send corpus requests (`tests/fixtures/corpus/**/req-*.pb` by
//! default) over OTLP/gRPC for a bounded time or request count. Each corpus run is sent
//! with fresh trace ids, so every send is a new run and the corpus loops are detected.
//! A request refused with `UNAVAILABLE` (loopwatch's forward queue full) is retried.
//! Throughput is spans delivered to the sink per second, counted until the sink has every
//! span the setup acknowledged (so loopwatch's asynchronous forwarding is included).
//! Latency is per acknowledged request, as the client sees it.
//!
//! Exit status: 0 when every acknowledged span reached the sink in both setups, 1 when a
//! setup lost spans, 2 on a set-up error.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use bytes::Bytes;
use clap::Parser;
use loopwatch::config::Config;
use loopwatch::forward::{ExportClient, ForwardCompression};
use loopwatch::otlp::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;
use serde::Serialize;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::Channel;

/// Loopback load generator: spans/s and latency of loopwatch vs a plain OTLP pass-through.
#[derive(Parser, Debug)]
#[command(
    name = "loopwatch-loadgen",
    version,
    about = "Loopback load generator: spans/s and latency of loopwatch vs a plain OTLP/gRPC pass-through"
)]
struct Args {
    /// How long each setup is loaded, e.g. `10s`, `500ms`.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    duration: Duration,
    /// Concurrent clients (one connection each).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    concurrency: u32,
    /// Stop each setup after this many requests as well (whichever comes first).
    #[arg(long)]
    requests: Option<u64>,
    /// Folder of recorded OTLP requests (`req-*.pb`, one folder per run).
    #[arg(long, default_value = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/corpus"))]
    corpus: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
}

/// One corpus request as bytes, with the offsets of its trace ids (to rewrite per send).
struct Template {
    bytes: Vec<u8>,
    /// (offset of a 16-byte trace id, index of the original trace id in this run).
    trace_ids: Vec<(usize, u32)>,
    spans: u64,
}

/// The requests of one corpus run, in arrival order.
struct Run {
    requests: Vec<Template>,
}

/// Loads the corpus runs: every folder holding `req-*.pb` is one run.
fn load_corpus(root: &Path) -> anyhow::Result<Vec<Run>> {
    // ScanError's message already names the path and the cause.
    let files = loopwatch::scan::request_files(&[root.to_path_buf()])
        .map_err(|e| anyhow::anyhow!("corpus: {e}"))?;
    let mut by_run: Vec<(PathBuf, Vec<PathBuf>)> = Vec::new();
    for file in files {
        let is_request = file.extension().is_some_and(|e| e == "pb")
            && file
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("req-"));
        if !is_request {
            continue;
        }
        let dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
        match by_run.last_mut() {
            Some((d, files)) if *d == dir => files.push(file),
            _ => by_run.push((dir, vec![file])),
        }
    }
    anyhow::ensure!(
        !by_run.is_empty(),
        "no req-*.pb files under {}",
        root.display()
    );
    by_run
        .into_iter()
        .map(|(_, files)| {
            let mut originals: Vec<Vec<u8>> = Vec::new();
            let requests = files
                .iter()
                .map(|f| {
                    let raw = std::fs::read(f).with_context(|| f.display().to_string())?;
                    let request = ExportTraceServiceRequest::decode(raw.as_slice())
                        .with_context(|| format!("{}: not an OTLP request", f.display()))?;
                    template(request, &mut originals).with_context(|| f.display().to_string())
                })
                .collect::<anyhow::Result<_>>()?;
            Ok(Run { requests })
        })
        .collect()
}

/// Encodes `request` with each valid trace id replaced by a random sentinel and records
/// where the sentinels landed. `originals` maps trace ids to indices across a run.
fn template(
    mut request: ExportTraceServiceRequest,
    originals: &mut Vec<Vec<u8>>,
) -> anyhow::Result<Template> {
    // Sentinels are per call: index i of `originals` → sentinels[i].
    let mut sentinels: Vec<[u8; 16]> = Vec::new();
    let mut replaced = 0usize;
    let mut replace = |id: &mut Vec<u8>| {
        if !loopwatch::otlp::is_valid_trace_id(id) {
            return;
        }
        let index = match originals.iter().position(|o| o == id) {
            Some(i) => i,
            None => {
                originals.push(id.clone());
                originals.len() - 1
            }
        };
        while sentinels.len() <= index {
            sentinels.push(rand::random());
        }
        *id = sentinels[index].to_vec();
        replaced += 1;
    };
    let mut spans = 0u64;
    for rs in &mut request.resource_spans {
        for ss in &mut rs.scope_spans {
            for span in &mut ss.spans {
                spans += 1;
                replace(&mut span.trace_id);
                for link in &mut span.links {
                    replace(&mut link.trace_id);
                }
            }
        }
    }
    let bytes = request.encode_to_vec();
    let mut trace_ids = Vec::new();
    for (index, sentinel) in sentinels.iter().enumerate() {
        let mut at = 0;
        while let Some(pos) = bytes[at..].windows(16).position(|w| w == sentinel) {
            trace_ids.push((at + pos, index as u32));
            at += pos + 16;
        }
    }
    anyhow::ensure!(
        trace_ids.len() == replaced,
        "trace id sentinels found {} times for {replaced} ids",
        trace_ids.len()
    );
    Ok(Template {
        bytes,
        trace_ids,
        spans,
    })
}

/// The OTLP/gRPC sink: counts the spans of every request it accepts.
#[derive(Clone, Default)]
struct Sink {
    spans: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let spans = loopwatch::receiver::decode::span_count(request.get_ref());
        self.spans.fetch_add(spans, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The plain pass-through: forwards each decoded request to the sink, answers with the
/// sink's answer.
#[derive(Clone)]
struct Passthrough {
    downstream: TraceServiceClient<Channel>,
}

#[tonic::async_trait]
impl TraceService for Passthrough {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut downstream = self.downstream.clone();
        downstream.export(request.into_inner()).await
    }
}

const MAX_MESSAGE: usize = 64 << 20;

/// Serves `service` on 127.0.0.1:0 until `stop` turns true; returns the bound address.
async fn serve<S>(service: S, stop: watch::Receiver<bool>) -> anyhow::Result<SocketAddr>
where
    S: TraceService,
{
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let service = TraceServiceServer::new(service).max_decoding_message_size(MAX_MESSAGE);
    tokio::spawn(async move {
        let mut stop = stop;
        let result = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(
                // Without TCP_NODELAY, small responses wait for delayed ACKs (~40 ms).
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                async move {
                    let _ = stop.wait_for(|s| *s).await;
                },
            )
            .await;
        if let Err(e) = result {
            eprintln!("loopwatch-loadgen: server on {addr}: {e}");
        }
    });
    Ok(addr)
}

/// What one setup measured.
#[derive(Debug, Serialize)]
struct SetupReport {
    setup: &'static str,
    /// Requests the setup acknowledged.
    requests: u64,
    /// Spans in acknowledged requests.
    spans_sent: u64,
    /// Spans the sink received.
    spans_at_sink: u64,
    /// Spans the sink received per second, from the first send until the sink had them all.
    spans_per_second: f64,
    /// Seconds from the first send until the last client stopped.
    send_seconds: f64,
    /// Seconds from the first send until the sink had every acknowledged span.
    delivery_seconds: f64,
    /// Request latency (client send → acknowledgement), milliseconds.
    latency_mean_ms: f64,
    latency_p50_ms: f64,
    latency_p99_ms: f64,
    latency_max_ms: f64,
    /// Sends refused with a retryable status (and retried).
    refused: u64,
    /// Sends that failed otherwise (not retried, not counted as sent).
    failed: u64,
    /// loopwatch only: spans its engine processed, and spans it annotated with `loop.*`.
    #[serde(skip_serializing_if = "Option::is_none")]
    engine_spans_seen: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    spans_annotated: Option<u64>,
}

impl SetupReport {
    fn lost(&self) -> bool {
        self.spans_at_sink != self.spans_sent
            || self.engine_spans_seen.is_some_and(|s| s != self.spans_sent)
    }
}

#[derive(Debug, Serialize)]
struct Report {
    corpus_runs: usize,
    corpus_requests: usize,
    corpus_spans: u64,
    concurrency: u32,
    duration_seconds: f64,
    loopwatch: SetupReport,
    passthrough: SetupReport,
    /// loopwatch spans/s ÷ pass-through spans/s.
    throughput_ratio: f64,
    /// loopwatch p50 latency ÷ pass-through p50 latency.
    latency_p50_ratio: f64,
    /// True when a setup did not deliver every acknowledged span.
    lost_spans: bool,
}

/// Per-client results.
#[derive(Default)]
struct ClientResult {
    latencies: Vec<Duration>,
    requests: u64,
    spans: u64,
    refused: u64,
    failed: u64,
}

/// Sends corpus runs to `target` until the deadline or the request budget runs out.
async fn client(
    client_index: u32,
    target: SocketAddr,
    runs: Arc<Vec<Run>>,
    deadline: Instant,
    budget: Arc<AtomicU64>,
    run_counter: Arc<AtomicU64>,
    salt: [u8; 4],
) -> ClientResult {
    let mut result = ClientResult::default();
    let mut export = match ExportClient::new(
        &format!("http://{target}"),
        ForwardCompression::None,
        Duration::from_secs(30),
    ) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("loopwatch-loadgen: client: {e}");
            result.failed += 1;
            return result;
        }
    };
    let mut next = client_index as usize % runs.len();
    'runs: while Instant::now() < deadline {
        let run = &runs[next];
        next = (next + 1) % runs.len();
        let run_id = run_counter.fetch_add(1, Ordering::Relaxed) + 1;
        for template in &run.requests {
            // Take one unit of the request budget (u64::MAX when unbounded).
            if budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                .is_err()
            {
                break 'runs;
            }
            let mut bytes = template.bytes.clone();
            for &(offset, index) in &template.trace_ids {
                let id = &mut bytes[offset..offset + 16];
                id[..8].copy_from_slice(&run_id.to_be_bytes());
                id[8..12].copy_from_slice(&index.to_be_bytes());
                id[12..].copy_from_slice(&salt);
            }
            let bytes = Bytes::from(bytes);
            loop {
                let started = Instant::now();
                match export.export(bytes.clone()).await {
                    Ok(_) => {
                        result.latencies.push(started.elapsed());
                        result.requests += 1;
                        result.spans += template.spans;
                        break;
                    }
                    Err(status) if status.code() == tonic::Code::Unavailable => {
                        result.refused += 1;
                        if Instant::now() > deadline + Duration::from_secs(30) {
                            result.failed += 1;
                            break 'runs;
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    Err(status) => {
                        if result.failed == 0 {
                            eprintln!("loopwatch-loadgen: export failed: {status}");
                        }
                        result.failed += 1;
                        break;
                    }
                }
            }
        }
    }
    result
}

fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
}

/// Loads `target` with the clients, waits until the sink has every acknowledged span.
async fn measure(
    setup: &'static str,
    target: SocketAddr,
    sink: &Sink,
    runs: &Arc<Vec<Run>>,
    args: &Args,
) -> SetupReport {
    let started = Instant::now();
    let deadline = started + args.duration;
    let budget = Arc::new(AtomicU64::new(args.requests.unwrap_or(u64::MAX)));
    let run_counter = Arc::new(AtomicU64::new(0));
    let salt: [u8; 4] = rand::random();
    let clients: Vec<_> = (0..args.concurrency)
        .map(|i| {
            tokio::spawn(client(
                i,
                target,
                runs.clone(),
                deadline,
                budget.clone(),
                run_counter.clone(),
                salt,
            ))
        })
        .collect();
    let mut total = ClientResult::default();
    for c in clients {
        match c.await {
            Ok(r) => {
                total.latencies.extend(r.latencies);
                total.requests += r.requests;
                total.spans += r.spans;
                total.refused += r.refused;
                total.failed += r.failed;
            }
            Err(e) => {
                eprintln!("loopwatch-loadgen: client task: {e}");
                total.failed += 1;
            }
        }
    }
    let send_seconds = started.elapsed().as_secs_f64();
    // loopwatch acknowledges before forwarding: wait for its queue to drain into the sink.
    let drain_deadline = Instant::now() + Duration::from_secs(60);
    while sink.spans.load(Ordering::Relaxed) < total.spans && Instant::now() < drain_deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let delivery = started.elapsed().as_secs_f64();
    let at_sink = sink.spans.load(Ordering::Relaxed);
    total.latencies.sort_unstable();
    SetupReport {
        setup,
        requests: total.requests,
        spans_sent: total.spans,
        spans_at_sink: at_sink,
        spans_per_second: at_sink as f64 / delivery.max(1e-9),
        send_seconds,
        delivery_seconds: delivery,
        latency_mean_ms: if total.latencies.is_empty() {
            0.0
        } else {
            total.latencies.iter().sum::<Duration>().as_secs_f64() * 1e3
                / total.latencies.len() as f64
        },
        latency_p50_ms: percentile_ms(&total.latencies, 50.0),
        latency_p99_ms: percentile_ms(&total.latencies, 99.0),
        latency_max_ms: total
            .latencies
            .last()
            .map_or(0.0, |d| d.as_secs_f64() * 1e3),
        refused: total.refused,
        failed: total.failed,
        engine_spans_seen: None,
        spans_annotated: None,
    }
}

async fn run_loopwatch(runs: &Arc<Vec<Run>>, args: &Args) -> anyhow::Result<SetupReport> {
    let (stop, stop_rx) = watch::channel(false);
    let sink = Sink::default();
    let sink_addr = serve(sink.clone(), stop_rx).await?;
    let mut config = Config::default();
    config.receiver.grpc_listen = "127.0.0.1:0".parse()?;
    config.receiver.http_listen = "127.0.0.1:0".parse()?;
    config.admin.listen = String::new();
    config.exporter.endpoint = Some(format!("http://{sink_addr}"));
    config.detection.fingerprint_key = Some("loopwatch-loadgen".into());
    config.shutdown.drain_timeout = Duration::from_secs(30);
    let server = loopwatch::server::start(config)
        .await
        .context("starting loopwatch")?;
    let mut report = measure("loopwatch", server.grpc_addr, &sink, runs, args).await;
    let stats = &server.engine.stats;
    report.engine_spans_seen = Some(stats.spans_seen.load(Ordering::Relaxed));
    report.spans_annotated = Some(stats.spans_annotated.load(Ordering::Relaxed));
    server.shutdown().await.context("loopwatch shutdown")?;
    report.spans_at_sink = sink.spans.load(Ordering::Relaxed);
    let _ = stop.send(true);
    Ok(report)
}

async fn run_passthrough(runs: &Arc<Vec<Run>>, args: &Args) -> anyhow::Result<SetupReport> {
    let (stop, stop_rx) = watch::channel(false);
    let sink = Sink::default();
    let sink_addr = serve(sink.clone(), stop_rx.clone()).await?;
    let channel =
        tonic::transport::Endpoint::from_shared(format!("http://{sink_addr}"))?.connect_lazy();
    let downstream = TraceServiceClient::new(channel)
        .max_decoding_message_size(MAX_MESSAGE)
        .max_encoding_message_size(MAX_MESSAGE);
    let addr = serve(Passthrough { downstream }, stop_rx).await?;
    let report = measure("passthrough", addr, &sink, runs, args).await;
    let _ = stop.send(true);
    Ok(report)
}

async fn run(args: Args) -> anyhow::Result<Report> {
    let runs = Arc::new(load_corpus(&args.corpus)?);
    let corpus_requests = runs.iter().map(|r| r.requests.len()).sum();
    let corpus_spans = runs
        .iter()
        .flat_map(|r| r.requests.iter())
        .map(|t| t.spans)
        .sum();
    let loopwatch = run_loopwatch(&runs, &args).await?;
    let passthrough = run_passthrough(&runs, &args).await?;
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    Ok(Report {
        corpus_runs: runs.len(),
        corpus_requests,
        corpus_spans,
        concurrency: args.concurrency,
        duration_seconds: args.duration.as_secs_f64(),
        throughput_ratio: ratio(loopwatch.spans_per_second, passthrough.spans_per_second),
        latency_p50_ratio: ratio(loopwatch.latency_p50_ms, passthrough.latency_p50_ms),
        lost_spans: loopwatch.lost() || passthrough.lost(),
        loopwatch,
        passthrough,
    })
}

fn print_table(r: &Report) {
    println!(
        "corpus: {} runs, {} requests, {} spans; {} clients for {:.1}s per setup",
        r.corpus_runs, r.corpus_requests, r.corpus_spans, r.concurrency, r.duration_seconds
    );
    println!(
        "{:<12} {:>9} {:>10} {:>10} {:>11} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "setup",
        "requests",
        "spans",
        "at sink",
        "spans/s",
        "mean ms",
        "p50 ms",
        "p99 ms",
        "refused",
        "failed"
    );
    for s in [&r.loopwatch, &r.passthrough] {
        println!(
            "{:<12} {:>9} {:>10} {:>10} {:>11.0} {:>8.2} {:>8.2} {:>8.2} {:>8} {:>8}",
            s.setup,
            s.requests,
            s.spans_sent,
            s.spans_at_sink,
            s.spans_per_second,
            s.latency_mean_ms,
            s.latency_p50_ms,
            s.latency_p99_ms,
            s.refused,
            s.failed
        );
    }
    println!(
        "loopwatch/passthrough: throughput {:.2}x, p50 latency {:.2}x; loopwatch annotated {} spans",
        r.throughput_ratio,
        r.latency_p50_ratio,
        r.loopwatch.spans_annotated.unwrap_or(0)
    );
    if r.lost_spans {
        println!("LOST SPANS: a setup did not deliver every acknowledged span to the sink");
    }
}

fn main() -> ExitCode {
    let args = Args::parse();
    let json = args.json;
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("loopwatch-loadgen: runtime: {e}");
            return ExitCode::from(2);
        }
    };
    match runtime.block_on(run(args)) {
        Ok(report) => {
            if json {
                match serde_json::to_string_pretty(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("loopwatch-loadgen: {e}");
                        return ExitCode::from(2);
                    }
                }
            } else {
                print_table(&report);
            }
            if report.lost_spans {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("loopwatch-loadgen: {e:#}");
            ExitCode::from(2)
        }
    }
}
