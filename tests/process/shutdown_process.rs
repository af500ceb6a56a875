//! SIGTERM while forwarded requests sleep in backoff, on the real binary (issue 9 item 1):
//! the retries are tried at once; when the downstream is back they are delivered and the
//! exit code is 0; when it is still down the loss is reported at ERROR and the exit code is
//! non-zero.

use crate::support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::downstream::Downstream;
use crate::support::fault_load::{sigterm, wait_exit};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

struct Serve {
    child: std::process::Child,
    grpc: String,
    admin: String,
    lines: std::sync::mpsc::Receiver<String>,
}

/// `loopwatch serve` forwarding to `downstream` with a 30 s first backoff and a 2 s drain.
fn serve(downstream: SocketAddr) -> Serve {
    let mut command = support::serve_process::serve_command(Some(downstream));
    command
        .env("LOOPWATCH_EXPORTER__INITIAL_BACKOFF", "30s")
        .env("LOOPWATCH_EXPORTER__MAX_BACKOFF", "30s")
        .env("LOOPWATCH_SHUTDOWN__DRAIN_TIMEOUT", "2s");
    let (child, listening, lines) = support::serve_process::spawn_until_listening(command);
    Serve {
        child,
        grpc: listening["grpc"].as_str().unwrap().to_string(),
        admin: listening["admin"].as_str().unwrap().to_string(),
        lines,
    }
}

fn request(spans: u8) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (0..spans)
                    .map(|n| Span {
                        trace_id: vec![9; 16],
                        span_id: vec![n + 1; 8],
                        name: "work".into(),
                        ..Span::default()
                    })
                    .collect(),
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
}

/// Waits for a stderr line containing `needle`; returns it.
fn wait_line(lines: &std::sync::mpsc::Receiver<String>, needle: &str, timeout: Duration) -> String {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(line) = lines.recv_timeout(Duration::from_millis(100)) {
            if line.contains(needle) {
                return line;
            }
        }
    }
    panic!("no log line containing {needle:?} within {timeout:?}");
}

/// Waits until `/metrics` shows `requests` requests sleeping in backoff.
async fn wait_in_backoff(admin: &str, requests: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let want = format!("loopwatch_forward_in_backoff {requests}\n");
    loop {
        let body = support::serve_process::scrape(admin).await;
        if body.contains(&want) {
            return;
        }
        assert!(Instant::now() < deadline, "never {want:?}:\n{body}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_backoff_retries_at_once_and_delivers() {
    let addr = closed_port();
    let mut serve = serve(addr);
    let mut client = TraceServiceClient::connect(format!("http://{}", serve.grpc))
        .await
        .unwrap();
    client.export(request(5)).await.unwrap();
    // the first attempt fails: the request now sleeps 15-30 s in backoff
    wait_in_backoff(&serve.admin, 1).await;
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let downstream = Downstream::default();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(downstream.clone()))
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    let started = Instant::now();
    sigterm(&serve.child);
    let status = wait_exit(&mut serve.child, Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(downstream.spans().len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_the_downstream_still_down_reports_the_loss_and_exits_non_zero() {
    let mut serve = serve(closed_port());
    let mut client = TraceServiceClient::connect(format!("http://{}", serve.grpc))
        .await
        .unwrap();
    client.export(request(3)).await.unwrap();
    client.export(request(4)).await.unwrap();
    wait_in_backoff(&serve.admin, 2).await;
    sigterm(&serve.child);
    let status = wait_exit(&mut serve.child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{status:?}");
    let report = wait_line(&serve.lines, "NOT delivered", Duration::from_secs(5));
    let v: serde_json::Value = serde_json::from_str(&report).unwrap();
    assert_eq!(v["level"], "ERROR", "{report}");
    assert_eq!(v["fields"]["undelivered_spans"], 7, "{report}");
    assert_eq!(v["fields"]["undelivered_requests"], 2, "{report}");
    let error = wait_line(&serve.lines, "acknowledged span(s)", Duration::from_secs(5));
    assert!(
        error.contains("7 acknowledged span(s) were not delivered"),
        "{error}"
    );
}

/// The SIGTERM and SIGINT handlers are registered before the server says it is listening:
/// a signal sent the moment that line appears is a graceful shutdown (exit 0 with nothing
/// queued), never the default action that kills the process undrained. Several rounds,
/// since the old window (between the line and the first poll of the shutdown future) was
/// short.
#[test]
fn sigterm_right_after_the_listening_line_is_a_graceful_shutdown() {
    for _ in 0..5 {
        let mut serve = serve(closed_port());
        sigterm(&serve.child);
        let status = wait_exit(&mut serve.child, Duration::from_secs(10));
        assert_eq!(status.code(), Some(0), "{status:?}");
    }
}
