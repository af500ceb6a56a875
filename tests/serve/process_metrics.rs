//! `/metrics` of a running `loopwatch serve` carries `loopwatch_build_info` and the
//! standard `process_*` metrics with plausible values.

use crate::support;

use crate::support::serve_process::{scrape, serve_command, spawn_until_listening};

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

/// A tool span that ended three seconds before it arrives: counted in
/// `loopwatch_ingest_lag_seconds` under its service, and one WARN names the SDK setting.
#[tokio::test]
async fn late_tool_spans_are_measured_and_warned_about_once() {
    use crate::support::spans::{kv, s};
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
    use opentelemetry_proto::tonic::resource::v1::Resource;

    let (mut child, fields, lines) = spawn_until_listening(serve_command(None));
    let grpc = fields["grpc"].as_str().unwrap().to_owned();
    let admin = fields["admin"].as_str().unwrap().to_owned();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let span = |i: u8, ago_ns: u64| opentelemetry_proto::tonic::trace::v1::Span {
        trace_id: vec![9; 16],
        span_id: vec![i; 8],
        name: "execute_tool search".into(),
        start_time_unix_nano: now - ago_ns - 1_000,
        end_time_unix_nano: now - ago_ns,
        attributes: vec![
            kv("gen_ai.operation.name", s("execute_tool")),
            kv("gen_ai.tool.name", s("search")),
            kv("gen_ai.tool.call.arguments", s(&format!("{{\"q\":{i}}}"))),
        ],
        ..Default::default()
    };
    let mut request =
        support::spans::request_of(vec![span(1, 3_000_000_000), span(2, 3_500_000_000)]);
    request.resource_spans[0].resource = Some(Resource {
        attributes: vec![kv("service.name", s("late-agent"))],
        ..Default::default()
    });
    let mut client = TraceServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    client.export(request.clone()).await.unwrap();
    client.export(request).await.unwrap();
    let metrics = scrape(&admin).await;
    let _ = child.kill();
    let _ = child.wait();
    let count = value(
        &metrics,
        "loopwatch_ingest_lag_seconds_count{service_name=\"late-agent\"}",
    );
    assert_eq!(count, 2.0, "{metrics}");
    let sum = value(
        &metrics,
        "loopwatch_ingest_lag_seconds_sum{service_name=\"late-agent\"}",
    );
    assert!((6.0..30.0).contains(&sum), "two lags of about 3 s: {sum}");
    let warnings: Vec<String> = lines
        .try_iter()
        .filter(|l| l.contains("OTEL_BSP_SCHEDULE_DELAY"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("\"level\":\"WARN\""),
        "{}",
        warnings[0]
    );
}
