//! Forwarder against real downstream OTLP/gRPC servers on real ports.

use crate::support;

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::receiver::{corpus, decode_pb, read, RecordingSink};
use bytes::Bytes;
use loopwatch::forward::{
    DropReason, ForwardCompression, ForwardQueue, Forwarder, ForwarderConfig,
};
use loopwatch::ingest::AcceptError;
use loopwatch::otlp::ExportTraceServiceRequest;
use loopwatch::receiver::rpc_status::status_details_with_retry;
use loopwatch::receiver::{serve_grpc, ReceiverOptions, ReceiverStats};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use tonic::codec::CompressionEncoding;
use tonic::{Code, Status};

/// A downstream that answers scripted errors first, then records and accepts.
#[derive(Default)]
struct Downstream {
    script: Mutex<VecDeque<Status>>,
    got: Mutex<Vec<ExportTraceServiceRequest>>,
    calls: AtomicUsize,
    delay: Duration,
}

impl Downstream {
    fn got(&self) -> usize {
        self.got.lock().map(|g| g.len()).unwrap_or(0)
    }
}

#[derive(Clone)]
struct Svc(Arc<Downstream>);

#[tonic::async_trait]
impl TraceService for Svc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, Status> {
        self.0.calls.fetch_add(1, Ordering::SeqCst);
        if !self.0.delay.is_zero() {
            tokio::time::sleep(self.0.delay).await;
        }
        if let Some(status) = self.0.script.lock().ok().and_then(|mut s| s.pop_front()) {
            return Err(status);
        }
        if let Ok(mut got) = self.0.got.lock() {
            got.push(request.into_inner());
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

async fn start_downstream_on(listener: tokio::net::TcpListener, downstream: Arc<Downstream>) {
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(
                TraceServiceServer::new(Svc(downstream))
                    .accept_compressed(CompressionEncoding::Gzip),
            )
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener)),
    );
}

async fn bind() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    (listener, addr)
}

async fn start_downstream(downstream: Arc<Downstream>) -> SocketAddr {
    let (listener, addr) = bind().await;
    start_downstream_on(listener, downstream).await;
    addr
}

fn config(addr: SocketAddr) -> ForwarderConfig {
    ForwarderConfig {
        endpoint: Some(format!("http://{addr}")),
        queue_capacity: 16,
        timeout: Duration::from_secs(2),
        compression: ForwardCompression::None,
        max_elapsed_retry: Duration::from_secs(30),
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(50),
        concurrency: 1,
        // one request per export unless a test turns batching on
        batch_max_bytes: 1,
        batch_timeout: Duration::ZERO,
        ..ForwarderConfig::default()
    }
}

fn start(config: &ForwarderConfig) -> Forwarder {
    Forwarder::start(config).unwrap_or_else(|e| panic!("start: {e}"))
}

fn send(queue: &ForwardQueue, bytes: &[u8]) -> Result<(), AcceptError> {
    queue.try_reserve()?.send(Bytes::copy_from_slice(bytes), 1);
    Ok(())
}

async fn wait_until(what: &str, timeout: Duration, f: impl Fn() -> bool) {
    let end = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn forwards_corpus_bytes_untouched_with_gzip() {
    // downstream = loopwatch's own receiver, which keeps the exact bytes it got
    let (listener, addr) = bind().await;
    let sink = RecordingSink::new();
    tokio::spawn(serve_grpc(
        listener,
        sink.clone(),
        ReceiverOptions::default(),
        Arc::new(ReceiverStats::default()),
        std::future::pending(),
    ));
    let cfg = ForwarderConfig {
        compression: ForwardCompression::Gzip,
        queue_capacity: 1024,
        ..config(addr)
    };
    let forwarder = start(&cfg);
    let queue = forwarder.queue();
    let stats = forwarder.stats();
    let originals: Vec<Vec<u8>> = corpus("pb").iter().map(|p| read(p)).collect();
    let mut spans = 0;
    for bytes in &originals {
        let n: u64 = decode_pb(bytes)
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len() as u64)
            .sum();
        spans += n;
        queue
            .try_reserve()
            .unwrap_or_else(|e| panic!("{e}"))
            .send(Bytes::from(bytes.clone()), n);
    }
    let report = forwarder.shutdown(Duration::from_secs(20)).await;
    assert_eq!(report.undelivered, 0);
    let got = sink.take();
    assert_eq!(got.len(), originals.len());
    for (incoming, original) in got.iter().zip(&originals) {
        assert_eq!(
            incoming.raw_protobuf().map(|b| b.as_ref()),
            Some(original.as_slice())
        );
        assert_eq!(incoming.to_decoded().unwrap(), decode_pb(original));
    }
    assert_eq!(queue.try_reserve().err(), Some(AcceptError::ShuttingDown));
    assert_eq!(stats.forwarded_requests(), originals.len() as u64);
    assert_eq!(stats.forwarded_spans(), spans);
}

