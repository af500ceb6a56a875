//! The fault suite's bookkeeping (tests/process/faults_*.rs): clients under load that record which
//! span ids were acknowledged, the span ids a downstream received, and the figures
//! (acknowledged / delivered / lost / duplicated) compared by span id.

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, ExitStatus};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

use super::downstream::Downstream;

/// Spans per request of [`request`]; one trace per request.
pub const SPANS_PER_REQUEST: u64 = 20;

/// Clients of one [`Load`].
pub const SENDERS: usize = 4;

/// A `loopwatch serve` child with its gRPC and admin addresses.
pub struct Serve {
    pub child: Child,
    pub grpc: String,
    pub admin: String,
}

/// `command` (a `serve_process::serve_command`) started and listening.
pub fn spawn(command: Command) -> Serve {
    let (child, listening, _lines) = super::serve_process::spawn_until_listening(command);
    Serve {
        child,
        grpc: listening["grpc"].as_str().unwrap().to_string(),
        admin: listening["admin"].as_str().unwrap().to_string(),
    }
}

/// [`SPANS_PER_REQUEST`] spans with the 8-byte big-endian span ids `first_id..`.
pub fn request(first_id: u64) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (first_id..first_id + SPANS_PER_REQUEST)
                    .map(|id| Span {
                        trace_id: [&[7u8; 8][..], &(first_id / SPANS_PER_REQUEST).to_be_bytes()]
                            .concat(),
                        span_id: id.to_be_bytes().to_vec(),
                        name: "chat".into(),
                        ..Span::default()
                    })
                    .collect(),
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
}

/// [`SENDERS`] clients exporting requests of fresh span ids until stopped; records the ids
/// of every acknowledged (OK) request and counts refusals.
pub struct Load {
    stop: Arc<AtomicBool>,
    acknowledged: Arc<Mutex<HashSet<u64>>>,
    pub refused: Arc<AtomicU64>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    pub async fn start(grpc: &str) -> Load {
        let next = Arc::new(AtomicU64::new(1));
        let stop = Arc::new(AtomicBool::new(false));
        let acknowledged = Arc::new(Mutex::new(HashSet::new()));
        let refused = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..SENDERS {
            let mut client = TraceServiceClient::connect(format!("http://{grpc}"))
                .await
                .unwrap();
            let (next, stop, acknowledged, refused) = (
                next.clone(),
                stop.clone(),
                acknowledged.clone(),
                refused.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let first = next.fetch_add(SPANS_PER_REQUEST, Ordering::Relaxed);
                    match client.export(request(first)).await {
                        Ok(_) => acknowledged
                            .lock()
                            .unwrap()
                            .extend(first..first + SPANS_PER_REQUEST),
                        Err(_) => {
                            refused.fetch_add(1, Ordering::Relaxed);
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                    }
                }
            }));
        }
        Load {
            stop,
            acknowledged,
            refused,
            tasks,
        }
    }

    /// Spans acknowledged so far.
    pub fn acknowledged_count(&self) -> usize {
        self.acknowledged.lock().unwrap().len()
    }

    /// Stops the clients (each finishes its request in flight); returns the acknowledged ids.
    pub async fn stop(self) -> HashSet<u64> {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            let _ = task.await;
        }
        let acknowledged = self.acknowledged.lock().unwrap().clone();
        acknowledged
    }
}

/// One value of `/metrics` (an unlabelled gauge or counter).
pub async fn metric(admin: &str, name: &str) -> f64 {
    let body = super::serve_process::scrape(admin).await;
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in\n{body}"))
}

/// Span id → times delivered.
pub fn delivered(downstream: &Downstream) -> HashMap<u64, u64> {
    let mut seen = HashMap::new();
    for span in downstream.spans() {
        let id = u64::from_be_bytes(span.span_id.as_slice().try_into().unwrap());
        *seen.entry(id).or_insert(0) += 1;
    }
    seen
}

#[derive(Debug)]
#[allow(dead_code)] // read through Debug in the printed figures
pub struct Figures {
    pub acknowledged: usize,
    pub delivered: usize,
    pub lost: usize,
    pub duplicated: u64,
    /// Delivered although the client got no OK (in flight at a kill or a refusal).
    pub unacknowledged_delivered: usize,
}

impl Figures {
    /// The `FAULT <name> acknowledged=… delivered=… lost=… duplicated=…` line.
    pub fn print(&self, name: &str) {
        println!(
            "FAULT {name} acknowledged={} delivered={} lost={} duplicated={}",
            self.acknowledged, self.delivered, self.lost, self.duplicated
        );
    }
}

pub fn figures(acknowledged: &HashSet<u64>, seen: &HashMap<u64, u64>) -> Figures {
    Figures {
        acknowledged: acknowledged.len(),
        delivered: acknowledged
            .iter()
            .filter(|id| seen.contains_key(id))
            .count(),
        lost: acknowledged
            .iter()
            .filter(|id| !seen.contains_key(id))
            .count(),
        duplicated: seen.values().map(|n| n - 1).sum(),
        unacknowledged_delivered: seen.keys().filter(|id| !acknowledged.contains(id)).count(),
    }
}

/// Polls (up to `timeout`) until every acknowledged span reached `downstream`; returns the
/// figures then (lost > 0 if the timeout passed).
pub async fn wait_delivered(
    acknowledged: &HashSet<u64>,
    downstream: &Downstream,
    timeout: Duration,
) -> Figures {
    let deadline = Instant::now() + timeout;
    loop {
        let f = figures(acknowledged, &delivered(downstream));
        if f.lost == 0 || Instant::now() > deadline {
            return f;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends SIGTERM to `child`.
pub fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
}

/// Waits up to `timeout` for `child` to exit (killing it and panicking after).
pub fn wait_exit(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("loopwatch did not exit within {timeout:?} of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// SIGTERM, then the exit status (up to 20 s).
pub fn sigterm_and_wait(serve: &mut Serve) -> ExitStatus {
    sigterm(&serve.child);
    wait_exit(&mut serve.child, Duration::from_secs(20))
}
