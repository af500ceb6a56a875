use super::*;
use crate::otlp::ExportTraceServiceRequest;
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

fn request() -> ExportTraceServiceRequest {
    let span = |id: u8| Span {
        trace_id: vec![1; 16],
        span_id: vec![id; 8],
        name: format!("span {id}"),
        attributes: vec![kv("gen_ai.tool.name", "search")],
        ..Default::default()
    };
    ExportTraceServiceRequest {
        resource_spans: vec![
            ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![
                        kv("host.name", "h"),
                        kv("service.name", "svc"),
                        kv("session.id", "s-1"),
                    ],
                    ..Default::default()
                }),
                scope_spans: vec![
                    ScopeSpans {
                        spans: vec![span(1), span(2)],
                        ..Default::default()
                    },
                    ScopeSpans {
                        spans: vec![span(3)],
                        ..Default::default()
                    },
                ],
                ..Default::default()
            },
            ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![span(4)],
                    ..Default::default()
                }],
                ..Default::default()
            },
        ],
    }
}

#[test]
fn locates_every_span_and_keeps_only_the_asked_resource_attributes() {
    let decoded = request();
    let bytes = Bytes::from(decoded.encode_to_vec());
    let read = WireRequest::read(bytes.clone()).unwrap();
    assert_eq!(read.span_count(), 4);
    let indices: Vec<_> = read.spans().iter().map(|s| s.index).collect();
    assert_eq!(indices, vec![(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0)]);
    for wire in read.spans() {
        let (r, s, i) = wire.index;
        let expected = &decoded.resource_spans[r].scope_spans[s].spans[i];
        assert_eq!(wire.span, SpanView::from(expected));
        assert_eq!(
            &bytes[wire.range.clone()],
            expected.encode_to_vec().as_slice()
        );
    }
    assert_eq!(read.resources.len(), 2);
    assert_eq!(read.resources[0].service_name.as_deref(), Some("svc"));
    assert_eq!(
        read.resource(0, &["session.id", "service.name"])
            .unwrap()
            .attributes,
        vec![kv("service.name", "svc"), kv("session.id", "s-1")]
    );
    assert_eq!(read.resource(0, &[]).unwrap(), Resource::default());
    assert_eq!(read.resources[1], WireResource::default());
    assert_eq!(read.spans()[3].resource, 1);
}

#[test]
fn reading_stops_at_the_span_and_value_caps() {
    let bytes = Bytes::from(request().encode_to_vec());
    let limits = |max_spans, max_values| ReadLimits {
        max_spans,
        max_values,
    };
    // 4 spans of one attribute each, in 2 `resource_spans` of 3 `scope_spans` between
    // them, the first with a resource holding `service.name`: 4 + 2 + 3 + 1 + 1 values.
    assert_eq!(
        WireRequest::read_limited(bytes.clone(), limits(4, 11)).map(|r| r.span_count()),
        Ok(4)
    );
    assert_eq!(
        WireRequest::read_limited(bytes.clone(), limits(3, 11)).err(),
        Some(WireError::TooManySpans { limit: 3 })
    );
    assert_eq!(
        WireRequest::read_limited(bytes, limits(4, 10)).err(),
        Some(WireError::TooManyValues { limit: 10 })
    );
}

/// issue D1: the entries around spans cost two bytes on the wire each when empty, and the
/// reader keeps a record or a range for each, so they count against the values cap as
/// attributes do: a request of millions of them is refused at the cap.
#[test]
fn entries_around_spans_count_against_the_value_cap() {
    let limits = ReadLimits {
        max_spans: usize::MAX,
        max_values: 1000,
    };
    let read = |bytes: Vec<u8>| WireRequest::read_limited(Bytes::from(bytes), limits);
    let too_many = Some(WireError::TooManyValues { limit: 1000 });
    // Empty `resource_spans` entries (the 14 MB bomb was 7 M of these).
    assert_eq!(
        read([0x0a, 0x00].repeat(1000)).map(|r| r.resources.len()),
        Ok(1000)
    );
    assert_eq!(read([0x0a, 0x00].repeat(1001)).err(), too_many);
    // In one `ResourceSpans`: empty `scope_spans`, `resource` occurrences (one range kept
    // each), `instrumentation_library_spans` entries (a range each), and `service.name`
    // attributes of its resource (each decoded to read the service name).
    let mut legacy = Vec::new();
    prost::encoding::bytes::encode(INSTRUMENTATION_LIBRARY_SPANS, &Vec::new(), &mut legacy);
    let service_name = Resource {
        attributes: vec![kv("service.name", "svc")],
        ..Default::default()
    };
    let mut resource = Vec::new();
    prost::encoding::message::encode(1, &service_name, &mut resource);
    for (entry, per_entry) in [
        (vec![0x12, 0x00], 1),
        (vec![0x0a, 0x00], 1),
        (legacy, 1),
        (resource, 2),
    ] {
        // 999 values and the `ResourceSpans` around them are read; one more is refused.
        let n = 999 / per_entry;
        let fits = one_resource_spans(&vec![entry.clone(); n]).to_vec();
        assert!(read(fits).is_ok(), "{entry:?}");
        let over = one_resource_spans(&vec![entry.clone(); n + 1]).to_vec();
        assert_eq!(read(over).err(), too_many, "{entry:?}");
    }
}

