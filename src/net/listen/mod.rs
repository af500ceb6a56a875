//! Listener hygiene shared by the OTLP gRPC and HTTP receivers and the admin API.
//!
//! [`spawn_accept`] runs one accept loop per listener: it accepts a client, takes a slot of
//! the listener's connection limit for it, and at the limit makes one by closing the
//! connection that has read nothing for longest ([`table`]; at least a second), else waits
//! for one (meanwhile new clients wait in the kernel's backlog, holding no descriptor). It
//! survives accept errors such as `EMFILE` (logs, backs off, keeps listening), does the TLS
//! handshake under a timeout in its own task, and hands finished connections ([`Conn`]) to
//! the server over a channel. HTTP/2 limits and
//! timeouts are applied by [`grpc::server_builder`] (tonic) and [`http::serve_router`]
//! (hyper, for axum routers).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, Semaphore};

use crate::net::tls::ReloadingServerTls;

pub mod conn;
pub mod fd;
pub mod grpc;
pub mod http;
pub mod table;

pub use conn::Conn;
pub use table::{ConnTable, ListenerStats};

/// `[receiver.connections]` / `[admin.connections]`: per-listener limits and timeouts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionConfig {
    /// Open connections per listener (default 1000 on each receiver, 64 on admin); more
    /// clients wait in the kernel's accept backlog.
    pub max_connections: usize,
    /// HTTP/2 streams (requests) open at once per connection (default 250).
    pub max_concurrent_streams: u32,
    /// A connection without a byte read or written for this long is closed (default
    /// `5m`; `0s` = never). HTTP/2 keepalive pings count, so a live peer stays connected.
    #[serde(with = "humantime_serde")]
    pub idle_timeout: Duration,
    /// HTTP/1 request headers must arrive within this (default `10s`).
    #[serde(with = "humantime_serde")]
    pub header_read_timeout: Duration,
    /// TLS handshake deadline (default `10s`).
    #[serde(with = "humantime_serde")]
    pub handshake_timeout: Duration,
    /// HTTP/2 keepalive ping interval (default `30s`; `0s` = no pings).
    #[serde(with = "humantime_serde")]
    pub keepalive_interval: Duration,
    /// A keepalive ping not answered within this closes the connection (default `10s`).
    #[serde(with = "humantime_serde")]
    pub keepalive_timeout: Duration,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            max_connections: 1000,
            max_concurrent_streams: 250,
            idle_timeout: Duration::from_secs(300),
            header_read_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            keepalive_interval: Duration::from_secs(30),
            keepalive_timeout: Duration::from_secs(10),
        }
    }
}

impl ConnectionConfig {
    /// The admin listener's defaults: as the receivers', with 64 connections.
    pub fn admin_default() -> Self {
        Self {
            max_connections: 64,
            ..Self::default()
        }
    }

    /// Checks the values a listener cannot work with.
    ///
    /// # Errors
    /// `section.connections.key: why`.
    pub fn validate(&self, section: &str) -> Result<(), String> {
        let bad = |key: &str, why: &str| Err(format!("{section}.connections.{key}: {why}"));
        if self.max_connections == 0 {
            return bad("max_connections", "must be at least 1");
        }
        if self.max_concurrent_streams == 0 {
            return bad("max_concurrent_streams", "must be at least 1");
        }
        if self.header_read_timeout.is_zero() {
            return bad("header_read_timeout", "must be positive");
        }
        if self.handshake_timeout.is_zero() {
            return bad("handshake_timeout", "must be positive");
        }
        if !self.keepalive_interval.is_zero() && self.keepalive_timeout.is_zero() {
            return bad(
                "keepalive_timeout",
                "must be positive when keepalive_interval is",
            );
        }
        Ok(())
    }
}

/// Connections handed from an accept loop to a server.
pub type Incoming = mpsc::Receiver<Conn>;

/// Spawns the accept loop of `listener` (named in logs, e.g. `receiver.grpc`; counted in
/// `stats`): TLS when `tls` is set, at most `limits.max_connections` open connections (at
/// the limit the connection idle longest is closed for a new client), until `stop`.
pub fn spawn_accept(
    name: &'static str,
    listener: TcpListener,
    tls: Option<Arc<ReloadingServerTls>>,
    limits: &ConnectionConfig,
    stats: Arc<ListenerStats>,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Incoming {
    let (tx, rx) = mpsc::channel(64);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let table = Arc::new(ConnTable::new(stats));
    let limits = limits.clone();
    tokio::spawn(async move {
        tokio::pin!(stop);
        let mut last_warning: Option<tokio::time::Instant> = None;
        'accept: loop {
            let (tcp, _) = tokio::select! {
                _ = &mut stop => break,
                _ = tx.closed() => break,
                accepted = listener.accept() => match accepted {
                    Ok(accepted) => accepted,
                    Err(error) => {
                        // EMFILE/ENFILE/ENOBUFS and aborted handshakes: never fatal.
                        let now = tokio::time::Instant::now();
                        if last_warning.is_none_or(|t| now - t > Duration::from_secs(10)) {
                            tracing::warn!(listener = name, %error, "accept failed; retrying");
                            last_warning = Some(now);
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            // A slot for it: a free one, or one made by closing the connection that has
            // read nothing for longest; else wait (re-trying the eviction) for one.
            let slot = match Arc::clone(&slots).try_acquire_owned() {
                Ok(slot) => slot,
                Err(tokio::sync::TryAcquireError::Closed) => break,
                Err(tokio::sync::TryAcquireError::NoPermits) => loop {
                    table.evict_idlest(table::EVICT_IDLE_AFTER);
                    tokio::select! {
                        _ = &mut stop => break 'accept,
                        _ = tx.closed() => break 'accept,
                        slot = Arc::clone(&slots).acquire_owned() => match slot {
                            Ok(slot) => break slot,
                            Err(_) => break 'accept,
                        },
                        _ = tokio::time::sleep(Duration::from_millis(250)) => {}
                    }
                },
            };
            let _ = tcp.set_nodelay(true);
            match &tls {
                None => {
                    let conn = Conn::new(conn::Stream::Plain(tcp), slot, limits.idle_timeout)
                        .listed_in(&table);
                    if tx.send(conn).await.is_err() {
                        break;
                    }
                }
                Some(tls) => {
                    let acceptor = tls.acceptor();
                    let tx = tx.clone();
                    let (handshake, idle) = (limits.handshake_timeout, limits.idle_timeout);
                    let table = Arc::clone(&table);
                    tokio::spawn(async move {
                        let peer = tcp.peer_addr().ok();
                        match tokio::time::timeout(handshake, acceptor.accept(tcp)).await {
                            Ok(Ok(stream)) => {
                                let stream = conn::Stream::Tls(Box::new(stream));
                                let conn = Conn::new(stream, slot, idle).listed_in(&table);
                                let _ = tx.send(conn).await;
                            }
                            Ok(Err(error)) => {
                                tracing::debug!(listener = name, ?peer, %error, "TLS handshake failed")
                            }
                            Err(_) => {
                                tracing::debug!(listener = name, ?peer, "TLS handshake timed out")
                            }
                        }
                    });
                }
            }
        }
    });
    rx
}

/// The `Stream` of connections tonic's `serve_with_incoming_shutdown` takes.
pub fn incoming_stream(
    incoming: Incoming,
) -> impl futures::Stream<Item = Result<Conn, std::io::Error>> {
    tokio_stream::wrappers::ReceiverStream::new(incoming).map(Ok)
}
