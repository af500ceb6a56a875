//! The admin API through the running server: the corpus goes in over OTLP/gRPC, then
//! `/v1/traces/{trace_id}/loops`, `/v1/summary`, `/v1/runs`, `/metrics`, `/healthz`,
//! `/readyz` and the gRPC health service are checked against values computed here
//! independently from `tests/fixtures/corpus/runs.json` and `expected.json`.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use crate::support::downstream::Downstream;
use crate::support::server::*;
use hmac::{Hmac, Mac};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};

const KEY: &str = "admin-api-test-fingerprint-key";

/// DESIGN §3 default volatile argument keys.
const VOLATILE_KEYS: [&str; 8] = [
    "timestamp",
    "request_id",
    "trace_id",
    "span_id",
    "nonce",
    "now",
    "_ts",
    "correlation_id",
];

struct CorpusRun {
    run: String,
    tool_calls: usize,
    sequence: Vec<String>,
    requests: Vec<ExportTraceServiceRequest>,
    trace_id: String,
    service_name: String,
    expected: Value,
}

fn fixture(name: &str) -> Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/corpus")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn service_name(request: &ExportTraceServiceRequest) -> String {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    request.resource_spans[0]
        .resource
        .as_ref()
        .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
        .and_then(|kv| kv.value.as_ref()?.value.as_ref())
        .map(|v| match v {
            Any::StringValue(s) => s.clone(),
            other => panic!("service.name {other:?}"),
        })
        .expect("service.name")
}

fn corpus() -> Vec<CorpusRun> {
    let runs = fixture("runs.json");
    let expected = fixture("expected.json");
    let runs: Vec<CorpusRun> = runs
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let run = r["run"].as_str().unwrap().to_string();
            let requests = run_requests(&run);
            CorpusRun {
                tool_calls: r["tool_calls"].as_u64().unwrap() as usize,
                sequence: r["sequence"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|s| s.as_str().unwrap().to_string())
                    .collect(),
                trace_id: trace_id_of(&requests[0]),
                service_name: service_name(&requests[0]),
                expected: expected[&run].clone(),
                requests,
                run,
            }
        })
        .collect();
    assert_eq!(runs.len(), expected.as_object().unwrap().len());
    runs
}

fn strip_volatile(value: &mut Value) {
    match value {
        Value::Object(map) => {
            map.retain(|k, _| !VOLATILE_KEYS.contains(&k.as_str()));
            map.values_mut().for_each(strip_volatile);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_volatile),
        _ => {}
    }
}

/// `tool(args)` of runs.json → (tool, canonical argument text), `None` when the
/// arguments were not captured (`tool(?)`). Arguments that are JSON are that value (a
/// JSON string holding JSON once more is unwrapped once), other text is the string it
/// spells; volatile keys are removed; then RFC 8785.
fn canonical_call(entry: &str) -> Option<(String, String)> {
    let open = entry.find('(').expect("tool(args)");
    let tool = &entry[..open];
    let args = entry[open + 1..].strip_suffix(')').expect("tool(args)");
    if args == "?" {
        return None;
    }
    let mut value: Value =
        serde_json::from_str(args).unwrap_or_else(|_| Value::String(args.to_string()));
    if let Value::String(inner) = &value {
        if let Ok(v) = serde_json::from_str::<Value>(inner) {
            value = v;
        }
    }
    strip_volatile(&mut value);
    Some((
        tool.to_string(),
        serde_json_canonicalizer::to_string(&value).unwrap(),
    ))
}

/// The external fingerprint: hex HMAC-SHA256(key, SHA-256(tool ‖ 0x00 ‖ canonical args)).
fn external_fingerprint(key: &str, tool: &str, canonical_args: &str) -> String {
    let mut sha = Sha256::new();
    sha.update(tool.as_bytes());
    sha.update([0u8]);
    sha.update(canonical_args.as_bytes());
    let mut mac = Hmac::<Sha256>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(&sha.finalize());
    hex::encode(mac.finalize().into_bytes())
}

