//! A borrowed view of the parts of a span detection reads: ids, name, kind, times,
//! attributes, events and status. The conventions ([`crate::conventions`]), the run key
//! ([`crate::conventions::run_key`]) and the engine read spans through it, so the wire path
//! ([`crate::otlp::wire::view`]) borrows strings and ids from the request's bytes instead of
//! materialising an owned `opentelemetry_proto` `Span`, and the OTLP/JSON path borrows them
//! from the decoded `Span` ([`SpanView::from`]).
//!
//! The shapes mirror `opentelemetry_proto` (same field and variant names). A span's name,
//! its events' names and its status message are `Cow::Borrowed` when their bytes are valid
//! UTF-8 and `Cow::Owned` (lossy, U+FFFD) when they are not; attribute keys and string
//! values are [`Text`]s, checked only when read; ids and bytes values are borrowed slices. Links, trace state, flags,
//! `key_strindex` and dropped counts are not in the view.

use std::borrow::Cow;

mod text;
pub use text::Text;

use opentelemetry_proto::tonic::common::v1::{
    any_value::Value, AnyValue, ArrayValue, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::trace::v1::{span::Event, Span, Status};

/// What detection reads of one span, borrowing from a buffer or a decoded `Span`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpanView<'a> {
    /// 16 bytes when valid (as received; may be empty or malformed).
    pub trace_id: &'a [u8],
    /// 8 bytes when valid.
    pub span_id: &'a [u8],
    /// 8 bytes, empty for a root span.
    pub parent_span_id: &'a [u8],
    /// The span name.
    pub name: Cow<'a, str>,
    /// OTLP `SpanKind` as its number.
    pub kind: i32,
    /// Start, nanoseconds since the Unix epoch (0 when unset).
    pub start_time_unix_nano: u64,
    /// End, nanoseconds since the Unix epoch (0 when unset).
    pub end_time_unix_nano: u64,
    /// Span attributes in wire order (duplicates kept, as prost keeps them). Borrowed from
    /// the request's attribute store for the spans of a request read from its bytes
    /// ([`crate::otlp::wire::view::ViewArena`]); owned in a view of a decoded `Span` or of one
    /// span read on its own ([`crate::otlp::wire::view::span`]).
    pub attributes: List<'a, KeyValueView<'a>>,
    /// Span events in wire order.
    pub events: Vec<EventView<'a>>,
    /// The status, when the span carries one.
    pub status: Option<StatusView<'a>>,
}

/// A list of a view: a slice of storage shared by a request's spans (the wire path,
/// [`crate::otlp::wire::view::ViewArena`]) or a vector of its own (a view of a decoded `Span`).
/// Reads as a slice (`Deref`); compares, clones and prints as one. (`Cow<[T]>` would do
/// but is invariant in `T`, and views must stay covariant to be kept beside their bytes.)
#[derive(Clone)]
pub enum List<'a, T> {
    /// Part of a shared store.
    Borrowed(&'a [T]),
    /// The view's own.
    Owned(Vec<T>),
}

impl<T> Default for List<'_, T> {
    fn default() -> Self {
        List::Borrowed(&[])
    }
}

impl<T> std::ops::Deref for List<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match self {
            List::Borrowed(items) => items,
            List::Owned(items) => items,
        }
    }
}

impl<'l, T> IntoIterator for &'l List<'_, T> {
    type Item = &'l T;
    type IntoIter = std::slice::Iter<'l, T>;
    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

impl<T: PartialEq> PartialEq for List<'_, T> {
    fn eq(&self, other: &Self) -> bool {
        **self == **other
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for List<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        (**self).fmt(f)
    }
}

impl<T> From<Vec<T>> for List<'_, T> {
    fn from(items: Vec<T>) -> Self {
        List::Owned(items)
    }
}

/// One attribute: `KeyValue`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KeyValueView<'a> {
    /// The attribute key.
    pub key: Text<'a>,
    /// The value; `None` when the `value` field is absent.
    pub value: Option<AnyValueView<'a>>,
}

/// `AnyValue`: `value` is `None` for an empty AnyValue (present, no variant set).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AnyValueView<'a> {
    /// The variant set, if any.
    pub value: Option<ValueView<'a>>,
}

