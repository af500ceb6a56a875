//! `cargo xtask loadgen bench`: loopwatch, the plain pass-through and (when given) rotel as
//! separate server processes pinned to their own CPUs, loaded by the same clients and
//! counted by the same sink in this process, over a matrix of cells; the median of
//! interleaved rounds goes into a markdown table (`report.rs`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;

use crate::loadgen::client::{measure, Load, Outcome};
use crate::loadgen::processes::{Binaries, Scratch};
use crate::loadgen::procfs;
use crate::loadgen::servers::start_sink;
use crate::loadgen::traffic::{self, Run};

/// Options of `bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The loopwatch binary (default: `loopwatch` beside this executable, as `cargo build`
    /// puts the two binaries of the workspace).
    #[arg(long)]
    pub loopwatch: Option<PathBuf>,
    /// rotel's `rotel-agent` binary (from `pip install rotel`: `rotel/rotel-agent` in the
    /// package folder); without it the rotel rows are left out.
    #[arg(long, env = "ROTEL")]
    pub rotel: Option<PathBuf>,
    /// Interleaved rounds; every figure is the median over them.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Load per measurement (one cell, one setup, one round).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Smoke-test size: 1 round of 300 ms, 2 000 idle runs.
    #[arg(long)]
    pub quick: bool,
    /// CPUs the servers are pinned to (`taskset -c` list); empty = not pinned. Run this
    /// command itself on the other CPUs (`taskset -c 1 xtask loadgen bench`).
    #[arg(long, default_value = "0")]
    pub server_cpus: String,
    /// CPUs of the worker-thread scaling cells (`taskset -c` list): a server with n worker
    /// threads is pinned to the first n of them (the last one when the list is shorter);
    /// empty = not pinned.
    #[arg(long, default_value = "0,1")]
    pub scaling_cpus: String,
    /// Client counts of the matrix.
    #[arg(long, value_delimiter = ',', default_value = "4,32")]
    pub clients: Vec<u32>,
    /// Spans per request of the synthetic cells (the flag alone: none).
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "10,100,1000")]
    pub spans: Vec<usize>,
    /// Tokio worker threads of the scaling cells (loopwatch `server.worker_threads`, the
    /// pass-through's `--worker-threads`); the flag alone: no scaling cells.
    #[arg(long, value_delimiter = ',', num_args = 0.., default_value = "1,2")]
    pub worker_threads: Vec<usize>,
    /// Skip the latency step (open-loop load at `--latency-load` of loopwatch's maximum).
    #[arg(long)]
    pub no_latency: bool,
    /// Offered load of the latency step, as a fraction of loopwatch's closed-loop maximum
    /// spans/s for the same traffic.
    #[arg(long, default_value_t = 0.5, value_parser = crate::loadgen::latency::parse_fraction)]
    pub latency_load: f64,
    /// What loopwatch's maximum is in the latency step: its best closed-loop spans/s, or
    /// its best spans per server CPU-second (the rate a fully busy server CPU would carry).
    #[arg(long, value_enum, default_value = "closed-loop")]
    pub latency_basis: crate::loadgen::latency::Basis,
    /// Concurrent senders of the latency step (each one connection, one request in flight).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub latency_senders: u32,
    /// Paced load per latency measurement (default: `--duration`; `--quick`: 1 s).
    #[arg(long, value_parser = humantime::parse_duration)]
    pub latency_duration: Option<Duration>,
    /// Runs (traces of one tool call) sent before the second memory reading.
    #[arg(long, default_value_t = 100_000)]
    pub idle_runs: u64,
    /// Folder of recorded OTLP requests for the corpus cells.
    #[arg(long, default_value = crate::loadgen::DEFAULT_CORPUS)]
    pub corpus: PathBuf,
    /// Write the markdown report here (default: standard output).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Also write every row as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Let the servers' output through to standard error (default: discarded).
    #[arg(long)]
    pub server_logs: bool,
    /// Leave out the raw pass-through (received bytes forwarded as they are, no decode or
    /// encode), which otherwise runs in every closed-loop cell as the floor column: the
    /// transport's own share of the CPU.
    #[arg(long = "no-raw-passthrough", action = clap::ArgAction::SetFalse)]
    pub raw_passthrough: bool,
}

