//! The `loop.*` attributes as encoded `KeyValue` bodies ([`EncodedAttributes`]), written
//! once and copied onto a span and its `loop.detected` event, and the `AnyValue` bodies
//! they hold ([`value`]).

use std::borrow::Cow;
use std::ops::Range;

use opentelemetry_proto::tonic::common::v1::KeyValue;

use crate::otlp::wire::reader::{put_len_key, put_varint};

/// Encoded `KeyValue` messages (their bodies, as prost writes them) and their keys, to be
/// written on a span and inside its event ([`SpanEdit::adding_encoded_with_event`]).
#[derive(Debug, Clone, Default)]
pub struct EncodedAttributes {
    pub(super) bytes: Vec<u8>,
    /// Each attribute's key and the range of its body in `bytes`.
    pub(super) entries: Vec<(Cow<'static, str>, Range<usize>)>,
    /// Reused for the `AnyValue` body of [`EncodedAttributes::push`].
    scratch: Vec<u8>,
}

/// Equal when they hold the same keys and encoded bytes.
impl PartialEq for EncodedAttributes {
    fn eq(&self, other: &Self) -> bool {
        self.bytes == other.bytes && self.entries == other.entries
    }
}

impl EncodedAttributes {
    /// Empty, with room for `attributes` attributes of `bytes` encoded bytes in all (the
    /// `loop.*` attributes of a span are about 400 bytes; growing the buffer 4 times from
    /// nothing was a reallocation per annotated span).
    pub fn with_capacity(attributes: usize, bytes: usize) -> Self {
        EncodedAttributes {
            bytes: Vec::with_capacity(bytes),
            entries: Vec::with_capacity(attributes),
            scratch: Vec::with_capacity(bytes / 2),
        }
    }

    /// Appends the attribute `key` whose `AnyValue` body `write_value` writes (see
    /// [`value`]); the key must not be empty (prost would leave it out).
    pub fn push(&mut self, key: &'static str, write_value: impl FnOnce(&mut Vec<u8>)) {
        let start = self.bytes.len();
        put_len_key(1, &mut self.bytes);
        put_varint(key.len() as u64, &mut self.bytes);
        self.bytes.extend_from_slice(key.as_bytes());
        self.scratch.clear();
        write_value(&mut self.scratch);
        put_len_key(2, &mut self.bytes);
        put_varint(self.scratch.len() as u64, &mut self.bytes);
        self.bytes.extend_from_slice(&self.scratch);
        self.entries
            .push((Cow::Borrowed(key), start..self.bytes.len()));
    }

    /// `attributes` encoded with prost.
    pub fn from_key_values(attributes: &[KeyValue]) -> Self {
        use prost::Message;
        let mut encoded = EncodedAttributes::default();
        for kv in attributes {
            let start = encoded.bytes.len();
            kv.encode_raw(&mut encoded.bytes);
            let end = encoded.bytes.len();
            encoded
                .entries
                .push((Cow::Owned(kv.key.clone()), start..end));
        }
        encoded
    }

    pub(super) fn bodies(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.entries.iter().map(|(_, r)| &self.bytes[r.clone()])
    }
}

/// `AnyValue` message bodies, written as prost writes them (a oneof field is written even
/// when it holds its default).
pub mod value {
    use prost::encoding::encoded_len_varint;

    use super::{put_len_key, put_varint};

    /// `bool_value` (field 2).
    pub fn put_bool(value: bool, out: &mut Vec<u8>) {
        out.push(0x10);
        put_varint(u64::from(value), out);
    }

    /// `int_value` (field 3).
    pub fn put_int(value: i64, out: &mut Vec<u8>) {
        out.push(0x18);
        put_varint(value as u64, out);
    }

    /// `string_value` (field 1).
    pub fn put_string(value: &str, out: &mut Vec<u8>) {
        put_len_key(1, out);
        put_varint(value.len() as u64, out);
        out.extend_from_slice(value.as_bytes());
    }

    /// `array_value` (field 5) of `string_value`s.
    pub fn put_string_array<S: AsRef<str>>(items: &[S], out: &mut Vec<u8>) {
        let element = |s: &S| {
            let s = s.as_ref();
            1 + encoded_len_varint(s.len() as u64) + s.len()
        };
        let array_len: usize = items
            .iter()
            .map(|s| {
                let len = element(s);
                1 + encoded_len_varint(len as u64) + len
            })
            .sum();
        put_len_key(5, out);
        put_varint(array_len as u64, out);
        for item in items {
            put_len_key(1, out);
            put_varint(element(item) as u64, out);
            put_string(item.as_ref(), out);
        }
    }
}