/// The `AnyValue` oneof (`any_value::Value`), borrowed.
#[derive(Debug, Clone, PartialEq)]
pub enum ValueView<'a> {
    /// `string_value`.
    StringValue(Text<'a>),
    /// `bool_value`.
    BoolValue(bool),
    /// `int_value`.
    IntValue(i64),
    /// `double_value`.
    DoubleValue(f64),
    /// `array_value`: its values.
    ArrayValue(Vec<AnyValueView<'a>>),
    /// `kvlist_value`: its entries.
    KvlistValue(Vec<KeyValueView<'a>>),
    /// `bytes_value`.
    BytesValue(&'a [u8]),
    /// `string_value_strindex` (a profiles dictionary index; never read as text).
    StringValueStrindex(i32),
}

/// One span event: `Span.Event`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EventView<'a> {
    /// Nanoseconds since the Unix epoch.
    pub time_unix_nano: u64,
    /// The event name, e.g. `exception`.
    pub name: Cow<'a, str>,
    /// Event attributes in wire order (borrowed or owned as [`SpanView::attributes`]).
    pub attributes: List<'a, KeyValueView<'a>>,
}

/// The span status: `Status`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StatusView<'a> {
    /// The status message.
    pub message: Cow<'a, str>,
    /// OTLP `StatusCode` as its number (2 = error).
    pub code: i32,
}

/// Text from bytes: borrowed when valid UTF-8, else lossy (U+FFFD) and owned. Valid text
/// (the usual case) is checked by `simdutf8` (SIMD; `str::from_utf8` was 8 % of reading the
/// corpus, whose conversations are long strings): `String::from_utf8_lossy` walks it chunk
/// by chunk, several times slower, so it only runs on text that is not UTF-8.
pub fn text(bytes: &[u8]) -> Cow<'_, str> {
    match simdutf8::basic::from_utf8(bytes) {
        Ok(text) => Cow::Borrowed(text),
        Err(_) => Cow::Owned(String::from_utf8_lossy(bytes).into_owned()),
    }
}

impl<'a> From<&'a Span> for SpanView<'a> {
    fn from(span: &'a Span) -> Self {
        SpanView {
            trace_id: &span.trace_id,
            span_id: &span.span_id,
            parent_span_id: &span.parent_span_id,
            name: Cow::Borrowed(&span.name),
            kind: span.kind,
            start_time_unix_nano: span.start_time_unix_nano,
            end_time_unix_nano: span.end_time_unix_nano,
            attributes: List::Owned(span.attributes.iter().map(KeyValueView::from).collect()),
            events: span.events.iter().map(EventView::from).collect(),
            status: span.status.as_ref().map(StatusView::from),
        }
    }
}

impl<'a> From<&'a KeyValue> for KeyValueView<'a> {
    fn from(kv: &'a KeyValue) -> Self {
        KeyValueView {
            key: Text::from(kv.key.as_str()),
            value: kv.value.as_ref().map(AnyValueView::from),
        }
    }
}

impl<'a> From<&'a AnyValue> for AnyValueView<'a> {
    fn from(value: &'a AnyValue) -> Self {
        AnyValueView {
            value: value.value.as_ref().map(|v| match v {
                Value::StringValue(s) => ValueView::StringValue(Text::from(s.as_str())),
                Value::BoolValue(b) => ValueView::BoolValue(*b),
                Value::IntValue(i) => ValueView::IntValue(*i),
                Value::DoubleValue(d) => ValueView::DoubleValue(*d),
                Value::ArrayValue(a) => {
                    ValueView::ArrayValue(a.values.iter().map(AnyValueView::from).collect())
                }
                Value::KvlistValue(l) => {
                    ValueView::KvlistValue(l.values.iter().map(KeyValueView::from).collect())
                }
                Value::BytesValue(b) => ValueView::BytesValue(b),
                Value::StringValueStrindex(i) => ValueView::StringValueStrindex(*i),
            }),
        }
    }
}

/// The owned prost `KeyValue` of a view (`key_strindex` 0: views do not carry it).
impl From<&KeyValueView<'_>> for KeyValue {
    fn from(kv: &KeyValueView<'_>) -> Self {
        KeyValue {
            key: kv.key.to_string(),
            value: kv.value.as_ref().map(AnyValue::from),
            ..KeyValue::default()
        }
    }
}

/// The owned prost `AnyValue` of a view.
impl From<&AnyValueView<'_>> for AnyValue {
    fn from(value: &AnyValueView<'_>) -> Self {
        AnyValue {
            value: value.value.as_ref().map(|v| match v {
                ValueView::StringValue(s) => Value::StringValue(s.to_string()),
                ValueView::BoolValue(b) => Value::BoolValue(*b),
                ValueView::IntValue(i) => Value::IntValue(*i),
                ValueView::DoubleValue(d) => Value::DoubleValue(*d),
                ValueView::ArrayValue(values) => Value::ArrayValue(ArrayValue {
                    values: values.iter().map(AnyValue::from).collect(),
                }),
                ValueView::KvlistValue(values) => Value::KvlistValue(KeyValueList {
                    values: values.iter().map(KeyValue::from).collect(),
                }),
                ValueView::BytesValue(b) => Value::BytesValue(b.to_vec()),
                ValueView::StringValueStrindex(i) => Value::StringValueStrindex(*i),
            }),
        }
    }
}

