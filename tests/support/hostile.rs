//! The attack suite's hostile clients (issue 31): gRPC streams and HTTP/1.1 bodies that
//! stall, idle connections, attributes nested past the decoder's limit, and liveness
//! probes timed while they go on.

use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue, KeyValueList};
use tokio::io::AsyncWriteExt;

/// Opens `streams` gRPC Export streams on one HTTP/2 connection to `grpc`, each sending
/// the 5-byte message prefix of a 1000-byte message and one byte of it, then stalling;
/// returns the tasks that wait for each stream's `grpc-status`.
pub async fn stalled_streams(
    grpc: &str,
    streams: usize,
) -> Vec<tokio::task::JoinHandle<Option<i32>>> {
    let tcp = tokio::net::TcpStream::connect(grpc).await.unwrap();
    let (client, connection): (h2::client::SendRequest<bytes::Bytes>, _) =
        h2::client::Builder::new()
            .initial_window_size(1 << 20)
            .handshake(tcp)
            .await
            .expect("h2");
    tokio::spawn(connection);
    let mut waits = Vec::new();
    for _ in 0..streams {
        let request = http::Request::post(format!(
            "http://{grpc}/opentelemetry.proto.collector.trace.v1.TraceService/Export"
        ))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
        let mut client = client.clone().ready().await.expect("ready");
        let (response, mut body) = client.send_request(request, false).expect("send");
        let mut prefix = vec![0u8];
        prefix.extend_from_slice(&1000u32.to_be_bytes());
        prefix.push(0x0a);
        body.send_data(prefix.into(), false).expect("one byte");
        waits.push(tokio::spawn(async move {
            let _keep_open = body;
            let response = response.await.ok()?;
            let status = |map: &http::HeaderMap| {
                map.get("grpc-status")
                    .and_then(|v| v.to_str().ok()?.parse::<i32>().ok())
            };
            if let Some(code) = status(response.headers()) {
                return Some(code);
            }
            let mut body = response.into_body();
            while body.data().await.is_some() {}
            status(&body.trailers().await.ok()??)
        }));
    }
    waits
}

/// Opens `n` HTTP/1.1 connections to the OTLP/HTTP port `http`, each sending the head of
/// a 1000-byte protobuf POST and one byte of its body, then stalling.
pub async fn stalled_http(http: &str, n: usize) -> Vec<tokio::net::TcpStream> {
    let mut stalled = Vec::new();
    for _ in 0..n {
        let mut tcp = tokio::net::TcpStream::connect(http).await.unwrap();
        let head = format!(
            "POST /v1/traces HTTP/1.1\r\nhost: {http}\r\ncontent-type: application/x-protobuf\r\ncontent-length: 1000\r\n\r\n\x0a"
        );
        tcp.write_all(head.as_bytes()).await.unwrap();
        stalled.push(tcp);
    }
    stalled
}

/// The status code a stalled HTTP/1.1 request (from [`stalled_http`]) was answered with
/// within `timeout`, `None` when none came.
pub async fn http_status(mut tcp: tokio::net::TcpStream, timeout: Duration) -> Option<String> {
    let mut answer = vec![0u8; 12];
    let read = tokio::time::timeout(
        timeout,
        tokio::io::AsyncReadExt::read_exact(&mut tcp, &mut answer),
    )
    .await;
    read.ok()
        .and_then(Result::ok)
        .map(|_| String::from_utf8_lossy(&answer[9..12]).into_owned())
}

/// `GET /healthz` on `admin`: how long it took (fails after 10 s).
pub async fn healthz_in(admin: &str) -> Duration {
    let started = Instant::now();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();
    let response = client
        .get(format!("http://{admin}/healthz"))
        .send()
        .await
        .expect("/healthz answers");
    assert_eq!(response.status(), 200);
    started.elapsed()
}

/// An attribute `key` whose value is a kvlist holding a kvlist … `depth` levels down, a
/// string at the bottom: past the protobuf recursion limit of 100 (prost, the Collector)
/// when `depth` is 48 (each level is two messages).
pub fn deep_attribute(key: &str, depth: usize) -> KeyValue {
    let mut value = AnyValue {
        value: Some(Value::StringValue("leaf".into())),
    };
    for _ in 0..depth {
        value = AnyValue {
            value: Some(Value::KvlistValue(KeyValueList {
                values: vec![KeyValue {
                    key: "k".into(),
                    value: Some(value),
                    ..KeyValue::default()
                }],
            })),
        };
    }
    KeyValue {
        key: key.into(),
        value: Some(value),
        ..KeyValue::default()
    }
}