/// Repeated calls of a run as the API must list them: (tool, canonical args, steps),
/// most hits first, ties by first step.
fn expected_loops(sequence: &[String]) -> Vec<(String, String, Vec<usize>)> {
    let mut groups: Vec<(String, String, Vec<usize>)> = Vec::new();
    for (i, entry) in sequence.iter().enumerate() {
        let Some((tool, args)) = canonical_call(entry) else {
            continue;
        };
        match groups.iter_mut().find(|g| g.0 == tool && g.1 == args) {
            Some(g) => g.2.push(i + 1),
            None => groups.push((tool, args, vec![i + 1])),
        }
    }
    groups.retain(|g| g.2.len() >= 2);
    groups.sort_by(|a, b| b.2.len().cmp(&a.2.len()).then(a.2[0].cmp(&b.2[0])));
    groups
}

fn is_lower_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

fn detections(expected: &Value) -> impl Iterator<Item = (&'static str, &Value)> {
    ["nudge", "stop"].into_iter().flat_map(move |profile| {
        expected[profile]
            .as_array()
            .unwrap()
            .iter()
            .map(move |d| (profile, d))
    })
}

fn is_looping(expected: &Value) -> bool {
    detections(expected).any(|(_, d)| d["severity"] != "info")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_through_the_admin_api() {
    let corpus = corpus();
    let (downstream, downstream_addr) = Downstream::start(false).await;
    let mut config = test_config(Some(downstream_addr));
    config.detection.fingerprint_key = Some(KEY.into());
    let server = loopwatch::server::start(config).await.unwrap();
    let admin = server.admin_addr.unwrap();

    let mut spans_sent = 0;
    let mut requests_sent = 0;
    for run in &corpus {
        export_all(server.grpc_addr, &run.requests).await;
        spans_sent += run.requests.iter().map(span_count).sum::<usize>();
        requests_sent += run.requests.len();
    }
    assert_eq!(
        downstream
            .wait_for_spans(spans_sent, Duration::from_secs(30))
            .await,
        spans_sent,
        "every span forwarded"
    );

    // --- /v1/traces/{trace_id}/loops, each run against runs.json ---
    // canonical call → external fingerprint, over all runs: equal calls, equal fingerprints.
    let mut by_call: HashMap<(String, String), String> = HashMap::new();
    for run in &corpus {
        let (status, body) = get(admin, &format!("/v1/traces/{}/loops", run.trace_id)).await;
        assert_eq!(status, 200, "{}: {body}", run.run);
        let got: Value = serde_json::from_str(&body).unwrap();
        let want: Vec<Value> = expected_loops(&run.sequence)
            .into_iter()
            .map(|(tool, args, steps)| {
                let fingerprint = external_fingerprint(KEY, &tool, &args);
                json!({"fingerprint": fingerprint, "hits": steps.len(), "step_indices": steps, "tool_name": tool})
            })
            .collect();
        assert_eq!(got, json!({ "data": want }), "{}", run.run);
        for entry in got["data"].as_array().unwrap() {
            let fp = entry["fingerprint"].as_str().unwrap();
            assert!(is_lower_hex(fp, 64), "{}: {fp}", run.run);
        }
        for (tool, args, _) in expected_loops(&run.sequence) {
            let fp = external_fingerprint(KEY, &tool, &args);
            let previous = by_call.entry((tool, args)).or_insert_with(|| fp.clone());
            assert_eq!(*previous, fp);
        }
    }
    let distinct: std::collections::HashSet<&String> = by_call.values().collect();
    assert_eq!(
        distinct.len(),
        by_call.len(),
        "distinct calls, distinct fingerprints"
    );
    // The cases worth spelling out.
    let loops = |run: &str| {
        let run = corpus.iter().find(|r| r.run == run).unwrap();
        let trace_id = run.trace_id.clone();
        async move { get_json(admin, &format!("/v1/traces/{trace_id}/loops")).await }
    };
    let s5 = loops("pydantic-ai/v5-default/s5_volatile_args").await;
    assert_eq!(
        s5["data"],
        json!([{
            "fingerprint": external_fingerprint(KEY, "lookup_user", r#"{"user_id":"u-17"}"#),
            "hits": 5, "step_indices": [1, 2, 3, 4, 5], "tool_name": "lookup_user"
        }]),
        "request_id/timestamp are volatile: 5 equal calls"
    );
    let nocontent = loops("pydantic-ai/v5-nocontent/s1_stuck_repeat").await;
    assert_eq!(
        nocontent,
        json!({"data": []}),
        "calls without arguments never count"
    );
    let s3 = loops("pydantic-ai/v5-default/s3_alternating").await;
    assert_eq!(s3["data"][0]["step_indices"], json!([1, 3, 5, 7]));
    assert_eq!(s3["data"][1]["step_indices"], json!([2, 4, 6, 8]));
    let healthy = corpus
        .iter()
        .find(|r| r.run == "pydantic-ai/v5-default/s4_healthy")
        .unwrap();
    let (status, body) = get(admin, &format!("/v1/traces/{}/loops", healthy.trace_id)).await;
    assert_eq!((status, body.as_str()), (200, r#"{"data":[]}"#));
    let upper = healthy.trace_id.to_ascii_uppercase();
    assert_eq!(
        get(admin, &format!("/v1/traces/{upper}/loops")).await.0,
        200
    );
    let (status, body) = get(admin, &format!("/v1/traces/{}/loops", "ab".repeat(16))).await;
    assert_eq!(status, 404, "unknown trace: {body}");
    assert!(serde_json::from_str::<Value>(&body).unwrap()["error"].is_string());
    // A path segment that does not decode (not UTF-8) is answered in the API's JSON too.
    for path in [
        "/v1/runs/%C0%AF",
        "/v1/traces/%C0%AF/loops",
        "/v1/runs/%FF/approve",
    ] {
        let (status, body) = if path.ends_with("/approve") {
            let response = reqwest::Client::new()
                .post(format!("http://{admin}{path}"))
                .json(&serde_json::json!({}))
                .send()
                .await
                .unwrap();
            (response.status().as_u16(), response.text().await.unwrap())
        } else {
            get(admin, path).await
        };
        assert_eq!(status, 400, "{path}: {body}");
        let error = serde_json::from_str::<Value>(&body).unwrap()["error"].clone();
        assert!(
            error.as_str().is_some_and(|e| !e.is_empty()),
            "{path}: {body}"
        );
    }
    // An id no trace can have (not 32 hex characters) is the client's error, not a miss.
    let too_long = "ab".repeat(17);
    let not_hex = format!("{}zz", &healthy.trace_id[..30]);
    for bad in ["abc", too_long.as_str(), not_hex.as_str(), "%20"] {
        let (status, body) = get(admin, &format!("/v1/traces/{bad}/loops")).await;
        assert_eq!(status, 400, "trace id {bad:?}: {body}");
        let error = serde_json::from_str::<Value>(&body).unwrap()["error"].clone();
        assert!(
            error.as_str().unwrap().contains("32 hex characters"),
            "{bad:?}: {body}"
        );
    }

    // --- /v1/summary against expected.json ---
    let runs = corpus.len();
    let loop_runs = corpus.iter().filter(|r| is_looping(&r.expected)).count();
    let mut by_pattern: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_severity: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_labels: BTreeMap<(String, String, String), usize> = BTreeMap::new();
    let mut by_service: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for run in &corpus {
        for (profile, d) in detections(&run.expected) {
            let pattern = d["pattern"].as_str().unwrap().to_string();
            let severity = d["severity"].as_str().unwrap().to_string();
            *by_pattern.entry(pattern.clone()).or_default() += 1;
            *by_severity.entry(severity.clone()).or_default() += 1;
            *by_labels
                .entry((profile.to_string(), pattern, severity))
                .or_default() += 1;
        }
        let s = by_service.entry(run.service_name.clone()).or_default();
        s.0 += 1;
        s.1 += usize::from(is_looping(&run.expected));
    }
    let summary = get_json(admin, "/v1/summary").await;
    assert_eq!(summary["runs"], runs);
    assert_eq!(summary["loop_runs"], loop_runs);
    assert_eq!(summary["loop_rate"], json!(loop_runs as f64 / runs as f64));
    assert_eq!(summary["detections_by_pattern"], json!(by_pattern));
    assert_eq!(summary["detections_by_severity"], json!(by_severity));
    let want_services: BTreeMap<String, Value> = by_service
        .iter()
        .map(|(name, (runs, loops))| {
            (
                name.clone(),
                json!({"runs": runs, "loop_runs": loops, "loop_rate": *loops as f64 / *runs as f64}),
            )
        })
        .collect();
    assert_eq!(summary["by_service"], json!(want_services));
    let agents = summary["by_agent"].as_object().unwrap();
    let sum = |field: &str| -> u64 { agents.values().map(|a| a[field].as_u64().unwrap()).sum() };
    assert_eq!(
        (sum("runs"), sum("loop_runs")),
        (runs as u64, loop_runs as u64)
    );

    // --- /v1/runs ---
    let looping = get_json(admin, "/v1/runs?looping=true&limit=3").await;
    let looping = looping["data"].as_array().unwrap();
    assert_eq!(looping.len(), 3);
    for r in looping {
        let expected = &corpus
            .iter()
            .find(|c| c.trace_id == r["run_key"])
            .unwrap_or_else(|| panic!("unknown run {r}"))
            .expected;
        assert!(is_looping(expected), "{r}");
        assert_eq!(r["looping"], true);
        let d = r["detections"].as_array().unwrap();
        assert_eq!(d.len(), detections(expected).count(), "{r}");
        assert!(d.iter().any(|d| d["severity"] != "info"));
    }
    let all = get_json(admin, "/v1/runs?limit=1000").await;
    assert_eq!(all["data"].as_array().unwrap().len(), runs);
    let calm = get_json(admin, "/v1/runs?looping=false").await;
    assert_eq!(calm["data"].as_array().unwrap().len(), runs - loop_runs);
    // A query string that does not deserialize is 400 in the API's JSON error shape on
    // every endpoint that reads one (axum's own rejection is text/plain).
    for (path, names) in [
        ("/v1/runs?looping=maybe", "looping"),
        ("/v1/runs?foo=1", "foo"),
        ("/v1/runs?limit=-1", "limit"),
        ("/v1/signals?foo=1", "foo"),
        ("/v1/signals?since=yesterday", "since"),
        ("/v1/signals?action=stop", "action"),
    ] {
        let response = reqwest::get(format!("http://{admin}{path}")).await.unwrap();
        assert_eq!(response.status().as_u16(), 400, "{path}");
        assert_eq!(
            response.headers()["content-type"],
            "application/json",
            "{path}"
        );
        let body: Value = response.json().await.unwrap();
        let error = body["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(names),
            "{path}: the error names {names}: {body}"
        );
    }

    // --- /metrics ---
    let forwarded =
        metric_sum_reaches(admin, "loopwatch_spans_forwarded_total", spans_sent as f64).await;
    assert!(forwarded, "spans forwarded = spans sent");
    // The reporter task publishes signals after Export has returned.
    let warn_or_kill: usize = by_labels
        .iter()
        .filter(|((_, _, severity), _)| severity != "info")
        .map(|(_, n)| n)
        .sum();
    let published = metric_sum_reaches(
        admin,
        "loopwatch_signals_published_total",
        warn_or_kill as f64,
    )
    .await;
    assert!(published, "one signal published per warn/kill detection");
    let m = scrape(admin).await;
    let total = |name: &str| m.sum(name, &[]);
    assert_eq!(total("loopwatch_spans_received_total"), spans_sent as f64);
    assert_eq!(
        total("loopwatch_requests_received_total"),
        requests_sent as f64
    );
    assert_eq!(total("loopwatch_spans_processed_total"), spans_sent as f64);
    assert_eq!(total("loopwatch_spans_rejected_total"), 0.0);
    assert!(
        m.has("loopwatch_spans_rejected_total"),
        "rejected by reason, even at 0"
    );
    let tool_calls: usize = corpus.iter().map(|r| r.tool_calls).sum();
    assert_eq!(total("loopwatch_tool_calls_total"), tool_calls as f64);
    assert_eq!(total("loopwatch_tool_calls_without_arguments_total"), 6.0);
    let got: BTreeMap<(String, String, String), usize> = m
        .samples
        .iter()
        .filter(|s| s.name == "loopwatch_detections_total")
        .map(|s| {
            (
                (
                    s.labels["profile"].clone(),
                    s.labels["pattern"].clone(),
                    s.labels["severity"].clone(),
                ),
                s.value as usize,
            )
        })
        .collect();
    assert_eq!(got, by_labels, "detections by profile/pattern/severity");
    assert_eq!(total("loopwatch_runs_active"), runs as f64);
    assert_eq!(total("loopwatch_runs_evicted_total"), 0.0);
    // Every detection reached the reporter: none dropped, by severity even at 0.
    assert!(m.has("loopwatch_detection_reports_dropped_total"));
    assert_eq!(total("loopwatch_detection_reports_dropped_total"), 0.0);
    assert_eq!(total("loopwatch_spans_forwarded_total"), spans_sent as f64);
    assert_eq!(total("loopwatch_forward_queue_depth"), 0.0);
    let delivered_requests = total("loopwatch_requests_forwarded_total");
    assert!(delivered_requests >= 1.0 && delivered_requests <= requests_sent as f64);
    let exports = total("loopwatch_forward_exports_total");
    assert!(exports >= 1.0 && exports <= delivered_requests, "{exports}");
    assert_eq!(
        total("loopwatch_forward_latency_seconds_count"),
        exports,
        "one latency observation per export RPC (a batch of requests is one)"
    );
    assert!(total("loopwatch_forward_latency_seconds_sum") > 0.0);
    assert_eq!(m.types["loopwatch_forward_latency_seconds"], "histogram");
    let signals = warn_or_kill;
    assert_eq!(
        total("loopwatch_signals_published_total"),
        signals as f64,
        "one signal per warn/kill detection, none for info"
    );
    assert_eq!(
        m.value(
            "loopwatch_signals_published_total",
            &[("profile", "stop"), ("action", "kill")]
        ),
        by_labels
            .iter()
            .filter(|((p, _, s), _)| p == "stop" && s == "kill")
            .map(|(_, n)| *n as f64)
            .sum::<f64>()
    );
    let recent = get_json(admin, "/v1/signals").await;
    assert_eq!(recent["data"].as_array().unwrap().len(), signals);
    server.shutdown().await.unwrap();
}

async fn loops_of(key: Option<&str>, run: &str) -> Vec<(String, String)> {
    let mut config = test_config(None);
    config.detection.fingerprint_key = key.map(str::to_string);
    let server = loopwatch::server::start(config).await.unwrap();
    let requests = run_requests(run);
    export_all(server.grpc_addr, &requests).await;
    let body = get_json(
        server.admin_addr.unwrap(),
        &format!("/v1/traces/{}/loops", trace_id_of(&requests[0])),
    )
    .await;
    server.shutdown().await.unwrap();
    body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["tool_name"].as_str().unwrap().to_string(),
                e["fingerprint"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fingerprints_depend_on_the_key_only() {
    let run = "pydantic-ai/v5-default/s3_alternating";
    let a1 = loops_of(Some("key-a"), run).await;
    let a2 = loops_of(Some("key-a"), run).await;
    let b = loops_of(Some("key-b"), run).await;
    let random = loops_of(None, run).await;
    assert_eq!(a1.len(), 2);
    assert_eq!(a1, a2, "two servers with the same key agree");
    for (x, y) in a1.iter().zip(&b) {
        assert_eq!(x.0, y.0);
        assert_ne!(x.1, y.1, "different keys, different fingerprints");
    }
    for (x, y) in a1.iter().zip(&random) {
        assert_ne!(x.1, y.1, "no key: a random one");
    }
    // The same calls seen by another framework's convention: same fingerprints.
    let strands = loops_of(Some("key-a"), "strands/default/s3_alternating").await;
    assert_eq!(strands, a1);
    assert_eq!(
        a1[0],
        (
            "read_file".to_string(),
            external_fingerprint("key-a", "read_file", r#"{"path":"a.py"}"#)
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_grpc_health() {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let (_downstream, downstream_addr) = Downstream::start(false).await;
    let server = loopwatch::server::start(test_config(Some(downstream_addr)))
        .await
        .unwrap();
    let admin = server.admin_addr.unwrap();
    assert_eq!(get(admin, "/healthz").await.0, 200);
    let (status, body) = get(admin, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = HealthClient::new(channel);
    for service in ["", "opentelemetry.proto.collector.trace.v1.TraceService"] {
        let response = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap_or_else(|e| panic!("Check({service:?}): {e}"))
            .into_inner();
        assert_eq!(
            response.status,
            ServingStatus::Serving as i32,
            "{service:?}"
        );
    }
    let unknown = health
        .check(HealthCheckRequest {
            service: "no.such.Service".into(),
        })
        .await;
    assert_eq!(unknown.unwrap_err().code(), tonic::Code::NotFound);
    server.shutdown().await.unwrap();

    // A configured downstream whose port is closed: alive and ready (readiness is local
    // state only), with loopwatch_exporter_up = 0 once the idle probe ran.
    let closed = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap()
    };
    let server = loopwatch::server::start(test_config(Some(closed)))
        .await
        .unwrap();
    let admin = server.admin_addr.unwrap();
    assert_eq!(get(admin, "/healthz").await.0, 200);
    assert!(
        eventually(Duration::from_secs(5), || async {
            scrape(admin).await.value("loopwatch_exporter_up", &[]) == 0.0
        })
        .await
    );
    let (status, body) = get(admin, "/readyz").await;
    assert_eq!(status, 200, "{body}");
    server.shutdown().await.unwrap();

    // Detect-only (no downstream): ready once listening.
    let server = loopwatch::server::start(test_config(None)).await.unwrap();
    assert_eq!(get(server.admin_addr.unwrap(), "/readyz").await.0, 200);
    server.shutdown().await.unwrap();
}
#[test]
fn openmetrics_parser_rejects_malformed_expositions() {
    let good = "# HELP a_total x\n# TYPE a counter\na_total{k=\"v\\\"\"} 3\n# TYPE g gauge\ng 1.5\n# EOF\n";
    let s = parse_openmetrics(good).unwrap();
    assert_eq!(s.value("a_total", &[("k", "v\"")]), 3.0);
    assert_eq!(s.value("g", &[]), 1.5);
    for bad in [
        "# TYPE a counter\na_total 3\n",                   // no EOF
        "a_total 3\n# EOF\n",                              // undeclared family
        "# TYPE a counter\na_total  3\n# EOF\n",           // two spaces
        "# TYPE a counter\na_total{k=v} 3\n# EOF\n",       // unquoted label
        "# TYPE a counter\na_total -1\n# EOF\n",           // negative counter
        "# TYPE a counter\na_total 1\na_total 2\n# EOF\n", // duplicate
        "# TYPE a counter\na 1\n# EOF\n",                  // counter without _total
        "# TYPE a counter\na_total one\n# EOF\n",          // not a number
    ] {
        assert!(parse_openmetrics(bad).is_err(), "accepted {bad:?}");
    }
}
