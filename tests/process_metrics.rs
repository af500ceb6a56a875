//! `/metrics` of a running `loopwatch serve` carries `loopwatch_build_info` and the
//! standard `process_*` metrics with plausible values.

mod common;

use common::serve_process::{scrape, serve_command, spawn_until_listening};

fn value(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} in {metrics}"))
}

#[tokio::test]
async fn build_info_and_process_metrics_are_exposed() {
    let (mut child, fields, _lines) = spawn_until_listening(serve_command(None));
    let admin = fields["admin"].as_str().unwrap().to_owned();
    let metrics = scrape(&admin).await;
    let openmetrics = reqwest::Client::new()
        .get(format!("http://{admin}/metrics"))
        .header("accept", "application/openmetrics-text; version=1.0.0")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let info = metrics
        .lines()
        .find(|l| l.starts_with("loopwatch_build_info{"))
        .unwrap_or_else(|| panic!("build_info in {metrics}"));
    assert!(
        info.contains(&format!("version=\"{}\"", env!("CARGO_PKG_VERSION")))
            && info.ends_with(" 1"),
        "{info}"
    );
    let rss = value(&metrics, "process_resident_memory_bytes");
    assert!((1e6..4e9).contains(&rss), "rss {rss}");
    let fds = value(&metrics, "process_open_fds");
    assert!((3.0..10_000.0).contains(&fds), "fds {fds}");
    assert!(value(&metrics, "process_max_fds") >= fds);
    assert!(value(&metrics, "process_cpu_seconds_total") >= 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    let start = value(&metrics, "process_start_time_seconds");
    assert!(
        (now - 120.0..=now + 2.0).contains(&start),
        "start {start}, now {now}"
    );
    // Two registries (prefixed and not) encode as one exposition with one EOF.
    assert!(openmetrics.trim_end().ends_with("# EOF"), "{openmetrics}");
    assert_eq!(openmetrics.matches("# EOF").count(), 1);
    assert!(openmetrics.contains("process_open_fds "));
}
