//! A late span re-orders a run so that the loop completes on a span forwarded with an
//! earlier request: loopwatch forwards a synthetic `loop.detected` child span of it to a
//! real downstream (DESIGN §5), once, and counts it in `/metrics`.

use crate::support;

use std::time::Duration;

use crate::support::downstream::Downstream;
use crate::support::spans::{kv, s};
use loopwatch::config::Config;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

const TRACE: [u8; 16] = [0x5a; 16];

/// Call `n` (1-based) of five identical `read_file` calls without captured results (so
/// only nudge's repeated_call, at 5, can fire, with severity warn).
fn call(n: u8) -> Span {
    let start = 1_700_000_000_000_000_000 + u64::from(n) * 1_000_000;
    Span {
        trace_id: TRACE.to_vec(),
        span_id: vec![0, 0, 0, 0, 0, 0, 0, n],
        parent_span_id: vec![0, 0, 0, 0, 0, 0, 0, 0xaa],
        name: "execute_tool read_file".into(),
        kind: 1,
        start_time_unix_nano: start,
        end_time_unix_nano: start + 500_000,
        attributes: vec![
            kv("gen_ai.operation.name", s("execute_tool")),
            kv("gen_ai.tool.name", s("read_file")),
            kv("gen_ai.tool.call.arguments", s(r#"{"path":"notes.txt"}"#)),
        ],
        ..Default::default()
    }
}

fn request(calls: &[u8]) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![
                    kv("service.name", s("late-agent")),
                    kv("host.name", s("box-1")),
                ],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: calls.iter().map(|n| call(*n)).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn attr(span: &Span, key: &str) -> Option<Value> {
    loopwatch::otlp::attr(&span.attributes, key).and_then(|v| v.value.clone())
}

#[derive(Clone, Copy, Debug)]
enum Transport {
    Grpc,
    HttpJson,
}

async fn late_span_completes_a_loop_on_a_forwarded_span(transport: Transport) {
    let (downstream, downstream_addr) = Downstream::start(false).await;
    let mut config = Config::default();
    config.receiver.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.receiver.http_listen = "127.0.0.1:0".parse().unwrap();
    config.admin.listen = "127.0.0.1:0".into();
    config.exporter.endpoint = Some(format!("http://{downstream_addr}"));
    config.shutdown.drain_timeout = Duration::from_secs(5);
    let server = loopwatch::server::start(config).await.unwrap();
    let mut client = TraceServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();

    // Calls 1, 2, 4, 5: four identical calls, below repeated_call 5; forwarded as they are.
    client.export(request(&[1, 2, 4, 5])).await.unwrap();
    assert_eq!(
        downstream.wait_for_spans(4, Duration::from_secs(10)).await,
        4
    );
    // Call 3 arrives late: the run replays and the loop completes on call 5.
    let late = request(&[3]);
    let send_late = |late: ExportTraceServiceRequest| {
        let mut client = client.clone();
        let http = server.http_addr;
        async move {
            match transport {
                Transport::Grpc => {
                    client.export(late).await.unwrap();
                }
                Transport::HttpJson => {
                    let body = serde_json::to_vec(&late).unwrap();
                    let response = reqwest::Client::new()
                        .post(format!("http://{http}/v1/traces"))
                        .header("content-type", "application/json")
                        .body(body)
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), 200);
                }
            }
        }
    };
    send_late(late.clone()).await;
    assert_eq!(
        downstream.wait_for_spans(6, Duration::from_secs(10)).await,
        6
    );
    // An exporter retry of the late request: nothing new.
    send_late(late).await;
    assert_eq!(
        downstream.wait_for_spans(8, Duration::from_secs(2)).await,
        7
    );

    let received = downstream.received.lock().unwrap().clone();
    let mut synthetic = Vec::new();
    for request in &received {
        for rs in &request.resource_spans {
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    if span.name == "loop.detected" {
                        synthetic.push((rs.clone(), ss.clone(), span.clone()));
                    } else {
                        assert_eq!(
                            attr(span, "loop.detected"),
                            None,
                            "{transport:?}: forwarded spans are never re-sent annotated"
                        );
                    }
                }
            }
        }
    }
    assert_eq!(synthetic.len(), 1, "{transport:?}: one synthetic span");
    let (rs, ss, span) = &synthetic[0];
    assert_eq!(span.trace_id, TRACE.to_vec());
    assert_eq!(span.parent_span_id, call(5).span_id);
    assert_eq!(span.span_id.len(), 8);
    assert!((1..=5).all(|n| span.span_id != call(n).span_id));
    assert_eq!(span.start_time_unix_nano, call(5).end_time_unix_nano);
    assert_eq!(span.end_time_unix_nano, call(5).end_time_unix_nano);
    assert_eq!(attr(span, "loop.detected"), Some(Value::BoolValue(true)));
    assert_eq!(attr(span, "loop.pattern"), Some(s("repeated_call")));
    assert_eq!(attr(span, "loop.severity"), Some(s("warn")));
    assert_eq!(attr(span, "loop.count"), Some(Value::IntValue(5)));
    assert_eq!(attr(span, "loop.profile"), Some(s("nudge")));
    assert_eq!(
        attr(span, "loop.first_span_id"),
        Some(s("0000000000000001"))
    );
    assert_eq!(
        attr(span, "loop.reason"),
        Some(s(
            "read_file was called 5 times with the same arguments in the last 10 tool calls"
        ))
    );
    let scope = ss.scope.as_ref().unwrap();
    assert_eq!(
        (scope.name.as_str(), scope.version.as_str()),
        ("loopwatch", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        loopwatch::otlp::service_name(rs.resource.as_ref()),
        Some("late-agent")
    );

    let admin = server.admin_addr.unwrap();
    let metrics = support::serve_process::scrape(&admin.to_string()).await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "loopwatch_synthetic_spans_total 1"),
        "{metrics}"
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_grpc_the_wire_path() {
    late_span_completes_a_loop_on_a_forwarded_span(Transport::Grpc).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_http_json_the_prost_path() {
    late_span_completes_a_loop_on_a_forwarded_span(Transport::HttpJson).await;
}
