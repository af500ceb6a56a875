//! The security settings of one `loopwatch serve`, checked at start-up and turned into
//! what the listeners need: TLS acceptors that reload, token checks, and warnings about
//! exposed, unauthenticated listeners. See docs/security.md.

use std::sync::Arc;

use crate::config::Config;
use crate::net::auth::{admin_check, TokenCheck};
use crate::net::listen::grpc::GrpcEdgeLayer;
use crate::net::tls::{ReloadingServerTls, ALPN_GRPC, ALPN_HTTP};

/// What the listeners of one server use.
pub struct Edges {
    /// TLS of the OTLP/gRPC listener (ALPN `h2`).
    pub grpc_tls: Option<Arc<ReloadingServerTls>>,
    /// TLS of the OTLP/HTTP listener (ALPN `h2`, `http/1.1`).
    pub http_tls: Option<Arc<ReloadingServerTls>>,
    /// TLS of the admin listener.
    pub admin_tls: Option<Arc<ReloadingServerTls>>,
    /// Token check of both receivers.
    pub receiver_auth: Option<TokenCheck>,
    /// Token check of the admin API and `Signals/Watch`.
    pub admin_auth: Option<TokenCheck>,
}

impl Edges {
    /// Loads certificates and tokens.
    ///
    /// # Errors
    /// A message naming the key whose file cannot be loaded.
    pub fn from_config(config: &Config) -> Result<Self, String> {
        crate::net::tls::install_default_provider();
        let load = |name, settings: &crate::net::tls::ServerTlsConfig, alpn, section: &str| {
            settings
                .enabled()
                .then(|| ReloadingServerTls::new(name, settings, alpn))
                .transpose()
                .map_err(|e| format!("{section}.tls: {e}"))
        };
        let edges = Self {
            grpc_tls: load("receiver.grpc", &config.receiver.tls, ALPN_GRPC, "receiver")?,
            http_tls: load("receiver.http", &config.receiver.tls, ALPN_HTTP, "receiver")?,
            admin_tls: load("admin", &config.admin.tls, ALPN_HTTP, "admin")?,
            receiver_auth: config.receiver.auth.check()?,
            admin_auth: admin_check(
                config.admin.auth_token.as_deref(),
                config.admin.auth_token_file.as_deref(),
            )?,
        };
        edges.warn_about_exposure(config);
        Ok(edges)
    }

    /// The gRPC listener's token policy.
    pub fn grpc_edge(&self) -> GrpcEdgeLayer {
        GrpcEdgeLayer {
            receiver: self.receiver_auth.clone(),
            admin: self.admin_auth.clone(),
        }
    }

    /// Starts the certificate watchers (file changes, SIGHUP); each ends with `stop()`.
    pub fn spawn_reloaders<F>(&self, stop: impl Fn() -> F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        for tls in [&self.grpc_tls, &self.http_tls, &self.admin_tls]
            .into_iter()
            .flatten()
        {
            tls.spawn_watcher(stop());
        }
    }

    fn warn_about_exposure(&self, config: &Config) {
        let admin_exposed = config
            .admin
            .listen
            .parse::<std::net::SocketAddr>()
            .is_ok_and(|a| !a.ip().is_loopback());
        if admin_exposed && self.admin_auth.is_none() {
            tracing::warn!(
                listen = %config.admin.listen,
                "admin API listens beyond loopback without admin.auth_token: run data and signals are readable by anyone who can reach it"
            );
        }
        if self.admin_auth.is_none() {
            tracing::info!("gRPC Signals/Watch is open: set admin.auth_token to require a token");
        }
    }
}
