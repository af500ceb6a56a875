//! `cargo xtask loadgen`: loopback throughput of loopwatch next to a plain OTLP pass-through.
//!
//! - Default command (`inproc.rs`): in one process, a counting OTLP/gRPC sink, then one
//!   after the other **loopwatch** (`loopwatch::server::start` forwarding to the sink:
//!   decode → detect → annotate → forward) and **passthrough** (a tonic `TraceService` that
//!   forwards each decoded request to the sink: decode + re-encode, nothing else). A quick
//!   ratio; exit status 0 when every acknowledged span reached the sink in both setups, 1
//!   when a setup lost spans, 2 on a set-up error.
//! - `bench` (`bench.rs`, driven by `cargo xtask bench`): loopwatch, the pass-through and rotel
//!   as separate processes pinned to their own CPUs, a matrix of traffic × clients, the
//!   median of interleaved rounds, spans per server CPU-second, memory; a markdown table.
//!   Its latency step (`latency.rs`) offers loopwatch and the pass-through the same
//!   open-loop load (`open_loop.rs`: a fixed rate, latency from each request's due time)
//!   at half of loopwatch's maximum and reports the added p99.
//! - `passthrough` (`servers.rs`): the pass-through as a process of its own, for `bench`,
//!   which starts it, loopwatch and rotel as pinned processes (`processes.rs`).
//!
//! K concurrent clients (`client.rs`) send corpus requests (`tests/fixtures/corpus/**/req-*.pb`)
//! or synthetic tool-call requests (`traffic.rs`) over OTLP/gRPC, each run with fresh
//! trace ids, so every send is a new run and its loops are detected. A request refused
//! with `UNAVAILABLE` is retried. Throughput is spans delivered to the sink per second,
//! counted until the sink has every span the setup acknowledged (asynchronous forwarding
//! included). Latency is per acknowledged request, as the client sees it.

mod bench;
mod client;
mod inproc;
mod latency;
mod open_loop;
mod processes;
mod procfs;
mod report;
mod servers;
mod traffic;

use std::net::{Ipv4Addr, SocketAddr};
use std::process::ExitCode;

use clap::Subcommand;

/// The recorded corpus in this repository (the workspace root is `xtask/..`).
const DEFAULT_CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/fixtures/corpus");

/// Any free port on 127.0.0.1.
const ANY_LOOPBACK_PORT: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 0);

/// Loopback load generator: spans/s and latency of loopwatch vs a plain OTLP pass-through.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct Cli {
    #[command(subcommand)]
    command: Option<Cmd>,
    #[command(flatten)]
    inproc: inproc::Args,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Separate pinned server processes, a matrix of cells, a markdown table.
    Bench(Box<bench::BenchArgs>),
    /// Serve the plain pass-through (used by `bench`).
    Passthrough(servers::PassthroughArgs),
}

fn runtime(worker_threads: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(n) = worker_threads.filter(|n| *n > 0) {
        builder.worker_threads(n);
    }
    builder.enable_all().build()
}

/// Runs the load generator as `cli` says; the exit code: 0 when every acknowledged span
/// reached the sink, 1 when a setup lost spans, 2 on a set-up error.
pub fn run(cli: Cli) -> ExitCode {
    let threads = match &cli.command {
        Some(Cmd::Passthrough(a)) => a.worker_threads,
        _ => None,
    };
    let runtime = match runtime(threads) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("loadgen: runtime: {e}");
            return ExitCode::from(2);
        }
    };
    let result = match cli.command {
        Some(Cmd::Passthrough(args)) => runtime.block_on(servers::run_passthrough(args)),
        Some(Cmd::Bench(args)) => {
            let command = std::env::args().collect::<Vec<_>>().join(" ");
            runtime.block_on(run_bench(*args, command))
        }
        None => return runtime.block_on(run_inproc(cli.inproc)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            ExitCode::from(2)
        }
    }
}

async fn run_bench(args: bench::BenchArgs, command: String) -> anyhow::Result<()> {
    let out = args.out.clone();
    let json = args.json.clone();
    let report = bench::run(args, command).await?;
    let text = report::markdown(&report);
    match out {
        Some(path) => std::fs::write(&path, &text)?,
        None => print!("{text}"),
    }
    if let Some(path) = json {
        std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    }
    Ok(())
}

async fn run_inproc(args: inproc::Args) -> ExitCode {
    let json = args.json;
    match inproc::run(args).await {
        Ok(report) => {
            if json {
                match serde_json::to_string_pretty(&report) {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("loadgen: {e}");
                        return ExitCode::from(2);
                    }
                }
            } else {
                inproc::print_table(&report);
            }
            if report.lost_spans {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("loadgen: {e:#}");
            ExitCode::from(2)
        }
    }
}
