//! Lossy materialisation of the parts of a span detection reads, into the
//! opentelemetry-proto types the conventions take: ids, name, kind, times, status,
//! attributes and events. Links, trace state, flags and dropped counts are not read.
//!
//! Semantics follow prost's decoding (a repeated field appends, a scalar field seen twice
//! keeps the last value, a nested message seen twice is merged, an `AnyValue` oneof of the
//! same message variant is merged and of another variant replaced), except that a string
//! that is not valid UTF-8 is read lossily (U+FFFD) instead of failing.
//! Each function validates what it reads exactly as [`super::schema::check`] does (wire
//! types, lengths, groups, the recursion budget), so a span is read in one pass.

use std::ops::Range;

use opentelemetry_proto::tonic::common::v1::{
    any_value::Value as AnyValueKind, AnyValue, ArrayValue, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::trace::v1::{span::Event, Span, Status};

use super::reader::{Field, Fields, Value, WireError};
use super::schema::{check, check_field, Msg};

/// Lossy UTF-8 (U+FFFD for invalid sequences). Valid text (the usual case) takes the
/// standard library's fast validation and one copy.
pub fn lossy(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
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
    bytes_field(buf, range, 1)
}

/// The raw bytes of field `number` (a string or bytes field) of the message in
/// `buf[range]`, the last occurrence winning as in prost; empty when absent. Nothing else
/// is decoded (e.g. a span event's `name`, field 2).
pub fn bytes_field(buf: &[u8], range: Range<usize>, number: u32) -> Result<&[u8], WireError> {
    let mut found: &[u8] = &[];
    for field in Fields::new(buf, range, u32::MAX) {
        let field = field?;
        if field.number == number {
            found = bytes_of(buf, &field);
        }
    }
    Ok(found)
}

/// Decodes a `KeyValue`, validating it as [`super::schema::check`] would; `budget` is
/// prost's recursion budget at this message.
pub fn key_value(buf: &[u8], range: Range<usize>, budget: u32) -> Result<KeyValue, WireError> {
    let mut kv = KeyValue::default();
    for field in Fields::new(buf, range, budget) {
        let field = field?;
        let nested = check_field(Msg::KeyValue, &field, budget)?;
        match (field.number, nested) {
            (1, _) => kv.key = lossy(bytes_of(buf, &field)),
            (2, Some((_, r, b))) => {
                merge_any_value(kv.value.get_or_insert_with(AnyValue::default), buf, r, b)?
            }
            (3, _) => kv.key_strindex = varint(&field) as i32,
            _ => {}
        }
    }
    Ok(kv)
}

fn merge_any_value(
    value: &mut AnyValue,
    buf: &[u8],
    range: Range<usize>,
    budget: u32,
) -> Result<(), WireError> {
    for field in Fields::new(buf, range, budget) {
        let field = field?;
        let nested = check_field(Msg::AnyValue, &field, budget)?;
        let kind = match (field.number, nested) {
            (1, _) => AnyValueKind::StringValue(lossy(bytes_of(buf, &field))),
            (2, _) => AnyValueKind::BoolValue(varint(&field) != 0),
            (3, _) => AnyValueKind::IntValue(varint(&field) as i64),
            (4, _) => AnyValueKind::DoubleValue(f64::from_bits(fixed64(&field))),
            (5, Some((_, r, b))) => {
                let mut array = match value.value.take() {
                    Some(AnyValueKind::ArrayValue(a)) => a,
                    _ => ArrayValue::default(),
                };
                for item in Fields::new(buf, r, b) {
                    let item = item?;
                    if let Some((_, ir, ib)) = check_field(Msg::ArrayValue, &item, b)? {
                        let mut v = AnyValue::default();
                        merge_any_value(&mut v, buf, ir, ib)?;
                        array.values.push(v);
                    }
                }
                AnyValueKind::ArrayValue(array)
            }
            (6, Some((_, r, b))) => {
                let mut list = match value.value.take() {
                    Some(AnyValueKind::KvlistValue(l)) => l,
                    _ => KeyValueList::default(),
                };
                for item in Fields::new(buf, r, b) {
                    let item = item?;
                    if let Some((_, ir, ib)) = check_field(Msg::KeyValueList, &item, b)? {
                        list.values.push(key_value(buf, ir, ib)?);
                    }
                }
                AnyValueKind::KvlistValue(list)
            }
            (7, _) => AnyValueKind::BytesValue(bytes_of(buf, &field).to_vec()),
            (8, _) => AnyValueKind::StringValueStrindex(varint(&field) as i32),
            _ => continue,
        };
        value.value = Some(kind);
    }
    Ok(())
}

fn event(buf: &[u8], range: Range<usize>, budget: u32) -> Result<Event, WireError> {
    let mut event = Event::default();
    for field in Fields::new(buf, range, budget) {
        let field = field?;
        let nested = check_field(Msg::Event, &field, budget)?;
        match (field.number, nested) {
            (1, _) => event.time_unix_nano = fixed64(&field),
            (2, _) => event.name = lossy(bytes_of(buf, &field)),
            (3, Some((_, r, b))) => event.attributes.push(key_value(buf, r, b)?),
            (4, _) => event.dropped_attributes_count = varint(&field) as u32,
            _ => {}
        }
    }
    Ok(event)
}

fn merge_status(
    status: &mut Status,
    buf: &[u8],
    range: Range<usize>,
    budget: u32,
) -> Result<(), WireError> {
    for field in Fields::new(buf, range, budget) {
        let field = field?;
        check_field(Msg::Status, &field, budget)?;
        match field.number {
            2 => status.message = lossy(bytes_of(buf, &field)),
            3 => status.code = varint(&field) as i32,
            _ => {}
        }
    }
    Ok(())
}

/// The detection view of the `Span` in `buf[range]`: ids, name, kind, times, attributes,
/// events and status (links, trace state, flags and dropped counts left empty). Validates
/// the whole span (links included) as [`super::schema::check`] would, in the same pass;
/// `budget` is prost's recursion budget at the span.
pub fn span(buf: &[u8], range: Range<usize>, budget: u32) -> Result<Span, WireError> {
    let mut span = Span::default();
    for field in Fields::new(buf, range, budget) {
        let field = field?;
        let nested = check_field(Msg::Span, &field, budget)?;
        match (field.number, nested) {
            (1, _) => span.trace_id = bytes_of(buf, &field).to_vec(),
            (2, _) => span.span_id = bytes_of(buf, &field).to_vec(),
            (4, _) => span.parent_span_id = bytes_of(buf, &field).to_vec(),
            (5, _) => span.name = lossy(bytes_of(buf, &field)),
            (6, _) => span.kind = varint(&field) as i32,
            (7, _) => span.start_time_unix_nano = fixed64(&field),
            (8, _) => span.end_time_unix_nano = fixed64(&field),
            (9, Some((_, r, b))) => span.attributes.push(key_value(buf, r, b)?),
            (11, Some((_, r, b))) => span.events.push(event(buf, r, b)?),
            (15, Some((_, r, b))) => {
                merge_status(span.status.get_or_insert_with(Status::default), buf, r, b)?
            }
            (_, Some((msg, r, b))) => check(msg, buf, r, b)?,
            _ => {}
        }
    }
    Ok(span)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::reader::RECURSION_LIMIT;
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
        assert_eq!(span(&buf, 0..buf.len(), RECURSION_LIMIT), Ok(original));
    }

    #[test]
    fn invalid_utf8_is_read_lossily() {
        // Span { name: b"ab\xffc" } and one attribute whose string value is b"\xfe"
        let mut buf = vec![0x2a, 4, b'a', b'b', 0xff, b'c'];
        buf.extend_from_slice(&[0x4a, 8, 0x0a, 1, b'k', 0x12, 3, 0x0a, 1, 0xfe]);
        assert!(Span::decode(buf.as_slice()).is_err(), "prost refuses it");
        let got = span(&buf, 0..buf.len(), RECURSION_LIMIT).unwrap();
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
        assert_eq!(span(&buf, 0..buf.len(), RECURSION_LIMIT).unwrap(), expected);
        assert_eq!(expected.name, "b");
        assert_eq!(expected.status.as_ref().map(|s| s.code), Some(2));
    }

    #[test]
    fn key_of_reads_only_the_key() {
        let buf = kv("service.name", AnyValueKind::StringValue("svc".into())).encode_to_vec();
        assert_eq!(key_of(&buf, 0..buf.len()), Ok(&b"service.name"[..]));
    }
}
