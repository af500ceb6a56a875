//! TLS with rustls on every edge.
//!
//! - Listeners ([`ServerTlsConfig`], `[receiver.tls]` and `[admin.tls]`): a PEM certificate
//!   chain and key, and optionally a client CA that turns on mutual TLS (a client without a
//!   certificate signed by it is refused during the handshake). [`ReloadingServerTls`]
//!   holds the current `rustls::ServerConfig` in an `ArcSwap`; every new connection takes
//!   the current one, so a reload (the files' modification time changed, or SIGHUP) never
//!   touches open connections. A reload that fails keeps the previous certificate.
//! - The downstream exporter ([`ClientTlsConfig`], `[exporter.tls]`): an `https://`
//!   endpoint always means TLS, verified against the system and webpki roots, or only
//!   against `ca_file` when set; a client certificate is optional.
//!
//! The crypto provider is `ring` everywhere ([`provider`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::{Deserialize, Serialize};

/// TLS errors, each naming the file (and, from config validation, the key) at fault.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read or holds no usable PEM item.
    #[error("{path}: {message}")]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        message: String,
    },
    /// Settings that do not go together (e.g. a key without a certificate).
    #[error("{0}")]
    Settings(String),
    /// rustls refused the certificate, key or CA.
    #[error("{0}")]
    Rustls(String),
}

/// The process's crypto provider: rustls with `ring`.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Installs `ring` as the process-wide rustls provider (for crates that use the default,
/// e.g. the Redis and NATS clients). Calling it again is harmless.
pub fn install_default_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// `[receiver.tls]` / `[admin.tls]`: server TLS, on when `cert_file` is set.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerTlsConfig {
    /// PEM certificate chain (leaf first); unset = cleartext.
    pub cert_file: Option<PathBuf>,
    /// PEM private key (PKCS#8, PKCS#1 or SEC1) of the certificate.
    pub key_file: Option<PathBuf>,
    /// PEM CA bundle; when set, clients must present a certificate signed by it (mTLS).
    pub client_ca_file: Option<PathBuf>,
    /// How often the files' modification times are checked for a reload (default `30s`;
    /// `0s` = reload only on SIGHUP).
    #[serde(with = "humantime_serde")]
    pub reload_interval: Duration,
}

impl Default for ServerTlsConfig {
    fn default() -> Self {
        Self {
            cert_file: None,
            key_file: None,
            client_ca_file: None,
            reload_interval: Duration::from_secs(30),
        }
    }
}

impl ServerTlsConfig {
    /// True when TLS is configured (`cert_file` set).
    pub fn enabled(&self) -> bool {
        self.cert_file.is_some()
    }

    /// Loads the files into a rustls server config advertising `alpn` (e.g. `h2`).
    ///
    /// # Errors
    /// [`TlsError`] naming the unreadable or invalid file, or a key without a certificate.
    pub fn load(&self, alpn: &[&[u8]]) -> Result<ServerConfig, TlsError> {
        let (cert_file, key_file) = match (&self.cert_file, &self.key_file) {
            (Some(c), Some(k)) => (c, k),
            (Some(_), None) => return Err(TlsError::Settings("cert_file needs key_file".into())),
            (None, _) => {
                return Err(TlsError::Settings(
                    "key_file and client_ca_file need cert_file".into(),
                ))
            }
        };
        let chain = read_certs(cert_file)?;
        let key = read_key(key_file)?;
        let builder = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
        let builder = match &self.client_ca_file {
            Some(ca) => {
                let roots = root_store(ca)?;
                let verifier =
                    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
                        .build()
                        .map_err(|e| TlsError::Rustls(format!("{}: {e}", ca.display())))?;
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let mut config = builder.with_single_cert(chain, key).map_err(|e| {
            TlsError::Rustls(format!(
                "{} / {}: {e}",
                cert_file.display(),
                key_file.display()
            ))
        })?;
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(config)
    }

    /// Checks the settings by loading them, for start-up and `check-config`.
    ///
    /// # Errors
    /// `section.tls: …` naming the file.
    pub fn validate(&self, section: &str) -> Result<(), String> {
        if self.enabled() || self.key_file.is_some() || self.client_ca_file.is_some() {
            self.load(&[]).map_err(|e| format!("{section}.tls: {e}"))?;
        }
        Ok(())
    }

    fn files(&self) -> impl Iterator<Item = &PathBuf> {
        [&self.cert_file, &self.key_file, &self.client_ca_file]
            .into_iter()
            .flatten()
    }
}

/// ALPN for a gRPC listener.
pub const ALPN_GRPC: &[&[u8]] = &[b"h2"];
/// ALPN for an HTTP listener (HTTP/2 preferred, HTTP/1.1 accepted).
pub const ALPN_HTTP: &[&[u8]] = &[b"h2", b"http/1.1"];

/// A server TLS config that can be swapped while the listener runs.
pub struct ReloadingServerTls {
    settings: ServerTlsConfig,
    alpn: &'static [&'static [u8]],
    current: ArcSwap<ServerConfig>,
    loaded_at: std::sync::Mutex<Vec<Option<SystemTime>>>,
    listener: &'static str,
}

impl ReloadingServerTls {
    /// Loads `settings` for the listener named `listener` (used in logs).
    ///
    /// # Errors
    /// [`TlsError`] when the files cannot be loaded.
    pub fn new(
        listener: &'static str,
        settings: &ServerTlsConfig,
        alpn: &'static [&'static [u8]],
    ) -> Result<Arc<Self>, TlsError> {
        let config = settings.load(alpn)?;
        let this = Self {
            settings: settings.clone(),
            alpn,
            current: ArcSwap::from_pointee(config),
            loaded_at: std::sync::Mutex::new(Vec::new()),
            listener,
        };
        *this.lock_times() = this.mtimes();
        Ok(Arc::new(this))
    }

