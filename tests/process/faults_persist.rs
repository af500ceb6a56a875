//! Fault suite, persistent queue (issue 9 items 2, 3 and 8), on the real binary: clients
//! load loopwatch while the downstream is down until the forward queue is full (bounded in
//! bytes here), loopwatch is killed with SIGKILL, restarted on the same queue directory, and
//! the downstream comes up. Every span has its own id; the downstream counts them.
//!
//! - persistent queue: every acknowledged span is delivered (duplicates allowed, counted);
//! - in-memory queue: the acknowledged spans pending at the kill are lost — with the
//!   downstream down the whole time, that is all of them, the one certain figure.
//!
//! The same with the downstream up and deliveries flowing at the kill (requests in flight:
//! the persistent queue may deliver some twice, never lose one).
//!
//! Each run prints a `fault-figures` line (acknowledged / delivered / lost / duplicated).

use crate::support;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::support::downstream::Downstream;
use crate::support::fault_load::{
    delivered, figures, metric, request, sigterm_and_wait, spawn, Figures, Load, Serve,
    SPANS_PER_REQUEST,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;

/// Byte bound of the forward queue in these runs (`exporter.queue.max_bytes`).
const MAX_BYTES: u64 = 256 * 1024;

/// `loopwatch serve` forwarding to `downstream`, with a short backoff and the queue bounded
/// by [`MAX_BYTES`] (the request bound is far above); persistent in `directory` if given.
fn serve(downstream: SocketAddr, directory: Option<&Path>) -> Serve {
    let mut command = support::serve_process::serve_command(Some(downstream));
    command
        .env("LOOPWATCH_EXPORTER__INITIAL_BACKOFF", "100ms")
        .env("LOOPWATCH_EXPORTER__MAX_BACKOFF", "500ms")
        .env("LOOPWATCH_EXPORTER__QUEUE_CAPACITY", "100000")
        .env(
            "LOOPWATCH_EXPORTER__QUEUE__MAX_BYTES",
            MAX_BYTES.to_string(),
        )
        .env("LOOPWATCH_SHUTDOWN__DRAIN_TIMEOUT", "10s");
    if let Some(directory) = directory {
        command
            .env("LOOPWATCH_EXPORTER__QUEUE__PERSISTENT", "true")
            .env("LOOPWATCH_EXPORTER__QUEUE__DIRECTORY", directory);
    }
    spawn(command)
}

fn closed_port() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap()
}

/// A downstream that counts what it receives, started on `addr` now.
async fn downstream_on(addr: SocketAddr) -> Downstream {
    let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
    let downstream = Downstream::default();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(
                TraceServiceServer::new(downstream.clone()).max_decoding_message_size(64 << 20),
            )
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
    downstream
}

