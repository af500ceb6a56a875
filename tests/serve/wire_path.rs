//! The span path on the wire reader: detection and in-place annotation of a protobuf
//! request, including one that prost refuses for a string that is not valid UTF-8.

use std::time::Instant;

use bytes::Bytes;
use loopwatch::config::Config;
use loopwatch::engine::Engine;
use loopwatch::otlp::view::{SpanView, ValueView};
use loopwatch::otlp::wire::WireRequest;
use loopwatch::otlp::ExportTraceServiceRequest;
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

fn view_attribute<'a>(span: &'a SpanView<'a>, key: &str) -> Option<&'a ValueView<'a>> {
    loopwatch::otlp::view::attr(&span.attributes, key).and_then(|v| v.value.as_ref())
}

#[test]
fn a_bad_string_is_read_lossily_and_the_loop_is_still_annotated_in_place() {
    let bytes = looping_request();
    assert!(ExportTraceServiceRequest::decode(bytes.as_slice()).is_err());
    let received = Bytes::from(bytes.clone());
    let read = WireRequest::read(received.clone()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read.span_count(), 5);
    assert_eq!(
        view_attribute(&read.spans()[1].span, "note"),
        Some(&ValueView::StringValue("\u{fffd}ARK".into()))
    );
    let ranges: Vec<_> = read.spans().iter().map(|s| s.range.clone()).collect();
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
                d.span_id.to_vec(),
            )
        })
        .collect();
    assert_eq!(patterns, vec![("nudge", "repeated_result", vec![3; 8])]);
    assert_eq!(done.processed.annotated_spans, 1);

    // The forwarded bytes: spans 1, 2, 4, 5 exactly as received (the bad byte included),
    // span 3 with the loop.* attributes appended.
    // Forwarded in pieces: the received bytes are sliced, not copied (only the rewritten
    // length prefixes and span 3's appended fields are new bytes).
    assert!(done.pieces.len() > 1, "{} pieces", done.pieces.len());
    let received_at = received.as_ptr_range();
    let sliced: usize = done
        .pieces
        .iter()
        .filter(|p| received_at.contains(&p.as_ptr()))
        .map(Bytes::len)
        .sum();
    let untouched: usize = ranges
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 2)
        .map(|(_, r)| r.len())
        .sum();
    assert!(
        sliced >= untouched + ranges[2].len(),
        "{sliced} bytes sliced"
    );
    let forwarded_request = done.bytes();
    let out = WireRequest::read(forwarded_request.clone()).unwrap_or_else(|e| panic!("{e}"));
    for (i, range) in ranges.iter().enumerate() {
        let forwarded = &forwarded_request[out.spans()[i].range.clone()];
        if i == 2 {
            assert!(forwarded.starts_with(&bytes[range.clone()]));
            assert!(forwarded.len() > range.len());
        } else {
            assert_eq!(forwarded, &bytes[range.clone()], "span {i} changed");
        }
    }
    let annotated = &out.spans()[2].span;
    assert_eq!(
        view_attribute(annotated, "loop.detected"),
        Some(&ValueView::BoolValue(true))
    );
    assert_eq!(
        view_attribute(annotated, "loop.pattern"),
        Some(&ValueView::StringValue("repeated_result".into()))
    );
    assert_eq!(
        view_attribute(annotated, "loop.count"),
        Some(&ValueView::IntValue(3))
    );
    assert_eq!(
        view_attribute(annotated, "loop.first_span_id"),
        Some(&ValueView::StringValue("0101010101010101".into()))
    );
}

#[test]
fn an_unannotated_request_is_forwarded_as_the_same_bytes() {
    let bytes = Bytes::from(looping_request());
    let read = WireRequest::read(bytes.clone()).unwrap_or_else(|e| panic!("{e}"));
    let mut read_two = read.clone();
    read_two.truncate_spans(2);
    let done = engine()
        .process_wire(read_two, Instant::now())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(done.processed.detections.is_empty());
    // the very same buffer, not a copy
    assert_eq!(done.pieces.len(), 1);
    assert_eq!(done.pieces[0].as_ptr(), bytes.as_ptr());
    assert_eq!(done.pieces[0], bytes);
}