#[tokio::test]
async fn forwarded_request_decodes_same_and_counts() {
    let downstream = Arc::new(Downstream::default());
    let addr = start_downstream(Arc::clone(&downstream)).await;
    let forwarder = start(&config(addr));
    let original = read(&corpus("pb")[0]);
    forwarder
        .queue()
        .try_reserve()
        .unwrap_or_else(|e| panic!("{e}"))
        .send(Bytes::from(original.clone()), 7);
    wait_until("delivery", Duration::from_secs(10), || {
        downstream.got() == 1
    })
    .await;
    let stats = forwarder.stats();
    wait_until("counters", Duration::from_secs(5), || {
        stats.forwarded_requests() == 1
    })
    .await;
    assert_eq!(stats.forwarded_spans(), 7);
    assert_eq!(stats.retries(), 0);
    assert_eq!(stats.queue_depth(), 0);
    assert_eq!(stats.in_flight(), 0);
    let got = downstream.got.lock().map(|g| g.clone()).unwrap_or_default();
    assert_eq!(got[0], decode_pb(&original));
}

#[tokio::test]
async fn unavailable_is_retried_then_delivered_once() {
    let downstream = Arc::new(Downstream::default());
    if let Ok(mut s) = downstream.script.lock() {
        s.extend((0..3).map(|_| Status::unavailable("warming up")));
    }
    let addr = start_downstream(Arc::clone(&downstream)).await;
    let forwarder = start(&config(addr));
    let stats = forwarder.stats();
    let latencies = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&latencies);
    assert!(stats.set_latency_hook(Arc::new(move |l| {
        if let Ok(mut v) = sink.lock() {
            v.push(l);
        }
    })));
    send(&forwarder.queue(), &read(&corpus("pb")[0])).unwrap_or_else(|e| panic!("{e}"));
    wait_until("delivery", Duration::from_secs(10), || {
        stats.forwarded_requests() == 1
    })
    .await;
    assert_eq!(downstream.calls.load(Ordering::SeqCst), 4);
    assert_eq!(downstream.got(), 1);
    assert_eq!(stats.retries(), 3);
    let latencies = latencies.lock().map(|v| v.clone()).unwrap_or_default();
    assert_eq!(latencies.len(), 1);
    assert!(latencies[0].since_enqueued >= latencies[0].export);
    assert!(
        latencies[0].since_enqueued >= Duration::from_millis(15),
        "{latencies:?}"
    );
}

#[tokio::test]
async fn non_retryable_codes_are_dropped_and_counted() {
    let downstream = Arc::new(Downstream::default());
    let retry_info =
        status_details_with_retry(Code::ResourceExhausted, "busy", Duration::from_millis(30));
    if let Ok(mut s) = downstream.script.lock() {
        s.push_back(Status::invalid_argument("bad request"));
        s.push_back(Status::resource_exhausted("quota, no retry info"));
        s.push_back(Status::with_details(
            Code::ResourceExhausted,
            "busy",
            retry_info,
        ));
    }
    let addr = start_downstream(Arc::clone(&downstream)).await;
    let forwarder = start(&config(addr));
    let stats = forwarder.stats();
    let queue = forwarder.queue();
    let bytes = read(&corpus("pb")[0]);
    send(&queue, &bytes).unwrap_or_else(|e| panic!("{e}"));
    wait_until("first drop", Duration::from_secs(10), || {
        stats.dropped_requests(DropReason::NonRetryable) == 1
    })
    .await;
    send(&queue, &bytes).unwrap_or_else(|e| panic!("{e}"));
    wait_until("second drop", Duration::from_secs(10), || {
        stats.dropped_requests(DropReason::NonRetryable) == 2
    })
    .await;
    assert_eq!(downstream.calls.load(Ordering::SeqCst), 2);
    assert_eq!(stats.retries(), 0);
    // RESOURCE_EXHAUSTED with RetryInfo is retried after the server's delay
    let started = Instant::now();
    send(&queue, &bytes).unwrap_or_else(|e| panic!("{e}"));
    wait_until("delivery", Duration::from_secs(10), || {
        stats.forwarded_requests() == 1
    })
    .await;
    assert!(started.elapsed() >= Duration::from_millis(30));
    assert_eq!(stats.retries(), 1);
    assert_eq!(downstream.calls.load(Ordering::SeqCst), 4);
    assert_eq!(stats.dropped_spans(DropReason::NonRetryable), 2);
}

