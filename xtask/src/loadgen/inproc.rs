//! The default command: loopwatch and the pass-through in this process, one after the other,
//! against an in-process sink (a quick ratio; `bench` runs them as pinned processes).

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use loopwatch::config::Config;
use serde::Serialize;

use crate::loadgen::client::{measure, Load, Outcome};
use crate::loadgen::servers::{serve, start_sink, Passthrough};
use crate::loadgen::traffic::{load_corpus, Run};

/// Options of the in-process comparison.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// How long each setup is loaded, e.g. `10s`, `500ms`.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Concurrent clients (one connection each).
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub concurrency: u32,
    /// Stop each setup after this many requests as well (whichever comes first).
    #[arg(long)]
    pub requests: Option<u64>,
    /// Folder of recorded OTLP requests (`req-*.pb`, one folder per run).
    #[arg(long, default_value = crate::loadgen::DEFAULT_CORPUS)]
    pub corpus: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Run loopwatch with the persistent forward queue in this directory
    /// (`exporter.queue.persistent`), to measure what the fsync before each acknowledgement costs.
    #[arg(long)]
    pub persistent_queue: Option<PathBuf>,
}

/// What one setup measured.
#[derive(Debug, Serialize)]
pub struct SetupReport {
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
    fn new(setup: &'static str, o: &Outcome) -> SetupReport {
        SetupReport {
            setup,
            requests: o.requests,
            spans_sent: o.spans,
            spans_at_sink: o.at_sink,
            spans_per_second: o.spans_per_second(),
            send_seconds: o.send_seconds,
            delivery_seconds: o.delivery_seconds,
            latency_mean_ms: o.mean_ms(),
            latency_p50_ms: o.percentile_ms(50.0),
            latency_p99_ms: o.percentile_ms(99.0),
            latency_max_ms: o.latencies.last().map_or(0.0, |d| d.as_secs_f64() * 1e3),
            refused: o.refused,
            failed: o.failed,
            engine_spans_seen: None,
            spans_annotated: None,
        }
    }

    fn lost(&self) -> bool {
        self.spans_at_sink != self.spans_sent
            || self.engine_spans_seen.is_some_and(|s| s != self.spans_sent)
    }
}

/// The JSON (`--json`) and table report.
#[derive(Debug, Serialize)]
pub struct Report {
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
    pub lost_spans: bool,
}

fn load(args: &Args) -> Load {
    Load {
        concurrency: args.concurrency,
        duration: args.duration,
        requests: args.requests.unwrap_or(u64::MAX),
        drain_timeout: Duration::from_secs(60),
    }
}

async fn run_loopwatch(runs: &Arc<Vec<Run>>, args: &Args) -> anyhow::Result<SetupReport> {
    let (sink, sink_addr, stop) = start_sink().await?;
    let mut config = Config::default();
    config.receiver.grpc_listen = crate::loadgen::ANY_LOOPBACK_PORT;
    config.receiver.http_listen = crate::loadgen::ANY_LOOPBACK_PORT;
    config.admin.listen = String::new();
    config.exporter.endpoint = Some(format!("http://{sink_addr}"));
    config.detection.fingerprint_key = Some("loopwatch-loadgen".into());
    config.shutdown.drain_timeout = Duration::from_secs(30);
    if let Some(directory) = &args.persistent_queue {
        config.exporter.queue.persistent = true;
        config.exporter.queue.directory = Some(directory.clone());
    }
    let server = loopwatch::server::start(config)
        .await
        .context("starting loopwatch")?;
    let outcome = measure(server.grpc_addr, &sink, runs, load(args)).await;
    let mut report = SetupReport::new("loopwatch", &outcome);
    let stats = &server.engine.stats;
    report.engine_spans_seen = Some(stats.spans_seen.load(Ordering::Relaxed));
    report.spans_annotated = Some(stats.spans_annotated.load(Ordering::Relaxed));
    server.shutdown().await.context("loopwatch shutdown")?;
    report.spans_at_sink = sink.spans.load(Ordering::Relaxed);
    let _ = stop.send(true);
    Ok(report)
}

async fn run_passthrough(runs: &Arc<Vec<Run>>, args: &Args) -> anyhow::Result<SetupReport> {
    let (sink, sink_addr, stop) = start_sink().await?;
    let passthrough = Passthrough::new(&format!("http://{sink_addr}"))?;
    let addr = serve(
        passthrough,
        crate::loadgen::ANY_LOOPBACK_PORT,
        stop.subscribe(),
    )
    .await?;
    let outcome = measure(addr, &sink, runs, load(args)).await;
    let _ = stop.send(true);
    Ok(SetupReport::new("passthrough", &outcome))
}

/// Runs both setups on the corpus.
pub async fn run(args: Args) -> anyhow::Result<Report> {
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

/// Prints the report as a plain-text table.
pub fn print_table(r: &Report) {
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
