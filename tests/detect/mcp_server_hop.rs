//! One call, one event across a call hop (DESIGN §2): OpenLLMetry's MCP instrumentation
//! traces one `tools/call` as the client's `{name}.tool` span, FastMCP's `mcp.server`
//! span under it and the server's `{name}.tool` span under that (traceloop/openllmetry
//! `packages/opentelemetry-instrumentation-mcp/.../instrumentation.py`,
//! `fastmcp_instrumentation.py`). The fixtures (`tests/fixtures/mcp_server_hop/`, the
//! tester's findings 19 and 19b, built from that source) are read as one call per client
//! span, in one request and split into requests arriving in every order.
//!
//! - `loop.json`: trace a1 makes 3 identical calls with the same result (nudge:
//!   `repeated_result` warn at call 3; stop: nothing); trace b2 makes 3 distinct calls
//!   (nothing).
//! - `healthy_poll.json`: a poller with the same arguments and a changing result, 3 calls
//!   (trace c3) and 4 calls (trace d4): nothing.

use crate::support;

use std::time::Instant;

use loopwatch::config::Config;
use loopwatch::engine::report::DetectionRecord;
use loopwatch::engine::Engine;
use loopwatch::otlp::ExportTraceServiceRequest;
use serde_json::Value as Json;

/// (trace prefix, profile, pattern, call, severity) of every final detection.
type Found = Vec<(String, String, String, Option<usize>, String)>;

fn fixture(name: &str) -> Json {
    let path = support::spans::fixtures().join("mcp_server_hop").join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Every span of `request` with its resource and scope, in order.
fn spans(request: &Json) -> Vec<(Json, Json, Json)> {
    let mut out = Vec::new();
    for rs in request["resourceSpans"].as_array().unwrap() {
        for ss in rs["scopeSpans"].as_array().unwrap() {
            for span in ss["spans"].as_array().unwrap() {
                out.push((rs["resource"].clone(), ss["scope"].clone(), span.clone()));
            }
        }
    }
    out
}

/// A request of `spans`, each in its own resource_spans entry.
fn request_of(spans: &[&(Json, Json, Json)]) -> ExportTraceServiceRequest {
    let resource_spans: Vec<Json> = spans
        .iter()
        .map(|(resource, scope, span)| {
            serde_json::json!({
                "resource": resource,
                "scopeSpans": [{"scope": scope, "spans": [span]}],
            })
        })
        .collect();
    let text = serde_json::json!({ "resourceSpans": resource_spans }).to_string();
    // Read as `scan` reads a request file.
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path =
        std::env::temp_dir().join(format!("loopwatch-mcp-hop-{}-{n}.json", std::process::id()));
    std::fs::write(&path, text).unwrap();
    let request = loopwatch::cli::scan::read_request(&path).unwrap();
    std::fs::remove_file(&path).unwrap();
    request
}

/// The final detections (as `scan` reports them) of `requests` fed in order to one engine.
fn detect(requests: Vec<ExportTraceServiceRequest>) -> Found {
    let engine = Engine::from_config(&Config::default()).unwrap();
    let now = Instant::now();
    let mut runs = Vec::new();
    for mut request in requests {
        for d in engine.process(&mut request, now).detections {
            if !runs.contains(&d.run_key) {
                runs.push(d.run_key.clone());
            }
        }
    }
    let mut found: Found = runs
        .iter()
        .flat_map(|run| engine.registry.detections(run).unwrap_or_default())
        .map(|d| {
            let r = DetectionRecord::from(&d);
            (
                r.trace_id[..2].to_string(),
                r.profile,
                r.pattern,
                r.call,
                r.severity,
            )
        })
        .collect();
    found.sort();
    found
}

/// Which part of one call a span is: 0 the client tool span (no workflow name), 1 the
/// `mcp.server` span, 2 the server tool span.
fn part(span: &Json) -> usize {
    let attrs = span["attributes"].as_array().unwrap();
    let attr = |k: &str| {
        attrs
            .iter()
            .find(|a| a["key"] == k)
            .map(|a| a["value"]["stringValue"].as_str().unwrap().to_string())
    };
    match (
        attr("traceloop.span.kind").as_deref(),
        attr("traceloop.workflow.name"),
    ) {
        (Some("server"), _) => 1,
        (Some("tool"), Some(_)) => 2,
        (Some("tool"), None) => 0,
        other => panic!("unexpected span {other:?}"),
    }
}

/// Every way of sending the spans of `request` as requests: in one request; as 2 requests
/// (one part alone, the other two together; both orders); as 3 requests, one per part
/// (all 6 orders); and as one request per span, forwards and backwards.
fn splits(request: &Json) -> Vec<(String, Vec<ExportTraceServiceRequest>)> {
    let all = spans(request);
    let of = |parts: &[usize]| -> Vec<&(Json, Json, Json)> {
        all.iter().filter(|s| parts.contains(&part(&s.2))).collect()
    };
    let mut out = vec![("one request".to_string(), vec![request_of(&of(&[0, 1, 2]))])];
    for alone in 0..3 {
        let rest: Vec<usize> = (0..3).filter(|&p| p != alone).collect();
        out.push((
            format!("{alone} then {rest:?}"),
            vec![request_of(&of(&[alone])), request_of(&of(&rest))],
        ));
        out.push((
            format!("{rest:?} then {alone}"),
            vec![request_of(&of(&rest)), request_of(&of(&[alone]))],
        ));
    }
    for order in [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ] {
        out.push((
            format!("parts in order {order:?}"),
            order.iter().map(|&p| request_of(&of(&[p]))).collect(),
        ));
    }
    let one_each: Vec<_> = all.iter().map(|s| request_of(&[s])).collect();
    out.push(("one span per request".to_string(), one_each));
    let backwards: Vec<_> = all.iter().rev().map(|s| request_of(&[s])).collect();
    out.push(("one span per request, backwards".to_string(), backwards));
    out
}

fn found(trace: &str, profile: &str, pattern: &str, call: usize, severity: &str) -> Found {
    vec![(
        trace.into(),
        profile.into(),
        pattern.into(),
        Some(call),
        severity.into(),
    )]
}

#[test]
fn a_loop_traced_through_an_mcp_server_span_warns_at_call_3_in_any_batching() {
    let request = fixture("loop.json");
    let wanted = found("a1", "nudge", "repeated_result", 3, "warn");
    for (how, requests) in splits(&request) {
        assert_eq!(detect(requests), wanted, "{how}");
    }
}

#[test]
fn a_healthy_poller_traced_through_an_mcp_server_span_is_no_loop_in_any_batching() {
    let request = fixture("healthy_poll.json");
    for (how, requests) in splits(&request) {
        assert_eq!(detect(requests), Found::new(), "{how}");
    }
}

#[test]
fn calls_under_distinct_hops_stay_distinct_calls() {
    // Each server tool span is its own call when nothing links it to a client span: the
    // client spans alone (as read client-only) and the server spans alone both give the
    // loop at call 3 of 3 calls, never fewer calls.
    let request = fixture("loop.json");
    let all = spans(&request);
    let clients: Vec<_> = all.iter().filter(|s| part(&s.2) == 0).collect();
    let servers: Vec<_> = all.iter().filter(|s| part(&s.2) != 0).collect();
    let wanted = found("a1", "nudge", "repeated_result", 3, "warn");
    assert_eq!(detect(vec![request_of(&clients)]), wanted);
    assert_eq!(detect(vec![request_of(&servers)]), wanted);
}
