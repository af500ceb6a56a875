//! gRPC stream `loopwatch.v1.Signals/Watch` (DESIGN §6, `proto/loopwatch/v1/signals.proto`)
//! over the hub's broadcast channel.

use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;
use tokio_stream::wrappers::BroadcastStream;
use tonic::{Request, Response, Status};

use super::hub::SignalHub;
use super::{Action, Signal};

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
            schema: s.schema.into(),
            id: s.id.into(),
            occurrence: s.occurrence,
            severity: s.severity.as_str().to_owned(),
            time_unix_nano: s.time_unix_nano,
            trace_id: s.trace_id.into(),
            run_key: s.run_key.into(),
            service_name: s.service_name.map(Into::into),
            agent_name: s.agent_name.map(Into::into),
            profile: s.profile.into(),
            action: s.action.as_str().to_owned(),
            pattern: s.pattern.into(),
            tool_names: s.tool_names.into_iter().map(Into::into).collect(),
            count: s.count,
            window: s.window,
            fingerprints: s.fingerprints.into_iter().map(Into::into).collect(),
            span_ids: s.span_ids.into_iter().map(Into::into).collect(),
            first_span_id: s.first_span_id.into(),
            message: s.message,
        }
    }
}

/// A received `proto::Signal` whose `severity` or `action` is not a known name.
pub type UnknownName = crate::detector::UnknownName;

impl TryFrom<proto::Signal> for Signal {
    type Error = UnknownName;

    /// The signal a stream item carries; an unknown `severity` or `action` is an error.
    fn try_from(s: proto::Signal) -> Result<Self, Self::Error> {
        Ok(Signal {
            schema: s.schema.into(),
            id: s.id.into(),
            occurrence: s.occurrence,
            severity: s.severity.parse()?,
            time_unix_nano: s.time_unix_nano,
            trace_id: s.trace_id.into(),
            run_key: s.run_key.into(),
            service_name: s.service_name.map(Into::into),
            agent_name: s.agent_name.map(Into::into),
            profile: s.profile.into(),
            action: s.action.parse()?,
            pattern: s.pattern.into(),
            tool_names: s.tool_names.into_iter().map(Into::into).collect(),
            count: s.count,
            window: s.window,
            fingerprints: s.fingerprints.into_iter().map(Into::into).collect(),
            span_ids: s.span_ids.into_iter().map(Into::into).collect(),
            first_span_id: s.first_span_id.into(),
            message: s.message,
        })
    }
}

/// The filters of a `Watch` request, checked: each `None` matches any value.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WatchFilter {
    /// Exact `service_name`; never matches a signal without one.
    pub service_name: Option<String>,
    /// Exact lowercase-hex `trace_id`.
    pub trace_id: Option<String>,
    /// The signal's action.
    pub action: Option<Action>,
}

impl TryFrom<&proto::WatchRequest> for WatchFilter {
    type Error = UnknownName;

    /// An empty field is no filter; `action` must be `"warn"` or `"kill"` (else the error,
    /// which `Watch` returns as `INVALID_ARGUMENT`).
    fn try_from(request: &proto::WatchRequest) -> Result<Self, Self::Error> {
        let set = |s: &str| Some(s.to_owned()).filter(|s| !s.is_empty());
        Ok(WatchFilter {
            service_name: set(&request.service_name),
            trace_id: set(&request.trace_id),
            action: match request.action.as_str() {
                "" => None,
                action => Some(action.parse()?),
            },
        })
    }
}

impl WatchFilter {
    /// Whether `signal` passes every filter set.
    pub fn matches(&self, signal: &Signal) -> bool {
        self.service_name
            .as_deref()
            .is_none_or(|name| signal.service_name.as_deref() == Some(name))
            && self
                .trace_id
                .as_deref()
                .is_none_or(|trace_id| signal.trace_id == trace_id)
            && self.action.is_none_or(|action| signal.action == action)
    }
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

/// Response header of a `Watch` stream that is subscribed (value `1`): every signal
/// published after the client read it reaches the stream.
pub const SUBSCRIBED_HEADER: &str = "loopwatch-subscribed";

/// Server stream of `Watch`.
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<proto::Signal, Status>> + Send>>;

#[tonic::async_trait]
impl proto::signals_server::Signals for SignalsService {
    type WatchStream = WatchStream;

    async fn watch(
        &self,
        request: Request<proto::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let filter = WatchFilter::try_from(request.get_ref())
            .map_err(|e| Status::invalid_argument(format!("Watch filter: {e}")))?;
        let stream = BroadcastStream::new(self.hub.subscribe()).filter_map(move |item| {
            let out = match item {
                Ok(signal) if filter.matches(&signal) => {
                    Some(Ok(proto::Signal::from(Arc::unwrap_or_clone(signal))))
                }
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
        let mut response = Response::new(stream);
        // Sent with the response headers, after the subscription above: a client reads it
        // as "subscribed". A refusal (INVALID_ARGUMENT, UNAUTHENTICATED) is a trailers-only
        // answer whose headers carry no such key, which a client may read before the status.
        response.metadata_mut().insert(
            SUBSCRIBED_HEADER,
            tonic::metadata::MetadataValue::from_static("1"),
        );
        Ok(response)
    }
}
