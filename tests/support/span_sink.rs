//! A real OTLP/gRPC downstream for long tests that counts spans by (trace id, span id)
//! instead of keeping whole requests (a soak forwards hundreds of MB), and that can flap:
//! refuse every export with `UNAVAILABLE` (retryable: loopwatch keeps and resends) or
//! stall every export, for a while.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};

/// (trace id, span id) of a span, as sent.
pub type SpanKey = (Vec<u8>, Vec<u8>);

/// How the sink answers exports now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkMode {
    /// Accepts at once.
    Up = 0,
    /// Refuses with `UNAVAILABLE`.
    Refusing = 1,
    /// Holds each export until the mode changes, then answers as the new mode says.
    Stalled = 2,
}

/// The counting downstream; clones share their counts.
#[derive(Clone, Default)]
pub struct SpanSink {
    seen: Arc<Mutex<HashMap<SpanKey, u32>>>,
    mode: Arc<AtomicU8>,
    refused: Arc<Mutex<u64>>,
    /// Mode changes so far.
    changes: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl TraceService for SpanSink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        while self.mode() == SinkMode::Stalled {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if self.mode() == SinkMode::Refusing {
            *self.refused.lock().unwrap() += 1;
            return Err(tonic::Status::unavailable("the test downstream flaps"));
        }
        let mut seen = self.seen.lock().unwrap();
        for span in request
            .into_inner()
            .resource_spans
            .into_iter()
            .flat_map(|rs| rs.scope_spans)
            .flat_map(|ss| ss.spans)
        {
            *seen.entry((span.trace_id, span.span_id)).or_insert(0) += 1;
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

/// A runtime of its own a sink serves on; shut down (in the background) when dropped.
pub struct OwnRuntime(Option<tokio::runtime::Runtime>);

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            runtime.shutdown_background();
        }
    }
}

impl SpanSink {
    /// Starts on 127.0.0.1:0, up, serving on a runtime of its own (2 threads) that lives
    /// as long as the [`OwnRuntime`]: decoding what loopwatch forwards (the soak's bombs of a
    /// million attributes take seconds in a debug build) then holds up none of the test's
    /// own clients and probes, whose latencies are what the test measures.
    pub async fn start_apart() -> (SpanSink, SocketAddr, OwnRuntime) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("span-sink")
            .enable_all()
            .build()
            .unwrap();
        let sink = SpanSink::default();
        let serving = sink.clone();
        let addr = runtime
            .spawn(async move { super::downstream::serve_trace_service(serving).await })
            .await
            .unwrap();
        (sink, addr, OwnRuntime(Some(runtime)))
    }

    /// How it answers now.
    pub fn mode(&self) -> SinkMode {
        match self.mode.load(Ordering::Relaxed) {
            1 => SinkMode::Refusing,
            2 => SinkMode::Stalled,
            _ => SinkMode::Up,
        }
    }

    /// Answers as `mode` from now on.
    pub fn set_mode(&self, mode: SinkMode) {
        if self.mode.swap(mode as u8, Ordering::Relaxed) != mode as u8 {
            self.changes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Mode changes so far: a span of time with the same count and mode [`SinkMode::Up`]
    /// at both ends was all up.
    pub fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    /// Times the span `key` arrived (0: never).
    pub fn count(&self, key: &SpanKey) -> u32 {
        self.seen.lock().unwrap().get(key).copied().unwrap_or(0)
    }

    /// Distinct spans arrived, and arrivals in all (duplicates included).
    pub fn totals(&self) -> (usize, u64) {
        let seen = self.seen.lock().unwrap();
        (seen.len(), seen.values().map(|&n| u64::from(n)).sum())
    }

    /// Exports refused while flapping.
    pub fn refused(&self) -> u64 {
        *self.refused.lock().unwrap()
    }

    /// Waits until every key of `keys` arrived (or `timeout` passed); the keys still missing.
    pub async fn wait_for(
        &self,
        keys: impl Iterator<Item = &SpanKey> + Clone,
        timeout: Duration,
    ) -> Vec<SpanKey> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let missing: Vec<SpanKey> = {
                let seen = self.seen.lock().unwrap();
                keys.clone()
                    .filter(|k| !seen.contains_key(*k))
                    .cloned()
                    .collect()
            };
            if missing.is_empty() || tokio::time::Instant::now() > deadline {
                return missing;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
