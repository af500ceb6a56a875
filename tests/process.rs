//! The built binary as a process and the repository itself: the CLI, SIGTERM and the
//! fault suites on `loopwatch serve`, `inject` and the webhook, the deploy manifests and
//! Helm chart, the Prometheus rules, the module layout and `rust-version`.
//!
//! Each file of `tests/process/` is a module of this one test binary (one link per edit, not
//! one per file); `cargo test --test process process::NAME::` runs one file's tests. Shared
//! helpers are in `tests/support/`.

mod support;

mod process {
    mod artifacts;
    mod attack_decoded_cost;
    mod attack_disk_full;
    mod attack_partial;
    mod attack_slow_clients;
    mod attack_soak;
    mod attack_soak_clients;
    mod cli;
    mod cli_broken_pipe;
    mod config_reload;
    mod deploy_helm;
    mod deploy_kubernetes;
    mod faults_downstream;
    mod faults_limits;
    mod faults_persist;
    mod inject;
    mod layout;
    mod prometheus;
    mod rust_version;
    mod shutdown_process;
    mod test_binaries;
}
