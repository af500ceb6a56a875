//! The soak test's clients (`attack_soak.rs`): the ordinary client that sends runs of tool
//! calls (every other one a loop) and retries as an OTLP exporter does, the partial request
//! of good spans beside one unreadable span, and the figures every client adds to.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::support::attack::{export_until_accepted, post_until_accepted, tool_call};
use crate::support::span_sink::{SinkMode, SpanKey, SpanSink};
use crate::support::spans::{kv, request_of, s};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// Tool calls per run: the `stop` profile kills at the 10th identical call, `nudge` warns
/// at the 5th and again at the 10th.
const CALLS: u64 = 10;

/// What the soak's clients did, shared by all of them.
#[derive(Default)]
pub struct Figures {
    /// Ordinary requests sent over gRPC, and over OTLP/HTTP.
    pub grpc_requests: AtomicU64,
    pub http_requests: AtomicU64,
    /// Retryable refusals the ordinary clients met (and retried).
    pub good_refusals: AtomicU64,
    /// Ordinary runs acknowledged that loop, and that do not.
    pub loop_runs: AtomicU64,
    pub other_runs: AtomicU64,
    /// Decoded-cost bombs acknowledged, and the refusals met on the way.
    pub bombs_acknowledged: AtomicU64,
    pub bomb_refusals: AtomicU64,
    /// Requests of good spans beside an unreadable one, acknowledged.
    pub partial_requests: AtomicU64,
    max_latency_micros: AtomicU64,
    max_latency_sink_up_micros: AtomicU64,
    acknowledged: Mutex<Vec<SpanKey>>,
    stalled_grpc: Mutex<BTreeMap<Option<i32>, u64>>,
    stalled_http: Mutex<BTreeMap<Option<String>, u64>>,
}

impl Figures {
    /// Adds `n` to `counter` (one of the fields).
    pub fn add(&self, counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// The value of `counter`.
    pub fn get(&self, counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }

    /// Records good spans the server acknowledged.
    pub fn acknowledge(&self, keys: Vec<SpanKey>) {
        self.acknowledged.lock().unwrap().extend(keys);
    }

    /// Every good span acknowledged so far.
    pub fn acknowledged(&self) -> Vec<SpanKey> {
        self.acknowledged.lock().unwrap().clone()
    }

    /// The longest an ordinary request waited to be accepted (retries included).
    pub fn max_latency(&self) -> Duration {
        Duration::from_micros(self.max_latency_micros.load(Ordering::Relaxed))
    }

    /// The same, of requests sent and accepted while the downstream was up throughout.
    pub fn max_latency_sink_up(&self) -> Duration {
        Duration::from_micros(self.max_latency_sink_up_micros.load(Ordering::Relaxed))
    }

    /// Counts a stalled stream's answer.
    pub fn count_stalled_grpc(&self, code: Option<i32>) {
        *self.stalled_grpc.lock().unwrap().entry(code).or_insert(0) += 1;
    }

    /// Counts a stalled body's answer.
    pub fn count_stalled_http(&self, code: Option<String>) {
        *self.stalled_http.lock().unwrap().entry(code).or_insert(0) += 1;
    }

    /// `grpc-status` of each stalled stream (`None`: no answer within 20 s) → streams.
    pub fn stalled_grpc(&self) -> BTreeMap<Option<i32>, u64> {
        self.stalled_grpc.lock().unwrap().clone()
    }

    /// HTTP status of each stalled body (`None`: no answer within 20 s) → requests.
    pub fn stalled_http(&self) -> BTreeMap<Option<String>, u64> {
        self.stalled_http.lock().unwrap().clone()
    }
}

/// The (trace id, span id) of every span of `request`.
fn keys_of(request: &ExportTraceServiceRequest) -> Vec<SpanKey> {
    request
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
        .map(|span| (span.trace_id.clone(), span.span_id.clone()))
        .collect()
}

/// Run `n` of ordinary client `client`, in one request: 10 `search` calls in a trace of its
/// own, all the same call when `looping`, else each with other arguments (no loop).
pub fn good_run(client: u64, n: u64, looping: bool) -> ExportTraceServiceRequest {
    let run = client << 32 | n;
    request_of(
        (0..CALLS)
            .map(|call| {
                let mut span = tool_call(run, call);
                if !looping {
                    span.attributes[2] = kv(
                        "gen_ai.tool.call.arguments",
                        s(&format!(r#"{{"q":"thing {call}"}}"#)),
                    );
                }
                span
            })
            .collect(),
    )
}

/// Request `n` of the partial-acceptance client: 4 good spans and, third, one whose
/// attribute is nested 48 levels deep; the request and its good spans' keys.
pub fn partial_request(n: u64) -> (ExportTraceServiceRequest, Vec<SpanKey>) {
    let trace_id = [&[0x70u8; 8][..], &n.to_be_bytes()].concat();
    let span = |i: u64| Span {
        trace_id: trace_id.clone(),
        span_id: (n << 8 | i).to_be_bytes().to_vec(),
        name: "chat".into(),
        ..Span::default()
    };
    let mut spans: Vec<Span> = (0..5).map(span).collect();
    spans[2]
        .attributes
        .push(crate::support::hostile::deep_attribute("deep", 48));
    let good = spans
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 2)
        .map(|(_, s)| (s.trace_id.clone(), s.span_id.clone()))
        .collect();
    (request_of(spans), good)
}

/// An ordinary client, over gRPC or OTLP/HTTP protobuf.
pub struct GoodClient {
    id: u64,
    grpc: Option<TraceServiceClient<tonic::transport::Channel>>,
    target: String,
}

impl GoodClient {
    /// Client `id` of the receiver at `target` (gRPC when `grpc`, else OTLP/HTTP).
    pub async fn new(id: u64, grpc: bool, target: &str) -> GoodClient {
        let grpc = if grpc {
            Some(
                TraceServiceClient::connect(format!("http://{target}"))
                    .await
                    .unwrap(),
            )
        } else {
            None
        };
        GoodClient {
            id,
            grpc,
            target: target.to_owned(),
        }
    }

    /// Sends runs 100 ms apart until `stop`, each retried until accepted; adds to `figures`
    /// (latency apart for the requests `sink` was up throughout).
    pub async fn run(mut self, stop: &AtomicBool, figures: &Figures, sink: &SpanSink) {
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            let looping = n % 2 == 0;
            let request = good_run(self.id, n, looping);
            let started = Instant::now();
            let (mode, changes) = (sink.mode(), sink.changes());
            let patience = Duration::from_secs(60);
            let refusals = match self.grpc.as_mut() {
                Some(client) => {
                    figures.add(&figures.grpc_requests, 1);
                    export_until_accepted(client, &request, patience).await
                }
                None => {
                    figures.add(&figures.http_requests, 1);
                    post_until_accepted(&self.target, request.encode_to_vec(), patience).await
                }
            };
            let waited = started.elapsed().as_micros() as u64;
            figures
                .max_latency_micros
                .fetch_max(waited, Ordering::Relaxed);
            if mode == SinkMode::Up && sink.mode() == SinkMode::Up && sink.changes() == changes {
                figures
                    .max_latency_sink_up_micros
                    .fetch_max(waited, Ordering::Relaxed);
            }
            figures.add(&figures.good_refusals, u64::from(refusals));
            figures.add(
                if looping {
                    &figures.loop_runs
                } else {
                    &figures.other_runs
                },
                1,
            );
            figures.acknowledge(keys_of(&request));
            n += 1;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
