use super::*;
use crate::otlp::test_support::kv;
use crate::otlp::wire::reader::RECURSION_LIMIT;
use opentelemetry_proto::tonic::common::v1::{
    any_value::Value as AnyValueKind, AnyValue, ArrayValue, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::trace::v1::{span::Event, Span, Status};
use prost::Message;
use std::borrow::Cow;

fn read(buf: &[u8]) -> Result<SpanView<'_>, WireError> {
    span(
        buf,
        0..buf.len(),
        RECURSION_LIMIT,
        &mut ValueBudget::new(usize::MAX),
    )
}

#[test]
fn span_fields_read_as_prost_reads_them() {
    let original = Span {
        trace_id: vec![1; 16],
        span_id: vec![2; 8],
        parent_span_id: vec![3; 8],
        name: "execute_tool search".into(),
        kind: 3,
        start_time_unix_nano: 10,
        end_time_unix_nano: 20,
        attributes: vec![
            kv("s", AnyValueKind::StringValue("x".into())),
            kv("b", AnyValueKind::BoolValue(true)),
            kv("i", AnyValueKind::IntValue(-5)),
            kv("d", AnyValueKind::DoubleValue(1.5)),
            kv("y", AnyValueKind::BytesValue(vec![0, 255])),
            kv(
                "a",
                AnyValueKind::ArrayValue(ArrayValue {
                    values: vec![AnyValue {
                        value: Some(AnyValueKind::IntValue(1)),
                    }],
                }),
            ),
            kv(
                "m",
                AnyValueKind::KvlistValue(KeyValueList {
                    values: vec![kv("k", AnyValueKind::StringValue("v".into()))],
                }),
            ),
        ],
        events: vec![Event {
            time_unix_nano: 15,
            name: "exception".into(),
            attributes: vec![kv("exception.type", AnyValueKind::StringValue("E".into()))],
            dropped_attributes_count: 1,
        }],
        status: Some(Status {
            message: "boom".into(),
            code: 2,
        }),
        ..Default::default()
    };
    let buf = original.encode_to_vec();
    let view = read(&buf).unwrap();
    assert_eq!(view, SpanView::from(&original));
    // Valid text is borrowed from the buffer, not copied.
    assert!(matches!(view.name, Cow::Borrowed("execute_tool search")));
    assert_eq!(view.trace_id.as_ptr(), buf[2..].as_ptr());
}

#[test]
fn plain_attributes_read_as_the_field_walk_reads_them() {
    let plain = [
        kv("s", AnyValueKind::StringValue("text".into())),
        kv("e", AnyValueKind::StringValue(String::new())),
        kv("b", AnyValueKind::BoolValue(true)),
        kv("f", AnyValueKind::BoolValue(false)),
        kv("i", AnyValueKind::IntValue(-7)),
        kv("z", AnyValueKind::IntValue(0)),
        kv("d", AnyValueKind::DoubleValue(-0.25)),
        kv("long", AnyValueKind::StringValue("x".repeat(300))),
    ];
    for attribute in &plain {
        let buf = attribute.encode_to_vec();
        let direct = plain_key_value(&buf);
        assert_eq!(
            direct.as_ref(),
            Some(&KeyValueView::from(attribute)),
            "{attribute:?}"
        );
    }
    // Other shapes are left to the field walk: an empty key (prost leaves the field
    // out), no value, bytes, an array; below, an empty value, a value field seen
    // twice, a truncated string, a second int.
    let other = [
        kv("", AnyValueKind::StringValue("x".into())),
        KeyValue {
            key: "k".into(),
            value: None,
            ..Default::default()
        },
        kv("y", AnyValueKind::BytesValue(vec![1])),
        kv(
            "a",
            AnyValueKind::ArrayValue(ArrayValue {
                values: vec![AnyValue::default()],
            }),
        ),
    ];
    for attribute in &other {
        assert_eq!(plain_key_value(&attribute.encode_to_vec()), None);
    }
    assert_eq!(plain_key_value(&[0x0a, 1, b'k', 0x12, 0]), None);
    assert_eq!(
        plain_key_value(&[0x0a, 1, b'k', 0x12, 3, 0x0a, 1, b'a', 0x12, 0]),
        None
    );
    assert_eq!(
        plain_key_value(&[0x0a, 1, b'k', 0x12, 3, 0x0a, 5, b'a']),
        None
    );
    assert_eq!(
        plain_key_value(&[0x0a, 1, b'k', 0x12, 2, 0x18, 1, 0x18, 2]),
        None
    );
}

