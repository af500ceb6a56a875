//! Resource attributes as opentelemetry-proto types (read through the span view), and the
//! raw bytes of single fields (`key_of`, `bytes_field`).
//!
//! Semantics follow prost's decoding (a repeated field appends, a scalar field seen twice
//! keeps the last value, a nested message seen twice is merged, an `AnyValue` oneof of the
//! same message variant is merged and of another variant replaced), except that a string
//! that is not valid UTF-8 is read lossily (U+FFFD) instead of failing.
//! Each function validates what it reads exactly as [`super::schema::check`] does (wire
//! types, lengths, groups, the recursion budget), so a span is read in one pass.

use std::ops::Range;

use opentelemetry_proto::tonic::common::v1::KeyValue;

use super::reader::{bytes_of, Fields, ValueBudget, WireError};

/// Lossy UTF-8 (U+FFFD for invalid sequences). Valid text (the usual case) takes the
/// standard library's fast validation and one copy.
pub fn lossy(bytes: &[u8]) -> String {
    match std::str::from_utf8(bytes) {
        Ok(text) => text.to_owned(),
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
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
/// prost's recursion budget at this message. Read as a [`super::view`] view and copied into
/// the owned prost type (`key_strindex`, which detection never reads, is left 0).
pub fn key_value(buf: &[u8], range: Range<usize>, budget: u32) -> Result<KeyValue, WireError> {
    super::view::key_value(buf, range, budget, &mut ValueBudget::new(usize::MAX))
        .map(|kv| KeyValue::from(&kv))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::test_support::kv;
    use crate::otlp::wire::reader::RECURSION_LIMIT;
    use opentelemetry_proto::tonic::common::v1::{
        any_value::Value as AnyValueKind, AnyValue, ArrayValue, KeyValueList,
    };
    use prost::Message;

    #[test]
    fn key_value_reads_what_prost_decodes() {
        let nested = kv(
            "m",
            AnyValueKind::KvlistValue(KeyValueList {
                values: vec![
                    kv("s", AnyValueKind::StringValue("x".into())),
                    kv(
                        "a",
                        AnyValueKind::ArrayValue(ArrayValue {
                            values: vec![
                                AnyValue {
                                    value: Some(AnyValueKind::IntValue(-1)),
                                },
                                AnyValue {
                                    value: Some(AnyValueKind::BytesValue(vec![0, 255])),
                                },
                                AnyValue {
                                    value: Some(AnyValueKind::DoubleValue(1.5)),
                                },
                                AnyValue {
                                    value: Some(AnyValueKind::BoolValue(true)),
                                },
                                AnyValue { value: None },
                            ],
                        }),
                    ),
                ],
            }),
        );
        let buf = nested.encode_to_vec();
        assert_eq!(key_value(&buf, 0..buf.len(), RECURSION_LIMIT), Ok(nested));
    }

    #[test]
    fn key_of_reads_only_the_key() {
        let buf = kv("service.name", AnyValueKind::StringValue("svc".into())).encode_to_vec();
        assert_eq!(key_of(&buf, 0..buf.len()), Ok(&b"service.name"[..]));
    }
}
