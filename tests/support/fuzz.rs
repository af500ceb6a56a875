//! What the fuzz targets run: the library of the `fuzz/` crate (its `[lib] path`), and the
//! module `support::fuzz` of the `detect` test binary, which `tests/detect/fuzz_inputs.rs`
//! feeds with seeded, mutated corpus bytes on stable Rust.
//!
//! Every function here must return normally for any input: a panic is the bug the fuzzer
//! looks for. Assertions check invariants that hold for every input (every span kept,
//! annotations encodable, fingerprints deterministic).

use std::time::Instant;

use loopwatch::conventions::event::{CallStatus, Payload};
use loopwatch::detector::ProfileSettings;
use loopwatch::engine::{Engine, EngineOptions};
use loopwatch::fingerprint::{FingerprintKey, Fingerprinter};
use loopwatch::otlp::wire::WireRequest;
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

/// The fields of a prost-decoded span that the wire reader materialises (the rest is
/// forwarded as bytes, never read).
pub fn detection_view(
    span: &opentelemetry_proto::tonic::trace::v1::Span,
) -> opentelemetry_proto::tonic::trace::v1::Span {
    opentelemetry_proto::tonic::trace::v1::Span {
        trace_id: span.trace_id.clone(),
        span_id: span.span_id.clone(),
        parent_span_id: span.parent_span_id.clone(),
        name: span.name.clone(),
        kind: span.kind,
        start_time_unix_nano: span.start_time_unix_nano,
        end_time_unix_nano: span.end_time_unix_nano,
        attributes: span.attributes.clone(),
        events: span.events.clone(),
        status: span.status.clone(),
        ..Default::default()
    }
}

/// What prost makes of `data` with the pre-1.0 `ResourceSpans.instrumentation_library_spans`
/// (field 1000) read as the wire reader reads it: in a `ResourceSpans` without any
/// `scope_spans`, each entry prost decodes as a `ScopeSpans` at that depth becomes one (the
/// Collector's `MigrateTraces`), an entry it cannot decode is skipped (prost skips the
/// field). `Err` when prost refuses `data`; `Ok(None)` when an entry fails only for a
/// string that is not UTF-8 (the wire reader reads it lossily: prost has no answer).
pub fn migrated_request(
    data: &[u8],
) -> Result<Option<ExportTraceServiceRequest>, prost::DecodeError> {
    use loopwatch::otlp::wire::reader::{Fields, RECURSION_LIMIT};
    use loopwatch::otlp::wire::schema::INSTRUMENTATION_LIBRARY_SPANS;
    let mut request = ExportTraceServiceRequest::decode(data)?;
    let fields = |range: std::ops::Range<usize>| {
        Fields::new(data, range, RECURSION_LIMIT).filter_map(Result::ok)
    };
    let resource_spans = fields(0..data.len()).filter(|f| f.number == 1);
    for (r, field) in resource_spans.enumerate() {
        let Some(range) = field.len_range() else {
            continue;
        };
        if fields(range.clone()).any(|f| f.number == 2) {
            continue;
        }
        for legacy in fields(range).filter(|f| f.number == INSTRUMENTATION_LIBRARY_SPANS) {
            let Some(entry) = legacy.len_range() else {
                continue;
            };
            // The entry as the `scope_spans` of a request's only `ResourceSpans`: decoded
            // at the depth it has in `data`.
            let mut inner = Vec::new();
            prost::encoding::bytes::encode(2, &data[entry].to_vec(), &mut inner);
            let mut framed = Vec::new();
            prost::encoding::bytes::encode(1, &inner, &mut framed);
            match ExportTraceServiceRequest::decode(framed.as_slice()) {
                Ok(mut one) => {
                    let scope_spans = one.resource_spans.remove(0).scope_spans.remove(0);
                    request.resource_spans[r].scope_spans.push(scope_spans);
                }
                Err(e) if e.to_string().contains("UTF-8") => return Ok(None),
                Err(_) => {}
            }
        }
    }
    Ok(Some(request))
}