#[test]
fn invalid_utf8_is_read_lossily() {
    // Span { name: b"ab\xffc" } and one attribute whose string value is b"\xfe"
    let mut buf = vec![0x2a, 4, b'a', b'b', 0xff, b'c'];
    buf.extend_from_slice(&[0x4a, 8, 0x0a, 1, b'k', 0x12, 3, 0x0a, 1, 0xfe]);
    assert!(Span::decode(buf.as_slice()).is_err(), "prost refuses it");
    let got = read(&buf).unwrap();
    assert_eq!(got.name, "ab\u{fffd}c");
    assert!(matches!(got.name, Cow::Owned(_)));
    assert_eq!(
        *got.attributes,
        [KeyValueView {
            key: "k".into(),
            value: Some(AnyValueView {
                value: Some(ValueView::StringValue("\u{fffd}".into()))
            }),
        }]
    );
}

#[test]
fn repeated_scalars_and_messages_merge_like_prost() {
    // name twice (last wins), status twice (merged), an attribute value twice:
    // kvlist then kvlist (merged), and a string then an int (replaced).
    let mut buf = Vec::new();
    buf.extend_from_slice(&[0x2a, 1, b'a', 0x2a, 1, b'b']);
    buf.extend_from_slice(&[0x7a, 3, 0x12, 1, b'm', 0x7a, 2, 0x18, 2]);
    // KeyValue{key "k", value{kvlist[{key "x"}]}, value{kvlist[{key "y"}]}}
    let kv_x = [0x32, 5, 0x0a, 3, 0x0a, 1, b'x'];
    let kv_y = [0x32, 5, 0x0a, 3, 0x0a, 1, b'y'];
    let mut key_value = vec![0x0a, 1, b'k', 0x12, kv_x.len() as u8];
    key_value.extend_from_slice(&kv_x);
    key_value.extend_from_slice(&[0x12, kv_y.len() as u8]);
    key_value.extend_from_slice(&kv_y);
    buf.push(0x4a);
    buf.push(key_value.len() as u8);
    buf.extend_from_slice(&key_value);
    // KeyValue{key "s", value{string "t"}, value{int 4}}
    let replaced = [0x0a, 1, b's', 0x12, 3, 0x0a, 1, b't', 0x12, 2, 0x18, 4];
    buf.push(0x4a);
    buf.push(replaced.len() as u8);
    buf.extend_from_slice(&replaced);
    let expected = Span::decode(buf.as_slice()).expect("valid protobuf");
    assert_eq!(read(&buf).unwrap(), SpanView::from(&expected));
    assert_eq!(expected.name, "b");
    assert_eq!(expected.status.as_ref().map(|s| s.code), Some(2));
    assert_eq!(
        expected.attributes[0]
            .value
            .as_ref()
            .and_then(|v| v.value.clone()),
        Some(AnyValueKind::KvlistValue(KeyValueList {
            values: vec![kv_key("x"), kv_key("y")]
        }))
    );
}

fn kv_key(key: &str) -> KeyValue {
    KeyValue {
        key: key.into(),
        ..Default::default()
    }
}

#[test]
fn spans_sharing_an_arena_each_see_only_their_own_attributes_and_events() {
    let event = |name: &str, key: &str| Event {
        name: name.into(),
        time_unix_nano: 7,
        attributes: vec![kv(key, AnyValueKind::StringValue("e".into()))],
        ..Default::default()
    };
    let first = Span {
        name: "first".into(),
        attributes: vec![
            kv("a", AnyValueKind::IntValue(1)),
            kv("b", AnyValueKind::IntValue(2)),
        ],
        events: vec![event("x", "ex"), event("y", "ey")],
        ..Default::default()
    };
    let second = Span {
        name: "second".into(),
        attributes: vec![kv("c", AnyValueKind::IntValue(3))],
        events: vec![event("z", "ez")],
        ..Default::default()
    };
    // The first span on the wire with an event between its two attributes: its
    // attributes stay one run of the arena, its event's go to the event store.
    let mut buf = Vec::new();
    let field = |buf: &mut Vec<u8>, key: u8, message: Vec<u8>| {
        buf.push(key);
        prost::encoding::encode_varint(message.len() as u64, buf);
        buf.extend_from_slice(&message);
    };
    field(&mut buf, 0x2a, b"first".to_vec());
    field(&mut buf, 0x4a, first.attributes[0].encode_to_vec());
    field(&mut buf, 0x5a, first.events[0].encode_to_vec());
    field(&mut buf, 0x4a, first.attributes[1].encode_to_vec());
    field(&mut buf, 0x5a, first.events[1].encode_to_vec());
    let split = buf.len();
    buf.extend_from_slice(&second.encode_to_vec());
    assert_eq!(Span::decode(&buf[..split]).unwrap(), first);

    let mut arena = ViewArena::default();
    let mut values = ValueBudget::new(usize::MAX);
    let records = [0..split, split..buf.len()]
        .map(|range| span_into(&buf, range, RECURSION_LIMIT, &mut values, &mut arena).unwrap());
    assert_eq!(arena.span_attributes.len(), 3);
    assert_eq!(arena.events.len(), 3);
    assert_eq!(records[0].view(&arena), SpanView::from(&first));
    assert_eq!(records[1].view(&arena), SpanView::from(&second));
    assert!(matches!(
        records[1].view(&arena).attributes,
        List::Borrowed(_)
    ));
    // On its own, a span's view owns its lists and reads the same.
    assert_eq!(read(&buf[..split]).unwrap(), SpanView::from(&first));
}