    /// An acceptor with the current certificate (one per connection).
    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(self.current.load_full())
    }

    /// Reloads the files now; on error the previous config stays in use.
    ///
    /// # Errors
    /// [`TlsError`] when the new files cannot be loaded.
    pub fn reload(&self) -> Result<(), TlsError> {
        let times = self.mtimes();
        let config = self.settings.load(self.alpn)?;
        self.current.store(Arc::new(config));
        *self.lock_times() = times;
        tracing::info!(listener = self.listener, "TLS certificate reloaded");
        Ok(())
    }

    /// Reloads when a file's modification time differs from the last load.
    pub fn reload_if_changed(&self) {
        if self.mtimes() != *self.lock_times() {
            self.reload_logged();
        }
    }

    fn reload_logged(&self) {
        if let Err(error) = self.reload() {
            tracing::error!(listener = self.listener, %error, "TLS reload failed; keeping the previous certificate");
        }
    }

    fn lock_times(&self) -> std::sync::MutexGuard<'_, Vec<Option<SystemTime>>> {
        self.loaded_at
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn mtimes(&self) -> Vec<Option<SystemTime>> {
        self.settings
            .files()
            .map(|f| std::fs::metadata(f).and_then(|m| m.modified()).ok())
            .collect()
    }

    /// Watches for changes (every `reload_interval`) and SIGHUP until `stop` resolves.
    pub fn spawn_watcher(
        self: &Arc<Self>,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let interval = this.settings.reload_interval;
            #[cfg(unix)]
            let mut hup =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()).ok();
            tokio::pin!(stop);
            loop {
                let tick = async {
                    if interval.is_zero() {
                        std::future::pending::<()>().await
                    } else {
                        tokio::time::sleep(interval).await
                    }
                };
                #[cfg(unix)]
                let hangup = async {
                    match hup.as_mut() {
                        Some(h) => {
                            h.recv().await;
                        }
                        None => std::future::pending::<()>().await,
                    }
                };
                #[cfg(not(unix))]
                let hangup = std::future::pending::<()>();
                tokio::select! {
                    _ = &mut stop => break,
                    _ = tick => this.reload_if_changed(),
                    _ = hangup => this.reload_logged(),
                }
            }
        })
    }
}

/// `[exporter.tls]`: TLS to the downstream, used when the endpoint is `https://`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ClientTlsConfig {
    /// PEM CA bundle the downstream's certificate must chain to; unset = the system roots
    /// and the webpki (Mozilla) roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain, for a downstream that requires mTLS.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// Name to verify the downstream's certificate against instead of the endpoint's host.
    pub server_name: Option<String>,
}

impl ClientTlsConfig {
    /// True when any key is set.
    pub fn is_set(&self) -> bool {
        *self != Self::default()
    }

