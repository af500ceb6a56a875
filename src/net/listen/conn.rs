//! One accepted connection: plain TCP or TLS, holding its slot of the listener's
//! connection limit until dropped, closed after `idle_timeout` without a byte read or
//! written, and listed in its listener's [`ConnTable`] (which may ask it to close, to make
//! room for a new client: its next read or write then fails).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use super::table::{ConnState, ConnTable};
use std::sync::Arc;

/// The byte stream under a [`Conn`].
pub enum Stream {
    /// Cleartext TCP.
    Plain(TcpStream),
    /// TLS over TCP (handshake done).
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

/// An accepted connection (see the module docs).
pub struct Conn {
    stream: Stream,
    _slot: OwnedSemaphorePermit,
    idle_timeout: Duration,
    last_activity: Instant,
    idle: Pin<Box<Sleep>>,
    remote_addr: Option<SocketAddr>,
    /// Its entry in the listener's table (`None` outside a listener, e.g. tests).
    listed: Option<(Arc<ConnTable>, u64, Arc<ConnState>)>,
}

impl Conn {
    /// Wraps `stream`; `slot` is released when the connection is dropped. A zero
    /// `idle_timeout` turns the idle check off.
    pub fn new(stream: Stream, slot: OwnedSemaphorePermit, idle_timeout: Duration) -> Self {
        let remote_addr = match &stream {
            Stream::Plain(s) => s.peer_addr().ok(),
            Stream::Tls(s) => s.get_ref().0.peer_addr().ok(),
        };
        let now = Instant::now();
        let idle = Box::pin(tokio::time::sleep_until(deadline(now, idle_timeout)));
        Self {
            stream,
            _slot: slot,
            idle_timeout,
            last_activity: now,
            idle,
            remote_addr,
            listed: None,
        }
    }

    /// Lists the connection in `table`, which may then ask it to close
    /// ([`ConnTable::evict_idlest`]); it leaves the table when dropped.
    pub fn listed_in(mut self, table: &Arc<ConnTable>) -> Self {
        let (id, state) = table.add();
        self.listed = Some((Arc::clone(table), id, state));
        self
    }

    /// `Err` once the table asked the connection to close; registers the task otherwise.
    fn check_closing(&self, cx: &mut Context<'_>) -> io::Result<()> {
        if let Some((_, _, state)) = &self.listed {
            state.register(cx.waker());
            if state.closing() {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    "closed to make room for a new connection (the listener was full and this one idle)",
                ));
            }
        }
        Ok(())
    }

    /// The peer's address.
    pub fn remote_addr(&self) -> Option<SocketAddr> {
        self.remote_addr
    }

    /// Called when an operation is pending: `Err(TimedOut)` once the connection has been
    /// idle for `idle_timeout`.
    fn check_idle(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        if self.idle_timeout.is_zero() {
            return Ok(());
        }
        loop {
            if self.idle.as_mut().poll(cx).is_pending() {
                return Ok(());
            }
            let due = self.last_activity + self.idle_timeout;
            if Instant::now() >= due {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "connection idle for longer than idle_timeout",
                ));
            }
            // Activity since the timer was set: move it and poll again to register.
            self.idle.as_mut().reset(due);
        }
    }
}

fn deadline(now: Instant, idle_timeout: Duration) -> Instant {
    // A zero timeout never fires (check_idle returns early); any far deadline will do.
    now + if idle_timeout.is_zero() {
        Duration::from_secs(86_400)
    } else {
        idle_timeout
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if let Err(e) = this.check_closing(cx) {
            return Poll::Ready(Err(e));
        }
        let before = buf.filled().len();
        let result = match &mut this.stream {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        };
        match result {
            Poll::Ready(r) => {
                if buf.filled().len() > before {
                    this.last_activity = Instant::now();
                    if let Some((table, _, state)) = &this.listed {
                        table.read(state);
                    }
                }
                Poll::Ready(r)
            }
            Poll::Pending => match this.check_idle(cx) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if let Err(e) = this.check_closing(cx) {
            return Poll::Ready(Err(e));
        }
        let result = match &mut this.stream {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        };
        match result {
            Poll::Ready(Ok(n)) if n > 0 => {
                this.last_activity = Instant::now();
                Poll::Ready(Ok(n))
            }
            Poll::Pending => match this.check_idle(cx) {
                Ok(()) => Poll::Pending,
                Err(e) => Poll::Ready(Err(e)),
            },
            other => other,
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let result = match &mut this.stream {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        };
        if let Poll::Ready(Ok(n)) = result {
            if n > 0 {
                this.last_activity = Instant::now();
            }
        }
        result
    }

    fn is_write_vectored(&self) -> bool {
        match &self.stream {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().stream {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        if let Some((table, id, _)) = &self.listed {
            table.remove(*id);
        }
    }
}

impl tonic::transport::server::Connected for Conn {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        match &self.stream {
            Stream::Plain(s) => s.connect_info(),
            Stream::Tls(s) => s.get_ref().0.connect_info(),
        }
    }
}
