//! `rust-version` in Cargo.toml is what the locked dependencies need: the highest
//! `rust-version` among the packages in Cargo.lock (read with `cargo metadata --locked`),
//! so the declared minimum is neither below what the build needs nor above it.
//!
//! Every locked package counts, for every platform, so cargo reads the manifests of
//! packages this machine's build never downloaded (Windows-only ones, say): it fetches them
//! from the registry, as the build fetched the others. No `--offline`: that needed a cache
//! only `cargo fetch` fills, a step of CI's and not of the README's
//! `cargo test --workspace`.

use std::process::Command;

fn parse(v: &str) -> (u64, u64, u64) {
    let mut parts = v.split('.').map(|p| p.parse::<u64>().unwrap());
    (
        parts.next().unwrap(),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

#[test]
fn rust_version_matches_the_locked_dependencies() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--locked"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let members = meta["workspace_members"].as_array().unwrap();
    let mut ours = None;
    let mut needed = ((0, 0, 0), String::new());
    for p in meta["packages"].as_array().unwrap() {
        let Some(v) = p["rust_version"].as_str() else {
            continue;
        };
        if p["name"] == "loopwatch" {
            ours = Some(parse(v));
        } else if members.contains(&p["id"]) {
            continue; // xtask: ours too, not a dependency
        } else if parse(v) > needed.0 {
            needed = (parse(v), format!("{} {}", p["name"], p["version"]));
        }
    }
    let ours = ours.expect("loopwatch declares rust-version");
    assert_eq!(
        (ours.0, ours.1),
        (needed.0 .0, needed.0 .1),
        "Cargo.toml rust-version {ours:?}; the locked dependencies need {:?} ({})",
        needed.0,
        needed.1
    );
}
