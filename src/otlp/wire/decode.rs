//! Resource attributes as opentelemetry-proto types (read through the span view), the
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

use opentelemetry_proto::tonic::common::v1::KeyValue;

use super::reader::{Field, Fields, Value, WireError};

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
///
/// With a memory grant ([`ValueBudget::with_memory`]) it also pays for what the reader
/// builds, in bytes: [`VALUE_VIEW_BYTES`] per value and [`SPAN_VIEW_BYTES`] per span,
/// asking the grant for more in steps of [`GRANT_STEP`] bytes; when the grant refuses,
/// reading stops with [`WireError::OverBudget`] before the memory is allocated (issue 31
/// item 1: admission by decoded cost).
pub struct ValueBudget<'g> {
    left: usize,
    limit: usize,
    memory: Option<Memory<'g>>,
}

/// The memory side of a [`ValueBudget`]: bytes paid for and not yet used, and where more
/// come from.
struct Memory<'g> {
    left: usize,
    grow: &'g mut dyn FnMut(usize) -> bool,
}

impl std::fmt::Debug for ValueBudget<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueBudget")
            .field("left", &self.left)
            .field("limit", &self.limit)
            .field("memory_left", &self.memory.as_ref().map(|m| m.left))
            .finish()
    }
}

/// Bytes one value (attribute, event, array or kvlist element) is counted at once read:
/// its view, twice (the arena's vectors grow by doubling, so up to half of it is slack).
pub const VALUE_VIEW_BYTES: usize =
    2 * std::mem::size_of::<crate::otlp::view::KeyValueView<'static>>();

/// Bytes one span is counted at once read: its record and its view (see
/// [`super::request`]), with slack for the vectors that hold them.
pub const SPAN_VIEW_BYTES: usize =
    2 * (std::mem::size_of::<crate::otlp::view::SpanView<'static>>() + 96);

/// Memory is asked of the grant in steps of this many bytes (1 MiB).
pub const GRANT_STEP: usize = 1 << 20;

impl<'g> ValueBudget<'g> {
    /// A budget of `limit` values.
    pub fn new(limit: usize) -> Self {
        Self {
            left: limit,
            limit,
            memory: None,
        }
    }

    /// A budget of `limit` values whose views are also paid for in bytes by `grow` (called
    /// with the bytes wanted; `false` refuses).
    pub fn with_memory(limit: usize, grow: &'g mut dyn FnMut(usize) -> bool) -> Self {
        Self {
            left: limit,
            limit,
            memory: Some(Memory { left: 0, grow }),
        }
    }

    /// Values left to take.
    pub(super) fn left(&self) -> usize {
        self.left
    }

    /// Takes one value, or fails with [`WireError::TooManyValues`] (or
    /// [`WireError::OverBudget`]).
    pub(super) fn take(&mut self) -> Result<(), WireError> {
        match self.left.checked_sub(1) {
            Some(left) => {
                self.left = left;
                self.pay(VALUE_VIEW_BYTES)
            }
            None => Err(WireError::TooManyValues { limit: self.limit }),
        }
    }

    /// Pays for one span's views ([`SPAN_VIEW_BYTES`]).
    pub(super) fn take_span(&mut self) -> Result<(), WireError> {
        self.pay(SPAN_VIEW_BYTES)
    }

    #[inline]
    fn pay(&mut self, bytes: usize) -> Result<(), WireError> {
        let Some(memory) = &mut self.memory else {
            return Ok(());
        };
        match memory.left.checked_sub(bytes) {
            Some(left) => {
                memory.left = left;
                Ok(())
            }
            None => {
                if !(memory.grow)(GRANT_STEP) {
                    return Err(WireError::OverBudget);
                }
                memory.left += GRANT_STEP - bytes;
                Ok(())
            }
        }
    }
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
