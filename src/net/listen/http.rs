//! Serving an axum router on accepted [`Conn`](super::Conn)s with hyper: HTTP/1.1 and
//! HTTP/2 (prior knowledge or ALPN), HTTP/1 header-read timeout, HTTP/2 stream cap and
//! keepalive, graceful shutdown that finishes in-flight requests.

use std::future::Future;

use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;

use super::{ConnectionConfig, Incoming};

/// Serves `router` on the connections from `incoming` until `shutdown` resolves, then
/// stops taking connections and waits for the open ones to finish their requests.
///
/// # Errors
/// None today (connection errors are logged at DEBUG); `io::Result` for the caller's join.
pub async fn serve_router(
    mut incoming: Incoming,
    router: axum::Router,
    limits: &ConnectionConfig,
    shutdown: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let keepalive = (!limits.keepalive_interval.is_zero()).then_some(limits.keepalive_interval);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.max_concurrent_streams)
        .max_pending_accept_reset_streams(Some(limits.max_concurrent_streams as usize))
        .keep_alive_interval(keepalive)
        .keep_alive_timeout(limits.keepalive_timeout);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let conn = tokio::select! {
            _ = &mut shutdown => break,
            conn = incoming.recv() => match conn {
                Some(conn) => conn,
                None => break,
            },
        };
        let service = TowerToHyperService::new(router.clone());
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(conn), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "HTTP connection ended with an error");
            }
        });
    }
    drop(incoming);
    graceful.shutdown().await;
    Ok(())
}