/// The wire path on `wire` (read from `bytes`), a request prost has no reference for: it is
/// processed, and forwarded byte for byte when nothing in it was annotated.
fn forwarded_unless_annotated(wire: WireRequest, bytes: &bytes::Bytes) {
    let processed = engine(None)
        .process_wire(wire, Instant::now())
        .expect("a read request annotates");
    if processed.processed.annotated_spans == 0 {
        assert_eq!(&processed.bytes(), bytes);
    }
}

/// Whether a trace id of `span` (its own, a link's) is neither empty nor 16 bytes, or a
/// span id (its own, its parent's, a link's) neither empty nor 8.
fn has_wrong_id(span: &opentelemetry_proto::tonic::trace::v1::Span) -> bool {
    let wrong = |id: &[u8], len: usize| !id.is_empty() && id.len() != len;
    wrong(&span.trace_id, 16)
        || wrong(&span.span_id, 8)
        || wrong(&span.parent_span_id, 8)
        || span
            .links
            .iter()
            .any(|link| wrong(&link.trace_id, 16) || wrong(&link.span_id, 8))
}

/// Target (d): the zero-copy wire reader against prost on the same bytes.
///
/// - The reader accepts what prost accepts; it may accept more only where prost's error
///   is a string that is not valid UTF-8 (read lossily by design). Of a request prost
///   decodes, it leaves out only the spans holding an id of the wrong length.
/// - On bytes prost decodes, every span's materialised view equals prost's, the
///   conventions extract the same events, and the engine fed through the wire path finds
///   the same detections and forwards bytes that decode to exactly the request the prost
///   path annotates; a request with nothing annotated is forwarded byte for byte.
///
/// Prost reads `instrumentation_library_spans` (field 1000) as [`migrated_request`] does.
///
/// Returns whether prost decoded the input (for coverage counts in the stable test).
pub fn wire_input(data: &[u8]) -> bool {
    let bytes = bytes::Bytes::copy_from_slice(data);
    let wire = WireRequest::read(bytes.clone());
    if let Ok(read) = &wire {
        if !read.rejected().is_empty() {
            // Spans that could not be read were cut out (issue 31 item 5): only of a request
            // prost refuses, or spans holding an id of the wrong length (which prost reads
            // and the Collector refuses), and what is left is read as it is.
            if let Ok(decoded) = migrated_request(data) {
                for rejected in read.rejected() {
                    let (r, s, i) = rejected.index;
                    let span = decoded
                        .as_ref()
                        .map(|request| &request.resource_spans[r].scope_spans[s].spans[i]);
                    assert!(
                        rejected.reason.contains(": id has") && span.is_none_or(has_wrong_id),
                        "the wire reader left out a span prost decodes: {rejected:?}"
                    );
                }
            }
            let pruned = read.bytes.clone();
            assert!(
                WireRequest::read(pruned.clone()).is_ok_and(|again| again.rejected().is_empty()),
                "the pruned request reads whole"
            );
            return wire_input(&pruned);
        }
    }
    let request = match migrated_request(data) {
        Ok(Some(request)) => request,
        Ok(None) => {
            // A legacy entry with a string that is not UTF-8: read lossily, no reference.
            forwarded_unless_annotated(
                wire.expect("the wire reader reads what prost decodes"),
                &bytes,
            );
            return false;
        }
        Err(prost_error) => {
            if let Ok(wire) = wire {
                assert!(
                    prost_error.to_string().contains("UTF-8"),
                    "the wire reader accepted what prost refuses: {prost_error}"
                );
                forwarded_unless_annotated(wire, &bytes);
            }
            return false;
        }
    };
    let wire = match wire {
        Ok(wire) => wire,
        Err(e) => panic!("the wire reader refused what prost decodes: {e}"),
    };
    assert_eq!(wire.span_count(), span_count(&request));
    for located in wire.spans() {
        let (r, s, i) = located.index;
        let span = &request.resource_spans[r].scope_spans[s].spans[i];
        assert_eq!(
            located.span,
            loopwatch::otlp::view::SpanView::from(&detection_view(span))
        );
        assert_eq!(
            loopwatch::conventions::extract_with(&[], &located.span),
            loopwatch::conventions::extract(span)
        );
        let resource = request.resource_spans[r].resource.as_ref();
        assert_eq!(
            wire.resources[located.resource].service_name.as_deref(),
            loopwatch::otlp::service_name(resource)
        );
    }
    for run_key_attribute in [None, Some("gen_ai.conversation.id")] {
        let now = Instant::now();
        let mut annotated = request.clone();
        let by_prost = engine(run_key_attribute).process(&mut annotated, now);
        let by_wire = engine(run_key_attribute)
            .process_wire(wire.clone(), now)
            .expect("a read request annotates");
        assert_eq!(by_wire.processed.detections, by_prost.detections);
        assert_eq!(by_wire.processed.annotated_spans, by_prost.annotated_spans);
        assert_eq!(by_wire.processed.synthetic_spans, by_prost.synthetic_spans);
        let forwarded = migrated_request(&by_wire.bytes())
            .expect("forwarded bytes decode")
            .expect("forwarded strings are those received, UTF-8");
        assert_eq!(
            forwarded, annotated,
            "forwarded request differs from prost's"
        );
        if by_prost.annotated_spans == 0 && by_prost.synthetic_spans == 0 {
            assert_eq!(
                by_wire.bytes(),
                bytes,
                "an unannotated request is forwarded as received"
            );
        }
        check_loop_events(&annotated);
    }
    late_spans_both_ways(&request);
    true
}