/// A server under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Setup {
    Loopwatch,
    Passthrough,
    /// The pass-through forwarding received bytes with no decode or encode: the transport
    /// alone (left out with `--no-raw-passthrough`).
    #[serde(rename = "raw-passthrough")]
    RawPassthrough,
    Rotel,
}

impl Setup {
    pub fn name(self) -> &'static str {
        match self {
            Setup::Loopwatch => "loopwatch",
            Setup::Passthrough => "passthrough",
            Setup::RawPassthrough => "raw-passthrough",
            Setup::Rotel => "rotel",
        }
    }
}

/// What the clients send in a cell.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Traffic {
    /// The recorded corpus (`tests/fixtures/corpus`), runs in order.
    Corpus,
    /// Synthetic tool calls: traces of 10 distinct calls.
    NoLoops,
    /// Synthetic tool calls: traces of one call repeated 10 times.
    LoopHeavy,
}

impl Traffic {
    pub fn label(self) -> &'static str {
        match self {
            Traffic::Corpus => "corpus",
            Traffic::NoLoops => "0 % loops",
            Traffic::LoopHeavy => "loop-heavy",
        }
    }
}

/// One cell of the matrix: the same load for every setup.
#[derive(Clone, Debug, Serialize)]
pub struct Cell {
    pub traffic: Traffic,
    /// Spans per request (the corpus: its mean, rounded).
    pub spans_per_request: f64,
    pub clients: u32,
    /// `taskset -c` list of the server ("" = not pinned).
    pub server_cpus: String,
    /// Tokio worker threads of the server (`None`: its default).
    pub worker_threads: Option<usize>,
    /// Index into the prepared traffic.
    #[serde(skip)]
    pub(crate) runs: usize,
    #[serde(skip)]
    pub(crate) setups: Vec<Setup>,
}

/// One measurement.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Sample {
    pub spans_per_second: f64,
    pub spans_per_cpu_second: f64,
    pub cpu_seconds: f64,
    /// CPU used by this process (clients + sink) per second of the load, in %: near 100 %
    /// per client CPU, the clients, not the server, set spans/s.
    pub client_cpu_percent: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub lost: u64,
    pub refused: u64,
    pub failed: u64,
    pub annotated: u64,
    /// loopwatch's detection reports (log line and signal) dropped because its report
    /// queue was full (`loopwatch_detection_reports_dropped_total`); 0 for the others.
    pub reports_dropped: u64,
    pub spans: u64,
}

/// Median (lost, failed: sum) of the rounds of one setup in one cell.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub cell: Cell,
    pub setup: Setup,
    pub rounds: usize,
    pub median: Sample,
}

/// Resident memory of one setup.
#[derive(Clone, Debug, Serialize)]
pub struct MemoryRow {
    pub setup: Setup,
    pub idle_rss_bytes: u64,
    pub runs: u64,
    pub loaded_rss_bytes: u64,
    pub lost: u64,
}

/// Everything `bench` measured.
#[derive(Debug, Serialize)]
pub struct BenchReport {
    pub command: String,
    pub date: String,
    pub machine: crate::loadgen::report::Machine,
    pub rounds: u32,
    pub duration_seconds: f64,
    pub server_cpus: String,
    pub corpus_spans_per_request: f64,
    pub rows: Vec<Row>,
    /// The latency step (empty with `--no-latency`), and the seconds of each paced load.
    pub latency: Vec<crate::loadgen::latency::LatencyRow>,
    pub latency_duration_seconds: f64,
    pub memory: Vec<MemoryRow>,
    /// CPUs this process (clients and sink) may run on (`Cpus_allowed_list`).
    pub client_cpus: String,
    /// `/proc/loadavg` before and after: how busy the machine was.
    pub loadavg_before: String,
    pub loadavg_after: String,
}

/// The median of `values` (0 when empty).
pub(crate) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