#[tokio::test]
async fn down_downstream_fills_queue_then_everything_is_delivered() {
    let (listener, addr) = bind().await;
    drop(listener); // nothing listens there yet
    let cfg = ForwarderConfig {
        queue_capacity: 4,
        ..config(addr)
    };
    let forwarder = start(&cfg);
    let queue = forwarder.queue();
    let stats = forwarder.stats();
    let bytes = read(&corpus("pb")[0]);
    let mut accepted = 0;
    let mut refused = None;
    for _ in 0..50 {
        match send(&queue, &bytes) {
            Ok(()) => accepted += 1,
            Err(e) => {
                refused = Some(e);
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(refused, Some(AcceptError::QueueFull));
    // the capacity bounds queued + in flight + in backoff together
    assert_eq!(accepted, 4);
    assert_eq!(stats.pending_requests(), 4);
    assert_eq!(
        stats.queue_depth() + stats.in_flight() + stats.in_backoff(),
        4
    );
    wait_until("a retry", Duration::from_secs(5), || stats.retries() > 0).await;

    // the downstream comes up on the same address
    let downstream = Arc::new(Downstream::default());
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .unwrap_or_else(|e| panic!("rebind {addr}: {e}"));
    start_downstream_on(listener, Arc::clone(&downstream)).await;
    wait_until("all delivered", Duration::from_secs(15), || {
        downstream.got() == accepted
    })
    .await;
    wait_until("counters", Duration::from_secs(5), || {
        stats.forwarded_requests() == accepted as u64
    })
    .await;
    for reason in DropReason::ALL {
        assert_eq!(stats.dropped_requests(reason), 0, "{reason:?}");
    }
    assert!(send(&queue, &bytes).is_ok());
}

#[tokio::test]
async fn shutdown_drains_queue_within_deadline() {
    let downstream = Arc::new(Downstream {
        delay: Duration::from_millis(20),
        ..Downstream::default()
    });
    let addr = start_downstream(Arc::clone(&downstream)).await;
    let forwarder = start(&config(addr));
    let queue = forwarder.queue();
    let bytes = read(&corpus("pb")[0]);
    for _ in 0..10 {
        send(&queue, &bytes).unwrap_or_else(|e| panic!("{e}"));
    }
    let started = Instant::now();
    let report = forwarder.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.undelivered, 0);
    assert_eq!(downstream.got(), 10);
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(send(&queue, &bytes), Err(AcceptError::ShuttingDown));
}

#[tokio::test]
async fn shutdown_deadline_reports_undelivered() {
    let (listener, addr) = bind().await;
    drop(listener);
    let forwarder = start(&config(addr));
    let stats = forwarder.stats();
    let queue = forwarder.queue();
    let bytes = read(&corpus("pb")[0]);
    for _ in 0..3 {
        send(&queue, &bytes).unwrap_or_else(|e| panic!("{e}"));
    }
    let started = Instant::now();
    let report = forwarder.shutdown(Duration::from_millis(300)).await;
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(report.undelivered, 3);
    assert_eq!(report.undelivered_spans, 3);
    assert_eq!(stats.dropped_requests(DropReason::Shutdown), 3);
    assert_eq!(stats.dropped_spans(DropReason::Shutdown), 3);
    assert_eq!(stats.pending_requests(), 0);
    assert_eq!(stats.forwarded_requests(), 0);
}

#[tokio::test]
async fn no_endpoint_discards_and_counts() {
    let forwarder = start(&ForwarderConfig::default());
    let stats = forwarder.stats();
    send(&forwarder.queue(), b"\x0a\x00").unwrap_or_else(|e| panic!("{e}"));
    let report = forwarder.shutdown(Duration::from_secs(1)).await;
    assert_eq!(report.undelivered, 0);
    assert_eq!(stats.discarded_requests(), 1);
    assert_eq!(stats.forwarded_requests(), 0);
}

/// Config for the delivery tests: one delivery slot, batching off.
fn one_slot(addr: SocketAddr) -> ForwarderConfig {
    ForwarderConfig {
        queue_capacity: 64,
        ..config(addr)
    }
}

#[tokio::test]
async fn connection_broken_mid_request_is_retried_and_delivered() {
    // The first downstream reads part of the request and closes the connection. The
    // forwarder's start-up reachability probe connects and sends nothing: skip it.
    let (listener, addr) = bind().await;
    let breaker = tokio::spawn(async move {
        use tokio::io::AsyncReadExt;
        loop {
            let (mut socket, _) = listener.accept().await.unwrap_or_else(|e| panic!("{e}"));
            let mut got = vec![0u8; 256];
            let mut read = 0;
            while read < 200 {
                match socket.read(&mut got[read..]).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => read += n,
                }
            }
            if read > 0 {
                // socket and listener dropped here: the connection breaks mid-request
                return read;
            }
        }
    });
    let cfg = ForwarderConfig {
        initial_backoff: Duration::from_millis(200),
        max_backoff: Duration::from_millis(200),
        ..one_slot(addr)
    };
    let forwarder = start(&cfg);
    let stats = forwarder.stats();
    let health = forwarder.health().unwrap_or_else(|| panic!("no health"));
    let bytes = read(&corpus("pb")[0]);
    assert!(
        bytes.len() > 1000,
        "the request must outlive the 200 bytes read"
    );
    send(&forwarder.queue(), &bytes).unwrap_or_else(|e| panic!("{e}"));
    let read_before_break = breaker.await.unwrap_or_else(|e| panic!("{e}"));
    assert!(read_before_break >= 200, "read {read_before_break}");
    wait_until(
        "the broken attempt to be retried",
        Duration::from_secs(5),
        || stats.in_backoff() == 1 || stats.retries() > 0,
    )
    .await;
    assert_eq!(
        health.up(),
        0,
        "a broken connection marks the downstream down"
    );
    // the real downstream comes up on the same address
    let downstream = Arc::new(Downstream::default());
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .unwrap_or_else(|e| panic!("rebind {addr}: {e}"));
    start_downstream_on(listener, Arc::clone(&downstream)).await;
    wait_until("delivery", Duration::from_secs(10), || {
        downstream.got() == 1
    })
    .await;
    wait_until("counters", Duration::from_secs(5), || {
        stats.forwarded_requests() == 1
    })
    .await;
    assert_eq!(
        downstream.got.lock().map(|g| g[0].clone()).ok(),
        Some(decode_pb(&bytes))
    );
    assert!(stats.retries() >= 1);
    assert_eq!(stats.dropped_requests_total(), 0);
    assert_eq!(health.up(), 1, "recovered");
}

#[tokio::test]
async fn backoff_does_not_block_other_deliveries() {
    let downstream = Arc::new(Downstream::default());
    if let Ok(mut s) = downstream.script.lock() {
        s.push_back(Status::unavailable("overloaded"));
    }
    let addr = start_downstream(Arc::clone(&downstream)).await;
    let cfg = ForwarderConfig {
        initial_backoff: Duration::from_secs(3),
        max_backoff: Duration::from_secs(3),
        ..one_slot(addr)
    };
    let forwarder = start(&cfg);
    let stats = forwarder.stats();
    let queue = forwarder.queue();
    let bytes = read(&corpus("pb")[0]);
    send(&queue, &bytes).unwrap_or_else(|e| panic!("{e}"));
    wait_until(
        "the first request to sleep in backoff",
        Duration::from_secs(5),
        || stats.in_backoff() == 1,
    )
    .await;
    // one delivery slot, held by nobody while the first request sleeps (≥ 1.5 s)
    let started = Instant::now();
    send(&queue, &bytes).unwrap_or_else(|e| panic!("{e}"));
    wait_until("the second request", Duration::from_secs(5), || {
        stats.forwarded_requests() == 1
    })
    .await;
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(stats.in_backoff(), 1, "the first is still waiting");
    wait_until("the first request", Duration::from_secs(10), || {
        stats.forwarded_requests() == 2
    })
    .await;
    assert_eq!(downstream.got(), 2);
    assert_eq!(stats.in_backoff(), 0);
    assert_eq!(stats.pending_requests(), 0);
}

#[tokio::test]
async fn shutdown_wakes_retries_in_backoff_and_delivers_at_once() {
    let downstream = Arc::new(Downstream::default());
    if let Ok(mut s) = downstream.script.lock() {
        s.push_back(Status::unavailable("restarting"));
        s.push_back(Status::unavailable("restarting"));
    }
    let addr = start_downstream(Arc::clone(&downstream)).await;
    let cfg = ForwarderConfig {
        initial_backoff: Duration::from_secs(20),
        max_backoff: Duration::from_secs(20),
        max_elapsed_retry: Duration::from_secs(300),
        concurrency: 2,
        ..one_slot(addr)
    };
    let forwarder = start(&cfg);
    let stats = forwarder.stats();
    let bytes = read(&corpus("pb")[0]);
    for _ in 0..2 {
        send(&forwarder.queue(), &bytes).unwrap_or_else(|e| panic!("{e}"));
    }
    wait_until("both in backoff", Duration::from_secs(5), || {
        stats.in_backoff() == 2
    })
    .await;
    let started = Instant::now();
    let report = forwarder.shutdown(Duration::from_secs(5)).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(report.undelivered, 0);
    assert_eq!(report.undelivered_spans, 0);
    assert_eq!(downstream.got(), 2);
    assert_eq!(stats.forwarded_requests(), 2);
}

/// `n` requests of one span each, with span ids 0..n (big-endian in the last 4 bytes).
fn numbered_requests(n: u32) -> Vec<Vec<u8>> {
    use prost::Message;
    (0..n)
        .map(|i| {
            let mut request = support::receiver::big_request(200);
            let span = &mut request.resource_spans[0].scope_spans[0].spans[0];
            span.span_id = [[0u8; 4], i.to_be_bytes()].concat();
            request.encode_to_vec()
        })
        .collect()
}

fn span_ids(requests: &[ExportTraceServiceRequest]) -> Vec<u32> {
    let mut ids: Vec<u32> = requests
        .iter()
        .flat_map(|r| &r.resource_spans)
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .map(|s| u32::from_be_bytes([s.span_id[4], s.span_id[5], s.span_id[6], s.span_id[7]]))
        .collect();
    ids.sort_unstable();
    ids
}

#[tokio::test]
async fn batching_delivers_every_span_once_in_fewer_requests() {
    let downstream = Arc::new(Downstream {
        delay: Duration::from_millis(50),
        ..Downstream::default()
    });
    let addr = start_downstream(Arc::clone(&downstream)).await;
    let cfg = ForwarderConfig {
        batch_max_bytes: 64 * 1024,
        ..one_slot(addr)
    };
    let forwarder = start(&cfg);
    let stats = forwarder.stats();
    let requests = numbered_requests(40);
    for bytes in &requests {
        send(&forwarder.queue(), bytes).unwrap_or_else(|e| panic!("{e}"));
    }
    let report = forwarder.shutdown(Duration::from_secs(10)).await;
    assert_eq!(report.undelivered, 0);
    let got = downstream.got.lock().map(|g| g.clone()).unwrap_or_default();
    assert_eq!(
        span_ids(&got),
        (0..40).collect::<Vec<u32>>(),
        "every span exactly once"
    );
    let calls = downstream.calls.load(Ordering::SeqCst);
    assert!(calls < 10, "40 queued requests took {calls} exports");
    assert_eq!(stats.exports(), calls as u64);
    assert_eq!(stats.forwarded_requests(), 40);
    assert_eq!(stats.forwarded_spans(), 40);
}

#[tokio::test]
async fn batches_respect_the_byte_limit() {
    let downstream = Arc::new(Downstream {
        delay: Duration::from_millis(30),
        ..Downstream::default()
    });
    let addr = start_downstream(Arc::clone(&downstream)).await;
    let requests = numbered_requests(12);
    let one = requests[0].len();
    let cfg = ForwarderConfig {
        batch_max_bytes: one * 3,
        ..one_slot(addr)
    };
    let forwarder = start(&cfg);
    for bytes in &requests {
        send(&forwarder.queue(), bytes).unwrap_or_else(|e| panic!("{e}"));
    }
    let report = forwarder.shutdown(Duration::from_secs(10)).await;
    assert_eq!(report.undelivered, 0);
    let got = downstream.got.lock().map(|g| g.clone()).unwrap_or_default();
    assert_eq!(span_ids(&got), (0..12).collect::<Vec<u32>>());
    for request in &got {
        assert!(
            request.resource_spans.len() <= 3,
            "{} requests in one export",
            request.resource_spans.len()
        );
    }
    assert!(got.len() >= 4);
}

#[tokio::test]
async fn persistent_queue_keeps_what_the_drain_left_and_the_next_start_delivers_it() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let (listener, addr) = bind().await;
    drop(listener);
    let mut cfg = config(addr);
    cfg.queue.persistent = true;
    cfg.queue.directory = Some(dir.path().to_path_buf());
    let forwarder = start(&cfg);
    let stats = forwarder.stats();
    let queue = forwarder.queue();
    let bytes = read(&corpus("pb")[0]);
    for _ in 0..3 {
        send(&queue, &bytes).unwrap_or_else(|e| panic!("{e}"));
    }
    assert_eq!(stats.pending_bytes(), 3 * bytes.len() as u64);
    let report = forwarder.shutdown(Duration::from_millis(300)).await;
    assert_eq!(
        (
            report.undelivered,
            report.kept_on_disk,
            report.kept_on_disk_spans
        ),
        (0, 3, 3)
    );
    assert_eq!(stats.dropped_requests_total(), 0);
    drop(queue);

    let downstream = Arc::new(Downstream::default());
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    start_downstream_on(listener, Arc::clone(&downstream)).await;
    let forwarder = start(&cfg);
    let stats = forwarder.stats();
    wait_until(
        "3 re-queued requests delivered",
        Duration::from_secs(10),
        || downstream.got() == 3,
    )
    .await;
    let report = forwarder.shutdown(Duration::from_secs(5)).await;
    assert_eq!((report.undelivered, report.kept_on_disk), (0, 0));
    assert_eq!((stats.forwarded_requests(), stats.pending_bytes()), (3, 0));
    // delivered requests were deleted from the store
    let (_, left) =
        loopwatch::forward::store::DiskQueue::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
    assert!(left.is_empty());
}

