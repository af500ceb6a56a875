//! Helpers of the operations tests (deploy manifests, Prometheus, browser): finding the
//! external tools they drive. A missing tool skips the test with a message, and fails it
//! when `CI` is set (`.ci/run` installs every one of them).

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
        let msg = format!(
            "{name} not found ({why}); deploy/tools/install-tools.sh installs it (.ci/run runs it)"
        );
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

/// The documents of a YAML file as JSON values (Python's PyYAML, which
/// `deploy/tools/install-tools.sh` installs; empty documents left out).
pub fn yaml_docs(path: &Path) -> Vec<serde_json::Value> {
    let json = run(Command::new("python3")
        .arg("-c")
        .arg(
            "import json, sys, yaml\nfor d in yaml.safe_load_all(open(sys.argv[1])):\n    if d is not None:\n        print(json.dumps(d))",
        )
        .arg(path));
    json.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect()
}

/// Validates every object of a manifest file with `deploy/tools/validate-manifests.py`
/// (strict schemas of the core kinds for Kubernetes 1.29 and 1.37, the Prometheus
/// Operator's CRDs; a kind without a schema is an error). Returns its report; panics
/// with it when an object fails. `None` (after saying why) when its Python packages are
/// missing, a panic instead when `CI` is set.
pub fn validate_manifests(path: &Path) -> Option<String> {
    let script = repo().join("deploy/tools/validate-manifests.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(path)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if out.status.code() == Some(3) {
        let msg = format!(
            "{} (deploy/tools/install-tools.sh installs it)",
            report.trim()
        );
        if in_ci() {
            panic!("{msg}");
        }
        eprintln!("skipped: {msg}");
        return None;
    }
    assert!(out.status.success(), "{}:\n{report}", path.display());
    assert!(report.contains(" 0 failed"), "{report}");
    Some(report)
}

/// `loopwatch check-config` on `config` with the container's literal `LOOPWATCH_*` env
/// vars (a misspelt key is an error there); `secret_env` stands in for the values a
/// container takes from Secrets. Panics unless it answers ok.
pub fn check_env_accepted(
    config: &Path,
    container: &serde_json::Value,
    secret_env: &[(&str, &str)],
) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_loopwatch"));
    cmd.arg("check-config").arg(config);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("LOOPWATCH_")) {
        cmd.env_remove(k);
    }
    let mut set = 0;
    for e in container["env"].as_array().expect("env list") {
        let name = e["name"].as_str().expect("env name");
        if let (true, Some(v)) = (name.starts_with("LOOPWATCH_"), e["value"].as_str()) {
            cmd.env(name, v);
            set += 1;
        }
    }
    for (k, v) in secret_env {
        cmd.env(k, v);
    }
    assert!(
        set >= 2,
        "expected LOOPWATCH_* env vars on {}",
        container["name"]
    );
    let out = run(&mut cmd);
    assert!(out.contains(": ok"), "{out}");
}
