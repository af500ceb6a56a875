//! Open-loop load: requests leave on a fixed schedule (a rate in spans/s) whatever the
//! target's answers, spread over M concurrent senders, and each request's latency counts
//! from its scheduled send time. A closed-loop client slows down with the server and so
//! never sees the queue it would have built (coordinated omission); here a server that
//! falls behind shows that queue in the latency.
//!
//! The schedule is one shared pacer: a sender about to send a request of `k` spans reserves
//! them on a shared span counter; a request whose first span is span `n` of the load is due
//! at `start + n / rate`. A free sender takes the next request and sleeps until it is due;
//! when every sender is still waiting for an answer, the due time passes unserved and the
//! wait counts in that request's latency ("late" sends).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use loopwatch::forward::{ExportClient, ForwardCompression};

use crate::loadgen::client::{drain, is_refusal, with_fresh_trace_ids};
use crate::loadgen::servers::Sink;
use crate::loadgen::traffic::Run;

/// A paced load.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    /// Offered rate, spans per second (> 0).
    pub spans_per_second: f64,
    /// Concurrent senders (one connection each, one request in flight each).
    pub senders: u32,
    /// How long the schedule runs.
    pub duration: Duration,
    /// How long to wait, after the last answer, for the sink to hold every acknowledged span.
    pub drain_timeout: Duration,
}

/// What one paced load measured.
#[derive(Debug, Default)]
pub struct PacedOutcome {
    /// Latency of every acknowledged scheduled request, sorted: acknowledgement − due time
    /// when the request left late (no sender was free when it was due), else
    /// acknowledgement − actual send (the timer's own wake-up slack, up to ~1 ms, is the
    /// client's, not the server's).
    pub latencies: Vec<Duration>,
    /// Acknowledged scheduled requests and the spans in them (warm-up requests excluded).
    pub requests: u64,
    pub spans: u64,
    /// Scheduled requests no sender was free for when they were due.
    pub late: u64,
    /// Retryable refusals (each retried after 1 ms, the wait counted in the latency).
    pub refused: u64,
    /// Sends that failed otherwise (not retried).
    pub failed: u64,
    /// Spans the sink received during the load, warm-up included, and the spans it was
    /// owed (acknowledged spans, warm-up included).
    pub at_sink: u64,
    pub owed: u64,
    /// From the schedule's start until the last answer.
    pub send_seconds: f64,
}

impl PacedOutcome {
    /// Acknowledged spans per second of sending: the offered rate when the target keeps up.
    pub fn achieved_spans_per_second(&self) -> f64 {
        self.spans as f64 / self.send_seconds.max(1e-9)
    }

    /// Acknowledged spans that never reached the sink.
    pub fn lost(&self) -> u64 {
        self.owed.saturating_sub(self.at_sink)
    }

    /// Latency percentile `p` (0–100) in milliseconds, nearest rank; 0 without samples.
    pub fn percentile_ms(&self, p: f64) -> f64 {
        crate::loadgen::client::percentile_ms(&self.latencies, p)
    }
}

/// Shared by the senders of one load.
struct Schedule {
    runs: Arc<Vec<Run>>,
    start: Instant,
    end: Instant,
    spans_per_second: f64,
    /// Spans reserved so far: the next request is due at `start + reserved / rate`.
    reserved: AtomicU64,
    run_counter: AtomicU64,
    salt: [u8; 4],
}

impl Schedule {
    /// Reserves `spans` spans; `None` once the request would be due after the end.
    fn reserve(&self, spans: u64) -> Option<Instant> {
        let before = self.reserved.fetch_add(spans, Ordering::Relaxed);
        let due = self.start + Duration::from_secs_f64(before as f64 / self.spans_per_second);
        (due < self.end).then_some(due)
    }

    fn next_run_id(&self) -> u64 {
        self.run_counter.fetch_add(1, Ordering::Relaxed) + 1
    }
}

#[derive(Default)]
struct SenderResult {
    latencies: Vec<Duration>,
    requests: u64,
    spans: u64,
    late: u64,
    refused: u64,
    failed: u64,
}