/// A downstream that answers `UNAVAILABLE` to every export (a real tonic server counting
/// the calls): during a 2 s drain with a 100 ms initial backoff each of 8 requests is
/// exported at most a handful of times (woken once, then 100·2ⁿ ms waits drawn in
/// `[d/2, d]`: at most 7 exports in 2 s), not every 100 ms (about 20 each, 160+ in all,
/// the hot loop a drain against a refusing downstream used to be).
#[tokio::test]
async fn drain_retries_keep_their_backoff() {
    let downstream = Arc::new(Downstream::default());
    if let Ok(mut s) = downstream.script.lock() {
        for _ in 0..10_000 {
            s.push_back(Status::unavailable("refusing"));
        }
    }
    let addr = start_downstream(Arc::clone(&downstream)).await;
    let cfg = ForwarderConfig {
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(5),
        max_elapsed_retry: Duration::from_secs(300),
        concurrency: 8,
        ..config(addr)
    };
    let forwarder = start(&cfg);
    let stats = forwarder.stats();
    let bytes = read(&corpus("pb")[0]);
    for _ in 0..8 {
        send(&forwarder.queue(), &bytes).unwrap_or_else(|e| panic!("{e}"));
    }
    wait_until("all 8 in backoff", Duration::from_secs(5), || {
        stats.in_backoff() == 8
    })
    .await;
    let before = downstream.calls.load(Ordering::SeqCst);
    let started = Instant::now();
    let report = forwarder.shutdown(Duration::from_secs(2)).await;
    let elapsed = started.elapsed();
    let during = downstream.calls.load(Ordering::SeqCst) - before;
    assert!(elapsed >= Duration::from_secs(2), "{elapsed:?}");
    assert_eq!(report.undelivered, 8);
    // Every request is tried at once when the drain starts...
    assert!(during >= 8, "{during} exports during the drain");
    // ...and then only as its backoff allows.
    assert!(during <= 8 * 7, "{during} exports during a 2 s drain");
}