/// A request of one `ResourceSpans` holding `fields` (encoded fields, in this order).
fn one_resource_spans(fields: &[Vec<u8>]) -> Bytes {
    let mut out = Vec::new();
    prost::encoding::bytes::encode(1, &fields.concat(), &mut out);
    Bytes::from(out)
}

/// `ScopeSpans` of `spans` as field `number` of a `ResourceSpans`.
fn scope_spans_field(number: u32, spans: Vec<Span>) -> Vec<u8> {
    let mut out = Vec::new();
    let scope_spans = ScopeSpans {
        spans,
        ..Default::default()
    };
    prost::encoding::message::encode(number, &scope_spans, &mut out);
    out
}

fn named(name: &str) -> Span {
    Span {
        name: name.into(),
        ..Default::default()
    }
}

#[test]
fn instrumentation_library_spans_are_read_only_without_scope_spans() {
    let names = |bytes: Bytes| -> Vec<(String, (usize, usize, usize))> {
        let read = WireRequest::read(bytes).expect("prost reads it");
        read.spans()
            .iter()
            .map(|s| (s.span.name.to_string(), s.index))
            .collect()
    };
    let old = |name: &str| scope_spans_field(INSTRUMENTATION_LIBRARY_SPANS, vec![named(name)]);
    let new = |name: &str| scope_spans_field(2, vec![named(name)]);
    let mut resource = Vec::new();
    prost::encoding::message::encode(1, &Resource::default(), &mut resource);
    // Old field alone, its entries in order, a resource around them.
    assert_eq!(
        names(one_resource_spans(&[old("a"), resource.clone(), old("b")])),
        [("a".into(), (0, 0, 0)), ("b".into(), (0, 1, 0))]
    );
    // A `scope_spans` entry, before or after it, even an empty one, hides it.
    assert_eq!(
        names(one_resource_spans(&[old("a"), new("n")])),
        [("n".into(), (0, 0, 0))]
    );
    assert_eq!(
        names(one_resource_spans(&[new("n"), old("a")])),
        [("n".into(), (0, 0, 0))]
    );
    let empty = scope_spans_field(2, Vec::new());
    assert_eq!(names(one_resource_spans(&[old("a"), empty])), []);
    // An entry prost could not decode as `ScopeSpans` is skipped (prost skips the
    // field); a field 1000 of another wire type too.
    let mut broken = Vec::new();
    prost::encoding::bytes::encode(
        INSTRUMENTATION_LIBRARY_SPANS,
        &vec![0x12, 0x05, 0x01],
        &mut broken,
    );
    let mut varint = Vec::new();
    prost::encoding::uint64::encode(INSTRUMENTATION_LIBRARY_SPANS, &7, &mut varint);
    let request = one_resource_spans(&[broken, varint, old("b")]);
    assert!(ExportTraceServiceRequest::decode(request.clone()).is_ok());
    assert_eq!(names(request), [("b".into(), (0, 0, 0))]);
    // Its spans count towards the span cap.
    let two = one_resource_spans(&[old("a"), old("b")]);
    let limits = ReadLimits {
        max_spans: 1,
        max_values: usize::MAX,
    };
    assert_eq!(
        WireRequest::read_limited(two, limits).err(),
        Some(WireError::TooManySpans { limit: 1 })
    );
}

/// An attribute holding a kvlist holding a kvlist … `depth` levels down.
fn nested(depth: usize) -> AnyValue {
    use opentelemetry_proto::tonic::common::v1::KeyValueList;
    let mut value = AnyValue {
        value: Some(Value::StringValue("leaf".into())),
    };
    for _ in 0..depth {
        value = AnyValue {
            value: Some(Value::KvlistValue(KeyValueList {
                values: vec![KeyValue {
                    key: "k".into(),
                    value: Some(value),
                    ..Default::default()
                }],
            })),
        };
    }
    value
}

