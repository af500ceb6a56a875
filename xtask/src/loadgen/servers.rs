//! The OTLP/gRPC endpoints the load generator runs itself: the counting sink every setup
//! forwards to, and the plain pass-through loopwatch is compared with.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use loopwatch::forward::client::{ExportBody, RawBytesCodec};
use loopwatch::otlp::ExportTraceServiceRequest;
use loopwatch::receiver::grpc::{ExportCodec, RawExport};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::transport::Channel;

/// Largest request the sink and the pass-through decode (64 MiB).
pub const MAX_MESSAGE: usize = 64 << 20;

/// The OTLP/gRPC sink: counts the spans of every request it accepts, and the spans that
/// carry a `loop.*` attribute (annotated by loopwatch).
#[derive(Clone, Default)]
pub struct Sink {
    pub spans: Arc<AtomicU64>,
    pub requests: Arc<AtomicU64>,
    pub annotated: Arc<AtomicU64>,
}

#[tonic::async_trait]
impl TraceService for Sink {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let request = request.get_ref();
        let spans = loopwatch::otlp::span_count(request);
        let annotated = request
            .resource_spans
            .iter()
            .flat_map(|rs| &rs.scope_spans)
            .flat_map(|ss| &ss.spans)
            .filter(|span| span.attributes.iter().any(|a| a.key.starts_with("loop.")))
            .count() as u64;
        self.spans.fetch_add(spans, Ordering::Relaxed);
        self.annotated.fetch_add(annotated, Ordering::Relaxed);
        self.requests.fetch_add(1, Ordering::Relaxed);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The plain pass-through: forwards each decoded request to the sink (prost decode, then
/// encode), answers with the sink's answer.
#[derive(Clone)]
pub struct Passthrough {
    downstream: TraceServiceClient<Channel>,
}

impl Passthrough {
    /// A pass-through to `downstream` (`http://host:port`), connecting lazily.
    pub fn new(downstream: &str) -> anyhow::Result<Passthrough> {
        let channel = tonic::transport::Endpoint::from_shared(downstream.to_string())?
            .tcp_nodelay(true)
            .connect_lazy();
        Ok(Passthrough {
            downstream: TraceServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        })
    }
}

#[tonic::async_trait]
impl TraceService for Passthrough {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut downstream = self.downstream.clone();
        downstream.export(request.into_inner()).await
    }
}

/// A fresh counting [`Sink`] served on any free loopback port: the sink, its address, and
/// the sender whose `true` stops it (and anything else served with a receiver of it).
pub async fn start_sink() -> anyhow::Result<(Sink, SocketAddr, watch::Sender<bool>)> {
    let (stop, stop_rx) = watch::channel(false);
    let sink = Sink::default();
    let addr = serve(sink.clone(), crate::loadgen::ANY_LOOPBACK_PORT, stop_rx).await?;
    Ok((sink, addr, stop))
}

/// Serves `service` on `listen` (port 0: any free port) until `stop` turns true; returns
/// the bound address.
pub async fn serve<S>(
    service: S,
    listen: SocketAddr,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<SocketAddr>
where
    S: TraceService,
{
    // Compressed requests are accepted (a setup that compresses anyway still counts), the
    // setups are asked not to compress.
    let service = TraceServiceServer::new(service)
        .max_decoding_message_size(MAX_MESSAGE)
        .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
        .accept_compressed(tonic::codec::CompressionEncoding::Zstd);
    serve_grpc(service, listen, stop).await
}

/// Serves the gRPC `service` on `listen` until `stop` turns true; returns the bound address.
async fn serve_grpc<S>(
    service: S,
    listen: SocketAddr,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<SocketAddr>
where
    S: tonic::codegen::Service<
            http::Request<tonic::body::Body>,
            Response = http::Response<tonic::body::Body>,
            Error = std::convert::Infallible,
        > + tonic::server::NamedService
        + Clone
        + Send
        + Sync
        + 'static,
    S::Future: Send + 'static,
{
    let listener = TcpListener::bind(listen).await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        let mut stop = stop;
        let result = tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming_shutdown(
                // Without TCP_NODELAY, small responses wait for delayed ACKs (~40 ms).
                tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
                async move {
                    let _ = stop.wait_for(|s| *s).await;
                },
            )
            .await;
        if let Err(e) = result {
            eprintln!("loadgen: server on {addr}: {e}");
        }
    });
    Ok(addr)
}

/// The raw pass-through: forwards each request's bytes to the sink as received, with no
/// decode and no encode (tonic's server and client, loopwatch's own byte codecs). It does
/// the transport work every setup does and nothing else, so it shows how much of a
/// setup's CPU the transport alone takes (`bench --raw-passthrough`).
#[derive(Clone)]
pub struct RawPassthrough {
    downstream: tonic::client::Grpc<Channel>,
}

impl RawPassthrough {
    /// A raw pass-through to `downstream` (`http://host:port`), connecting lazily.
    pub fn new(downstream: &str) -> anyhow::Result<RawPassthrough> {
        let channel = tonic::transport::Endpoint::from_shared(downstream.to_string())?
            .tcp_nodelay(true)
            .connect_lazy();
        Ok(RawPassthrough {
            downstream: tonic::client::Grpc::new(channel)
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        })
    }
}

impl tonic::server::NamedService for RawPassthrough {
    const NAME: &'static str = loopwatch::otlp::TRACE_SERVICE_NAME;
}

impl tonic::server::UnaryService<RawExport> for RawPassthrough {
    type Response = ExportTraceServiceResponse;
    type Future = futures::future::BoxFuture<
        'static,
        Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status>,
    >;

