use super::*;
use crate::otlp::test_support::kv;
use crate::otlp::wire::WireRequest;
use crate::otlp::ExportTraceServiceRequest;
use bytes::Bytes;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::{span::Event, ResourceSpans, ScopeSpans};
use prost::Message;

fn request() -> ExportTraceServiceRequest {
    let span = |id: u8| Span {
        trace_id: vec![1; 16],
        span_id: vec![id; 8],
        name: "execute_tool".into(),
        attributes: vec![
            kv("loop.count", Value::IntValue(99)),
            kv("gen_ai.tool.name", Value::StringValue("search".into())),
        ],
        // Span 2 went through a loopwatch before: its event is replaced, not doubled.
        events: [("e", 1), ("loop.detected", 2), ("f", 3)]
            .iter()
            .filter(|(name, _)| id == 2 || !name.starts_with("loop."))
            .map(|(name, time)| Event {
                name: (*name).into(),
                time_unix_nano: *time,
                ..Default::default()
            })
            .collect(),
        end_time_unix_nano: 7,
        ..Default::default()
    };
    let scope = |ids: &[u8]| ScopeSpans {
        spans: ids.iter().map(|i| span(*i)).collect(),
        schema_url: "s".into(),
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![
            ResourceSpans {
                scope_spans: vec![scope(&[1, 2]), scope(&[3])],
                schema_url: "r".into(),
                ..Default::default()
            },
            ResourceSpans {
                scope_spans: vec![scope(&[4])],
                ..Default::default()
            },
        ],
    }
}