/// Every span with `loop.*` attributes carries exactly one `loop.detected` event, at its
/// end time, with the same `loop.*` attributes loopwatch wrote.
pub fn check_loop_events(request: &ExportTraceServiceRequest) {
    for span in request
        .resource_spans
        .iter()
        .flat_map(|rs| &rs.scope_spans)
        .flat_map(|ss| &ss.spans)
    {
        if span.name == "loop.detected"
            || loopwatch::otlp::attr(&span.attributes, "loop.reason").is_none()
        {
            continue;
        }
        let events: Vec<_> = span
            .events
            .iter()
            .filter(|e| e.name == "loop.detected")
            .collect();
        assert_eq!(
            events.len(),
            1,
            "one loop.detected event per annotated span"
        );
        let written: Vec<_> = events[0]
            .attributes
            .iter()
            .map(|kv| loopwatch::otlp::attr(&span.attributes, &kv.key))
            .collect();
        assert!(
            written
                .iter()
                .zip(&events[0].attributes)
                .all(|(a, kv)| a == &kv.value.as_ref()),
            "the event repeats the span's loop.* attributes"
        );
        assert_eq!(events[0].time_unix_nano, span.end_time_unix_nano);
    }
}

/// One span per request, last first (late spans, replays, synthetic spans), through the
/// prost and the wire paths of two engines: the same detections and the same forwarded
/// requests, synthetic `loop.detected` spans included.
fn late_spans_both_ways(request: &ExportTraceServiceRequest) {
    let now = Instant::now();
    let (prost_engine, wire_engine) = (engine(None), engine(None));
    for single in one_span_per_request(request).into_iter().rev() {
        let mut annotated = single.clone();
        let by_prost = prost_engine.process(&mut annotated, now);
        let wire = WireRequest::read(bytes::Bytes::from(single.encode_to_vec()))
            .expect("a prost-encoded request reads");
        let by_wire = wire_engine
            .process_wire(wire, now)
            .expect("a read request annotates");
        assert_eq!(by_wire.processed.detections, by_prost.detections);
        assert_eq!(by_wire.processed.synthetic_spans, by_prost.synthetic_spans);
        let forwarded =
            ExportTraceServiceRequest::decode(by_wire.bytes()).expect("forwarded bytes decode");
        assert_eq!(
            forwarded, annotated,
            "late-span request differs from prost's"
        );
        check_loop_events(&annotated);
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
