//! OTLP/HTTP receiver against a real HTTP client on a real port.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::support::receiver::{
    big_request, corpus, decode_pb, deflate, gzip, read, zstd, RecordingSink,
};
use loopwatch::receiver::decode::decode_json;
use loopwatch::receiver::rpc_status::RpcStatus;
use loopwatch::receiver::{serve_http, ReceiverOptions, ReceiverStats, RejectReason};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;
use tokio::sync::oneshot;

struct Server {
    url: String,
    sink: Arc<RecordingSink>,
    stats: Arc<ReceiverStats>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
    addr: SocketAddr,
}

async fn start() -> Server {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap_or_else(|e| panic!("bind: {e}"));
    let addr = listener.local_addr().unwrap_or_else(|e| panic!("{e}"));
    let sink = RecordingSink::new();
    let stats = Arc::new(ReceiverStats::default());
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_http(
        listener,
        sink.clone(),
        ReceiverOptions::default(),
        Arc::clone(&stats),
        async {
            let _ = stopped.await;
        },
    ));
    Server {
        url: format!("http://{addr}/v1/traces"),
        sink,
        stats,
        stop: Some(stop),
        task,
        addr,
    }
}

async fn post(
    url: &str,
    content_type: &str,
    encoding: Option<&str>,
    body: Vec<u8>,
) -> reqwest::Response {
    let mut req = reqwest::Client::new()
        .post(url)
        .header("content-type", content_type)
        .body(body);
    if let Some(enc) = encoding {
        req = req.header("content-encoding", enc);
    }
    req.send().await.unwrap_or_else(|e| panic!("POST: {e}"))
}

fn encode(body: &[u8], encoding: Option<&str>) -> Vec<u8> {
    match encoding {
        Some("gzip") => gzip(body),
        Some("zstd") => zstd(body),
        Some("deflate") => deflate(body),
        _ => body.to_vec(),
    }
}

async fn json_error(resp: reqwest::Response) -> (u16, serde_json::Value) {
    let status = resp.status().as_u16();
    let body = resp.bytes().await.unwrap_or_default();
    let v: serde_json::Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("error body is not JSON ({e}): {body:?}"));
    (status, v)
}

#[tokio::test]
async fn corpus_protobuf_and_json_with_every_encoding() {
    let server = start().await;
    let encodings = [None, Some("gzip"), Some("zstd"), Some("deflate")];
    let mut sent = 0;
    for pb_file in corpus("pb") {
        let original = read(&pb_file);
        let expected = decode_pb(&original);
        let json_file = pb_file.with_extension("json");
        let json = read(&json_file);
        assert_eq!(
            decode_json(&json).unwrap_or_else(|e| panic!("{}: {e}", json_file.display())),
            expected,
            "{}: JSON and protobuf decode differently",
            json_file.display()
        );
        for enc in encodings {
            let resp = post(
                &server.url,
                "application/x-protobuf",
                enc,
                encode(&original, enc),
            )
            .await;
            assert_eq!(resp.status(), 200, "{} {enc:?}", pb_file.display());
            assert_eq!(
                resp.headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok()),
                Some("application/x-protobuf")
            );
            let body = resp.bytes().await.unwrap_or_default();
            assert_eq!(
                ExportTraceServiceResponse::decode(body.as_ref()).ok(),
                Some(ExportTraceServiceResponse::default())
            );

            let resp = post(&server.url, "application/json", enc, encode(&json, enc)).await;
            assert_eq!(resp.status(), 200, "{} {enc:?}", json_file.display());
            assert_eq!(
                resp.headers()
                    .get("content-type")
                    .and_then(|v| v.to_str().ok()),
                Some("application/json")
            );
            let body: serde_json::Value = resp.json().await.unwrap_or_default();
            assert!(body.is_object(), "{body}");

            let got = server.sink.take();
            assert_eq!(got.len(), 2);
            assert_eq!(got[0].to_decoded().unwrap(), expected);
            assert_eq!(
                got[0].raw_protobuf().map(|b| b.as_ref()),
                Some(original.as_slice())
            );
            assert_eq!(got[1].to_decoded().unwrap(), expected);
            assert_eq!(got[1].raw_protobuf(), None);
            sent += 2;
        }
    }
    assert_eq!(server.stats.accepted_requests(), sent);
}