/// `looping_request` without the bad byte (so prost decodes it too).
fn valid_looping_request() -> ExportTraceServiceRequest {
    let mut bytes = looping_request();
    let at = bytes
        .windows(3)
        .position(|w| w == b"ARK")
        .unwrap_or_else(|| panic!("marker"));
    bytes[at - 1] = b'M';
    ExportTraceServiceRequest::decode(bytes.as_slice()).unwrap_or_else(|e| panic!("{e}"))
}

fn wire_forward(engine: &Engine, request: &ExportTraceServiceRequest) -> ExportTraceServiceRequest {
    let read =
        WireRequest::read(Bytes::from(request.encode_to_vec())).unwrap_or_else(|e| panic!("{e}"));
    let done = engine
        .process_wire(read, Instant::now())
        .unwrap_or_else(|e| panic!("{e}"));
    ExportTraceServiceRequest::decode(done.bytes()).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn the_loop_event_is_written_identically_on_both_paths_and_replaced_on_reannotation() {
    let request = valid_looping_request();
    let by_wire = wire_forward(&engine(), &request);
    let mut by_prost = request.clone();
    engine().process(&mut by_prost, Instant::now());
    assert_eq!(by_wire, by_prost);
    let span = &by_wire.resource_spans[0].scope_spans[0].spans[2];
    assert_eq!(span.events.len(), 1);
    let event = &span.events[0];
    assert_eq!(event.name, "loop.detected");
    assert_eq!(event.time_unix_nano, span.end_time_unix_nano);
    let loop_attributes: Vec<&KeyValue> = span
        .attributes
        .iter()
        .filter(|kv| kv.key.starts_with("loop."))
        .collect();
    assert_eq!(event.attributes.iter().collect::<Vec<_>>(), loop_attributes);
    assert_eq!(loop_attributes.len(), 12);

    // A second loopwatch (or a replay of the annotated request into a fresh one) replaces
    // the event and the attributes instead of adding more.
    let again = wire_forward(&engine(), &by_wire);
    let mut again_prost = by_wire.clone();
    engine().process(&mut again_prost, Instant::now());
    assert_eq!(again, again_prost);
    assert_eq!(again, by_wire);
}

#[test]
fn a_loop_completed_on_an_earlier_request_gets_the_same_synthetic_span_on_both_paths() {
    let request = valid_looping_request();
    // Spans 1 and 4 first, span 2 late: nudge's repeated_result (3 identical calls and
    // results) completes on span 4, which went out with the first request.
    let split = |keep: &[usize]| {
        let mut part = request.clone();
        let spans = &mut part.resource_spans[0].scope_spans[0].spans;
        *spans = keep.iter().map(|i| spans[*i].clone()).collect();
        part
    };
    let (first, late) = (split(&[0, 3]), split(&[1]));
    let (wire_engine, prost_engine) = (engine(), engine());
    let mut by_prost = first.clone();
    assert_eq!(wire_forward(&wire_engine, &first), first);
    assert_eq!(
        prost_engine
            .process(&mut by_prost, Instant::now())
            .annotated_spans,
        0
    );
    let by_wire = wire_forward(&wire_engine, &late);
    let mut by_prost = late.clone();
    let processed = prost_engine.process(&mut by_prost, Instant::now());
    assert_eq!(processed.synthetic_spans, 1);
    assert_eq!(by_wire, by_prost);
    assert_eq!(by_wire.resource_spans.len(), 2);
    assert_eq!(by_wire.resource_spans[0], late.resource_spans[0]);
    let synthetic = &by_wire.resource_spans[1].scope_spans[0].spans[0];
    assert_eq!(synthetic.name, "loop.detected");
    assert_eq!(synthetic.parent_span_id, vec![4; 8]);
    assert_eq!(synthetic.trace_id, vec![7; 16]);
    assert_eq!(
        attribute(synthetic, "loop.pattern"),
        Some(&Value::StringValue("repeated_result".into()))
    );
    assert_eq!(
        wire_engine
            .stats
            .synthetic_spans
            .load(std::sync::atomic::Ordering::Relaxed),
        1
    );
}
