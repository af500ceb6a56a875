//! The pre-execution check and approvals on a real `loopwatch serve`: `POST /v1/check`
//! and gRPC `loopwatch.v1.Guard/Check` give the same answer; a `require_approval` profile
//! signals, and `approve` / `deny` answer it.

use crate::support;

use std::time::Duration;

use crate::support::serve_process::{serve_command, spawn_until_listening};
use crate::support::spans::{kv, request_of, s};
use loopwatch::guard::grpc::proto::CheckRequest;
use loopwatch::guard::grpc::GuardClient;
use loopwatch::signals::grpc::proto::WatchRequest;
use loopwatch::signals::grpc::SignalsClient;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{json, Value as Json};

const TRACE_HEX: &str = "0a0b0c0d0e0f10111213141516171819";

fn call(i: u8) -> Span {
    Span {
        trace_id: hex::decode(TRACE_HEX).unwrap(),
        span_id: vec![i + 1; 8],
        name: "execute_tool read_file".into(),
        start_time_unix_nano: 1_700_000_000_000_000_000 + u64::from(i) * 1_000_000,
        end_time_unix_nano: 1_700_000_000_000_000_000 + u64::from(i) * 1_000_000 + 500,
        attributes: vec![
            kv("gen_ai.operation.name", s("execute_tool")),
            kv("gen_ai.tool.name", s("read_file")),
            kv("gen_ai.tool.call.arguments", s(r#"{"path":"a.txt"}"#)),
            kv("gen_ai.tool.call.result", s("No such file")),
        ],
        ..Default::default()
    }
}

struct Server {
    child: std::process::Child,
    grpc: String,
    admin: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A server with `env` set, that has received `calls` identical calls of one run.
async fn server_after(calls: u8, env: &[(&str, &str)]) -> Server {
    let mut command = serve_command(None);
    for (k, v) in env {
        command.env(k, v);
    }
    let (child, fields, _lines) = spawn_until_listening(command);
    let server = Server {
        child,
        grpc: fields["grpc"].as_str().unwrap().to_owned(),
        admin: fields["admin"].as_str().unwrap().to_owned(),
    };
    let mut otlp = TraceServiceClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    if calls > 0 {
        otlp.export(request_of((0..calls).map(call).collect()))
            .await
            .unwrap();
    }
    server
}

async fn post(admin: &str, path: &str, body: Json) -> (u16, Json) {
    let response = reqwest::Client::new()
        .post(format!("http://{admin}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

#[tokio::test]
async fn http_and_grpc_checks_answer_the_same_and_change_nothing() {
    let server = server_after(2, &[]).await;
    let body =
        json!({"trace_id": TRACE_HEX, "tool_name": "read_file", "arguments": {"path": "a.txt"}});
    let (status, answer) = post(&server.admin, "/v1/check", body.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["decision"], "warn");
    assert_eq!(answer["pattern"], "repeated_result");
    assert_eq!(answer["count"], 3);
    assert_eq!(answer["profile"], "nudge");
    assert_eq!(answer["known_run"], true);
    assert!(answer["message"].as_str().unwrap().contains("read_file"));

    let mut guard = GuardClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    let grpc = guard
        .check(CheckRequest {
            trace_id: TRACE_HEX.into(),
            tool_name: "read_file".into(),
            arguments: r#"{"path": "a.txt"}"#.into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (grpc.decision.as_str(), grpc.pattern.as_str(), grpc.count),
        ("warn", "repeated_result", 3)
    );
    assert_eq!(grpc.message, answer["message"].as_str().unwrap());

    // Nothing changed: the run still has two calls and no loop.
    let runs: Json = reqwest::get(format!("http://{}/v1/runs", server.admin))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let run = &runs["data"][0];
    assert_eq!(run["tool_calls"], 2, "{runs}");
    assert_eq!(
        post(&server.admin, "/v1/check", body).await.1["decision"],
        "warn"
    );

    // An unknown run is allowed; a request without a tool is a 400 / INVALID_ARGUMENT.
    let (_, unknown) = post(
        &server.admin,
        "/v1/check",
        json!({"trace_id": "ffffffffffffffffffffffffffffffff", "tool_name": "x"}),
    )
    .await;
    assert_eq!(
        (unknown["decision"].clone(), unknown["known_run"].clone()),
        (json!("allow"), json!(false))
    );
    let (status, error) = post(&server.admin, "/v1/check", json!({"trace_id": TRACE_HEX})).await;
    assert_eq!(status, 400, "{error}");
    let refused = guard
        .check(CheckRequest {
            trace_id: TRACE_HEX.into(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    let (status, _) = post(&server.admin, "/v1/runs/nope/approve", json!({})).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_require_approval_profile_pauses_and_deny_kills() {
    let env = [("LOOPWATCH_PROFILES__STOP__ACTION", "require_approval")];
    let server = server_after(0, &env).await;
    let mut signals = SignalsClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    let mut stream = signals
        .watch(WatchRequest {
            trace_id: TRACE_HEX.into(),
            action: "require_approval".into(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    let mut otlp = TraceServiceClient::connect(format!("http://{}", server.grpc))
        .await
        .unwrap();
    otlp.export(request_of((0..6).map(call).collect()))
        .await
        .unwrap();
    let paused = tokio::time::timeout(Duration::from_secs(10), stream.message())
        .await
        .expect("a require_approval signal within 10 s")
        .unwrap()
        .unwrap();
    assert_eq!(paused.action, "require_approval");
    assert_eq!(
        (paused.profile.as_str(), paused.severity.as_str()),
        ("stop", "kill")
    );
    assert!(paused.message.starts_with("loopwatch paused this run"));

    let (status, denied) = post(
        &server.admin,
        &format!("/v1/runs/{TRACE_HEX}/deny"),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{denied}");
    let kills: Json = reqwest::get(format!(
        "http://{}/v1/signals?trace_id={TRACE_HEX}&action=kill",
        server.admin
    ))
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let kills = kills["data"].as_array().unwrap();
    assert_eq!(kills.len(), 1, "{kills:?}");
    assert_eq!(kills[0]["id"], denied["signal_id"]);
    assert_ne!(kills[0]["id"].as_str(), Some(paused.id.as_str()));

    let (status, approved) = post(
        &server.admin,
        &format!("/v1/runs/{TRACE_HEX}/approve"),
        json!({}),
    )
    .await;
    assert_eq!(status, 200, "{approved}");
    let (_, answer) = post(
        &server.admin,
        "/v1/check",
        json!({"trace_id": TRACE_HEX, "tool_name": "read_file", "arguments": {"path": "a.txt"}}),
    )
    .await;
    assert_eq!(answer["decision"], "allow", "{answer}");
    let metrics = support::serve_process::scrape(&server.admin).await;
    for decision in ["approve", "deny"] {
        assert!(
            metrics.contains(&format!(
                "loopwatch_approvals_total{{decision=\"{decision}\"}} 1"
            )),
            "{metrics}"
        );
    }
}

/// A Check request that is not a `CheckRequest` is the client's error: `INVALID_ARGUMENT`
/// (tonic-prost's codec answers `INTERNAL`, a server fault; `net::grpc_codec`).
#[tokio::test]
async fn a_check_that_does_not_decode_is_invalid_argument() {
    let server = server_after(0, &[]).await;
    let channel = tonic::transport::Channel::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    // Field 1 (`trace_id`, a string) sent as a varint; then a string of invalid UTF-8.
    for body in [&[0x08u8, 0x05][..], &[0x0a, 0x02, 0xff, 0xfe]] {
        let mut grpc = tonic::client::Grpc::new(channel.clone());
        grpc.ready().await.unwrap();
        let status = grpc
            .unary(
                tonic::Request::new(loopwatch::forward::ExportBody::from(
                    bytes::Bytes::copy_from_slice(body),
                )),
                http::uri::PathAndQuery::from_static("/loopwatch.v1.Guard/Check"),
                loopwatch::forward::RawBytesCodec,
            )
            .await
            .map(|_| ())
            .expect_err("a malformed Check is refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
        assert!(
            status
                .message()
                .contains("not a valid CheckRequest message"),
            "{}",
            status.message()
        );
    }
}
