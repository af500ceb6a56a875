//! Lossy materialisation of the parts of a span detection reads, into the
//! opentelemetry-proto types the conventions take: ids, name, kind, times, status,
//! attributes and events. Links, trace state, flags and dropped counts are not read.
//!
//! Semantics follow prost's decoding (a repeated field appends, a scalar field seen twice
//! keeps the last value, a nested message seen twice is merged, an `AnyValue` oneof of the
//! same message variant is merged and of another variant replaced), except that a string
//! that is not valid UTF-8 is read lossily (U+FFFD) instead of failing. Input is expected
//! to have passed [`super::schema::check`]; errors are still returned, never a panic.

use std::ops::Range;

use opentelemetry_proto::tonic::common::v1::{
    any_value::Value as AnyValueKind, AnyValue, ArrayValue, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::trace::v1::{span::Event, Span, Status};

use super::reader::{Field, Fields, Value, WireError};

/// Lossy UTF-8 (U+FFFD for invalid sequences; borrowed when valid, then copied once).
pub fn lossy(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn bytes_of<'a>(buf: &'a [u8], field: &Field) -> &'a [u8] {
    field.len_range().map_or(&[][..], |r| &buf[r])
}

fn varint(field: &Field) -> u64 {
    match field.value {
        Value::Varint(v) => v,
        _ => 0,
    }
}

fn fixed64(field: &Field) -> u64 {
    match field.value {
        Value::Fixed64(v) => v,
        _ => 0,
    }
}

/// The key of the `KeyValue` in `buf[range]` as raw bytes (the last `key` field wins, as
/// in prost), without decoding its value.
pub fn key_of(buf: &[u8], range: Range<usize>) -> Result<&[u8], WireError> {
    let mut key: &[u8] = &[];
    for field in Fields::new(buf, range, u32::MAX) {
        let field = field?;
        if field.number == 1 {
            key = bytes_of(buf, &field);
        }
    }
    Ok(key)
}

/// Decodes a `KeyValue`.
pub fn key_value(buf: &[u8], range: Range<usize>) -> Result<KeyValue, WireError> {
    let mut kv = KeyValue::default();
    for field in Fields::new(buf, range, u32::MAX) {
        let field = field?;
        match field.number {
            1 => kv.key = lossy(bytes_of(buf, &field)),
            2 => merge_any_value(kv.value.get_or_insert_with(AnyValue::default), buf, &field)?,
            3 => kv.key_strindex = varint(&field) as i32,
            _ => {}
        }
    }
    Ok(kv)
}

fn merge_any_value(value: &mut AnyValue, buf: &[u8], outer: &Field) -> Result<(), WireError> {
    let Some(range) = outer.len_range() else {
        return Ok(());
    };
    for field in Fields::new(buf, range, u32::MAX) {
        let field = field?;
        let kind = match field.number {
            1 => AnyValueKind::StringValue(lossy(bytes_of(buf, &field))),
            2 => AnyValueKind::BoolValue(varint(&field) != 0),
            3 => AnyValueKind::IntValue(varint(&field) as i64),
            4 => AnyValueKind::DoubleValue(f64::from_bits(fixed64(&field))),
            5 => {
                let mut array = match value.value.take() {
                    Some(AnyValueKind::ArrayValue(a)) => a,
                    _ => ArrayValue::default(),
                };
                for item in Fields::new(buf, field.len_range().unwrap_or(0..0), u32::MAX) {
                    let item = item?;
                    if item.number == 1 {
                        let mut v = AnyValue::default();
                        merge_any_value(&mut v, buf, &item)?;
                        array.values.push(v);
                    }
                }
                AnyValueKind::ArrayValue(array)
            }
            6 => {
                let mut list = match value.value.take() {
                    Some(AnyValueKind::KvlistValue(l)) => l,
                    _ => KeyValueList::default(),
                };
                for item in Fields::new(buf, field.len_range().unwrap_or(0..0), u32::MAX) {
                    let item = item?;
                    if let (1, Some(r)) = (item.number, item.len_range()) {
                        list.values.push(key_value(buf, r)?);
                    }
                }
                AnyValueKind::KvlistValue(list)
            }
            7 => AnyValueKind::BytesValue(bytes_of(buf, &field).to_vec()),
            8 => AnyValueKind::StringValueStrindex(varint(&field) as i32),
            _ => continue,
        };
        value.value = Some(kind);
    }
    Ok(())
}