fn added() -> Span {
    Span {
        attributes: vec![
            kv("loop.detected", Value::BoolValue(true)),
            kv("loop.count", Value::IntValue(5)),
        ],
        events: vec![Event {
            name: "loop.detected".into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

#[test]
fn adding_with_event_writes_what_adding_writes() {
    let attributes = [
        kv("loop.detected", Value::BoolValue(true)),
        kv("loop.reason", Value::StringValue("x".repeat(300))),
        kv("loop.count", Value::IntValue(-5)),
    ];
    for time_unix_nano in [0, 1_700_000_000_000_000_000] {
        for attributes in [&attributes[..], &attributes[..1], &[]] {
            let span = Span {
                attributes: attributes.to_vec(),
                events: vec![Event {
                    time_unix_nano,
                    name: "loop.detected".into(),
                    attributes: attributes.to_vec(),
                    dropped_attributes_count: 0,
                }],
                ..Default::default()
            };
            assert_eq!(
                SpanEdit::adding_with_event(3..9, attributes, "loop.detected", time_unix_nano),
                SpanEdit::adding(3..9, &span)
            );
        }
    }
}

/// Every subset of `spans` span indices, with its bit mask.
fn subsets(spans: usize) -> impl Iterator<Item = (u32, Vec<usize>)> {
    (0u32..(1 << spans)).map(move |mask| {
        let targets = (0..spans).filter(|t| mask & (1 << t) != 0).collect();
        (mask, targets)
    })
}

/// The request in `bytes` with `edits` applied, joined into one buffer.
fn rewritten(bytes: &Bytes, edits: &[SpanEdit]) -> Vec<u8> {
    rewrite_pieces(bytes, edits).unwrap().concat()
}

/// `original` with [`added`] written on the spans `targets` (indices into `read`'s
/// spans) as `annotate_span` writes it: the annotated request prost would encode.
fn annotated(
    original: &ExportTraceServiceRequest,
    read: &WireRequest,
    targets: &[usize],
) -> ExportTraceServiceRequest {
    let mut expected = original.clone();
    for &t in targets {
        let (r, s, i) = read.spans()[t].index;
        let span = &mut expected.resource_spans[r].scope_spans[s].spans[i];
        span.attributes.retain(|kv| kv.key != "loop.count");
        span.attributes.extend(added().attributes);
        span.events.retain(|e| e.name != "loop.detected");
        span.events.extend(added().events);
    }
    expected
}

#[test]
fn no_edit_is_byte_for_byte() {
    let bytes = Bytes::from(request().encode_to_vec());
    assert_eq!(rewrite_pieces(&bytes, &[]).unwrap(), vec![bytes.clone()]);
    assert_eq!(joined(&rewrite_pieces(&bytes, &[]).unwrap()), bytes);
}

#[test]
fn annotated_spans_decode_as_if_annotated_before_encoding() {
    let original = request();
    let bytes = Bytes::from(original.encode_to_vec());
    let read = WireRequest::read(bytes.clone()).unwrap();
    // Annotate spans 2 and 4 (two scope_spans, two resource_spans).
    assert_eq!(read.spans()[1].span.events.len(), 3);
    let targets = [1usize, 3];
    let edits: Vec<SpanEdit> = targets
        .iter()
        .map(|t| SpanEdit::adding(read.spans()[*t].range.clone(), &added()))
        .collect();
    let out = rewritten(&bytes, &edits);
    let got = ExportTraceServiceRequest::decode(out.as_slice()).unwrap();
    assert_eq!(got, annotated(&original, &read, &targets));
    // The untouched spans' bytes are in the output unchanged.
    for (t, span) in read.spans().iter().enumerate() {
        if !targets.contains(&t) {
            let raw = &bytes[span.range.clone()];
            assert!(out.windows(raw.len()).any(|w| w == raw));
        }
    }
}

#[test]
fn pieces_join_to_the_annotated_request_and_slice_the_received_bytes() {
    let original = request();
    let bytes = Bytes::from(original.encode_to_vec());
    let read = WireRequest::read(bytes.clone()).unwrap();
    let spans = read.spans().len();
    // Every subset of spans annotated (two resource_spans, two scope_spans).
    for (mask, targets) in subsets(spans) {
        let edits: Vec<SpanEdit> = targets
            .iter()
            .map(|&t| SpanEdit::adding(read.spans()[t].range.clone(), &added()))
            .collect();
        let pieces = rewrite_pieces(&bytes, &edits).unwrap();
        let got = ExportTraceServiceRequest::decode(joined(&pieces)).unwrap();
        assert_eq!(got, annotated(&original, &read, &targets), "mask {mask:b}");
        let received = bytes.as_ptr_range();
        let from_received: usize = pieces
            .iter()
            .filter(|p| received.contains(&p.as_ptr()))
            .map(Bytes::len)
            .sum();
        // Every received byte but the rewritten length prefixes and the dropped
        // loop.* attribute and event of each edited span is a slice, not a copy.
        let edited_bytes: usize = edits.iter().map(|e| e.range.len()).sum();
        assert!(
            from_received + 16 * edits.len() + 6 >= bytes.len() - edited_bytes,
            "mask {mask:b}: {from_received} of {} bytes sliced",
            bytes.len()
        );
        if edits.is_empty() {
            assert_eq!(pieces, vec![bytes.clone()]);
        }
    }
}

#[test]
fn removals_are_skipped_only_where_the_span_holds_none_of_them() {
    // Spans 1 and 3 carry no `loop.*` attribute or event; span 2 only the event (its
    // attributes stripped on the way), span 4 only the attribute.
    let mut original = request();
    let spans = original
        .resource_spans
        .iter_mut()
        .flat_map(|r| &mut r.scope_spans)
        .flat_map(|s| &mut s.spans);
    for (n, span) in spans.enumerate() {
        if n < 3 {
            span.attributes.retain(|kv| !kv.key.starts_with("loop."));
        }
    }
    let bytes = Bytes::from(original.encode_to_vec());
    let read = WireRequest::read(bytes.clone()).unwrap();
    for (mask, targets) in subsets(read.spans().len()) {
        let edits: Vec<SpanEdit> = targets
            .iter()
            .map(|&t| {
                let wire = &read.spans()[t];
                SpanEdit::adding(wire.range.clone(), &added()).without_absent_removals(&wire.span)
            })
            .collect();
        for (edit, t) in edits.iter().zip(&targets) {
            assert_eq!(edit.removes_nothing(), t % 2 == 0, "span {t}");
        }
        let got = ExportTraceServiceRequest::decode(rewritten(&bytes, &edits).as_slice());
        assert_eq!(
            got.unwrap(),
            annotated(&original, &read, &targets),
            "mask {mask:b}"
        );
    }
}

#[test]
fn an_edit_that_names_no_span_changes_nothing() {
    let bytes = Bytes::from(request().encode_to_vec());
    let stray = SpanEdit::adding(3..9, &added());
    assert_eq!(rewritten(&bytes, &[stray]), bytes);
}
