//! Protobuf wire-format primitives over a borrowed buffer: one message's fields, in order,
//! with absolute byte offsets into the request, using `prost::encoding`'s varint and key
//! decoding so malformed input fails exactly where prost fails.

use std::ops::Range;

use prost::encoding::{decode_key, decode_varint, WireType};

/// The decode-depth budget of a whole request: prost's `RECURSION_LIMIT` (100), so a
/// request nested too deep for prost is refused here too.
pub const RECURSION_LIMIT: u32 = 100;

/// Why bytes are not a valid OTLP protobuf message. Mapped to `INVALID_ARGUMENT` / HTTP 400
/// at the edge, like prost's `DecodeError` today.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// A malformed varint or field key (prost's own primitive failed).
    #[error(transparent)]
    Decode(#[from] prost::DecodeError),
    /// A length prefix or fixed-width value runs past the end of its enclosing message.
    #[error("a field runs past the end of its message (truncated or corrupt request)")]
    Truncated,
    /// A known field carries the wrong wire type.
    #[error("{message}.{field} has wire type {actual:?}, expected {expected:?}")]
    WireType {
        /// The OTLP message, e.g. `Span`.
        message: &'static str,
        /// The field number.
        field: u32,
        /// The wire type the OTLP schema gives the field.
        expected: WireType,
        /// The wire type found.
        actual: WireType,
    },
    /// An end-group marker without its start group (or with another tag).
    #[error("unexpected end-group marker")]
    UnexpectedEndGroup,
    /// Messages nested deeper than [`RECURSION_LIMIT`].
    #[error("message nested deeper than the recursion limit of {RECURSION_LIMIT}")]
    RecursionLimit,
    /// A span's trace or span id (its own, its parent's or a link's) that is neither empty
    /// nor of its OTLP length (trace 16 bytes, span 8). prost reads any length; the
    /// Collector refuses the whole request holding one ("unmarshal: invalid TraceID
    /// length", open-telemetry/opentelemetry-collector `pdata/internal/data/traceid.go` and
    /// `spanid.go`: empty or exactly 16 / 8 bytes), and the forwarder merges requests into
    /// one export, so the span is left out alone, as the OTLP/JSON decoder leaves it out
    /// (`receiver::partial`). `field` is the OTLP/JSON name (`traceId`, `links[0].spanId`),
    /// so the reason reads as a field of the span.
    #[error(".{field}: id has {len} bytes, expected {expected}")]
    IdLength {
        /// The id's field in the span, OTLP/JSON names.
        field: std::borrow::Cow<'static, str>,
        /// Its length in bytes.
        len: usize,
        /// The OTLP length: 16 for a trace id, 8 for a span id.
        expected: usize,
    },
    /// Not malformed, but more spans than the reader was allowed to read
    /// ([`super::WireRequest::read_limited`]): reading stopped at the cap, so a request of
    /// millions of empty spans costs the cap, not its span count.
    #[error("request holds more than {limit} spans")]
    TooManySpans {
        /// The cap.
        limit: usize,
    },
    /// Not malformed, but more attributes, events, array/kvlist elements and entries around
    /// the spans than the reader was allowed to build ([`ValueBudget`]).
    #[error("request holds more than {limit} values (attributes, events, array and kvlist elements, resource and scope entries)")]
    TooManyValues {
        /// The cap.
        limit: usize,
    },
    /// Not malformed, but what reading it builds does not fit the decoded-bytes budget now
    /// ([`ValueBudget::with_memory`]): reading stopped before building it;
    /// the receiver refuses the request retryably.
    #[error("the request's decoded size does not fit the decoded-bytes budget now")]
    OverBudget,
}

/// A field's value: scalars decoded, length-delimited values as absolute byte ranges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 1 (`fixed64`, `double`).
    Fixed64(u64),
    /// Wire type 5 (`fixed32`).
    Fixed32(u32),
    /// Wire type 2: the value's bytes (without the length prefix).
    Len(Range<usize>),
    /// Wire types 3/4 (deprecated groups): skipped whole.
    Group,
}

/// One field of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// Field number (≥ 1).
    pub number: u32,
    /// Wire type as encoded.
    pub wire_type: WireType,
    /// The decoded value.
    pub value: Value,
    /// Absolute range of the whole field (key, length prefix and value).
    pub range: Range<usize>,
}

impl Field {
    /// The value's byte range, for a length-delimited field.
    pub fn len_range(&self) -> Option<Range<usize>> {
        match &self.value {
            Value::Len(r) => Some(r.clone()),
            _ => None,
        }
    }
}

/// The fields of one message occupying `range` of `buf`, in wire order. Stops at the
/// first error (after yielding it).
pub struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    end: usize,
    /// prost's recursion budget left at this message (groups consume it).
    budget: u32,
    failed: bool,
}

