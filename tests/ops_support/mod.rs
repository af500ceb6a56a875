//! Helpers of the operations tests (deploy manifests, Prometheus, browser): finding the
//! external tools they drive. A missing tool skips the test with a message, and fails it
//! when `CI` is set (`.ci/run` installs every one of them).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// True when running in CI, where a missing tool is a failure.
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// `name` found on PATH (or at one of `also`), or `None` after saying why the test is
/// skipped; panics instead when `CI` is set.
pub fn tool(name: &str, also: &[&str], why: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join(name))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .chain(also.iter().map(PathBuf::from))
        .find(|p| p.is_file());
    if found.is_none() {
        let msg = format!("{name} not found ({why}); .ci/run installs it");
        if in_ci() {
            panic!("{msg}");
        }
        eprintln!("skipped: {msg}");
    }
    found
}

/// Runs a command to completion; panics with its stderr when it fails.
pub fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}
