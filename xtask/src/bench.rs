//! `cargo xtask bench`: the reproducible benchmark (what `bench/run.sh` did). loopwatch vs
//! a plain OTLP pass-through vs rotel (when installed), each a separate process pinned to
//! CPU 0, loaded by the same clients and counting sink on CPU 1. Writes markdown tables
//! (`bench/results.md`, or `--out FILE`) and prints them: the closed-loop matrix,
//! worker-thread scaling (1 worker on CPU 0, 2 workers on CPUs 0-1, which the clients
//! share), the latency step (open-loop load at half of loopwatch's maximum, loopwatch's p99
//! next to the pass-through's) and memory.
//!
//! ```text
//! cargo xtask bench                    # full run: release build, 4 interleaved rounds of 5 s
//! cargo xtask bench --quick            # smoke test: 1 round of 300 ms per cell, 1 s latency loads
//! cargo xtask bench --rounds 6 --duration 10s --out /tmp/b.md
//! cargo xtask bench --no-latency       # without the latency step
//! cargo xtask bench --worker-threads   # without the worker-thread scaling cells
//! cargo xtask bench --no-raw-passthrough  # without the raw pass-through (bytes forwarded as
//!                                         # received: the transport's own cost, the floor column)
//! ```
//!
//! Every other flag goes to `loadgen bench` (`cargo xtask loadgen bench --help`). rotel:
//! `pip install rotel` (a Rust collector shipped as a Python wheel); its `rotel-agent`
//! binary is found through the Python package, or set `ROTEL=/path/to/rotel-agent`. Needs
//! Linux (`/proc`) and `taskset` (util-linux) for pinning; without `taskset` nothing is
//! pinned. Relative paths are relative to the repository root.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

use anyhow::{bail, Context};

/// The markdown table's default place, relative to the repository root.
const DEFAULT_OUT: &str = "bench/results.md";

/// Runs the benchmark with `args` (`--out FILE` or `--out=FILE`, the rest for
/// `loadgen bench`); the exit code is the load generator's (2 on a set-up error here).
pub fn run(args: Vec<String>) -> ExitCode {
    match bench(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("bench: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn bench(args: Vec<String>) -> anyhow::Result<ExitCode> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .context("the workspace root above xtask/")?;
    std::env::set_current_dir(root).with_context(|| format!("cd {}", root.display()))?;
    let (out, rest) = split_out(args)?;
    if let Some(folder) = Path::new(&out)
        .parent()
        .filter(|f| !f.as_os_str().is_empty())
    {
        std::fs::create_dir_all(folder)
            .with_context(|| format!("creating {}", folder.display()))?;
    }
    let bins = release_binaries()?;
    let rotel = find_rotel();
    let mut command = if can_pin() {
        let mut c = Command::new("taskset");
        c.args(["-c", "1"]).arg(&bins.xtask);
        c
    } else {
        Command::new(&bins.xtask)
    };
    command
        .args(["loadgen", "bench", "--loopwatch"])
        .arg(&bins.loopwatch)
        .args(["--server-cpus", "0", "--out"])
        .arg(&out)
        .args(&rest);
    match rotel {
        Some(path) => command.env("ROTEL", path),
        None => command.env_remove("ROTEL"),
    };
    let status = command
        .status()
        .with_context(|| format!("running {}", bins.xtask.display()))?;
    if !status.success() {
        return Ok(ExitCode::from(
            status
                .code()
                .and_then(|c| u8::try_from(c).ok())
                .unwrap_or(2),
        ));
    }
    let table = std::fs::read_to_string(&out).with_context(|| format!("reading {out}"))?;
    print!("{table}");
    Ok(ExitCode::SUCCESS)
}

/// `--out FILE` / `--out=FILE` (the last one wins, as in a shell script's loop) taken out of
/// `args`; the file and the other arguments in their order.
fn split_out(args: Vec<String>) -> anyhow::Result<(String, Vec<String>)> {
    let mut out = DEFAULT_OUT.to_owned();
    let mut rest = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--out" {
            match args.next() {
                Some(file) => out = file,
                None => bail!("--out needs a file"),
            }
        } else if let Some(file) = arg.strip_prefix("--out=") {
            out = file.to_owned();
        } else {
            rest.push(arg);
        }
    }
    Ok((out, rest))
}

