//! The corpus and the oracle scenarios as OTLP requests, span and attribute builders, and
//! the built `loopwatch` binary run on them (`scan`).

use std::path::{Path, PathBuf};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value::Value, AnyValue, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    status::StatusCode, ResourceSpans, ScopeSpans, Span, Status,
};
use prost::Message;
use serde_json::Value as Json;

/// The built `loopwatch` binary, without the test environment's `RUST_LOG` and
/// `LOOPWATCH_*` variables (which would change its configuration).
pub fn loopwatch() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_loopwatch"));
    c.env_remove("RUST_LOG");
    for (k, _) in std::env::vars() {
        if k.starts_with("LOOPWATCH_") {
            c.env_remove(k);
        }
    }
    c
}

/// `loopwatch scan --format json --config F INPUT` with `config` written to F; asserts it
/// succeeds and returns the detections it printed.
pub fn scan_json(config: &str, input: &Path) -> Vec<Json> {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("loopwatch.toml");
    std::fs::write(&file, config).unwrap();
    let out = loopwatch()
        .args(["scan", "--format", "json", "--config"])
        .arg(&file)
        .arg(input)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scan: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (trace_id, profile, detection key) of every detection `scan_json(config, input)`
/// prints, sorted.
pub fn scan_keys(config: &str, input: &Path) -> Vec<(String, String, Key)> {
    let mut found: Vec<_> = scan_json(config, input)
        .iter()
        .map(|d| {
            (
                d["trace_id"].as_str().unwrap().to_owned(),
                d["profile"].as_str().unwrap().to_owned(),
                key_of(d),
            )
        })
        .collect();
    found.sort();
    found
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Corpus run names ("framework/variant/scenario") with their expected answers.
pub fn corpus_expected() -> Vec<(String, Json)> {
    let text = std::fs::read_to_string(fixtures().join("corpus/expected.json")).unwrap();
    let map: serde_json::Map<String, Json> = serde_json::from_str(&text).unwrap();
    map.into_iter().collect()
}

/// The request files (`.pb`) of one corpus run, in arrival order.
pub fn corpus_files(run: &str, ext: &str) -> Vec<PathBuf> {
    let dir = fixtures().join("corpus").join(run);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some(ext))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no .{ext} files in {}", dir.display());
    files
}

pub fn read_pb(path: &Path) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest::decode(std::fs::read(path).unwrap().as_slice()).unwrap()
}

/// The comparable part of a detection: (call, response, pattern, tools, count, severity).
pub type Key = (Option<u64>, Option<u64>, String, Vec<String>, u64, String);