    fn call(&mut self, request: tonic::Request<RawExport>) -> Self::Future {
        let mut downstream = self.downstream.clone();
        Box::pin(async move {
            downstream
                .ready()
                .await
                .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
            let body = ExportBody::new(vec![request.into_inner().0]);
            downstream
                .unary(
                    tonic::Request::new(body),
                    http::uri::PathAndQuery::from_static(loopwatch::otlp::EXPORT_PATH),
                    RawBytesCodec,
                )
                .await
        })
    }
}

impl tonic::codegen::Service<http::Request<tonic::body::Body>> for RawPassthrough {
    type Response = http::Response<tonic::body::Body>;
    type Error = std::convert::Infallible;
    type Future = futures::future::BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move {
            if request.uri().path() != loopwatch::otlp::EXPORT_PATH {
                return Ok(tonic::Status::unimplemented("").into_http());
            }
            let mut grpc = tonic::server::Grpc::new(ExportCodec)
                .max_decoding_message_size(MAX_MESSAGE)
                .accept_compressed(tonic::codec::CompressionEncoding::Gzip)
                .accept_compressed(tonic::codec::CompressionEncoding::Zstd);
            Ok(grpc.unary(service, request).await)
        })
    }
}

/// Serves the raw pass-through on `listen` until `stop` turns true; returns the bound
/// address.
pub async fn serve_raw(
    service: RawPassthrough,
    listen: SocketAddr,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<SocketAddr> {
    serve_grpc(service, listen, stop).await
}

/// `xtask loadgen passthrough`: the pass-through as its own process (for `bench`).
#[derive(clap::Args, Debug)]
pub struct PassthroughArgs {
    /// Address to serve OTLP/gRPC on.
    #[arg(long)]
    pub listen: SocketAddr,
    /// Where to forward, e.g. `http://127.0.0.1:4317`.
    #[arg(long)]
    pub downstream: String,
    /// Tokio worker threads (default: one per CPU the process may run on).
    #[arg(long)]
    pub worker_threads: Option<usize>,
    /// Forward the received bytes as they are ([`RawPassthrough`]) instead of decoding and
    /// re-encoding each request.
    #[arg(long)]
    pub raw: bool,
}

/// Runs the pass-through until the process is killed; prints `listening <addr>`.
pub async fn run_passthrough(args: PassthroughArgs) -> anyhow::Result<()> {
    let (_stop, stop_rx) = watch::channel(false);
    let addr = if args.raw {
        serve_raw(RawPassthrough::new(&args.downstream)?, args.listen, stop_rx).await?
    } else {
        serve(Passthrough::new(&args.downstream)?, args.listen, stop_rx).await?
    };
    println!("listening {addr}");
    std::future::pending::<()>().await;
    Ok(())
}
