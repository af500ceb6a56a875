//! TLS, mTLS, tokens and connection hygiene through the running server, on loopback with
//! certificates made in the test (issue 9).

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use crate::support::security::{one_span, Pki};
use crate::support::server::test_config;
use loopwatch::server::{start, RunningServer};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tonic::transport::Channel;

async fn started(config: loopwatch::config::Config) -> RunningServer {
    start(config)
        .await
        .unwrap_or_else(|e| panic!("start: {e:#}"))
}

/// An OTLP/gRPC export over TLS to 127.0.0.1 (certificate name `localhost`).
async fn export_tls(
    addr: SocketAddr,
    tls: tonic::transport::ClientTlsConfig,
) -> Result<(), String> {
    let channel = Channel::from_shared(format!("https://localhost:{}", addr.port()))
        .map_err(|e| e.to_string())?
        .tls_config(tls)
        .map_err(|e| e.to_string())?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5));
    // Connect to the IP, verify the name `localhost`.
    let channel = channel
        .connect_with_connector(tower::service_fn(move |_: http::Uri| async move {
            tokio::net::TcpStream::connect(addr)
                .await
                .map(hyper_util::rt::TokioIo::new)
        }))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    TraceServiceClient::new(channel)
        .export(one_span(7))
        .await
        .map(|_| ())
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))
}