/// The release binaries the benchmark runs.
struct Binaries {
    loopwatch: PathBuf,
    xtask: PathBuf,
}

/// Builds `loopwatch` and `xtask` in release mode (the same cargo as this process, so the
/// same toolchain and target directory) and returns where cargo put them.
fn release_binaries() -> anyhow::Result<Binaries> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["build", "--release", "--bin", "loopwatch", "--bin", "xtask"])
        .args(["--package", "loopwatch", "--package", "xtask"])
        .arg("--message-format=json-render-diagnostics")
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo build --release")?;
    if !output.status.success() {
        bail!("cargo build --release failed ({})", output.status);
    }
    let mut loopwatch = None;
    let mut xtask = None;
    for line in output.stdout.split(|b| *b == b'\n') {
        let Ok(message) = serde_json::from_slice::<serde_json::Value>(line) else {
            continue;
        };
        let Some(executable) = message["executable"].as_str() else {
            continue;
        };
        match message["target"]["name"].as_str() {
            Some("loopwatch") => loopwatch = Some(PathBuf::from(executable)),
            Some("xtask") => xtask = Some(PathBuf::from(executable)),
            _ => {}
        }
    }
    Ok(Binaries {
        loopwatch: loopwatch.context("cargo built no loopwatch executable")?,
        xtask: xtask.context("cargo built no xtask executable")?,
    })
}

/// `ROTEL` when it names an executable, else `rotel-agent` of the `rotel` Python package;
/// `None` (with a note) when neither is there.
fn find_rotel() -> Option<PathBuf> {
    let from_env = std::env::var_os("ROTEL")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from);
    let found = from_env.or_else(|| {
        ["python3", "python"].iter().find_map(|python| {
            let out = Command::new(python)
                .args([
                    "-c",
                    "import os, rotel; print(os.path.join(os.path.dirname(rotel.__file__), 'rotel-agent'))",
                ])
                .stderr(Stdio::null())
                .output()
                .ok()
                .filter(|o| o.status.success())?;
            let path = String::from_utf8(out.stdout).ok()?.trim().to_owned();
            (!path.is_empty()).then(|| PathBuf::from(path))
        })
    });
    match found {
        Some(path) if is_executable(&path) => Some(path),
        _ => {
            eprintln!(
                "bench: rotel not installed (pip install rotel, or set ROTEL): its rows are left out"
            );
            None
        }
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// True when `taskset` runs and the machine has at least 2 CPUs (`nproc --all`): the load
/// generator then runs on CPU 1, the servers on CPU 0.
fn can_pin() -> bool {
    let taskset = Command::new("taskset")
        .arg("-V")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let cpus = Command::new("nproc")
        .arg("--all")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(1);
    taskset && cpus >= 2
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn out_is_taken_out_wherever_it_is_and_the_rest_keeps_its_order() {
        let (out, rest) =
            split_out(strings(&["--quick", "--out", "/tmp/b.md", "--rounds", "3"])).unwrap();
        assert_eq!(out, "/tmp/b.md");
        assert_eq!(rest, strings(&["--quick", "--rounds", "3"]));
        let (out, rest) = split_out(strings(&["--out=a.md", "--spans", "--out", "b.md"])).unwrap();
        assert_eq!(out, "b.md", "the last one wins");
        assert_eq!(rest, strings(&["--spans"]));
        let (out, rest) = split_out(Vec::new()).unwrap();
        assert_eq!((out.as_str(), rest.len()), (DEFAULT_OUT, 0));
    }

    #[test]
    fn out_without_a_file_is_an_error() {
        let e = split_out(strings(&["--quick", "--out"])).unwrap_err();
        assert_eq!(e.to_string(), "--out needs a file");
    }
}
