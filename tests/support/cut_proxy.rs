//! A TCP proxy on a fixed loopback port in front of a real server, that can be cut (the
//! port closed and every open connection dropped, as when the server is killed) and
//! restored on the same port: the fault suite's outage.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

pub struct CutProxy {
    /// The proxy's address (what the system under test connects to).
    pub addr: SocketAddr,
    target: SocketAddr,
    accept: Option<JoinHandle<()>>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl CutProxy {
    /// Listens on a fresh 127.0.0.1 port, forwarding every connection to `target`.
    pub async fn start(target: SocketAddr) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut proxy = CutProxy {
            addr: listener.local_addr().unwrap(),
            target,
            accept: None,
            connections: Arc::default(),
        };
        proxy.accept = Some(proxy.serve(listener));
        proxy
    }

    /// A proxy whose port is reserved but closed (the server is down from the start).
    pub async fn start_cut(target: SocketAddr) -> CutProxy {
        let mut proxy = CutProxy::start(target).await;
        proxy.cut().await;
        proxy
    }

    fn serve(&self, listener: TcpListener) -> JoinHandle<()> {
        let (target, connections) = (self.target, self.connections.clone());
        tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                connections.lock().unwrap().push(task);
            }
        })
    }

    /// Closes the port (connects are refused) and drops every open connection; when it
    /// returns, no byte passes any more.
    pub async fn cut(&mut self) {
        if let Some(accept) = self.accept.take() {
            accept.abort();
            let _ = accept.await;
        }
        let connections: Vec<_> = self.connections.lock().unwrap().drain(..).collect();
        for connection in connections {
            connection.abort();
            let _ = connection.await;
        }
    }

    /// Listens again on the same port.
    pub async fn restore(&mut self) {
        assert!(self.accept.is_none(), "the proxy is not cut");
        let listener = TcpListener::bind(self.addr)
            .await
            .unwrap_or_else(|e| panic!("re-bind {}: {e}", self.addr));
        self.accept = Some(self.serve(listener));
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        if let Some(accept) = self.accept.take() {
            accept.abort();
        }
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }
}
