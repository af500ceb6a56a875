//! The span path on the wire reader: detection and in-place annotation of a protobuf
//! request, including one that prost refuses for a string that is not valid UTF-8.

use std::time::Instant;

use bytes::Bytes;
use loopwatch::config::Config;
use loopwatch::engine::Engine;
use loopwatch::otlp::ExportTraceServiceRequest;
use loopwatch::wire::WireRequest;
use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

fn kv(key: &str, value: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(Value::StringValue(value.into())),
        }),
        ..Default::default()
    }
}

/// Five identical `read_file` calls (nudge: repeated_call at 5); the second span carries
/// a `note` attribute whose value is patched to invalid UTF-8 after encoding.
fn looping_request() -> Vec<u8> {
    let span = |i: u8| Span {
        trace_id: vec![7; 16],
        span_id: vec![i + 1; 8],
        name: "execute_tool read_file".into(),
        start_time_unix_nano: 1_000 * u64::from(i + 1),
        end_time_unix_nano: 1_000 * u64::from(i + 1) + 500,
        attributes: vec![
            kv("gen_ai.operation.name", "execute_tool"),
            kv("gen_ai.tool.name", "read_file"),
            kv("gen_ai.tool.call.arguments", "{\"path\":\"a.txt\"}"),
            kv("gen_ai.tool.call.result", "same"),
            kv("note", if i == 1 { "MARK" } else { "fine" }),
        ],
        ..Default::default()
    };
    let request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(opentelemetry_proto::tonic::resource::v1::Resource {
                attributes: vec![kv("service.name", "agent")],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans: (0..5).map(span).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    let mut bytes = request.encode_to_vec();
    let at = bytes
        .windows(4)
        .position(|w| w == b"MARK")
        .unwrap_or_else(|| panic!("marker"));
    bytes[at] = 0xff;
    bytes
}

fn engine() -> Engine {
    let mut config = Config::default();
    config.detection.fingerprint_key = Some("test".into());
    Engine::from_config(&config).unwrap_or_else(|e| panic!("{e}"))
}

fn attribute<'a>(span: &'a Span, key: &str) -> Option<&'a Value> {
    loopwatch::otlp::attr(&span.attributes, key).and_then(|v| v.value.as_ref())
}

#[test]
fn a_bad_string_is_read_lossily_and_the_loop_is_still_annotated_in_place() {
    let bytes = looping_request();
    assert!(ExportTraceServiceRequest::decode(bytes.as_slice()).is_err());
    let read = WireRequest::read(Bytes::from(bytes.clone())).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read.span_count(), 5);
    assert_eq!(
        attribute(&read.spans[1].span, "note"),
        Some(&Value::StringValue("\u{fffd}ARK".into()))
    );
    let ranges: Vec<_> = read.spans.iter().map(|s| s.range.clone()).collect();
    let engine = engine();
    let done = engine
        .process_wire(read, Instant::now())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(done.spans, 5);
    let patterns: Vec<_> = done
        .processed
        .detections
        .iter()
        .map(|d| {
            (
                d.profile.name.as_str(),
                d.detection.pattern.as_str(),
                d.span_id.clone(),
            )
        })
        .collect();
    assert_eq!(patterns, vec![("nudge", "repeated_result", vec![3; 8])]);
    assert_eq!(done.processed.annotated_spans, 1);

    // The forwarded bytes: spans 1, 2, 4, 5 exactly as received (the bad byte included),
    // span 3 with the loop.* attributes appended.
    let out = WireRequest::read(done.bytes.clone()).unwrap_or_else(|e| panic!("{e}"));
    for (i, range) in ranges.iter().enumerate() {
        let forwarded = &done.bytes[out.spans[i].range.clone()];
        if i == 2 {
            assert!(forwarded.starts_with(&bytes[range.clone()]));
            assert!(forwarded.len() > range.len());
        } else {
            assert_eq!(forwarded, &bytes[range.clone()], "span {i} changed");
        }
    }
    let annotated = &out.spans[2].span;
    assert_eq!(
        attribute(annotated, "loop.detected"),
        Some(&Value::BoolValue(true))
    );
    assert_eq!(
        attribute(annotated, "loop.pattern"),
        Some(&Value::StringValue("repeated_result".into()))
    );
    assert_eq!(
        attribute(annotated, "loop.count"),
        Some(&Value::IntValue(3))
    );
    assert_eq!(
        attribute(annotated, "loop.first_span_id"),
        Some(&Value::StringValue("0101010101010101".into()))
    );
}

#[test]
fn an_unannotated_request_is_forwarded_as_the_same_bytes() {
    let bytes = Bytes::from(looping_request());
    let read = WireRequest::read(bytes.clone()).unwrap_or_else(|e| panic!("{e}"));
    let mut read_two = read.clone();
    read_two.spans.truncate(2);
    let done = engine()
        .process_wire(read_two, Instant::now())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(done.processed.detections.is_empty());
    // the very same buffer, not a copy
    assert_eq!(done.bytes.as_ptr(), bytes.as_ptr());
    assert_eq!(done.bytes, bytes);
}