impl<'a> From<&'a Event> for EventView<'a> {
    fn from(event: &'a Event) -> Self {
        EventView {
            time_unix_nano: event.time_unix_nano,
            name: Cow::Borrowed(&event.name),
            attributes: List::Owned(event.attributes.iter().map(KeyValueView::from).collect()),
        }
    }
}

impl<'a> From<&'a Status> for StatusView<'a> {
    fn from(status: &'a Status) -> Self {
        StatusView {
            message: Cow::Borrowed(&status.message),
            code: status.code,
        }
    }
}

/// The value of attribute `key`, if present (first occurrence wins), as
/// [`crate::otlp::attr`].
pub fn attr<'s, 'a>(attributes: &'s [KeyValueView<'a>], key: &str) -> Option<&'s AnyValueView<'a>> {
    attributes
        .iter()
        .find(|kv| kv.key.is(key))
        .and_then(|kv| kv.value.as_ref())
}

/// The string value of attribute `key`, if present and a `stringValue`, as
/// [`crate::otlp::attr_str`].
pub fn attr_str<'s>(attributes: &'s [KeyValueView<'_>], key: &str) -> Option<&'s str> {
    match attr(attributes, key)?.value.as_ref()? {
        ValueView::StringValue(s) => Some(s),
        _ => None,
    }
}

/// An AnyValue as JSON, exactly as [`crate::otlp::any_value_to_json`]: kvlist → object,
/// array → array, bytes → lowercase hex string, ints and doubles → numbers (non-finite
/// doubles → null), empty and strindex → null.
pub fn any_value_to_json(value: &AnyValueView<'_>) -> serde_json::Value {
    use serde_json::Value as J;
    match value.value.as_ref() {
        None | Some(ValueView::StringValueStrindex(_)) => J::Null,
        Some(ValueView::StringValue(s)) => J::String(s.to_string()),
        Some(ValueView::BoolValue(b)) => J::Bool(*b),
        Some(ValueView::IntValue(i)) => J::from(*i),
        Some(ValueView::DoubleValue(d)) => {
            serde_json::Number::from_f64(*d).map_or(J::Null, J::Number)
        }
        Some(ValueView::BytesValue(b)) => J::String(hex::encode(b)),
        Some(ValueView::ArrayValue(a)) => J::Array(a.iter().map(any_value_to_json).collect()),
        Some(ValueView::KvlistValue(kvs)) => J::Object(
            kvs.iter()
                .map(|kv| {
                    (
                        kv.key.to_string(),
                        kv.value.as_ref().map_or(J::Null, any_value_to_json),
                    )
                })
                .collect(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::test_support::kv;
    use opentelemetry_proto::tonic::common::v1::{ArrayValue, KeyValueList};

    #[test]
    fn a_prost_span_is_borrowed_whole() {
        let span = Span {
            trace_id: vec![1; 16],
            span_id: vec![2; 8],
            name: "chat".into(),
            attributes: vec![
                kv("s", Value::StringValue("x".into())),
                kv("y", Value::BytesValue(vec![0, 255])),
            ],
            status: Some(Status {
                message: "m".into(),
                code: 2,
            }),
            ..Default::default()
        };
        let view = SpanView::from(&span);
        assert_eq!(view.trace_id, &[1; 16][..]);
        assert!(matches!(view.name, Cow::Borrowed("chat")));
        assert_eq!(attr_str(&view.attributes, "s"), Some("x"));
        assert_eq!(
            attr(&view.attributes, "y").and_then(|v| v.value.clone()),
            Some(ValueView::BytesValue(&[0, 255]))
        );
        assert_eq!(attr(&view.attributes, "missing"), None);
        assert_eq!(
            view.status.map(|s| (s.code, s.message)),
            Some((2, "m".into()))
        );
    }

    #[test]
    fn json_matches_the_prost_mapping() {
        let value = AnyValue {
            value: Some(Value::KvlistValue(KeyValueList {
                values: vec![
                    kv("a", Value::IntValue(1)),
                    kv("b", Value::DoubleValue(f64::NAN)),
                    kv("c", Value::BytesValue(vec![0xab])),
                    kv(
                        "d",
                        Value::ArrayValue(ArrayValue {
                            values: vec![AnyValue {
                                value: Some(Value::BoolValue(true)),
                            }],
                        }),
                    ),
                ],
            })),
        };
        let json = any_value_to_json(&AnyValueView::from(&value));
        assert_eq!(json, crate::otlp::any_value_to_json(&value));
        assert_eq!(
            json,
            serde_json::json!({"a": 1, "b": null, "c": "ab", "d": [true]})
        );
    }

    #[test]
    fn invalid_utf8_is_owned_and_lossy() {
        assert!(matches!(text(b"ok"), Cow::Borrowed("ok")));
        assert_eq!(text(b"a\xffb"), Cow::<str>::Owned("a\u{fffd}b".into()));
    }
}
