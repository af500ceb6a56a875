//! The gRPC listener's edge: HTTP/2 limits on tonic's server, and [`GrpcEdgeLayer`],
//! which refuses a non-gRPC content type (HTTP 415, as the gRPC-over-HTTP/2 spec says a
//! server should) and checks tokens per service before any decoding.

use std::convert::Infallible;
use std::task::{Context, Poll};

use futures::future::{Either, Ready};
use http::{Request, Response, StatusCode};
use tonic::body::Body;

use super::ConnectionConfig;
use crate::net::auth::TokenCheck;

/// Path prefix of the admin-protected gRPC service (`Signals/Watch`).
pub const SIGNALS_PREFIX: &str = "/loopwatch.v1.Signals/";
/// Path prefix of the open gRPC health service.
pub const HEALTH_PREFIX: &str = "/grpc.health.v1.Health/";

/// A tonic server with `limits`' HTTP/2 stream cap, keepalive and the edge layer.
pub fn server_builder(
    limits: &ConnectionConfig,
    edge: GrpcEdgeLayer,
) -> tonic::transport::Server<tower::layer::util::Stack<GrpcEdgeLayer, tower::layer::util::Identity>>
{
    let keepalive = (!limits.keepalive_interval.is_zero()).then_some(limits.keepalive_interval);
    tonic::transport::Server::builder()
        .max_concurrent_streams(limits.max_concurrent_streams)
        .http2_keepalive_interval(keepalive)
        .http2_keepalive_timeout(keepalive.map(|_| limits.keepalive_timeout))
        .http2_max_pending_accept_reset_streams(Some(limits.max_concurrent_streams as usize))
        .layer(edge)
}

/// Token checks by service: `receiver` for everything but health and `Signals`, `admin`
/// for `Signals`; `None` = open.
#[derive(Clone, Debug, Default)]
pub struct GrpcEdgeLayer {
    /// Checked on the OTLP trace service (and any other non-health service).
    pub receiver: Option<TokenCheck>,
    /// Checked on `loopwatch.v1.Signals`.
    pub admin: Option<TokenCheck>,
}

impl<S> tower::Layer<S> for GrpcEdgeLayer {
    type Service = GrpcEdge<S>;

    fn layer(&self, inner: S) -> GrpcEdge<S> {
        GrpcEdge {
            inner,
            policy: self.clone(),
        }
    }
}

/// The service [`GrpcEdgeLayer`] builds.
#[derive(Clone, Debug)]
pub struct GrpcEdge<S> {
    inner: S,
    policy: GrpcEdgeLayer,
}

impl GrpcEdgeLayer {
    /// The refusal for `req`, if it is refused.
    fn refuse<B>(&self, req: &Request<B>) -> Option<Response<Body>> {
        let content_type = req
            .headers()
            .get(http::header::CONTENT_TYPE)
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        if !is_grpc_content_type(content_type) {
            let mut response = Response::new(Body::default());
            *response.status_mut() = StatusCode::UNSUPPORTED_MEDIA_TYPE;
            response.headers_mut().insert(
                http::header::ACCEPT,
                http::HeaderValue::from_static("application/grpc"),
            );
            return Some(response);
        }
        let path = req.uri().path();
        let check = if path.starts_with(HEALTH_PREFIX) {
            None
        } else if path.starts_with(SIGNALS_PREFIX) {
            self.admin.as_ref()
        } else {
            self.receiver.as_ref()
        };
        match check {
            Some(check) if !check.allows(req.headers()) => {
                Some(tonic::Status::unauthenticated("missing or wrong token").into_http())
            }
            _ => None,
        }
    }
}

/// `application/grpc` or `application/grpc+<codec>` / `;params`.
pub fn is_grpc_content_type(value: &[u8]) -> bool {
    const GRPC: &[u8] = b"application/grpc";
    value.len() >= GRPC.len()
        && value[..GRPC.len()].eq_ignore_ascii_case(GRPC)
        && matches!(value.get(GRPC.len()), None | Some(b'+') | Some(b';'))
}

impl<S, B> tower::Service<Request<B>> for GrpcEdge<S>
where
    S: tower::Service<Request<B>, Response = Response<Body>, Error = Infallible>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Either<Ready<Result<Response<Body>, Infallible>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        match self.policy.refuse(&req) {
            Some(response) => Either::Left(futures::future::ready(Ok(response))),
            None => Either::Right(self.inner.call(req)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types() {
        assert!(is_grpc_content_type(b"application/grpc"));
        assert!(is_grpc_content_type(b"application/grpc+proto"));
        assert!(is_grpc_content_type(b"Application/GRPC;charset=utf-8"));
        assert!(!is_grpc_content_type(b"application/grpc-web"));
        assert!(!is_grpc_content_type(b"application/json"));
        assert!(!is_grpc_content_type(b"application/grp"));
        assert!(!is_grpc_content_type(b""));
    }
}