#[tokio::test]
async fn malformed_bodies_are_400() {
    let server = start().await;
    let original = read(&corpus("pb")[0]);
    let resp = post(
        &server.url,
        "application/x-protobuf",
        None,
        original[..original.len() / 2].to_vec(),
    )
    .await;
    assert_eq!(resp.status(), 400);
    let body = resp.bytes().await.unwrap_or_default();
    let status = RpcStatus::decode(body.as_ref()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(status.code, 3);
    assert!(
        status.message.starts_with("invalid OTLP protobuf"),
        "{}",
        status.message
    );

    let resp = post(
        &server.url,
        "application/json",
        None,
        b"{\"resourceSpans\": [".to_vec(),
    )
    .await;
    let (code, v) = json_error(resp).await;
    assert_eq!(code, 400);
    assert_eq!(v["code"], 3);

    let resp = post(
        &server.url,
        "application/x-protobuf",
        Some("gzip"),
        b"not gzip".to_vec(),
    )
    .await;
    assert_eq!(resp.status(), 400);
    assert!(server.sink.take().is_empty());
    assert_eq!(
        server.stats.rejected_requests(RejectReason::InvalidPayload),
        3
    );
}

/// A span whose id is base64 is left out alone (issue 31 item 5): the request is accepted
/// with the others, and `partial_success` names the field and the fix.
#[tokio::test]
async fn a_base64_id_leaves_its_span_out_naming_the_field() {
    let server = start().await;
    let json = read(&corpus("json")[0]);
    let mut v: serde_json::Value = serde_json::from_slice(&json).unwrap_or_else(|e| panic!("{e}"));
    let spans = v["resourceSpans"][0]["scopeSpans"][0]["spans"]
        .as_array()
        .map_or(0, Vec::len);
    assert!(spans >= 2);
    // base64 of bytes 0..8: what a protobuf-JSON mapper that ignores OTLP/JSON would send
    v["resourceSpans"][0]["scopeSpans"][0]["spans"][1]["spanId"] = "AAECAwQFBgc=".into();
    let resp = post(
        &server.url,
        "application/json",
        None,
        v.to_string().into_bytes(),
    )
    .await;
    let (code, body) = json_error(resp).await;
    assert_eq!(code, 200, "{body}");
    let partial = &body["partialSuccess"];
    let rejected = partial["rejectedSpans"]
        .as_i64()
        .or_else(|| partial["rejectedSpans"].as_str()?.parse().ok());
    assert_eq!(rejected, Some(1), "{body}");
    let message = partial["errorMessage"].as_str().unwrap_or_default();
    assert!(
        message.contains("resourceSpans[0].scopeSpans[0].spans[1].spanId"),
        "{message}"
    );
    assert!(message.contains("hex"), "{message}");
    let got = server.sink.take();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].span_count(), spans as u64 - 1);
}

#[tokio::test]
async fn oversize_is_413_and_server_keeps_serving() {
    let server = start().await;
    let big = big_request(20 * 1024 * 1024).encode_to_vec();
    // compressed: small on the wire, over the limit once decompressed
    let resp = post(
        &server.url,
        "application/x-protobuf",
        Some("gzip"),
        gzip(&big),
    )
    .await;
    let status = resp.status();
    let body = resp.bytes().await.unwrap_or_default();
    assert_eq!(status, 413);
    let rpc = RpcStatus::decode(body.as_ref()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rpc.code, 8);
    assert!(rpc.message.contains("16777216"), "{}", rpc.message);
    // uncompressed 20 MiB body
    let result = reqwest::Client::new()
        .post(&server.url)
        .header("content-type", "application/x-protobuf")
        .body(big)
        .send()
        .await;
    match result {
        Ok(resp) => assert_eq!(resp.status(), 413),
        // the server may close the connection before the client finished writing
        Err(e) => assert!(e.is_request() || e.is_body(), "{e}"),
    }
    assert_eq!(server.stats.rejected_requests(RejectReason::TooLarge), 2);
    let ok = post(
        &server.url,
        "application/x-protobuf",
        None,
        read(&corpus("pb")[0]),
    )
    .await;
    assert_eq!(ok.status(), 200);
    assert_eq!(server.sink.take().len(), 1);
}

#[tokio::test]
async fn unsupported_media_and_encoding_are_415() {
    let server = start().await;
    let pb = read(&corpus("pb")[0]);
    let resp = post(&server.url, "text/plain", None, pb.clone()).await;
    let (code, body) = json_error(resp).await;
    assert_eq!(code, 415);
    assert_eq!(
        body["message"],
        "unsupported content type `text/plain`; accepted: application/x-protobuf, application/json"
    );
    let resp = post(&server.url, "application/json", Some("br"), pb).await;
    let (code, body) = json_error(resp).await;
    assert_eq!(code, 415);
    assert_eq!(
        body["message"],
        "unsupported compression `br`; accepted encodings: identity, gzip, zstd, deflate"
    );
    assert_eq!(
        server
            .stats
            .rejected_requests(RejectReason::UnsupportedContentType),
        1
    );
    assert_eq!(
        server
            .stats
            .rejected_requests(RejectReason::UnsupportedEncoding),
        1
    );
}

#[tokio::test]
async fn refused_is_503_with_retry_after_then_graceful_shutdown() {
    let mut server = start().await;
    let json = read(&corpus("json")[0]);
    server.sink.refuse_queue_full();
    let resp = post(&server.url, "application/json", None, json.clone()).await;
    assert_eq!(resp.status(), 503);
    assert_eq!(
        resp.headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    let (_, body) = json_error(resp).await;
    assert_eq!(body["code"], 14);
    assert_eq!(body["message"], "forward queue is full; retry later");
    server.sink.refuse_shutting_down();
    let resp = post(
        &server.url,
        "application/x-protobuf",
        None,
        read(&corpus("pb")[0]),
    )
    .await;
    assert_eq!(resp.status(), 503);
    assert!(resp.headers().contains_key("retry-after"));
    assert_eq!(server.stats.rejected_requests(RejectReason::QueueFull), 1);
    assert!(server.stats.rejected_spans(RejectReason::QueueFull) > 0);
    assert_eq!(
        server.stats.rejected_requests(RejectReason::ShuttingDown),
        1
    );

    if let Some(stop) = server.stop.take() {
        let _ = stop.send(());
    }
    let result = tokio::time::timeout(Duration::from_secs(5), &mut server.task)
        .await
        .unwrap_or_else(|_| panic!("server did not stop"));
    assert!(matches!(result, Ok(Ok(()))), "{result:?}");
    assert!(tokio::net::TcpStream::connect(server.addr).await.is_err());
}