fn aggregate(samples: &[Sample]) -> Sample {
    let m = |f: fn(&Sample) -> f64| median(samples.iter().map(f).collect());
    Sample {
        spans_per_second: m(|s| s.spans_per_second),
        spans_per_cpu_second: m(|s| s.spans_per_cpu_second),
        cpu_seconds: m(|s| s.cpu_seconds),
        client_cpu_percent: m(|s| s.client_cpu_percent),
        p50_ms: m(|s| s.p50_ms),
        p99_ms: m(|s| s.p99_ms),
        refused: m(|s| s.refused as f64) as u64,
        annotated: m(|s| s.annotated as f64) as u64,
        reports_dropped: samples.iter().map(|s| s.reports_dropped).sum(),
        spans: m(|s| s.spans as f64) as u64,
        lost: samples.iter().map(|s| s.lost).sum(),
        failed: samples.iter().map(|s| s.failed).sum(),
    }
}

/// The sink, a fresh server process (pinned to `cpus`, `worker_threads` tokio workers or
/// its default), one closed-loop load; CPU read from `/proc` around the load.
pub(crate) async fn measure_once(
    bins: &Binaries,
    setup: Setup,
    (cpus, worker_threads): (&str, Option<usize>),
    runs: &Arc<Vec<Run>>,
    load: Load,
    ticks: f64,
) -> anyhow::Result<Sample> {
    let (sink, sink_addr, stop) = start_sink().await?;
    let server = bins.start(setup, sink_addr, cpus, worker_threads)?;
    let pid = server.child.id();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let me = std::process::id();
    let cpu_before = procfs::cpu_seconds(pid, ticks)?;
    let client_before = procfs::cpu_seconds(me, ticks)?;
    let outcome: Outcome = measure(server.addr, &sink, runs, load).await;
    // loopwatch logs and signals its detections on a task of its own: the CPU is read once
    // that task has caught up, so it includes every report of the load.
    let reports_dropped = match server.admin {
        Some(admin) => reports_settled(admin).await?,
        None => 0,
    };
    let cpu = procfs::cpu_seconds(pid, ticks)? - cpu_before;
    let client_cpu = procfs::cpu_seconds(me, ticks)? - client_before;
    drop(server);
    let _ = stop.send(true);
    Ok(Sample {
        spans_per_second: outcome.spans_per_second(),
        spans_per_cpu_second: outcome.at_sink as f64 / cpu.max(1.0 / ticks),
        cpu_seconds: cpu,
        client_cpu_percent: 100.0 * client_cpu / outcome.delivery_seconds.max(1e-9),
        p50_ms: outcome.percentile_ms(50.0),
        p99_ms: outcome.percentile_ms(99.0),
        lost: outcome.lost(),
        refused: outcome.refused,
        failed: outcome.failed,
        annotated: outcome.annotated,
        reports_dropped,
        spans: outcome.spans,
    })
}

