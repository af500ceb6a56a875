//! The clients: K concurrent OTLP/gRPC senders replaying runs with fresh trace ids, and the
//! wait until the sink holds every span the target acknowledged.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use loopwatch::forward::{ExportClient, ForwardCompression};

use crate::loadgen::servers::Sink;
use crate::loadgen::traffic::{Run, Template};

/// How to load a target.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    /// Concurrent clients (one connection each).
    pub concurrency: u32,
    /// How long the clients send.
    pub duration: Duration,
    /// Stop after this many requests as well (`u64::MAX`: unbounded).
    pub requests: u64,
    /// How long to wait, after the clients stop, for the sink to hold every acknowledged
    /// span.
    pub drain_timeout: Duration,
}

/// What the clients and the sink saw for one load.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Latency of every acknowledged request (client send → acknowledgement), sorted.
    pub latencies: Vec<Duration>,
    /// Acknowledged requests and the spans in them.
    pub requests: u64,
    pub spans: u64,
    /// Sends refused with a retryable status (`UNAVAILABLE`, `RESOURCE_EXHAUSTED`), each
    /// retried after 1 ms.
    pub refused: u64,
    /// Sends that failed otherwise (not retried, not counted as sent).
    pub failed: u64,
    /// Spans (and spans with a `loop.*` attribute) the sink received during this load.
    pub at_sink: u64,
    pub annotated: u64,
    /// From the first send until the clients stopped, and until the sink had every
    /// acknowledged span (or the drain timeout passed).
    pub send_seconds: f64,
    pub delivery_seconds: f64,
}

impl Outcome {
    /// Spans the sink received per second of delivery.
    pub fn spans_per_second(&self) -> f64 {
        self.at_sink as f64 / self.delivery_seconds.max(1e-9)
    }

    /// Acknowledged spans that never reached the sink.
    pub fn lost(&self) -> u64 {
        self.spans.saturating_sub(self.at_sink)
    }

    /// Latency percentile `p` (0–100) in milliseconds, nearest rank.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        percentile_ms(&self.latencies, p)
    }

    pub fn mean_ms(&self) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        self.latencies.iter().sum::<Duration>().as_secs_f64() * 1e3 / self.latencies.len() as f64
    }
}

/// Percentile `p` (0–100) of `sorted` (ascending) in milliseconds, nearest rank; 0 when
/// empty.
pub fn percentile_ms(sorted: &[Duration], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1].as_secs_f64() * 1e3
}

/// Per-client results.
#[derive(Default)]
struct ClientResult {
    latencies: Vec<Duration>,
    requests: u64,
    spans: u64,
    refused: u64,
    failed: u64,
}

/// Shared by the clients of one load.
struct Shared {
    target: SocketAddr,
    runs: Arc<Vec<Run>>,
    deadline: Instant,
    budget: AtomicU64,
    run_counter: AtomicU64,
    /// Random per load, so trace ids never repeat across loads of one server.
    salt: [u8; 4],
}

/// `template`'s bytes with every trace id replaced by a fresh one: bytes 0..8 `run_id`,
/// 8..12 the trace's index in the run, 12..16 `salt` (random per load, so ids never repeat
/// across loads of one server).
pub fn with_fresh_trace_ids(template: &Template, run_id: u64, salt: [u8; 4]) -> Bytes {
    let mut bytes = template.bytes.clone();
    for &(offset, index) in &template.trace_ids {
        let id = &mut bytes[offset..offset + 16];
        id[..8].copy_from_slice(&run_id.to_be_bytes());
        id[8..12].copy_from_slice(&index.to_be_bytes());
        id[12..].copy_from_slice(&salt);
    }
    Bytes::from(bytes)
}

/// A retryable refusal (`UNAVAILABLE`, `RESOURCE_EXHAUSTED`): the clients retry it after
/// 1 ms.
pub fn is_refusal(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::ResourceExhausted
    )
}

/// Waits until `sink` has received `expected` spans since it counted `before` (or `timeout`
/// passed); returns the spans it received since then.
pub async fn drain(sink: &Sink, before: u64, expected: u64, timeout: Duration) -> u64 {
    let at_sink = || sink.spans.load(Ordering::Relaxed) - before;
    let deadline = Instant::now() + timeout;
    while at_sink() < expected && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    at_sink()
}

/// Sends runs to the target until the deadline or the request budget runs out, each run
/// with fresh trace ids ([`with_fresh_trace_ids`]).
async fn client(index: u32, shared: Arc<Shared>) -> ClientResult {
    let mut result = ClientResult::default();
    let mut export = match ExportClient::new(
        &format!("http://{}", shared.target),
        ForwardCompression::None,
        Duration::from_secs(30),
    ) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("loadgen: client: {e}");
            result.failed += 1;
            return result;
        }
    };
    let runs = &shared.runs;
    let mut next = index as usize % runs.len();
    'runs: while Instant::now() < shared.deadline {
        let run = &runs[next];
        next = (next + 1) % runs.len();
        let run_id = shared.run_counter.fetch_add(1, Ordering::Relaxed) + 1;
        for template in &run.requests {
            // Take one unit of the request budget (u64::MAX when unbounded).
            if shared
                .budget
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                .is_err()
            {
                break 'runs;
            }
            let bytes = with_fresh_trace_ids(template, run_id, shared.salt);
            loop {
                let started = Instant::now();
                match export.export(bytes.clone()).await {
                    Ok(_) => {
                        result.latencies.push(started.elapsed());
                        result.requests += 1;
                        result.spans += template.spans;
                        break;
                    }
                    Err(status) if is_refusal(&status) => {
                        result.refused += 1;
                        if Instant::now() > shared.deadline + Duration::from_secs(30) {
                            result.failed += 1;
                            break 'runs;
                        }
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    Err(status) => {
                        if result.failed == 0 {
                            eprintln!("loadgen: export failed: {status}");
                        }
                        result.failed += 1;
                        break;
                    }
                }
            }
        }
    }
    result
}

/// Loads `target` with `load.concurrency` clients replaying `runs`, then waits until `sink`
/// has every acknowledged span. Only what the sink received during this call is counted.
pub async fn measure(target: SocketAddr, sink: &Sink, runs: &Arc<Vec<Run>>, load: Load) -> Outcome {
    let sink_before = sink.spans.load(Ordering::Relaxed);
    let annotated_before = sink.annotated.load(Ordering::Relaxed);
    let started = Instant::now();
    let shared = Arc::new(Shared {
        target,
        runs: runs.clone(),
        deadline: started + load.duration,
        budget: AtomicU64::new(load.requests),
        run_counter: AtomicU64::new(0),
        salt: rand::random(),
    });
    let clients: Vec<_> = (0..load.concurrency)
        .map(|i| tokio::spawn(client(i, shared.clone())))
        .collect();
    let mut total = Outcome::default();
    for c in clients {
        match c.await {
            Ok(r) => {
                total.latencies.extend(r.latencies);
                total.requests += r.requests;
                total.spans += r.spans;
                total.refused += r.refused;
                total.failed += r.failed;
            }
            Err(e) => {
                eprintln!("loadgen: client task: {e}");
                total.failed += 1;
            }
        }
    }
    total.send_seconds = started.elapsed().as_secs_f64();
    // Setups acknowledge before forwarding: wait for their queues to drain into the sink.
    total.at_sink = drain(sink, sink_before, total.spans, load.drain_timeout).await;
    total.delivery_seconds = started.elapsed().as_secs_f64();
    total.annotated = sink.annotated.load(Ordering::Relaxed) - annotated_before;
    total.latencies.sort_unstable();
    total
}