/// Loads until the queue is full (refusals, pending bytes near the bound), then kills -9
/// with the clients still sending; returns the acknowledged span ids.
async fn load_until_full_then_kill(serve: &mut Serve) -> HashSet<u64> {
    let load = Load::start(&serve.grpc).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let refused = load.refused.load(Ordering::Relaxed);
        let pending = metric(&serve.admin, "loopwatch_forward_pending_bytes").await;
        assert!(pending <= MAX_BYTES as f64, "byte bound passed: {pending}");
        if refused >= 20 && pending > (MAX_BYTES / 2) as f64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "queue never filled: {refused} refusals, {pending} bytes"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    serve.child.kill().unwrap();
    serve.child.wait().unwrap();
    load.stop().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_a_full_persistent_queue_then_restart_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let addr = closed_port();
    let mut first = serve(addr, Some(dir.path()));
    let acknowledged = load_until_full_then_kill(&mut first).await;
    assert!(!acknowledged.is_empty());
    let file = std::fs::metadata(dir.path().join("queue.redb"))
        .unwrap()
        .len();
    println!("fault-figures queue.redb holding {MAX_BYTES} bytes of requests: {file} bytes");

    let downstream = downstream_on(addr).await;
    let second = serve(addr, Some(dir.path()));
    let f = restart_and_drain(second, &acknowledged, &downstream).await;
    println!("fault-figures kill-9 full queue, persistent: {f:?}");
    assert_eq!(f.lost, 0, "{f:?}");
    assert_eq!(f.delivered, f.acknowledged, "{f:?}");

    // After a clean stop the queue is empty on disk: a third start re-sends nothing.
    let before = downstream.spans().len();
    let mut third = serve(addr, Some(dir.path()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        metric(&third.admin, "loopwatch_forward_pending_bytes").await,
        0.0
    );
    let status = sigterm_and_wait(&mut third);
    assert!(status.success(), "{status:?}");
    assert_eq!(downstream.spans().len(), before);
}

/// Waits (up to 60 s) until the restarted loopwatch delivered every acknowledged span and
/// holds nothing, stops it with SIGTERM (exit 0) and returns the figures.
async fn restart_and_drain(
    mut second: Serve,
    acknowledged: &HashSet<u64>,
    downstream: &Downstream,
) -> Figures {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let f = figures(acknowledged, &delivered(downstream));
        if f.lost == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "acknowledged spans not delivered: {f:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while metric(&second.admin, "loopwatch_forward_pending_bytes").await != 0.0 {
        assert!(
            Instant::now() < deadline,
            "pending bytes never went back to 0"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let status = sigterm_and_wait(&mut second);
    assert!(status.success(), "{status:?}");
    figures(acknowledged, &delivered(downstream))
}

/// Downstream up, clients sending for `LOAD` while deliveries flow, then kill -9 with the
/// clients still sending and restart on the same directory (if any). Returns the figures,
/// acknowledged spans per second during the load and the spans delivered after the restart.
async fn kill_9_while_delivering(directory: Option<&Path>) -> (Figures, f64) {
    const LOAD: Duration = Duration::from_secs(2);
    let (downstream, addr) = Downstream::start(false).await;
    let mut first = serve(addr, directory);
    let load = Load::start(&first.grpc).await;
    tokio::time::sleep(LOAD).await;
    first.child.kill().unwrap();
    first.child.wait().unwrap();
    let acknowledged = load.stop().await;
    let rate = acknowledged.len() as f64 / LOAD.as_secs_f64();
    assert!(!acknowledged.is_empty());
    let second = serve(addr, directory);
    let f = match directory {
        Some(_) => restart_and_drain(second, &acknowledged, &downstream).await,
        None => {
            let mut second = second;
            // nothing to re-queue: what was not delivered before the kill is lost
            tokio::time::sleep(Duration::from_millis(500)).await;
            let status = sigterm_and_wait(&mut second);
            assert!(status.success(), "{status:?}");
            figures(&acknowledged, &delivered(&downstream))
        }
    };
    (f, rate)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_delivering_with_the_persistent_queue_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (f, rate) = kill_9_while_delivering(Some(dir.path())).await;
    println!(
        "fault-figures kill-9 while delivering, persistent: {f:?}, acknowledged {rate:.0} spans/s"
    );
    assert_eq!(f.lost, 0, "{f:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_while_delivering_in_memory_reports_the_loss() {
    let (f, rate) = kill_9_while_delivering(None).await;
    println!(
        "fault-figures kill-9 while delivering, in-memory: {f:?}, acknowledged {rate:.0} spans/s"
    );
    // only what is certain: nothing is delivered twice without a restart re-sending it
    assert_eq!(f.duplicated, 0, "{f:?}");
    assert_eq!(f.delivered + f.lost, f.acknowledged, "{f:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_with_a_full_in_memory_queue_loses_what_was_pending() {
    let addr = closed_port();
    let mut first = serve(addr, None);
    let acknowledged = load_until_full_then_kill(&mut first).await;
    assert!(!acknowledged.is_empty());

    let downstream = downstream_on(addr).await;
    let mut second = serve(addr, None);
    // A fresh request goes through, so the downstream was reachable: anything lost was
    // lost at the kill.
    let mut client = TraceServiceClient::connect(format!("http://{}", second.grpc))
        .await
        .unwrap();
    client.export(request(u64::MAX / 2)).await.unwrap();
    let arrived = downstream
        .wait_for_spans(SPANS_PER_REQUEST as usize, Duration::from_secs(10))
        .await;
    assert_eq!(arrived, SPANS_PER_REQUEST as usize);
    let status = sigterm_and_wait(&mut second);
    assert!(status.success(), "{status:?}");
    let f = figures(&acknowledged, &delivered(&downstream));
    println!("fault-figures kill-9 full queue, in-memory: {f:?}");
    // the downstream was down until after the kill: every acknowledged span was pending
    assert_eq!(f.delivered, 0, "{f:?}");
    assert_eq!(f.lost, f.acknowledged, "{f:?}");
}

#[test]
fn persistent_without_a_directory_fails_check_config_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("loopwatch.toml");
    std::fs::write(
        &file,
        "[exporter]\nendpoint = \"http://127.0.0.1:4317\"\n[exporter.queue]\npersistent = true\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_loopwatch"))
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("exporter.queue.directory: required when exporter.queue.persistent = true"),
        "{stderr}"
    );
}

#[test]
fn a_directory_that_cannot_hold_the_queue_stops_start_up_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_dir = dir.path().join("file");
    std::fs::write(&not_a_dir, b"x").unwrap();
    let queue_dir = not_a_dir.join("queue");
    let out = support::serve_process::serve_command(Some(closed_port()))
        .env("LOOPWATCH_EXPORTER__QUEUE__PERSISTENT", "true")
        .env("LOOPWATCH_EXPORTER__QUEUE__DIRECTORY", &queue_dir)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let want = format!(
        "exporter.queue.directory: persistent queue {}: cannot create the directory: ",
        queue_dir.join("queue.redb").display()
    );
    assert!(stderr.contains(&want), "{stderr}");
    // said once, not repeated by the error chain
    assert_eq!(
        stderr.matches("cannot create the directory").count(),
        1,
        "{stderr}"
    );
}