fn event(buf: &[u8], range: Range<usize>) -> Result<Event, WireError> {
    let mut event = Event::default();
    for field in Fields::new(buf, range, u32::MAX) {
        let field = field?;
        match (field.number, field.len_range()) {
            (1, _) => event.time_unix_nano = fixed64(&field),
            (2, _) => event.name = lossy(bytes_of(buf, &field)),
            (3, Some(r)) => event.attributes.push(key_value(buf, r)?),
            (4, _) => event.dropped_attributes_count = varint(&field) as u32,
            _ => {}
        }
    }
    Ok(event)
}

fn merge_status(status: &mut Status, buf: &[u8], range: Range<usize>) -> Result<(), WireError> {
    for field in Fields::new(buf, range, u32::MAX) {
        let field = field?;
        match field.number {
            2 => status.message = lossy(bytes_of(buf, &field)),
            3 => status.code = varint(&field) as i32,
            _ => {}
        }
    }
    Ok(())
}

/// The detection view of the `Span` in `buf[range]`: ids, name, kind, times, attributes,
/// events and status (links, trace state, flags and dropped counts left empty).
pub fn span(buf: &[u8], range: Range<usize>) -> Result<Span, WireError> {
    let mut span = Span::default();
    for field in Fields::new(buf, range, u32::MAX) {
        let field = field?;
        match (field.number, field.len_range()) {
            (1, _) => span.trace_id = bytes_of(buf, &field).to_vec(),
            (2, _) => span.span_id = bytes_of(buf, &field).to_vec(),
            (4, _) => span.parent_span_id = bytes_of(buf, &field).to_vec(),
            (5, _) => span.name = lossy(bytes_of(buf, &field)),
            (6, _) => span.kind = varint(&field) as i32,
            (7, _) => span.start_time_unix_nano = fixed64(&field),
            (8, _) => span.end_time_unix_nano = fixed64(&field),
            (9, Some(r)) => span.attributes.push(key_value(buf, r)?),
            (11, Some(r)) => span.events.push(event(buf, r)?),
            (15, Some(r)) => merge_status(span.status.get_or_insert_with(Status::default), buf, r)?,
            _ => {}
        }
    }
    Ok(span)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn kv(key: &str, value: AnyValueKind) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
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
        assert_eq!(span(&buf, 0..buf.len()), Ok(original));
    }

    #[test]
    fn invalid_utf8_is_read_lossily() {
        // Span { name: b"ab\xffc" } and one attribute whose string value is b"\xfe"
        let mut buf = vec![0x2a, 4, b'a', b'b', 0xff, b'c'];
        buf.extend_from_slice(&[0x4a, 8, 0x0a, 1, b'k', 0x12, 3, 0x0a, 1, 0xfe]);
        assert!(Span::decode(buf.as_slice()).is_err(), "prost refuses it");
        let got = span(&buf, 0..buf.len()).unwrap();
        assert_eq!(got.name, "ab\u{fffd}c");
        assert_eq!(
            got.attributes,
            vec![kv("k", AnyValueKind::StringValue("\u{fffd}".into()))]
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
        assert_eq!(span(&buf, 0..buf.len()).unwrap(), expected);
        assert_eq!(expected.name, "b");
        assert_eq!(expected.status.as_ref().map(|s| s.code), Some(2));
    }

    #[test]
    fn key_of_reads_only_the_key() {
        let buf = kv("service.name", AnyValueKind::StringValue("svc".into())).encode_to_vec();
        assert_eq!(key_of(&buf, 0..buf.len()), Ok(&b"service.name"[..]));
    }
}