/// The comparable part of one detection in the JSON shape of `expected.json` and of
/// `scan --format json`.
pub fn key_of(d: &Json) -> Key {
    (
        d["call"].as_u64(),
        d["response"].as_u64(),
        d["pattern"].as_str().unwrap().to_string(),
        d["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_str().unwrap().to_string())
            .collect(),
        d["count"].as_u64().unwrap(),
        d["severity"].as_str().unwrap().to_string(),
    )
}

pub fn expected_keys(expected: &Json, profile: &str) -> Vec<Key> {
    expected[profile]
        .as_array()
        .unwrap()
        .iter()
        .map(key_of)
        .collect()
}

pub fn keys_of(detections: &[loopwatch::registry::RunDetection], profile: &str) -> Vec<Key> {
    detections
        .iter()
        .filter(|d| d.profile.name == profile)
        .map(|d| {
            (
                d.detection.call.map(|c| c as u64),
                d.detection.response.map(|c| c as u64),
                d.detection.pattern.as_str().to_string(),
                d.detection
                    .tool_names
                    .iter()
                    .map(|t| t.to_string())
                    .collect(),
                d.detection.count as u64,
                d.detection.severity.as_str().to_string(),
            )
        })
        .collect()
}

/// The detections `server` holds for corpus run `run` (its trace is the trace of the run's
/// first recorded request), after asserting that each profile's are the `expected` ones
/// (`context` names the case in the failure message).
pub fn assert_corpus_run_detections(
    server: &loopwatch::server::RunningServer,
    run: &str,
    expected: &Json,
    context: &str,
) -> Vec<loopwatch::registry::RunDetection> {
    let first = read_pb(&corpus_files(run, "pb")[0]);
    let trace_id = hex::encode(&first.resource_spans[0].scope_spans[0].spans[0].trace_id);
    let detections = server
        .engine
        .registry
        .detections(&trace_id)
        .unwrap_or_default();
    for profile in ["nudge", "stop"] {
        assert_eq!(
            keys_of(&detections, profile),
            expected_keys(expected, profile),
            "{run} ({context}), profile {profile}"
        );
    }
    detections
}

pub fn kv(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

pub fn s(v: &str) -> Value {
    Value::StringValue(v.to_string())
}

fn json_text(v: &Json) -> String {
    match v {
        Json::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Turns an oracle scenario into one OTLP request of spans (DESIGN/oracle README): a chat
/// span per response (text-only responses carry their text in `gen_ai.output.messages`,
/// responses with calls carry tool_call parts), then one `execute_tool` span per call,
/// start times increasing; an error becomes span status ERROR with the message.
/// `structured` puts object arguments in as kvlist AnyValues instead of JSON strings.
pub fn scenario_request(
    scenario: &Json,
    trace_id: [u8; 16],
    structured: bool,
) -> ExportTraceServiceRequest {
    let mut spans = Vec::new();
    let mut t: u64 = 1_700_000_000_000_000_000;
    let mut next_id: u64 = 1;
    let mut span = |name: &str, attributes: Vec<KeyValue>, status: Option<Status>, t: &mut u64| {
        let start = *t;
        *t += 1_000_000;
        let id = next_id;
        next_id += 1;
        Span {
            trace_id: trace_id.to_vec(),
            span_id: id.to_be_bytes().to_vec(),
            name: name.into(),
            kind: 1,
            start_time_unix_nano: start,
            end_time_unix_nano: start + 500_000,
            attributes,
            status,
            ..Default::default()
        }
    };
    for response in scenario["responses"].as_array().unwrap() {
        let calls = response
            .get("calls")
            .and_then(|c| c.as_array())
            .filter(|c| !c.is_empty());
        let output = match calls {
            Some(calls) => {
                let parts: Vec<Json> = calls
                    .iter()
                    .map(|c| serde_json::json!({"type": "tool_call", "name": c["tool"], "arguments": c.get("args").cloned().unwrap_or(Json::Null)}))
                    .collect();
                serde_json::json!([{"role": "assistant", "parts": parts}])
            }
            None => {
                serde_json::json!([{"role": "assistant", "parts": [{"type": "text", "content": response.get("text").and_then(|t| t.as_str()).unwrap_or("")}]}])
            }
        };
        spans.push(span(
            "chat scripted",
            vec![
                kv("gen_ai.operation.name", s("chat")),
                kv("gen_ai.output.messages", s(&output.to_string())),
            ],
            None,
            &mut t,
        ));
        for call in calls.into_iter().flatten() {
            let tool = call["tool"].as_str().unwrap();
            let mut attributes = vec![
                kv("gen_ai.operation.name", s("execute_tool")),
                kv("gen_ai.tool.name", s(tool)),
            ];
            if let Some(args) = call.get("args") {
                let value = match (structured, args) {
                    (true, Json::Object(_)) => json_to_any(args),
                    _ => s(&json_text(args)),
                };
                attributes.push(kv("gen_ai.tool.call.arguments", value));
            }
            if let Some(result) = call.get("result") {
                attributes.push(kv("gen_ai.tool.call.result", s(&json_text(result))));
            }
            let status = call.get("error").filter(|e| !e.is_null()).map(|e| Status {
                code: StatusCode::Error as i32,
                message: json_text(e),
            });
            spans.push(span(
                &format!("execute_tool {tool}"),
                attributes,
                status,
                &mut t,
            ));
        }
    }
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("scenario-agent"))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "scenario".into(),
                    ..Default::default()
                }),
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// JSON → AnyValue (objects as kvlist).
pub fn json_to_any(v: &Json) -> Value {
    use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};
    match v {
        Json::Null => Value::StringValue("null".into()),
        Json::Bool(b) => Value::BoolValue(*b),
        Json::Number(n) => n
            .as_i64()
            .map(Value::IntValue)
            .unwrap_or_else(|| Value::DoubleValue(n.as_f64().unwrap_or(0.0))),
        Json::String(s) => Value::StringValue(s.clone()),
        Json::Array(a) => Value::ArrayValue(ArrayValue {
            values: a
                .iter()
                .map(|x| AnyValue {
                    value: Some(json_to_any(x)),
                })
                .collect(),
        }),
        Json::Object(o) => Value::KvlistValue(KeyValueList {
            values: o.iter().map(|(k, x)| kv(k, json_to_any(x))).collect(),
        }),
    }
}

/// A request of `spans` under one resource and one scope, both empty.
pub fn request_of(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Splits a request into one request per span (keeping resource and scope). Defined in
/// `fuzz.rs`, which the fuzz crate builds on its own and so cannot import from here.
#[allow(unused_imports)] // not every test binary splits requests
pub use super::fuzz::one_span_per_request;

/// All oracle scenario names (file stems).
pub fn scenario_names() -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(fixtures().join("oracle/scenarios"))
        .unwrap()
        .map(|e| {
            e.unwrap()
                .path()
                .file_stem()
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    names.sort();
    names
}

pub fn read_json(path: &Path) -> Json {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Attributes holding doubles as ProtoJSON writes them in strings (`"NaN"`, `"Infinity"`,
/// `"-Infinity"`, `"1.5"`; Go's `protojson`, the Collector's `pdata`), also nested in an
/// `arrayValue` and a `kvlistValue`, added to every span of the OTLP/JSON `request` (and to
/// its events). Returns how many spans got them.
pub fn add_string_doubles(request: &mut Json) -> usize {
    let attributes = serde_json::json!([
        {"key": "test.nan", "value": {"doubleValue": "NaN"}},
        {"key": "test.string_double", "value": {"doubleValue": "1.5"}},
        {"key": "test.inf_list", "value": {"arrayValue": {"values": [
            {"doubleValue": "Infinity"}, {"doubleValue": "-Infinity"}]}}},
        {"key": "test.map", "value": {"kvlistValue": {"values": [
            {"key": "inf", "value": {"doubleValue": "Infinity"}}]}}}
    ]);
    let mut spans = 0;
    for rs in request["resourceSpans"]
        .as_array_mut()
        .into_iter()
        .flatten()
    {
        for ss in rs["scopeSpans"].as_array_mut().into_iter().flatten() {
            for span in ss["spans"].as_array_mut().into_iter().flatten() {
                spans += 1;
                let list = span
                    .as_object_mut()
                    .unwrap()
                    .entry("attributes")
                    .or_insert_with(|| Json::Array(Vec::new()));
                list.as_array_mut()
                    .unwrap()
                    .extend(attributes.as_array().unwrap().iter().cloned());
                for event in span["events"].as_array_mut().into_iter().flatten() {
                    let list = event
                        .as_object_mut()
                        .unwrap()
                        .entry("attributes")
                        .or_insert_with(|| Json::Array(Vec::new()));
                    list.as_array_mut().unwrap().push(attributes[0].clone());
                }
            }
        }
    }
    spans
}

/// True when `span` carries what [`add_string_doubles`] wrote, as doubles.
pub fn has_string_doubles(span: &Span) -> bool {
    let value = |key: &str| {
        span.attributes
            .iter()
            .find(|kv| kv.key == key)
            .and_then(|kv| kv.value.clone())
            .and_then(|v| v.value)
    };
    let double = |v: &Option<AnyValue>| match v.as_ref().and_then(|v| v.value.as_ref()) {
        Some(Value::DoubleValue(d)) => Some(*d),
        _ => None,
    };
    let nan = matches!(value("test.nan"), Some(Value::DoubleValue(d)) if d.is_nan());
    let string = value("test.string_double") == Some(Value::DoubleValue(1.5));
    let list = match value("test.inf_list") {
        Some(Value::ArrayValue(a)) => {
            a.values
                .iter()
                .map(|v| double(&Some(v.clone())))
                .collect::<Vec<_>>()
                == [Some(f64::INFINITY), Some(f64::NEG_INFINITY)]
        }
        _ => false,
    };
    let map = match value("test.map") {
        Some(Value::KvlistValue(kv)) => {
            kv.values.len() == 1 && double(&kv.values[0].value) == Some(f64::INFINITY)
        }
        _ => false,
    };
    nan && string && list && map
}
