//! Attack suite, slow clients (issue 31 items 2 and 6), against the real binary with a real
//! downstream and a forward queue of 100 slots:
//!
//! - 5 HTTP/2 connections each open 250 gRPC streams that send one byte of body and stall
//!   (1 250 streams, 12× the queue's slots): the streams hold no slot (the body is read
//!   first), an ordinary client is served meanwhile, and the stalled streams are cut off by
//!   the minimum body rate with a retryable `UNAVAILABLE`.
//! - the same over HTTP/1.1 on the OTLP/HTTP port (300 connections, `Content-Length` 1000,
//!   one byte sent): the port keeps serving, the stalled requests get 503.
//! - 80 idle connections to the admin listener (64 allowed) while the above goes on:
//!   `/healthz` answers within 2 s (the connection idle longest is closed for it).

use std::time::{Duration, Instant};

use crate::support::attack::{good_request, metric, Server};
use crate::support::downstream::Downstream;
use crate::support::hostile::{healthz_in, stalled_http, stalled_streams};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use prost::Message;
use tokio::io::AsyncWriteExt;

const CONFIG: &str = r#"
[exporter]
queue_capacity = 100
"#;

/// One ordinary gRPC export of 20 spans, retried (as an OTLP exporter does) until accepted;
/// how long it took.
async fn served_in(grpc: &str, n: u64) -> Duration {
    let started = Instant::now();
    let mut client = TraceServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    loop {
        match client.export(good_request(n, 20)).await {
            Ok(_) => return started.elapsed(),
            Err(status) => {
                assert!(
                    started.elapsed() < Duration::from_secs(30),
                    "never served: {status}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_clients_lock_out_neither_the_receivers_nor_the_admin_listener() {
    let (downstream, addr) = Downstream::start(false).await;
    let mut server = Server::start(Some(addr), CONFIG, &[]);

    // 1 250 stalled gRPC streams on 5 connections.
    let mut waits = Vec::new();
    for _ in 0..5 {
        waits.extend(stalled_streams(&server.grpc, 250).await);
    }
    // 300 stalled HTTP/1.1 requests.
    let stalled_http = stalled_http(&server.http, 300).await;
    // 80 idle connections to the admin listener (64 allowed), idle past the eviction age.
    let mut idle_admin = Vec::new();
    for _ in 0..80 {
        idle_admin.push(tokio::net::TcpStream::connect(&server.admin).await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(1200)).await;

    // While it all goes on: an ordinary client is served over gRPC and HTTP, and
    // liveness answers.
    let grpc_served = served_in(&server.grpc, 1).await;
    let http_started = Instant::now();
    let http_status = reqwest::Client::new()
        .post(format!("http://{}/v1/traces", server.http))
        .header("content-type", "application/x-protobuf")
        .body(good_request(2, 20).encode_to_vec())
        .send()
        .await
        .unwrap()
        .status();
    let http_served = http_started.elapsed();
    let healthz = healthz_in(&server.admin).await;
    assert!(server.alive());

    // The stalled streams are cut off, retryably, by the minimum body rate (2 s grace).
    let cut_started = Instant::now();
    let mut codes = std::collections::BTreeMap::new();
    for wait in waits {
        let code = tokio::time::timeout(Duration::from_secs(20), wait)
            .await
            .ok()
            .and_then(Result::ok)
            .flatten();
        *codes.entry(code).or_insert(0) += 1;
    }
    let mut http_codes = std::collections::BTreeMap::new();
    for tcp in stalled_http {
        let code = crate::support::hostile::http_status(tcp, Duration::from_secs(20)).await;
        *http_codes.entry(code).or_insert(0) += 1;
    }
    let cut_in = cut_started.elapsed();
    let too_slow = metric(
        &server.admin,
        "loopwatch_requests_rejected_total{reason=\"body_too_slow\"}",
    )
    .await;
    let evicted = metric(
        &server.admin,
        "loopwatch_connections_evicted_total{listener=\"admin\"}",
    )
    .await;
    assert_eq!(
        downstream.wait_for_spans(40, Duration::from_secs(10)).await,
        40
    );
    println!(
        "ATTACK slow-clients grpc_streams=1250 http_conns=300 admin_idle=80 grpc_served_in={grpc_served:?} \
         http_served_in={http_served:?} healthz_in={healthz:?} stalled_grpc_codes={codes:?} stalled_http_codes={http_codes:?} cut_within={cut_in:?} \
         body_too_slow={too_slow} admin_evicted={evicted} peak_rss_mib={}",
        server.peak_rss() >> 20
    );
    assert!(
        grpc_served < Duration::from_secs(5),
        "gRPC client served in {grpc_served:?}"
    );
    assert_eq!(http_status, 200);
    assert!(
        http_served < Duration::from_secs(5),
        "HTTP client served in {http_served:?}"
    );
    assert!(
        healthz < Duration::from_secs(2),
        "/healthz answered in {healthz:?}"
    );
    assert_eq!(
        codes.get(&Some(14)),
        Some(&1250),
        "every stalled stream: UNAVAILABLE {codes:?}"
    );
    assert_eq!(
        http_codes.get(&Some("503".to_owned())),
        Some(&300),
        "every stalled HTTP request: 503 {http_codes:?}"
    );
    assert_eq!(too_slow, 1250.0 + 300.0);
    assert!(evicted >= 1.0, "an idle admin connection made room");
    drop(idle_admin);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_completes_is_cut_at_the_read_deadline() {
    let (_downstream, addr) = Downstream::start(false).await;
    // A trickle fast enough for the minimum rate, never finished: the deadline cuts it.
    let server = Server::start(
        Some(addr),
        "[receiver]\nbody_read_timeout = \"2s\"\nbody_min_rate = 1\n",
        &[],
    );
    let mut tcp = tokio::net::TcpStream::connect(&server.http).await.unwrap();
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nhost: {}\r\ncontent-type: application/x-protobuf\r\ncontent-length: 100000\r\n\r\n",
        server.http
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let (mut read, mut write) = tcp.into_split();
    let trickle = tokio::spawn(async move {
        for _ in 0..100 {
            if write.write_all(&[0u8; 16]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::io::AsyncReadExt::read_to_end(&mut read, &mut answer),
    )
    .await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after"),
        "{answer}"
    );
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(1900) && elapsed < Duration::from_secs(15),
        "{elapsed:?}"
    );
    trickle.abort();
    assert_eq!(
        metric(
            &server.admin,
            "loopwatch_requests_rejected_total{reason=\"body_timeout\"}"
        )
        .await,
        1.0
    );
}
