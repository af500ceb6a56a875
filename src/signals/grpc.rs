//! gRPC stream `loopwatch.v1.Signals/Watch` (DESIGN §6, `proto/loopwatch/v1/signals.proto`)
//! over the hub's broadcast channel.

use std::pin::Pin;

use futures::{Stream, StreamExt};
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_stream::wrappers::BroadcastStream;
use tonic::{Request, Response, Status};

use super::hub::SignalHub;
use super::Signal;

/// Types generated from `proto/loopwatch/v1/signals.proto` (package `loopwatch.v1`).
#[allow(missing_docs, clippy::all, clippy::pedantic)]
pub mod proto {
    tonic::include_proto!("loopwatch.v1");
}

pub use proto::signals_client::SignalsClient;
pub use proto::signals_server::SignalsServer;

impl From<Signal> for proto::Signal {
    fn from(s: Signal) -> Self {
        proto::Signal {
            schema: s.schema,
            id: s.id,
            occurrence: s.occurrence,
            severity: s.severity,
            time_unix_nano: s.time_unix_nano,
            trace_id: s.trace_id,
            run_key: s.run_key,
            service_name: s.service_name,
            agent_name: s.agent_name,
            profile: s.profile,
            action: s.action,
            pattern: s.pattern,
            tool_names: s.tool_names,
            count: s.count,
            window: s.window,
            fingerprints: s.fingerprints,
            span_ids: s.span_ids,
            first_span_id: s.first_span_id,
            message: s.message,
        }
    }
}

impl From<proto::Signal> for Signal {
    fn from(s: proto::Signal) -> Self {
        Signal {
            schema: s.schema,
            id: s.id,
            occurrence: s.occurrence,
            severity: s.severity,
            time_unix_nano: s.time_unix_nano,
            trace_id: s.trace_id,
            run_key: s.run_key,
            service_name: s.service_name,
            agent_name: s.agent_name,
            profile: s.profile,
            action: s.action,
            pattern: s.pattern,
            tool_names: s.tool_names,
            count: s.count,
            window: s.window,
            fingerprints: s.fingerprints,
            span_ids: s.span_ids,
            first_span_id: s.first_span_id,
            message: s.message,
        }
    }
}

/// Whether `signal` passes the filters of `request` (each empty field matches any value;
/// otherwise exact match; `service_name` never matches a signal without one).
pub fn matches(request: &proto::WatchRequest, signal: &Signal) -> bool {
    (request.service_name.is_empty()
        || signal.service_name.as_deref() == Some(request.service_name.as_str()))
        && (request.trace_id.is_empty() || signal.trace_id == request.trace_id)
        && (request.action.is_empty() || signal.action == request.action)
}

/// The `Signals` service: each `Watch` call subscribes to the hub and streams matching
/// signals published after the call. A subscriber that lags more than
/// [`super::hub::BROADCAST_CAPACITY`] signals skips the missed ones (logged); the hub
/// never waits for it.
#[derive(Clone, Debug)]
pub struct SignalsService {
    hub: SignalHub,
    /// When it turns true, every open `Watch` stream ends (OK status), so a graceful
    /// server shutdown, which waits for open streams, is not held up by watchers.
    stop: Option<tokio::sync::watch::Receiver<bool>>,
}

/// The tonic server for [`SignalsService`], to add to the OTLP gRPC server
/// (`Server::builder().add_service(signals_service(hub))`). Its streams never end on
/// their own: use [`signals_service_until`] in a server that shuts down gracefully.
pub fn signals_service(hub: SignalHub) -> SignalsServer<SignalsService> {
    SignalsServer::new(SignalsService { hub, stop: None })
}

/// Like [`signals_service`], but every `Watch` stream ends once `stop` holds `true`.
pub fn signals_service_until(
    hub: SignalHub,
    stop: tokio::sync::watch::Receiver<bool>,
) -> SignalsServer<SignalsService> {
    SignalsServer::new(SignalsService {
        hub,
        stop: Some(stop),
    })
}

/// Server stream of `Watch`.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<proto::Signal, Status>> + Send>>;

#[tonic::async_trait]
impl proto::signals_server::Signals for SignalsService {
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<proto::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let filter = request.into_inner();
        let stream = BroadcastStream::new(self.hub.subscribe()).filter_map(move |item| {
            let out = match item {
                Ok(signal) if matches(&filter, &signal) => Some(Ok(proto::Signal::from(signal))),
                Ok(_) => None,
                Err(BroadcastStreamRecvError::Lagged(skipped)) => {
                    tracing::warn!(skipped, "gRPC signal watcher lagging, skipped signals");
                    None
                }
            };
            futures::future::ready(out)
        });
        let stream: Self::WatchStream = match self.stop.clone() {
            Some(mut stop) => Box::pin(stream.take_until(async move {
                // A dropped sender also ends the stream.
                let _ = stop.wait_for(|stopped| *stopped).await;
            })),
            None => Box::pin(stream),
        };
        Ok(Response::new(stream))
    }
}