#[test]
fn values_are_taken_from_the_budget_and_bad_input_fails_as_prost() {
    let span = Span {
        attributes: vec![
            kv("a", AnyValueKind::IntValue(1)),
            kv(
                "b",
                AnyValueKind::ArrayValue(ArrayValue {
                    values: vec![AnyValue::default(), AnyValue::default()],
                }),
            ),
        ],
        events: vec![Event::default()],
        ..Default::default()
    };
    let buf = span.encode_to_vec();
    // 2 attributes + 2 array elements + 1 event.
    let mut values = ValueBudget::new(5);
    assert!(super::span(&buf, 0..buf.len(), RECURSION_LIMIT, &mut values).is_ok());
    assert_eq!(
        super::span(
            &buf,
            0..buf.len(),
            RECURSION_LIMIT,
            &mut ValueBudget::new(4)
        ),
        Err(WireError::TooManyValues { limit: 4 })
    );
    for cut in 1..buf.len() {
        let ours = read(&buf[..cut]).is_ok();
        let prost = Span::decode(&buf[..cut]).is_ok();
        assert_eq!(ours, prost, "cut at {cut}");
    }
}

#[test]
fn ids_of_the_wrong_length_fail_the_span_naming_the_field() {
    use opentelemetry_proto::tonic::trace::v1::span::Link;
    let link = |trace_id: Vec<u8>, span_id: Vec<u8>| Link {
        trace_id,
        span_id,
        ..Default::default()
    };
    let good = Span {
        trace_id: vec![1; 16],
        span_id: vec![2; 8],
        parent_span_id: vec![3; 8],
        links: vec![link(vec![4; 16], vec![5; 8])],
        ..Default::default()
    };
    let id_length = |field: &str, len, expected| -> Result<(), WireError> {
        Err(WireError::IdLength {
            field: field.to_owned().into(),
            len,
            expected,
        })
    };
    // OTLP lengths and empty ids (prost's default, the Collector's empty id) are read.
    assert_eq!(read(&good.encode_to_vec()), Ok(SpanView::from(&good)));
    let empty = Span {
        links: vec![Link::default()],
        ..Default::default()
    };
    assert_eq!(read(&empty.encode_to_vec()), Ok(SpanView::from(&empty)));
    let with = |edit: &dyn Fn(&mut Span)| {
        let mut span = good.clone();
        edit(&mut span);
        let buf = span.encode_to_vec();
        assert!(
            Span::decode(buf.as_slice()).is_ok(),
            "prost reads any length"
        );
        read(&buf).map(|_| ())
    };
    assert_eq!(
        with(&|s| s.trace_id = vec![1; 17]),
        id_length("traceId", 17, 16)
    );
    assert_eq!(
        with(&|s| s.trace_id = vec![1; 15]),
        id_length("traceId", 15, 16)
    );
    assert_eq!(with(&|s| s.span_id = vec![2; 9]), id_length("spanId", 9, 8));
    assert_eq!(
        with(&|s| s.parent_span_id = vec![3; 7]),
        id_length("parentSpanId", 7, 8)
    );
    assert_eq!(
        with(&|s| s.links.push(link(vec![4; 8], vec![5; 8]))),
        id_length("links[1].traceId", 8, 16)
    );
    assert_eq!(
        with(&|s| s.links[0].span_id = vec![5; 16]),
        id_length("links[0].spanId", 16, 8)
    );
    // The first wrong one is named: the span's own ids before its links, as OTLP/JSON.
    assert_eq!(
        with(&|s| {
            s.links[0].trace_id = vec![4];
            s.parent_span_id = vec![3; 9];
        }),
        id_length("parentSpanId", 9, 8)
    );
    assert_eq!(
        with(&|s| s.links[0].span_id = vec![5; 16]).map_err(|e| e.to_string()),
        Err(".links[0].spanId: id has 16 bytes, expected 8".to_owned())
    );
    // The last occurrence of a field counts, as prost keeps it: a wrong id then a right
    // one is read, a right one then a wrong one is not.
    let mut buf = good.encode_to_vec();
    buf.extend_from_slice(&[0x0a, 3, 1, 2, 3]);
    assert_eq!(read(&buf).map(|_| ()), id_length("traceId", 3, 16));
    let mut buf = vec![0x0a, 3, 1, 2, 3];
    buf.extend_from_slice(&good.encode_to_vec());
    assert_eq!(read(&buf), Ok(SpanView::from(&good)));
    // A malformed field is reported before a wrong id, wherever it is.
    let mut buf = Span {
        trace_id: vec![1; 17],
        ..good.clone()
    }
    .encode_to_vec();
    buf.extend_from_slice(&[0x30, 0x01, 0x38, 0x01]);
    assert!(matches!(read(&buf), Err(WireError::WireType { .. })));
}