impl<'a> Fields<'a> {
    /// Fields of the message in `buf[range]`; `budget` is the recursion budget at this
    /// message ([`RECURSION_LIMIT`] for the request itself). `range` must lie within `buf`
    /// (it is clamped otherwise).
    pub fn new(buf: &'a [u8], range: Range<usize>, budget: u32) -> Self {
        let end = range.end.min(buf.len());
        Fields {
            buf,
            pos: range.start.min(end),
            end,
            budget,
            failed: false,
        }
    }

    fn varint(&mut self) -> Result<u64, WireError> {
        // One-byte varints (lengths under 128, small enums) are most: read them directly.
        if let Some(&byte) = self.buf[..self.end].get(self.pos) {
            if byte < 0x80 {
                self.pos += 1;
                return Ok(u64::from(byte));
            }
        }
        let mut rest = &self.buf[self.pos..self.end];
        let v = decode_varint(&mut rest)?;
        self.pos = self.end - rest.len();
        Ok(v)
    }

    fn key(&mut self) -> Result<(u32, WireType), WireError> {
        // A one-byte key (field numbers 1–15) with a valid tag and wire type is read
        // directly; anything else goes through prost, for its exact error.
        if let Some(&byte) = self.buf[..self.end].get(self.pos) {
            let wire_type = match byte & 0x07 {
                0 => Some(WireType::Varint),
                1 => Some(WireType::SixtyFourBit),
                2 => Some(WireType::LengthDelimited),
                3 => Some(WireType::StartGroup),
                4 => Some(WireType::EndGroup),
                5 => Some(WireType::ThirtyTwoBit),
                _ => None,
            };
            if let (true, Some(wire_type)) = (byte < 0x80 && byte >> 3 != 0, wire_type) {
                self.pos += 1;
                return Ok((u32::from(byte >> 3), wire_type));
            }
        }
        let mut rest = &self.buf[self.pos..self.end];
        let k = decode_key(&mut rest)?;
        self.pos = self.end - rest.len();
        Ok(k)
    }

    fn take(&mut self, n: u64) -> Result<Range<usize>, WireError> {
        let left = (self.end - self.pos) as u64;
        if n > left {
            return Err(WireError::Truncated);
        }
        let start = self.pos;
        self.pos += n as usize;
        Ok(start..self.pos)
    }

    /// Skips a group whose start key (tag `tag`) was just read, as prost's `skip_field`.
    fn skip_group(&mut self, tag: u32, budget: u32) -> Result<(), WireError> {
        if budget == 0 {
            return Err(WireError::RecursionLimit);
        }
        loop {
            let (inner, wire_type) = self.key()?;
            match wire_type {
                WireType::EndGroup if inner == tag => return Ok(()),
                WireType::EndGroup => return Err(WireError::UnexpectedEndGroup),
                WireType::StartGroup => self.skip_group(inner, budget - 1)?,
                other => {
                    if budget - 1 == 0 {
                        return Err(WireError::RecursionLimit);
                    }
                    self.value(other)?;
                }
            }
        }
    }

    fn value(&mut self, wire_type: WireType) -> Result<Value, WireError> {
        Ok(match wire_type {
            WireType::Varint => Value::Varint(self.varint()?),
            WireType::SixtyFourBit => {
                let r = self.take(8)?;
                let mut b = [0u8; 8];
                b.copy_from_slice(&self.buf[r]);
                Value::Fixed64(u64::from_le_bytes(b))
            }
            WireType::ThirtyTwoBit => {
                let r = self.take(4)?;
                let mut b = [0u8; 4];
                b.copy_from_slice(&self.buf[r]);
                Value::Fixed32(u32::from_le_bytes(b))
            }
            WireType::LengthDelimited => {
                let n = self.varint()?;
                Value::Len(self.take(n)?)
            }
            WireType::StartGroup | WireType::EndGroup => return Err(WireError::UnexpectedEndGroup),
        })
    }

    fn field(&mut self) -> Result<Field, WireError> {
        let start = self.pos;
        let (number, wire_type) = self.key()?;
        let value = match wire_type {
            WireType::StartGroup => {
                self.skip_group(number, self.budget)?;
                Value::Group
            }
            WireType::EndGroup => return Err(WireError::UnexpectedEndGroup),
            other => self.value(other)?,
        };
        Ok(Field {
            number,
            wire_type,
            value,
            range: start..self.pos,
        })
    }
}

impl Iterator for Fields<'_> {
    type Item = Result<Field, WireError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.end {
            return None;
        }
        let field = self.field();
        self.failed = field.is_err();
        Some(field)
    }
}

/// Appends a varint (for rewritten length prefixes).
pub fn put_varint(value: u64, out: &mut Vec<u8>) {
    prost::encoding::encode_varint(value, out);
}