    /// The tonic client TLS settings.
    ///
    /// # Errors
    /// [`TlsError`] naming an unreadable file, or a certificate without a key.
    pub fn tonic(&self) -> Result<tonic::transport::ClientTlsConfig, TlsError> {
        use tonic::transport::{Certificate, ClientTlsConfig as Tls, Identity};
        let mut tls = Tls::new();
        tls = match &self.ca_file {
            Some(ca) => {
                root_store(ca)?; // fail here, naming the file, rather than at connect time
                tls.ca_certificate(Certificate::from_pem(read(ca)?))
            }
            None => tls.with_enabled_roots(),
        };
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                read_certs(cert)?;
                read_key(key)?;
                tls = tls.identity(Identity::from_pem(read(cert)?, read(key)?));
            }
            (None, None) => {}
            _ => {
                return Err(TlsError::Settings(
                    "cert_file and key_file go together".into(),
                ))
            }
        }
        if let Some(name) = &self.server_name {
            tls = tls.domain_name(name.clone());
        }
        Ok(tls)
    }
}

impl ClientTlsConfig {
    /// The Redis client's certificates (`rediss://`): `None` when no CA or client
    /// certificate is set (the client then uses its built-in roots).
    ///
    /// # Errors
    /// [`TlsError`] naming an unreadable file, a certificate without a key, or a
    /// `server_name` (the Redis client verifies the URL's host).
    pub fn redis_certificates(&self) -> Result<Option<redis::TlsCertificates>, TlsError> {
        if self.server_name.is_some() {
            return Err(TlsError::Settings(
                "server_name is not supported for Redis; put the name in the URL".into(),
            ));
        }
        let root_cert = match &self.ca_file {
            Some(ca) => {
                root_store(ca)?;
                Some(read(ca)?)
            }
            None => None,
        };
        let client_tls = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                read_certs(cert)?;
                read_key(key)?;
                Some(redis::ClientTlsConfig {
                    client_cert: read(cert)?,
                    client_key: read(key)?,
                })
            }
            (None, None) => None,
            _ => {
                return Err(TlsError::Settings(
                    "cert_file and key_file go together".into(),
                ))
            }
        };
        Ok(
            (root_cert.is_some() || client_tls.is_some()).then_some(redis::TlsCertificates {
                client_tls,
                root_cert,
            }),
        )
    }
}

impl ClientTlsConfig {
    /// NATS connect options with this TLS: any setting (or `tls_first`) requires TLS; a
    /// `tls://` URL requires it by itself.
    ///
    /// # Errors
    /// [`TlsError`] naming an unreadable file, a certificate without a key, or a
    /// `server_name`.
    pub fn nats_options(
        &self,
        mut options: async_nats::ConnectOptions,
        tls_first: bool,
    ) -> Result<async_nats::ConnectOptions, TlsError> {
        if self.server_name.is_some() {
            return Err(TlsError::Settings(
                "server_name is not supported for NATS; put the name in the URL".into(),
            ));
        }
        if let Some(ca) = &self.ca_file {
            root_store(ca)?;
            options = options.add_root_certificates(ca.clone());
        }
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => {
                read_certs(cert)?;
                read_key(key)?;
                options = options.add_client_certificate(cert.clone(), key.clone());
            }
            (None, None) => {}
            _ => {
                return Err(TlsError::Settings(
                    "cert_file and key_file go together".into(),
                ))
            }
        }
        if self.is_set() || tls_first {
            options = options.require_tls(true);
        }
        if tls_first {
            options = options.tls_first();
        }
        Ok(options)
    }
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    std::fs::read(path).map_err(|e| TlsError::File {
        path: path.to_owned(),
        message: e.to_string(),
    })
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let bytes = read(path)?;
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::File {
            path: path.to_owned(),
            message: format!("not a PEM certificate file: {e}"),
        })?;
    if certs.is_empty() {
        return Err(TlsError::File {
            path: path.to_owned(),
            message: "no PEM certificate in the file".into(),
        });
    }
    Ok(certs)
}

fn read_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let bytes = read(path)?;
    PrivateKeyDer::from_pem_slice(&bytes).map_err(|e| TlsError::File {
        path: path.to_owned(),
        message: format!("no PEM private key in the file: {e}"),
    })
}

fn root_store(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in read_certs(path)? {
        roots.add(cert).map_err(|e| TlsError::File {
            path: path.to_owned(),
            message: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(roots)
}
