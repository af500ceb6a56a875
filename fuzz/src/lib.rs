//! What the fuzz targets run, shared with `tests/fuzz_inputs.rs` (which includes this file
//! and feeds it seeded, mutated corpus bytes on stable Rust).
//!
//! Every function here must return normally for any input: a panic is the bug the fuzzer
//! looks for. Assertions check invariants that hold for every input (every span kept,
//! annotations encodable, fingerprints deterministic).

use std::time::Instant;

use loopwatch::detector::ProfileSettings;
use loopwatch::engine::{Engine, EngineOptions};
use loopwatch::event::{CallStatus, Payload};
use loopwatch::fingerprint::{FingerprintKey, Fingerprinter};
use loopwatch::otlp::ExportTraceServiceRequest;
use loopwatch::receiver::decode::{decode_json, decode_protobuf, span_count};
use loopwatch::registry::{Registry, RegistryConfig};
use prost::Message;

/// An engine with both built-in profiles and small registry caps (so inputs reach the
/// forgetting and eviction paths). `run_key_attribute` picks the run-key mode.
pub fn engine(run_key_attribute: Option<&str>) -> Engine {
    let registry = Registry::new(
        vec![ProfileSettings::nudge(), ProfileSettings::stop()],
        RegistryConfig {
            max_runs: 4,
            max_events_per_run: 16,
            ..RegistryConfig::default()
        },
    );
    Engine::new(
        registry,
        Fingerprinter::default(),
        FingerprintKey::new(b"fuzz"),
        EngineOptions {
            run_key_attribute: run_key_attribute.map(str::to_owned),
            match_tool_name_without_arguments: run_key_attribute.is_some(),
            ..EngineOptions::default()
        },
    )
}

/// Detection and annotation of a decoded request, as the pipeline does it, three ways:
/// whole; again (an exporter retry: nothing new); then one span per request in reverse
/// order into a second engine (late spans, replays). The annotated request must encode
/// and decode back with the same spans.
pub fn process_request(request: ExportTraceServiceRequest) {
    let spans = span_count(&request);
    let now = Instant::now();
    let first = engine(None);
    let mut annotated = request.clone();
    let processed = first.process(&mut annotated, now);
    assert!(processed.annotated_spans as u64 <= spans);
    let bytes = annotated.encode_to_vec();
    let back = decode_protobuf(&bytes).expect("an annotated request encodes");
    assert_eq!(span_count(&back), spans, "annotation keeps every span");
    let mut retry = request.clone();
    let again = first.process(&mut retry, now);
    assert!(
        again.detections.is_empty(),
        "a retried request detects nothing new"
    );

    let second = engine(Some("gen_ai.conversation.id"));
    for mut single in one_span_per_request(&request).into_iter().rev() {
        second.process(&mut single, now);
        let _ = single.encode_to_vec();
    }
    for run in second.registry.runs() {
        let _ = second.registry.repeated_calls(&run.run_key);
    }
}

/// Target (a): protobuf bytes → decode → [`process_request`]. Undecodable bytes are fine.
pub fn protobuf_input(data: &[u8]) {
    if let Ok(request) = decode_protobuf(data) {
        process_request(request);
    }
}

/// Target (b): OTLP/JSON bytes → decode → [`process_request`]. Errors name a field.
pub fn json_input(data: &[u8]) {
    match decode_json(data) {
        Ok(request) => process_request(request),
        Err(e) => {
            let _ = e.to_string();
        }
    }
}

/// Target (c): bytes as argument/result text, bytes and (when they parse) structured
/// JSON → call and result fingerprints, twice (deterministic).
pub fn fingerprint_input(data: &[u8]) {
    let fingerprinter = Fingerprinter::default();
    let split = data.first().map_or(0, |&b| usize::from(b)).min(data.len());
    let (tool, rest) = data.split_at(split);
    let tool = String::from_utf8_lossy(tool);
    let mut payloads = vec![
        Payload::Bytes(rest.to_vec()),
        Payload::Text(String::from_utf8_lossy(rest).into_owned()),
    ];
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(rest) {
        payloads.push(Payload::Json(value));
    }
    let error = CallStatus::Error {
        message: String::from_utf8_lossy(rest).into_owned(),
    };
    for payload in &payloads {
        let a = fingerprinter.call_fingerprint(&tool, payload);
        assert_eq!(a, fingerprinter.call_fingerprint(&tool, payload));
        let r = fingerprinter.result_fingerprint(&CallStatus::Ok, Some(payload));
        assert_eq!(
            r,
            fingerprinter.result_fingerprint(&CallStatus::Ok, Some(payload))
        );
        let _ = fingerprinter.result_fingerprint(&error, Some(payload));
    }
    // Valid UTF-8 text and the same bytes are one value.
    if let Ok(text) = std::str::from_utf8(rest) {
        assert_eq!(
            fingerprinter.call_fingerprint(&tool, &Payload::Text(text.to_owned())),
            fingerprinter.call_fingerprint(&tool, &Payload::Bytes(rest.to_vec())),
        );
    }
}

/// Splits a request into one request per span (keeping resource and scope).
pub fn one_span_per_request(request: &ExportTraceServiceRequest) -> Vec<ExportTraceServiceRequest> {
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans};
    let mut out = Vec::new();
    for rs in &request.resource_spans {
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                out.push(ExportTraceServiceRequest {
                    resource_spans: vec![ResourceSpans {
                        resource: rs.resource.clone(),
                        schema_url: rs.schema_url.clone(),
                        scope_spans: vec![ScopeSpans {
                            scope: ss.scope.clone(),
                            schema_url: ss.schema_url.clone(),
                            spans: vec![span.clone()],
                        }],
                    }],
                });
            }
        }
    }
    out
}