/// Sends `bytes` until acknowledged, retrying refusals after 1 ms until `give_up`; `Err`
/// with the last status otherwise.
async fn send(
    export: &mut ExportClient,
    bytes: bytes::Bytes,
    give_up: Instant,
    refused: &mut u64,
) -> Result<(), tonic::Status> {
    loop {
        match export.export(bytes.clone()).await {
            Ok(_) => return Ok(()),
            Err(status) if is_refusal(&status) && Instant::now() < give_up => {
                *refused += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Err(status) => return Err(status),
        }
    }
}

/// One sender: replays runs (sender `index` starts at run `index`), each request when due.
async fn sender(index: u32, mut export: ExportClient, schedule: Arc<Schedule>) -> SenderResult {
    let mut result = SenderResult::default();
    let runs = &schedule.runs;
    let give_up = schedule.end + Duration::from_secs(30);
    let mut next = index as usize % runs.len();
    'runs: loop {
        let run = &runs[next];
        next = (next + 1) % runs.len();
        let run_id = schedule.next_run_id();
        for template in &run.requests {
            let taken = Instant::now();
            let Some(due) = schedule.reserve(template.spans) else {
                break 'runs;
            };
            let bytes = with_fresh_trace_ids(template, run_id, schedule.salt);
            let late = taken > due;
            if !late {
                tokio::time::sleep_until(due.into()).await;
            }
            let sent = Instant::now();
            match send(&mut export, bytes, give_up, &mut result.refused).await {
                Ok(()) => {
                    let from = if late { due } else { sent };
                    result.latencies.push(from.elapsed());
                    result.requests += 1;
                    result.spans += template.spans;
                    result.late += u64::from(late);
                }
                Err(status) => {
                    if result.failed == 0 {
                        eprintln!("loadgen: paced export failed: {status}");
                    }
                    result.failed += 1;
                }
            }
        }
    }
    result
}

/// Loads `target` with `runs` at `pace`, then waits until `sink` has every acknowledged
/// span. Every sender first sends one untimed warm-up request (its connection is set up
/// then, not inside a timed request); the schedule starts once all have been answered.
pub async fn measure_paced(
    target: SocketAddr,
    sink: &Sink,
    runs: &Arc<Vec<Run>>,
    pace: Pace,
) -> anyhow::Result<PacedOutcome> {
    anyhow::ensure!(
        pace.spans_per_second > 0.0 && pace.spans_per_second.is_finite(),
        "paced load needs a positive rate, got {} spans/s",
        pace.spans_per_second
    );
    anyhow::ensure!(!runs.is_empty(), "paced load needs traffic");
    let sink_before = sink.spans.load(Ordering::Relaxed);
    let salt: [u8; 4] = rand::random();
    let run_counter = AtomicU64::new(0);
    let mut outcome = PacedOutcome::default();
    let warm_up = (0..pace.senders.max(1)).map(|i| {
        let run = &runs[i as usize % runs.len()];
        let template = &run.requests[0];
        let bytes = with_fresh_trace_ids(
            template,
            run_counter.fetch_add(1, Ordering::Relaxed) + 1,
            salt,
        );
        async move {
            let mut export = ExportClient::new(
                &format!("http://{target}"),
                ForwardCompression::None,
                Duration::from_secs(30),
            )?;
            let mut refused = 0;
            let give_up = Instant::now() + Duration::from_secs(30);
            send(&mut export, bytes, give_up, &mut refused).await?;
            anyhow::Ok((export, template.spans))
        }
    });
    let mut exports = Vec::new();
    for warmed in futures::future::join_all(warm_up).await {
        let (export, spans) = warmed?;
        outcome.owed += spans;
        exports.push(export);
    }
    let start = Instant::now();
    let schedule = Arc::new(Schedule {
        runs: runs.clone(),
        start,
        end: start + pace.duration,
        spans_per_second: pace.spans_per_second,
        reserved: AtomicU64::new(0),
        run_counter,
        salt,
    });
    let senders: Vec<_> = exports
        .into_iter()
        .enumerate()
        .map(|(i, export)| tokio::spawn(sender(i as u32, export, schedule.clone())))
        .collect();
    for s in senders {
        let r = s.await?;
        outcome.latencies.extend(r.latencies);
        outcome.requests += r.requests;
        outcome.spans += r.spans;
        outcome.late += r.late;
        outcome.refused += r.refused;
        outcome.failed += r.failed;
    }
    outcome.send_seconds = start.elapsed().as_secs_f64();
    outcome.owed += outcome.spans;
    outcome.at_sink = drain(sink, sink_before, outcome.owed, pace.drain_timeout).await;
    outcome.latencies.sort_unstable();
    Ok(outcome)
}