/// Waits (up to 30 s) until loopwatch's detection report queue is empty, read from its
/// `/metrics` at `admin`; returns the detection reports it dropped (queue full), all
/// severities.
async fn reports_settled(admin: SocketAddr) -> anyhow::Result<u64> {
    let url = format!("http://{admin}/metrics");
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = client
            .get(&url)
            .send()
            .await?
            .error_for_status()?
            .text()
            .await?;
        let sum = |name: &str| -> f64 {
            text.lines()
                .filter(|line| {
                    line.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with([' ', '{']))
                })
                .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        let queued = sum("loopwatch_detection_reports_queued");
        if queued == 0.0 || Instant::now() >= deadline {
            return Ok(sum("loopwatch_detection_reports_dropped_total") as u64);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Idle RSS, then RSS after `runs` one-call traces (1000 per request, 4 clients).
async fn measure_memory(
    bins: &Binaries,
    setup: Setup,
    cpus: &str,
    runs: u64,
) -> anyhow::Result<MemoryRow> {
    let (sink, sink_addr, stop) = start_sink().await?;
    let server = bins.start(setup, sink_addr, cpus, None)?;
    let pid = server.child.id();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let idle = procfs::rss_bytes(pid)?;
    let per_request = 1000u64.min(runs.max(1));
    let traffic = Arc::new(traffic::synthetic(per_request as usize, 1, false, 4)?);
    let load = Load {
        concurrency: 4,
        duration: Duration::from_secs(3600),
        requests: runs.div_ceil(per_request),
        drain_timeout: Duration::from_secs(30),
    };
    let outcome = measure(server.addr, &sink, &traffic, load).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let loaded = procfs::rss_bytes(pid)?;
    drop(server);
    let _ = stop.send(true);
    Ok(MemoryRow {
        setup,
        idle_rss_bytes: idle,
        runs: outcome.spans,
        loaded_rss_bytes: loaded,
        lost: outcome.lost(),
    })
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// Runs the whole matrix and the memory readings; returns the report (not yet rendered).
pub async fn run(mut args: BenchArgs, command: String) -> anyhow::Result<BenchReport> {
    if args.quick {
        args.rounds = 1;
        args.duration = Duration::from_millis(300);
        args.idle_runs = args.idle_runs.min(2_000);
        args.latency_duration.get_or_insert(Duration::from_secs(1));
    }
    let here = std::env::current_exe().context("locating the xtask binary")?;
    let beside = |name: &str| here.with_file_name(name);
    let taskset = Command::new("taskset")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !taskset {
        eprintln!("loadgen: taskset not found: servers are not pinned");
        args.server_cpus.clear();
        args.scaling_cpus.clear();
    }
    let bins = Binaries {
        loopwatch: args
            .loopwatch
            .clone()
            .unwrap_or_else(|| beside("loopwatch")),
        loadgen: here.clone(),
        rotel: args.rotel.clone().filter(|p| !p.as_os_str().is_empty()),
        taskset,
        server_logs: args.server_logs,
        scratch: Scratch::new()?,
    };
    anyhow::ensure!(
        bins.loopwatch.exists(),
        "no loopwatch binary at {} (build it, or pass --loopwatch)",
        bins.loopwatch.display()
    );
    let mut setups = vec![Setup::Loopwatch, Setup::Passthrough];
    if args.raw_passthrough {
        setups.push(Setup::RawPassthrough);
    }
    if bins.rotel.is_some() {
        setups.push(Setup::Rotel);
    }

    // Traffic: [0] the corpus, then (spans, loop-heavy) pairs.
    let corpus = traffic::load_corpus(&args.corpus)?;
    let corpus_spans = traffic::spans_per_request(&corpus);
    let mut prepared: Vec<Arc<Vec<Run>>> = vec![Arc::new(corpus)];
    let mut cells = Vec::new();
    for &clients in &args.clients {
        cells.push(Cell {
            traffic: Traffic::Corpus,
            spans_per_request: corpus_spans,
            clients,
            server_cpus: args.server_cpus.clone(),
            worker_threads: None,
            runs: 0,
            setups: setups.clone(),
        });
    }
    for &spans in &args.spans {
        for traffic in [Traffic::NoLoops, Traffic::LoopHeavy] {
            prepared.push(Arc::new(traffic::synthetic(
                spans,
                traffic::CALLS_PER_TRACE,
                traffic == Traffic::LoopHeavy,
                4,
            )?));
            for &clients in &args.clients {
                cells.push(Cell {
                    traffic,
                    spans_per_request: spans as f64,
                    clients,
                    server_cpus: args.server_cpus.clone(),
                    worker_threads: None,
                    runs: prepared.len() - 1,
                    setups: setups.clone(),
                });
            }
        }
    }
    let most_clients = args.clients.iter().copied().max().unwrap_or(4);
    for &threads in &args.worker_threads {
        cells.push(Cell {
            traffic: Traffic::Corpus,
            spans_per_request: corpus_spans,
            clients: most_clients,
            server_cpus: first_cpus(&args.scaling_cpus, threads),
            worker_threads: Some(threads),
            runs: 0,
            setups: vec![Setup::Loopwatch, Setup::Passthrough],
        });
    }

    let loadavg_before = loadavg();
    let ticks = procfs::clock_ticks_per_second();
    let load = |clients| Load {
        concurrency: clients,
        duration: args.duration,
        requests: u64::MAX,
        drain_timeout: Duration::from_secs(if args.quick { 10 } else { 30 }),
    };
    let mut samples: Vec<Vec<Vec<Sample>>> = cells
        .iter()
        .map(|c| vec![Vec::new(); c.setups.len()])
        .collect();
    let total = cells.iter().map(|c| c.setups.len()).sum::<usize>() * args.rounds as usize;
    let mut done = 0;
    for round in 0..args.rounds as usize {
        for (c, cell) in cells.iter().enumerate() {
            // Interleave: each round starts the setups at a different one.
            for k in 0..cell.setups.len() {
                let s = (k + round) % cell.setups.len();
                let setup = cell.setups[s];
                let sample = measure_once(
                    &bins,
                    setup,
                    (&cell.server_cpus, cell.worker_threads),
                    &prepared[cell.runs],
                    load(cell.clients),
                    ticks,
                )
                .await;
                done += 1;
                // One failed measurement leaves its row a round short (the `rounds` field)
                // rather than losing the whole run.
                let sample = match sample {
                    Ok(sample) => sample,
                    Err(e) => {
                        eprintln!(
                            "[{done}/{total}] round {} {}: {} failed: {e:#}",
                            round + 1,
                            cell.traffic.label(),
                            setup.name()
                        );
                        continue;
                    }
                };
                eprintln!(
                    "[{done}/{total}] round {} {} {:.0} spans/req {} clients{}: {} {:.0} spans/s, {:.0} per CPU-s, lost {}",
                    round + 1,
                    cell.traffic.label(),
                    cell.spans_per_request,
                    cell.clients,
                    cell.worker_threads
                        .map(|n| format!(" {n} workers"))
                        .unwrap_or_default(),
                    setup.name(),
                    sample.spans_per_second,
                    sample.spans_per_cpu_second,
                    sample.lost
                );
                samples[c][s].push(sample);
            }
        }
    }
    let rows: Vec<Row> = cells
        .iter()
        .zip(samples)
        .flat_map(|(cell, per_setup)| {
            cell.setups
                .iter()
                .zip(per_setup)
                .map(|(&setup, samples)| Row {
                    cell: cell.clone(),
                    setup,
                    rounds: samples.len(),
                    median: aggregate(&samples),
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let latency = if args.no_latency {
        Vec::new()
    } else {
        let step = crate::loadgen::latency::Step {
            bins: &bins,
            cpus: &args.server_cpus,
            rounds: args.rounds,
            load: args.latency_load,
            basis: args.latency_basis,
            senders: args.latency_senders,
            duration: args.latency_duration.unwrap_or(args.duration),
            probe_clients: most_clients,
            quick: args.quick,
            ticks,
        };
        step.run(&rows, &prepared[0], corpus_spans).await?
    };
    let mut memory = Vec::new();
    for &setup in &setups {
        memory.push(
            measure_memory(&bins, setup, &args.server_cpus, args.idle_runs)
                .await
                .with_context(|| format!("memory of {}", setup.name()))?,
        );
    }
    Ok(BenchReport {
        command,
        date: crate::loadgen::report::utc_now(),
        machine: crate::loadgen::report::Machine::read(),
        rounds: args.rounds,
        duration_seconds: args.duration.as_secs_f64(),
        server_cpus: args.server_cpus.clone(),
        corpus_spans_per_request: corpus_spans,
        rows,
        latency,
        latency_duration_seconds: args.latency_duration.unwrap_or(args.duration).as_secs_f64(),
        memory,
        client_cpus: procfs::cpus_allowed_list().unwrap_or_default(),
        loadavg_before,
        loadavg_after: loadavg(),
    })
}

/// The CPUs of `list` (a `taskset -c` list: `0,1`, `0-3`, `0-3,8`) a server with `n`
/// worker threads is pinned to: the first `n` (at least one; all of them when the list is
/// shorter), as a comma list. An empty or unreadable list stays as it is (not pinned, or
/// left to `taskset` to refuse).
pub(crate) fn first_cpus(list: &str, n: usize) -> String {
    match procfs::cpu_list(list) {
        Some(cpus) if !cpus.is_empty() => cpus
            .iter()
            .take(n.max(1))
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
        _ => list.to_string(),
    }
}

#[cfg(test)]
mod tests;