/// Appends the key of a length-delimited field `number`.
pub fn put_len_key(number: u32, out: &mut Vec<u8>) {
    prost::encoding::encode_key(number, WireType::LengthDelimited, out);
}

/// The bytes of a length-delimited `field` (empty for any other wire type).
pub(super) fn bytes_of<'a>(buf: &'a [u8], field: &Field) -> &'a [u8] {
    field.len_range().map_or(&[][..], |r| &buf[r])
}

/// The value of a varint `field` (0 for any other wire type).
pub(super) fn varint(field: &Field) -> u64 {
    match field.value {
        Value::Varint(v) => v,
        _ => 0,
    }
}

/// The value of a fixed64 `field` (0 for any other wire type).
pub(super) fn fixed64(field: &Field) -> u64 {
    match field.value {
        Value::Fixed64(v) => v,
        _ => 0,
    }
}

/// How many values one request may still materialise: every `KeyValue` (span, event and
/// kvlist attributes), every array element and every event counts one, and so does every
/// entry around the spans the reader keeps something for (each `ResourceSpans`, each
/// occurrence of its `resource` and each `service.name` read from it, each `scope_spans`
/// and `instrumentation_library_spans` entry: [`super::request`]). Empty ones cost two
/// bytes on the wire but 32–80 bytes once built, so without a bound a 16 MB request of
/// empty attributes would build half a gigabyte (and one of empty `ResourceSpans` ~800 MB,
/// issue D1).
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

/// Bytes one value (attribute, event, array or kvlist element, or an entry around the
/// spans) is counted at once read: an attribute's view, twice (the arena's vectors grow by
/// doubling, so up to half of it is slack); more than a [`super::WireResource`] or a byte
/// range costs.
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

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(buf: &[u8]) -> Vec<Result<Field, WireError>> {
        Fields::new(buf, 0..buf.len(), RECURSION_LIMIT).collect()
    }

    #[test]
    fn reads_each_wire_type_with_absolute_ranges() {
        // 1: varint 150; 2: "hi"; 3: fixed64 7; 4: fixed32 9
        let buf = [
            0x08, 0x96, 0x01, 0x12, 0x02, b'h', b'i', 0x19, 7, 0, 0, 0, 0, 0, 0, 0, 0x25, 9, 0, 0,
            0,
        ];
        let got: Vec<Field> = fields(&buf).into_iter().map(|f| f.unwrap()).collect();
        assert_eq!(got.len(), 4);
        assert_eq!((got[0].number, &got[0].value), (1, &Value::Varint(150)));
        assert_eq!(got[0].range, 0..3);
        assert_eq!(got[1].value, Value::Len(5..7));
        assert_eq!(got[1].range, 3..7);
        assert_eq!(got[2].value, Value::Fixed64(7));
        assert_eq!(got[3].value, Value::Fixed32(9));
        assert_eq!(got[3].range, 16..21);
    }

    #[test]
    fn truncated_length_is_an_error_and_stops() {
        let buf = [0x12, 0x05, b'a'];
        let got = fields(&buf);
        assert_eq!(got, vec![Err(WireError::Truncated)]);
    }

    #[test]
    fn bad_varint_key_and_zero_tag_fail_like_prost() {
        let overlong = [0xff; 11];
        assert!(matches!(fields(&overlong)[0], Err(WireError::Decode(_))));
        let zero_tag = [0x00, 0x01];
        assert!(matches!(fields(&zero_tag)[0], Err(WireError::Decode(_))));
        let wire_type_7 = [0x0f];
        assert!(matches!(fields(&wire_type_7)[0], Err(WireError::Decode(_))));
    }

    #[test]
    fn groups_are_skipped_whole_and_unmatched_end_fails() {
        // field 1 start group, inner field 2 varint 5, end group 1, then field 3 varint 1
        let buf = [0x0b, 0x10, 0x05, 0x0c, 0x18, 0x01];
        let got: Vec<Field> = fields(&buf).into_iter().map(|f| f.unwrap()).collect();
        assert_eq!(got[0].value, Value::Group);
        assert_eq!(got[0].range, 0..4);
        assert_eq!(got[1].value, Value::Varint(1));
        assert_eq!(fields(&[0x0c]), vec![Err(WireError::UnexpectedEndGroup)]);
        // group closed by another tag
        assert_eq!(
            fields(&[0x0b, 0x14]),
            vec![Err(WireError::UnexpectedEndGroup)]
        );
    }

    #[test]
    fn range_bounds_the_message() {
        let buf = [0x08, 0x01, 0x08, 0x02];
        let got: Vec<_> = Fields::new(&buf, 2..4, RECURSION_LIMIT).collect();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].as_ref().unwrap().value, Value::Varint(2));
        // a range past the buffer is clamped, not a panic
        assert_eq!(Fields::new(&buf, 3..99, RECURSION_LIMIT).count(), 1);
    }
}
