//! `cargo xtask`: loopwatch's developer tools, a workspace member beside the product so
//! that `cargo build` and `cargo install` of loopwatch build one binary. The alias in
//! `.cargo/config.toml` runs this binary in release mode (a load generator must not be the
//! bottleneck); `bench` builds the product with the same features and profile.
//!
//! - `cargo xtask bench [--out FILE] [FLAGS]`: the reproducible benchmark (`bench.rs`):
//!   release builds, servers pinned to CPU 0, clients on CPU 1, a markdown table in
//!   `bench/results.md` (BENCHMARKS.md has the method and the current figures).
//! - `cargo xtask loadgen [FLAGS]`: the load generator itself (`loadgen/`): a quick
//!   in-process ratio by default, `loadgen bench` (the matrix `bench` drives) and
//!   `loadgen passthrough` (the plain OTLP pass-through the matrix compares against).

mod bench;
mod loadgen;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// loopwatch's developer tools.
#[derive(Parser, Debug)]
#[command(name = "xtask", bin_name = "cargo xtask", version)]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Subcommand, Debug)]
enum Task {
    /// Release builds, then `loadgen bench` pinned to CPUs: loopwatch vs a plain OTLP
    /// pass-through (and rotel when installed); writes bench/results.md (--out FILE) and
    /// prints it. Every flag but --out goes to `loadgen bench` (see
    /// `cargo xtask loadgen bench --help`).
    Bench {
        /// `--out FILE` and the flags of `loadgen bench`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Loopback load generator: spans/s and latency of loopwatch vs a plain OTLP/gRPC
    /// pass-through.
    Loadgen(loadgen::Cli),
}

fn main() -> ExitCode {
    match Cli::parse().task {
        Task::Bench { args } => bench::run(args),
        Task::Loadgen(cli) => loadgen::run(cli),
    }
}