#[test]
fn a_span_nested_past_the_recursion_limit_is_left_out_alone() {
    let mut request = request();
    let deep = Span {
        name: "deep".into(),
        attributes: vec![KeyValue {
            key: "deep".into(),
            value: Some(nested(48)),
            ..Default::default()
        }],
        ..Default::default()
    };
    request.resource_spans[0].scope_spans[0]
        .spans
        .insert(1, deep);
    let bytes = Bytes::from(request.encode_to_vec());
    assert!(
        ExportTraceServiceRequest::decode(bytes.clone()).is_err(),
        "prost refuses the whole request"
    );
    let read = WireRequest::read(bytes).expect("the rest is read");
    assert_eq!(read.span_count(), 4);
    assert_eq!(read.rejected().len(), 1);
    assert_eq!(read.rejected()[0].index, (0, 0, 1));
    assert!(read.rejected()[0].reason.contains("recursion limit"));
    // What is forwarded is the request without that span, every other byte kept.
    let mut expected = request.clone();
    expected.resource_spans[0].scope_spans[0].spans.remove(1);
    assert_eq!(
        ExportTraceServiceRequest::decode(read.bytes.clone()).ok(),
        Some(expected.clone())
    );
    assert_eq!(read.bytes.len(), expected.encoded_len());
    // A request-wide cap still stops the whole read.
    let limits = ReadLimits {
        max_spans: 2,
        max_values: usize::MAX,
    };
    let bytes = Bytes::from(request.encode_to_vec());
    assert_eq!(
        WireRequest::read_limited(bytes, limits).err(),
        Some(WireError::TooManySpans { limit: 2 })
    );
}

/// issue D5: prost reads an id of any length, the Collector refuses the whole request
/// holding one, and the forwarder merges requests into one export.
#[test]
fn a_span_with_an_id_of_the_wrong_length_is_left_out_alone() {
    let mut request = request();
    let spans = &mut request.resource_spans[0].scope_spans[1].spans;
    spans.insert(
        0,
        Span {
            trace_id: vec![1; 17],
            ..spans[0].clone()
        },
    );
    request.resource_spans[1].scope_spans[0].spans[0].parent_span_id = vec![9; 4];
    let bytes = Bytes::from(request.encode_to_vec());
    assert!(ExportTraceServiceRequest::decode(bytes.clone()).is_ok());
    let read = WireRequest::read(bytes).expect("the rest is read");
    let described: Vec<String> = read.rejected().iter().map(RejectedSpan::describe).collect();
    assert_eq!(
        described,
        [
            "resourceSpans[0].scopeSpans[1].spans[0].traceId: id has 17 bytes, expected 16",
            "resourceSpans[1].scopeSpans[0].spans[0].parentSpanId: id has 4 bytes, expected 8",
        ]
    );
    let names: Vec<&str> = read.spans().iter().map(|s| s.span.name.as_ref()).collect();
    assert_eq!(names, ["span 1", "span 2", "span 3"]);
    // Forwarded: the request without those two spans, every other byte as received.
    let mut expected = request.clone();
    expected.resource_spans[1].scope_spans[0].spans.clear();
    expected.resource_spans[0].scope_spans[1].spans.remove(0);
    assert_eq!(read.bytes, Bytes::from(expected.encode_to_vec()));
    // A request of no readable span is still read (the receiver refuses it).
    let mut bad = expected.clone();
    bad.resource_spans.truncate(1);
    for ss in &mut bad.resource_spans[0].scope_spans {
        for span in &mut ss.spans {
            span.span_id = vec![2; 16];
        }
    }
    let read = WireRequest::read(Bytes::from(bad.encode_to_vec())).unwrap();
    assert_eq!((read.span_count(), read.rejected().len()), (0, 3));
}

#[test]
fn a_memory_grant_that_refuses_stops_the_read() {
    let bytes = Bytes::from(request().encode_to_vec());
    let mut asked = 0;
    let mut refuse = |bytes: usize| {
        asked += bytes;
        false
    };
    assert_eq!(
        WireRequest::read_budgeted(bytes.clone(), ReadLimits::NONE, Some(&mut refuse)).err(),
        Some(WireError::OverBudget)
    );
    assert_eq!(asked, super::super::reader::GRANT_STEP);
    let mut granted = 0;
    let mut grant = |bytes: usize| {
        granted += bytes;
        true
    };
    let read = WireRequest::read_budgeted(bytes, ReadLimits::NONE, Some(&mut grant));
    assert_eq!(read.map(|r| r.span_count()).ok(), Some(4));
    assert_eq!(granted, super::super::reader::GRANT_STEP);
}

#[test]
fn malformed_requests_fail_without_panicking() {
    let bytes = request().encode_to_vec();
    for cut in 1..bytes.len() {
        let truncated = Bytes::copy_from_slice(&bytes[..cut]);
        let ours = WireRequest::read(truncated.clone()).is_ok();
        let prost = ExportTraceServiceRequest::decode(truncated).is_ok();
        assert_eq!(ours, prost, "cut at {cut}");
    }
}