#[tokio::test]
async fn grpc_receiver_tls_and_mtls() {
    let pki = Pki::new();
    let mut config = test_config(None);
    config.receiver.tls = pki.server_tls(true);
    let server = started(config).await;
    let addr = server.grpc_addr;

    let ok = export_tls(
        addr,
        pki.tonic_client(Some((&pki.client_cert, &pki.client_key))),
    )
    .await;
    assert_eq!(ok, Ok(()));
    assert_eq!(server.receiver_stats.accepted_spans(), 1);

    let no_cert = export_tls(addr, pki.tonic_client(None)).await;
    assert!(
        no_cert.is_err(),
        "a client without a certificate got in: {no_cert:?}"
    );
    let stranger = export_tls(
        addr,
        pki.tonic_client(Some((&pki.stranger_cert, &pki.stranger_key))),
    )
    .await;
    assert!(stranger.is_err(), "a certificate from another CA got in");
    // Cleartext to a TLS port is refused too.
    let mut plain = TraceServiceClient::connect(format!("http://{addr}"))
        .await
        .expect("TCP connect");
    assert!(plain.export(one_span(8)).await.is_err());
    assert_eq!(
        server.receiver_stats.accepted_spans(),
        1,
        "only the mTLS client"
    );
    server.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn http_receiver_and_admin_tls_mtls() {
    let pki = Pki::new();
    let mut config = test_config(None);
    config.receiver.tls = pki.server_tls(true);
    config.admin.tls = pki.server_tls(false);
    let server = started(config).await;
    let http = server.http_addr;
    let admin = server.admin_addr.expect("admin");
    let body = one_span(9).encode_to_vec();
    let url = format!("https://127.0.0.1:{}/v1/traces", http.port());

    let with_cert = pki.reqwest_client(Some((&pki.client_cert, &pki.client_key)));
    let response = with_cert
        .post(&url)
        .header("content-type", "application/x-protobuf")
        .body(body.clone())
        .send()
        .await
        .expect("mTLS POST");
    assert_eq!(response.status(), 200);
    assert_eq!(server.receiver_stats.accepted_spans(), 1);

    let without = pki.reqwest_client(None);
    let refused = without
        .post(&url)
        .header("content-type", "application/x-protobuf")
        .body(body.clone())
        .send()
        .await;
    assert!(refused.is_err(), "no client certificate, yet {refused:?}");
    let plain = reqwest::Client::new()
        .post(format!("http://{http}/v1/traces"))
        .header("content-type", "application/x-protobuf")
        .body(body)
        .send()
        .await;
    assert!(plain.is_err() || plain.is_ok_and(|r| r.status() != 200));
    assert_eq!(server.receiver_stats.accepted_spans(), 1);

    // Admin: TLS without client certificates.
    let health = without
        .get(format!("https://127.0.0.1:{}/healthz", admin.port()))
        .send()
        .await
        .expect("admin over TLS");
    assert_eq!(health.status(), 200);
    assert!(reqwest::get(format!("http://{admin}/healthz"))
        .await
        .is_err());
    server.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn tokens_on_admin_watch_and_receivers() {
    use loopwatch::signals::grpc::proto::signals_client::SignalsClient;
    use loopwatch::signals::grpc::proto::WatchRequest;
    let mut config = test_config(None);
    config.admin.auth_token = Some("admin-secret".into());
    config.receiver.auth.token = Some("ingest-secret".into());
    let server = started(config).await;
    let admin = server.admin_addr.expect("admin");
    let client = reqwest::Client::new();
    let get = |path: &str, token: Option<&str>| {
        let mut req = client.get(format!("http://{admin}{path}"));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move { req.send().await.expect("GET").status().as_u16() }
    };
    for path in ["/v1/runs", "/v1/summary", "/v1/signals", "/metrics"] {
        assert_eq!(get(path, None).await, 401, "{path} without a token");
        assert_eq!(get(path, Some("wrong")).await, 401, "{path} wrong token");
        assert_eq!(
            get(path, Some("ingest-secret")).await,
            401,
            "{path} receiver token"
        );
        assert_eq!(
            get(path, Some("admin-secret")).await,
            200,
            "{path} admin token"
        );
    }
    let unauthorized = client
        .get(format!("http://{admin}/v1/runs"))
        .send()
        .await
        .expect("GET");
    assert_eq!(
        unauthorized
            .headers()
            .get("www-authenticate")
            .map(|v| v.as_bytes()),
        Some(&b"Bearer"[..])
    );
    assert_eq!(get("/healthz", None).await, 200);
    assert_eq!(get("/readyz", None).await, 200);

    // OTLP/gRPC Export: receiver token.
    let channel = Channel::from_shared(format!("http://{}", server.grpc_addr))
        .expect("uri")
        .connect()
        .await
        .expect("connect");
    let export = |token: Option<&'static str>| {
        let mut client = TraceServiceClient::new(channel.clone());
        async move {
            let mut req = tonic::Request::new(one_span(3));
            if let Some(t) = token {
                req.metadata_mut().insert(
                    "authorization",
                    format!("Bearer {t}").parse().expect("value"),
                );
            }
            client.export(req).await.map(|_| ()).map_err(|s| s.code())
        }
    };
    assert_eq!(export(None).await, Err(tonic::Code::Unauthenticated));
    assert_eq!(
        export(Some("wrong")).await,
        Err(tonic::Code::Unauthenticated)
    );
    assert_eq!(
        export(Some("admin-secret")).await,
        Err(tonic::Code::Unauthenticated)
    );
    assert_eq!(export(Some("ingest-secret")).await, Ok(()));
    assert_eq!(server.receiver_stats.accepted_spans(), 1);

    // gRPC health is open.
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
    let status = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health without a token");
    assert_eq!(status.into_inner().status, 1, "SERVING");

    // Signals/Watch: admin token.
    let watch = |token: Option<&'static str>| {
        let mut client = SignalsClient::new(channel.clone());
        async move {
            let mut req = tonic::Request::new(WatchRequest::default());
            if let Some(t) = token {
                req.metadata_mut().insert(
                    "authorization",
                    format!("Bearer {t}").parse().expect("value"),
                );
            }
            client.watch(req).await.map(|_| ()).map_err(|s| s.code())
        }
    };
    assert_eq!(watch(None).await, Err(tonic::Code::Unauthenticated));
    assert_eq!(
        watch(Some("ingest-secret")).await,
        Err(tonic::Code::Unauthenticated)
    );
    assert_eq!(watch(Some("admin-secret")).await, Ok(()));

    // OTLP/HTTP: receiver token.
    let post = |token: Option<&str>| {
        let mut req = client
            .post(format!("http://{}/v1/traces", server.http_addr))
            .header("content-type", "application/x-protobuf")
            .body(one_span(4).encode_to_vec());
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        async move { req.send().await.expect("POST").status().as_u16() }
    };
    assert_eq!(post(None).await, 401);
    assert_eq!(post(Some("admin-secret")).await, 401);
    assert_eq!(post(Some("ingest-secret")).await, 200);
    assert_eq!(server.receiver_stats.accepted_spans(), 2);
    server.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn receiver_token_in_a_custom_header() {
    let mut config = test_config(None);
    config.receiver.auth.token = Some("k1".into());
    config.receiver.auth.header = "x-api-key".into();
    let server = started(config).await;
    let client = reqwest::Client::new();
    let post = |key: Option<&str>| {
        let mut req = client
            .post(format!("http://{}/v1/traces", server.http_addr))
            .header("content-type", "application/x-protobuf")
            .body(one_span(5).encode_to_vec());
        if let Some(k) = key {
            req = req.header("x-api-key", k);
        }
        async move { req.send().await.expect("POST").status().as_u16() }
    };
    assert_eq!(post(None).await, 401);
    assert_eq!(post(Some("k2")).await, 401);
    assert_eq!(post(Some("k1")).await, 200);
    server.shutdown().await.expect("shutdown");
}

/// A TLS OTLP downstream made with tonic's own TLS server (independent of loopwatch's).
async fn tls_downstream(
    pki: &Pki,
    require_client_cert: bool,
) -> (support::security::RecordingDownstream, SocketAddr) {
    let mut tls =
        tonic::transport::ServerTlsConfig::new().identity(tonic::transport::Identity::from_pem(
            Pki::read(&pki.server_cert),
            Pki::read(&pki.server_key),
        ));
    if require_client_cert {
        tls = tls.client_ca_root(tonic::transport::Certificate::from_pem(Pki::read(&pki.ca)));
    }
    support::security::RecordingDownstream::start_with(Some(tls)).await
}

#[tokio::test]
async fn downstream_over_tls_and_mtls() {
    let pki = Pki::new();
    let (downstream, addr) = tls_downstream(&pki, true).await;
    let mut config = test_config(None);
    config.exporter.endpoint = Some(format!("https://localhost:{}", addr.port()));
    config.exporter.tls = loopwatch::net::tls::ClientTlsConfig {
        ca_file: Some(pki.ca.clone()),
        cert_file: Some(pki.client_cert.clone()),
        key_file: Some(pki.client_key.clone()),
        server_name: None,
    };
    let server = started(config).await;
    support::server::export_all(server.grpc_addr, &[one_span(1), one_span(2)]).await;
    assert_eq!(
        downstream.wait_for_spans(2, Duration::from_secs(10)).await,
        2
    );
    server.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn https_endpoint_is_never_cleartext() {
    // A cleartext downstream behind an https:// endpoint: before the fix, loopwatch sent
    // spans to it in cleartext. Now the TLS handshake fails and nothing arrives.
    let (plain, addr) = support::security::RecordingDownstream::start_with(None).await;
    let mut config = test_config(None);
    config.exporter.endpoint = Some(format!("https://127.0.0.1:{}", addr.port()));
    config.exporter.timeout = Duration::from_millis(500);
    let server = started(config).await;
    support::server::export_all(server.grpc_addr, &[one_span(1)]).await;
    assert_eq!(plain.wait_for_spans(1, Duration::from_secs(2)).await, 0);
    // And a TLS downstream whose CA is not trusted (no ca_file: system roots) gets nothing.
    let pki = Pki::new();
    let (tls, tls_addr) = tls_downstream(&pki, false).await;
    let mut config = test_config(None);
    config.exporter.endpoint = Some(format!("https://localhost:{}", tls_addr.port()));
    config.exporter.timeout = Duration::from_millis(500);
    let untrusting = started(config).await;
    support::server::export_all(untrusting.grpc_addr, &[one_span(2)]).await;
    assert_eq!(tls.wait_for_spans(1, Duration::from_secs(2)).await, 0);
    // exporter.tls with an http:// endpoint is a configuration error, not ignored.
    let mut config = test_config(None);
    config.exporter.endpoint = Some(format!("http://{addr}"));
    config.exporter.tls.ca_file = Some(pki.ca.clone());
    let err = config
        .validate()
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("exporter.tls: set, but exporter.endpoint"),
        "{err}"
    );
    drop((server, untrusting));
}

#[tokio::test]
async fn grpc_refuses_a_non_grpc_content_type() {
    let server = started(test_config(None)).await;
    let tcp = tokio::net::TcpStream::connect(server.grpc_addr)
        .await
        .expect("connect");
    let (client, connection) = h2::client::handshake(tcp).await.expect("h2");
    tokio::spawn(connection);
    for content_type in ["application/json", "application/x-protobuf", "text/plain"] {
        let request = http::Request::post(format!(
            "http://{}/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            server.grpc_addr
        ))
        .header("content-type", content_type)
        .header("te", "trailers")
        .body(())
        .expect("request");
        let (response, mut body) = client
            .clone()
            .ready()
            .await
            .expect("ready")
            .send_request(request, false)
            .expect("send");
        body.send_data(one_span(1).encode_to_vec().into(), true)
            .expect("body");
        let response = response.await.expect("response");
        assert_eq!(response.status(), 415, "{content_type}");
    }
    assert_eq!(server.receiver_stats.accepted_spans(), 0);
    server.shutdown().await.expect("shutdown");
}

/// One HTTP/2 frame as read off the wire.
struct Frame {
    kind: u8,
    flags: u8,
    stream: u32,
    payload: Vec<u8>,
}

async fn read_frame(r: &mut (impl AsyncReadExt + Unpin)) -> Option<Frame> {
    let mut head = [0u8; 9];
    r.read_exact(&mut head).await.ok()?;
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let mut payload = vec![0; len];
    r.read_exact(&mut payload).await.ok()?;
    Some(Frame {
        kind: head[3],
        flags: head[4],
        stream: u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff,
        payload,
    })
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    out.extend_from_slice(&[kind, flags]);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// HPACK "literal header field without indexing, new name" (RFC 7541 §6.2.2), short strings.
fn hpack(headers: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in headers {
        assert!(name.len() < 127 && value.len() < 127);
        out.push(0);
        out.push(name.len() as u8);
        out.extend_from_slice(name.as_bytes());
        out.push(value.len() as u8);
        out.extend_from_slice(value.as_bytes());
    }
    out
}

/// What the server did with `streams` HEADERS frames that never end, sent on one
/// connection by a client that ignores SETTINGS_MAX_CONCURRENT_STREAMS.
#[derive(Debug)]
struct Flood {
    advertised_max_streams: Option<u32>,
    refused: Vec<u32>,
    goaway: bool,
}

async fn flood_streams(addr: SocketAddr, path: &str, content_type: &str, streams: u32) -> Flood {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let (mut rd, mut wr) = tcp.into_split();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(4, 0, 0, &[], &mut out);
    wr.write_all(&out).await.expect("preface");
    let mut advertised_max_streams = None;
    loop {
        let f = read_frame(&mut rd).await.expect("server SETTINGS");
        if f.kind == 4 && f.flags & 1 == 0 {
            for p in f.payload.chunks_exact(6) {
                if u16::from_be_bytes([p[0], p[1]]) == 3 {
                    advertised_max_streams = Some(u32::from_be_bytes([p[2], p[3], p[4], p[5]]));
                }
            }
            break;
        }
    }
    let reader = tokio::spawn(async move {
        let (mut refused, mut goaway) = (Vec::new(), false);
        while let Ok(Some(f)) =
            tokio::time::timeout(Duration::from_secs(3), read_frame(&mut rd)).await
        {
            match f.kind {
                3 if f.payload == 7u32.to_be_bytes() => refused.push(f.stream),
                7 => goaway = true,
                _ => {}
            }
        }
        (refused, goaway)
    });
    let mut out = Vec::new();
    frame(4, 1, 0, &[], &mut out); // SETTINGS ACK
    let block = hpack(&[
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "127.0.0.1"),
        ("content-type", content_type),
        ("te", "trailers"),
    ]);
    for i in 0..streams {
        frame(1, 4, 2 * i + 1, &block, &mut out); // HEADERS, END_HEADERS, no END_STREAM
        if out.len() > 64 * 1024 {
            if wr.write_all(&out).await.is_err() {
                break; // the server closed the connection
            }
            out.clear();
        }
    }
    let _ = wr.write_all(&out).await;
    let (refused, goaway) = reader.await.expect("reader");
    drop(wr);
    Flood {
        advertised_max_streams,
        refused,
        goaway,
    }
}

#[tokio::test]
async fn twenty_thousand_open_streams_are_capped() {
    let mut config = test_config(None);
    config.receiver.connections.max_concurrent_streams = 100;
    let server = started(config).await;
    for (addr, path, content_type) in [
        (
            server.grpc_addr,
            "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            "application/grpc",
        ),
        (server.http_addr, "/v1/traces", "application/x-protobuf"),
    ] {
        let flood = flood_streams(addr, path, content_type, 20_000).await;
        assert_eq!(flood.advertised_max_streams, Some(100), "{path}");
        // Streams 1..=100 (ids 1..=199) are served; from the 101st (id 201) on, every
        // stream the server read is refused, until it gives up on the connection.
        assert_eq!(
            flood.refused.first(),
            Some(&201),
            "{path}: {:?}",
            &flood.refused[..flood.refused.len().min(5)]
        );
        assert!(
            flood.refused.windows(2).all(|w| w[1] == w[0] + 2),
            "{path}: contiguous refusals"
        );
        assert!(
            flood.goaway || flood.refused.len() == 20_000 - 100,
            "{path}: {} refused, no GOAWAY",
            flood.refused.len()
        );
    }
    // The listeners still serve new connections.
    support::server::export_all(server.grpc_addr, &[one_span(1)]).await;
    assert_eq!(server.receiver_stats.accepted_spans(), 1);
    server.shutdown().await.expect("shutdown");
}

/// Sends one OTLP/HTTP request over a raw HTTP/1.1 connection; the status line's code.
async fn http1_post(tcp: &mut tokio::net::TcpStream, within: Duration) -> Option<String> {
    let body = one_span(6).encode_to_vec();
    let head = format!(
        "POST /v1/traces HTTP/1.1\r\nhost: x\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await.ok()?;
    tcp.write_all(&body).await.ok()?;
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(within, tcp.read(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
    text.split(' ').nth(1).map(str::to_owned)
}

#[tokio::test]
async fn connection_limit_per_listener_keeps_admin_up() {
    let mut config = test_config(None);
    config.receiver.connections.max_connections = 2;
    let server = started(config).await;
    let http = server.http_addr;
    let mut first = tokio::net::TcpStream::connect(http).await.expect("1st");
    let second = tokio::net::TcpStream::connect(http).await.expect("2nd");
    assert_eq!(
        http1_post(&mut first, Duration::from_secs(5))
            .await
            .as_deref(),
        Some("200")
    );
    // The third waits in the backlog: no answer while two connections are open ...
    let mut third = tokio::net::TcpStream::connect(http)
        .await
        .expect("3rd (backlog)");
    assert_eq!(
        http1_post(&mut third, Duration::from_millis(700)).await,
        None
    );
    // ... while the admin listener, with its own limit, answers.
    let (status, _) = support::server::get(server.admin_addr.expect("admin"), "/healthz").await;
    assert_eq!(status, 200);
    // Closing one lets the third in; its request was waiting and is answered.
    drop(second);
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(Duration::from_secs(5), third.read(&mut buf))
        .await
        .expect("served after a slot freed")
        .expect("read");
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    assert_eq!(server.receiver_stats.accepted_spans(), 2);
    server.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn idle_and_slow_header_connections_are_closed() {
    let mut config = test_config(None);
    config.receiver.connections.idle_timeout = Duration::from_secs(1);
    config.receiver.connections.header_read_timeout = Duration::from_secs(1);
    let server = started(config).await;
    let closed_within = |mut tcp: tokio::net::TcpStream, limit: Duration| async move {
        let mut buf = vec![0u8; 256];
        let started = std::time::Instant::now();
        loop {
            match tokio::time::timeout(limit, tcp.read(&mut buf)).await {
                Err(_) => return None,
                Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
                Ok(Ok(_)) => continue, // e.g. the server's SETTINGS or a 408
            }
        }
    };
    // Silent connections on both receivers.
    for addr in [server.grpc_addr, server.http_addr] {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let closed = closed_within(tcp, Duration::from_secs(5)).await;
        assert!(
            closed.is_some_and(|d| d >= Duration::from_millis(900)),
            "{addr}: {closed:?}"
        );
    }
    // Headers that never finish (slowloris), with a byte now and then.
    let mut tcp = tokio::net::TcpStream::connect(server.http_addr)
        .await
        .expect("connect");
    tcp.write_all(b"POST /v1/traces HTTP/1.1\r\n")
        .await
        .expect("write");
    let dribble = tokio::spawn(async move {
        for _ in 0..8 {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if tcp.write_all(b"x").await.is_err() {
                return true;
            }
        }
        let mut buf = [0u8; 64];
        matches!(
            tokio::time::timeout(Duration::from_secs(1), tcp.read(&mut buf)).await,
            Ok(Ok(0)) | Ok(Err(_))
        )
    });
    assert!(
        dribble.await.expect("dribble"),
        "a slow header kept the connection open"
    );
    server.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn certificates_reload_when_the_files_change() {
    let old = Pki::new();
    let new = Pki::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    std::fs::copy(&old.server_cert, &cert).expect("copy");
    std::fs::copy(&old.server_key, &key).expect("copy");
    let mut config = test_config(None);
    config.receiver.tls = loopwatch::net::tls::ServerTlsConfig {
        cert_file: Some(cert.clone()),
        key_file: Some(key.clone()),
        client_ca_file: None,
        reload_interval: Duration::from_millis(100),
    };
    let server = started(config).await;
    let addr = server.grpc_addr;
    assert_eq!(export_tls(addr, old.tonic_client(None)).await, Ok(()));
    assert!(export_tls(addr, new.tonic_client(None)).await.is_err());
    // Rotate as a Secret update would: new key and certificate.
    std::fs::copy(&new.server_key, &key).expect("copy");
    std::fs::copy(&new.server_cert, &cert).expect("copy");
    let mut rotated = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if export_tls(addr, new.tonic_client(None)).await.is_ok() {
            rotated = true;
            break;
        }
    }
    assert!(rotated, "the new certificate was never served");
    assert!(export_tls(addr, old.tonic_client(None)).await.is_err());
    // A broken file does not take the listener down: the last good certificate stays.
    std::fs::write(&cert, "not a certificate").expect("write");
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(export_tls(addr, new.tonic_client(None)).await, Ok(()));
    server.shutdown().await.expect("shutdown");
}

#[test]
fn check_config_reads_security_keys_from_the_environment() {
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml");
    let run = |vars: &[(&str, &str)]| {
        let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_loopwatch"));
        command
            .arg("check-config")
            .arg(&example)
            .env_remove("RUST_LOG");
        for (k, v) in vars {
            command.env(k, v);
        }
        let out = command.output().expect("run loopwatch");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert!(run(&[]).0);
    let (ok, stderr) = run(&[("LOOPWATCH_RECEIVER__CONNECTIONS__MAX_CONNECTIONS", "0")]);
    assert!(
        !ok && stderr.contains("receiver.connections.max_connections: must be at least 1"),
        "{stderr}"
    );
    let (ok, stderr) = run(&[(
        "LOOPWATCH_ADMIN__AUTH_TOKEN_FILE",
        "/nonexistent/admin-token",
    )]);
    assert!(
        !ok && stderr.contains("admin.auth_token_file: /nonexistent/admin-token"),
        "{stderr}"
    );
    let (ok, stderr) = run(&[("LOOPWATCH_RECEIVER__TLS__CERT_FILE", "/nonexistent/tls.crt")]);
    assert!(
        !ok && stderr.contains("receiver.tls: cert_file needs key_file"),
        "{stderr}"
    );
}

/// A TLS-terminating proxy in front of `upstream` (for servers that do not speak TLS
/// themselves, like the local Redis), with the PKI's server certificate; built with
/// rustls directly, not with loopwatch's TLS code.
async fn tls_proxy(pki: &Pki, upstream: &'static str) -> SocketAddr {
    use rustls_pki_types::pem::PemObject;
    let chain = rustls_pki_types::CertificateDer::pem_file_iter(&pki.server_cert)
        .expect("cert")
        .collect::<Result<Vec<_>, _>>()
        .expect("cert");
    let key = rustls_pki_types::PrivateKeyDer::from_pem_file(&pki.server_key).expect("key");
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("versions")
    .with_no_client_auth()
    .with_single_cert(chain, key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                }
            });
        }
    });
    addr
}

#[tokio::test]
async fn rediss_through_a_tls_terminating_proxy() {
    use crate::support::signals::{
        fast_retry, service_up, signal, unique, Action, REDIS_ADDR, REDIS_URL,
    };
    use futures::StreamExt;
    if !service_up(REDIS_ADDR).await {
        return;
    }
    let pki = Pki::new();
    let proxy = tls_proxy(&pki, REDIS_ADDR).await;
    let channel = unique("loopwatch:test:tls");
    let key_prefix = format!("{}:", unique("loopwatch:test:tlskill"));
    let client = redis::Client::open(REDIS_URL).expect("redis url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub.subscribe(&channel).await.expect("subscribe");

    let mut config = loopwatch::signals::SignalsConfig::default();
    config.redis.url = Some(format!("rediss://127.0.0.1:{}", proxy.port()));
    config.redis.channel = channel.clone();
    config.redis.key_prefix = key_prefix.clone();
    config.redis.tls.ca_file = Some(pki.ca.clone());
    config.retry = fast_retry();
    let hub = loopwatch::signals::SignalHub::start(config);
    let kill = signal(&unique("run"), 1, Action::Kill, Some("checkout"));
    hub.publish(kill.clone());
    let mut messages = pubsub.on_message();
    let msg = tokio::time::timeout(Duration::from_secs(10), messages.next())
        .await
        .expect("signal over rediss:// within 10s")
        .expect("pubsub open");
    let payload: String = msg.get_payload().expect("payload");
    assert_eq!(payload, serde_json::to_string(&kill).expect("json"));
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let flag: Option<String> = redis::cmd("GET")
        .arg(format!("{key_prefix}{}", kill.trace_id))
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(flag, Some(payload));
    hub.shutdown(Duration::from_secs(2)).await;

    // rediss:// without the CA (built-in roots): the proxy's certificate is not trusted,
    // nothing is published.
    let mut config = loopwatch::signals::SignalsConfig::default();
    config.redis.url = Some(format!("rediss://127.0.0.1:{}", proxy.port()));
    config.redis.channel = channel.clone();
    config.redis.key_prefix = key_prefix;
    config.retry = fast_retry();
    let untrusting = loopwatch::signals::SignalHub::start(config);
    untrusting.publish(signal(&unique("run"), 2, Action::Kill, Some("checkout")));
    assert!(
        tokio::time::timeout(Duration::from_secs(2), messages.next())
            .await
            .is_err(),
        "published through an untrusted certificate"
    );
    untrusting.shutdown(Duration::from_millis(200)).await;
}

#[tokio::test]
async fn nats_over_tls_through_a_tls_terminating_proxy() {
    use crate::support::signals::{
        fast_retry, service_up, signal, unique, Action, NATS_ADDR, NATS_URL,
    };
    use futures::StreamExt;
    if !service_up(NATS_ADDR).await {
        return;
    }
    let pki = Pki::new();
    let proxy = tls_proxy(&pki, NATS_ADDR).await;
    let prefix = unique("lwtls");
    let plain = async_nats::connect(NATS_URL).await.expect("nats");
    let mut sub = plain
        .subscribe(format!("{prefix}.>"))
        .await
        .expect("subscribe");
    plain.flush().await.expect("flush");

    let mut config = loopwatch::signals::SignalsConfig::default();
    config.nats.url = Some(format!("tls://127.0.0.1:{}", proxy.port()));
    config.nats.subject_prefix = prefix.clone();
    config.nats.jetstream = false;
    config.nats.tls.ca_file = Some(pki.ca.clone());
    config.nats.tls_first = true;
    config.retry = fast_retry();
    let hub = loopwatch::signals::SignalHub::start(config);
    let kill = signal(&unique("run"), 1, Action::Kill, Some("checkout"));
    hub.publish(kill.clone());
    let msg = tokio::time::timeout(Duration::from_secs(10), sub.next())
        .await
        .expect("signal over NATS TLS within 10s")
        .expect("subscription open");
    assert_eq!(msg.subject.as_str(), format!("{prefix}.kill.checkout"));
    assert_eq!(msg.payload, serde_json::to_vec(&kill).expect("json"));
    hub.shutdown(Duration::from_secs(2)).await;

    // Without the CA the proxy's certificate is not trusted: nothing is published.
    let mut config = loopwatch::signals::SignalsConfig::default();
    config.nats.url = Some(format!("tls://127.0.0.1:{}", proxy.port()));
    config.nats.subject_prefix = prefix;
    config.nats.jetstream = false;
    config.nats.tls_first = true;
    config.retry = fast_retry();
    let untrusting = loopwatch::signals::SignalHub::start(config);
    untrusting.publish(signal(&unique("run"), 2, Action::Kill, Some("checkout")));
    assert!(
        tokio::time::timeout(Duration::from_secs(2), sub.next())
            .await
            .is_err(),
        "published through an untrusted certificate"
    );
    untrusting.shutdown(Duration::from_millis(200)).await;
}
