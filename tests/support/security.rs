//! Certificates made in the test with `rcgen` (a CA, a server certificate for
//! `localhost`/127.0.0.1, a client certificate, and a stranger CA with its own client),
//! written as PEM files; and a one-span OTLP request.

use std::path::{Path, PathBuf};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};

/// PEM files of one test PKI in a temporary directory.
pub struct Pki {
    pub dir: tempfile::TempDir,
    /// CA that signed the server and client certificates.
    pub ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
    /// A CA nobody configured, and a client certificate it signed.
    pub stranger_ca: PathBuf,
    pub stranger_cert: PathBuf,
    pub stranger_key: PathBuf,
}

fn ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA")
}

fn leaf(
    issuer: &CertifiedIssuer<'static, KeyPair>,
    names: &[&str],
    usage: ExtendedKeyUsagePurpose,
) -> (String, String) {
    let mut params =
        CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
            .expect("leaf params");
    params.distinguished_name.push(
        DnType::CommonName,
        names.first().copied().unwrap_or("client"),
    );
    params.extended_key_usages = vec![usage];
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, issuer).expect("sign");
    (cert.pem(), key.serialize_pem())
}

fn write(dir: &Path, name: &str, pem: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, pem).expect("write PEM");
    path
}

impl Pki {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        let authority = ca("loopwatch test CA");
        let (server_cert, server_key) = leaf(
            &authority,
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
        );
        let (client_cert, client_key) =
            leaf(&authority, &["agent"], ExtendedKeyUsagePurpose::ClientAuth);
        let stranger = ca("stranger CA");
        let (stranger_cert, stranger_key) = leaf(
            &stranger,
            &["stranger"],
            ExtendedKeyUsagePurpose::ClientAuth,
        );
        Pki {
            ca: write(d, "ca.pem", &authority.pem()),
            server_cert: write(d, "server.pem", &server_cert),
            server_key: write(d, "server-key.pem", &server_key),
            client_cert: write(d, "client.pem", &client_cert),
            client_key: write(d, "client-key.pem", &client_key),
            stranger_ca: write(d, "stranger-ca.pem", &stranger.pem()),
            stranger_cert: write(d, "stranger.pem", &stranger_cert),
            stranger_key: write(d, "stranger-key.pem", &stranger_key),
            dir,
        }
    }

    pub fn read(path: &Path) -> Vec<u8> {
        std::fs::read(path).expect("read PEM")
    }

    /// Server TLS settings with this PKI's server certificate; `mtls` adds the client CA.
    pub fn server_tls(&self, mtls: bool) -> loopwatch::net::tls::ServerTlsConfig {
        loopwatch::net::tls::ServerTlsConfig {
            cert_file: Some(self.server_cert.clone()),
            key_file: Some(self.server_key.clone()),
            client_ca_file: mtls.then(|| self.ca.clone()),
            ..Default::default()
        }
    }

    /// A tonic client TLS config trusting this CA; with the client certificate when asked.
    pub fn tonic_client(
        &self,
        identity: Option<(&Path, &Path)>,
    ) -> tonic::transport::ClientTlsConfig {
        let mut tls = tonic::transport::ClientTlsConfig::new()
            .ca_certificate(tonic::transport::Certificate::from_pem(Self::read(
                &self.ca,
            )))
            .domain_name("localhost");
        if let Some((cert, key)) = identity {
            tls = tls.identity(tonic::transport::Identity::from_pem(
                Self::read(cert),
                Self::read(key),
            ));
        }
        tls
    }

    /// A reqwest client trusting only this CA; with a client certificate when asked.
    pub fn reqwest_client(&self, identity: Option<(&Path, &Path)>) -> reqwest::Client {
        let mut builder = reqwest::Client::builder()
            .use_rustls_tls()
            .tls_built_in_root_certs(false)
            .add_root_certificate(
                reqwest::Certificate::from_pem(&Self::read(&self.ca)).expect("CA"),
            )
            .timeout(std::time::Duration::from_secs(10));
        if let Some((cert, key)) = identity {
            let mut pem = Self::read(cert);
            pem.extend(Self::read(key));
            builder = builder.identity(reqwest::Identity::from_pem(&pem).expect("identity"));
        }
        builder.build().expect("client")
    }
}

/// One span in one request, with the given trace id byte.
pub fn one_span(id: u8) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![id; 16],
                    span_id: vec![id; 8],
                    name: "chat".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// A real OTLP/gRPC downstream, cleartext or TLS (tonic's own TLS server), counting spans.
#[derive(Clone, Default)]
pub struct RecordingDownstream {
    spans: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

#[tonic::async_trait]
impl opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceService
    for RecordingDownstream
{
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<
        tonic::Response<
            opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse,
        >,
        tonic::Status,
    > {
        let n: usize = request
            .get_ref()
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len())
            .sum();
        self.spans.fetch_add(n, std::sync::atomic::Ordering::SeqCst);
        Ok(tonic::Response::new(Default::default()))
    }
}

impl RecordingDownstream {
    /// Starts on 127.0.0.1:0, with TLS when given.
    pub async fn start_with(
        tls: Option<tonic::transport::ServerTlsConfig>,
    ) -> (Self, std::net::SocketAddr) {
        use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::TraceServiceServer;
        let me = Self::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut builder = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            builder = builder.tls_config(tls).expect("downstream TLS");
        }
        let router = builder.add_service(TraceServiceServer::new(me.clone()));
        tokio::spawn(async move {
            let _ = router
                .serve_with_incoming(tonic::transport::server::TcpIncoming::from(listener))
                .await;
        });
        (me, addr)
    }

    /// Waits until at least `n` spans arrived or `timeout` passes; returns the count.
    pub async fn wait_for_spans(&self, n: usize, timeout: std::time::Duration) -> usize {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let got = self.spans.load(std::sync::atomic::Ordering::SeqCst);
            if got >= n || tokio::time::Instant::now() >= deadline {
                return got;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
}
