//! A real OTLP/gRPC downstream for end-to-end tests: records every request it accepts.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use tokio::sync::watch;

#[derive(Clone, Default)]
pub struct Downstream {
    pub received: Arc<Mutex<Vec<ExportTraceServiceRequest>>>,
    /// While false, Export waits (a stalled downstream).
    open: Arc<Option<watch::Sender<bool>>>,
    /// Each Export is answered this long after it arrived (a slow downstream).
    delay: Duration,
}

#[tonic::async_trait]
impl TraceService for Downstream {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        if let Some(open) = self.open.as_ref() {
            let mut rx = open.subscribe();
            let _ = rx.wait_for(|o| *o).await;
        }
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        self.received.lock().unwrap().push(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl Downstream {
    /// Starts on 127.0.0.1:0; `stalled` = Export blocks until [`Downstream::open`].
    pub async fn start(stalled: bool) -> (Downstream, SocketAddr) {
        let gate = stalled.then(|| watch::channel(false).0);
        let downstream = Downstream {
            received: Arc::default(),
            open: Arc::new(gate),
            delay: Duration::ZERO,
        };
        let addr = downstream.clone().serve_on_new_port().await;
        (downstream, addr)
    }

    /// Starts on 127.0.0.1:0, answering each Export `delay` after it arrived.
    pub async fn start_slow(delay: Duration) -> (Downstream, SocketAddr) {
        let downstream = Downstream {
            delay,
            ..Downstream::default()
        };
        let addr = downstream.clone().serve_on_new_port().await;
        (downstream, addr)
    }

    async fn serve_on_new_port(self) -> SocketAddr {
        serve_trace_service(self).await
    }

    pub fn open(&self) {
        if let Some(open) = self.open.as_ref() {
            let _ = open.send(true);
        }
    }

    pub fn spans(&self) -> Vec<Span> {
        self.received
            .lock()
            .unwrap()
            .iter()
            .flat_map(|r| r.resource_spans.iter())
            .flat_map(|rs| rs.scope_spans.iter())
            .flat_map(|ss| ss.spans.iter().cloned())
            .collect()
    }

    /// Waits until at least `n` spans arrived (or the timeout passes); returns the count.
    pub async fn wait_for_spans(&self, n: usize, timeout: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let count = self.spans().len();
            if count >= n || tokio::time::Instant::now() > deadline {
                return count;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Serves `service` as an OTLP/gRPC trace receiver on a new 127.0.0.1 port (requests up to
/// 64 MiB) for the rest of the test; its address.
pub async fn serve_trace_service<S: TraceService>(service: S) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let service = TraceServiceServer::new(service).max_decoding_message_size(64 << 20);
    tokio::spawn(async move {
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
            .await
            .unwrap();
    });
    addr
}
