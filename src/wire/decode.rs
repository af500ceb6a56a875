//! Lossy materialisation of resource attributes into opentelemetry-proto types, the
//! [`ValueBudget`] of a request, and the field readers the span view shares
//! ([`super::view`]).
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

use super::reader::{Field, Fields, Value, WireError};
use super::schema::check_field;
use super::schema::Msg;

/// Lossy UTF-8 (U+FFFD for invalid sequences). Valid text (the usual case) takes the
/// standard library's fast validation and one copy.
pub fn lossy(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

pub(super) fn bytes_of<'a>(buf: &'a [u8], field: &Field) -> &'a [u8] {
    field.len_range().map_or(&[][..], |r| &buf[r])
}

pub(super) fn varint(field: &Field) -> u64 {
    match field.value {
        Value::Varint(v) => v,
        _ => 0,
    }
}

pub(super) fn fixed64(field: &Field) -> u64 {
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

/// How many values one request may still materialise: every `KeyValue` (span, event and
/// kvlist attributes), every array element and every event counts one. Empty ones cost two
/// bytes on the wire but 32–80 bytes once built, so without a bound a 16 MB request of
/// empty attributes would build half a gigabyte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValueBudget {
    left: usize,
    limit: usize,
}

impl ValueBudget {
    /// A budget of `limit` values.
    pub fn new(limit: usize) -> Self {
        Self { left: limit, limit }
    }

    /// Takes one value, or fails with [`WireError::TooManyValues`].
    pub(super) fn take(&mut self) -> Result<(), WireError> {
        match self.left.checked_sub(1) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => Err(WireError::TooManyValues { limit: self.limit }),
        }
    }
}

/// Decodes a `KeyValue`, validating it as [`super::schema::check`] would; `budget` is
/// prost's recursion budget at this message.
pub fn key_value(buf: &[u8], range: Range<usize>, budget: u32) -> Result<KeyValue, WireError> {
    key_value_within(buf, range, budget, &mut ValueBudget::new(usize::MAX))
}

fn key_value_within(
    buf: &[u8],
    range: Range<usize>,
    budget: u32,
    values: &mut ValueBudget,
) -> Result<KeyValue, WireError> {
    values.take()?;
    let mut kv = KeyValue::default();
    for field in Fields::new(buf, range, budget) {
        let field = field?;
        let nested = check_field(Msg::KeyValue, &field, budget)?;
        match (field.number, nested) {
            (1, _) => kv.key = lossy(bytes_of(buf, &field)),
            (2, Some((_, r, b))) => merge_any_value(
                kv.value.get_or_insert_with(AnyValue::default),
                buf,
                r,
                b,
                values,
            )?,
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
    values: &mut ValueBudget,
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
                        values.take()?;
                        let mut v = AnyValue::default();
                        merge_any_value(&mut v, buf, ir, ib, values)?;
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
                        list.values.push(key_value_within(buf, ir, ib, values)?);
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
    fn key_of_reads_only_the_key() {
        let buf = kv("service.name", AnyValueKind::StringValue("svc".into())).encode_to_vec();
        assert_eq!(key_of(&buf, 0..buf.len()), Ok(&b"service.name"[..]));
    }
}
