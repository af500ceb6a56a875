//! The borrowed [`SpanView`] of a span, read from the request's bytes: ids and bytes values
//! are slices of the request, texts are borrowed when valid UTF-8 and read lossily (owned,
//! U+FFFD) when not, and a request's attributes and events are kept in one
//! [`ViewArena`] for all its spans, so a span costs no allocation of its own bar the list
//! of its events, when it has any (and a non-UTF-8 text, an array or a kvlist value).
//!
//! Semantics and validation are those of [`super::decode`] (prost's merge rules: a repeated
//! field appends, a scalar seen twice keeps the last value, a nested message seen twice is
//! merged, an `AnyValue` oneof of the same message variant is merged and of another variant
//! replaced; wire types, lengths, groups and the recursion budget checked as
//! [`super::schema::check`] does, in the same pass, with the same [`WireError`]s), and every
//! attribute, event and array or kvlist element is taken from the [`ValueBudget`] at the
//! same point.

use std::borrow::Cow;
use std::ops::Range;

use crate::otlp::view::{
    text, AnyValueView, EventView, KeyValueView, List, SpanView, StatusView, Text, ValueView,
};

use super::reader::{bytes_of, fixed64, varint, ValueBudget};
use super::reader::{Fields, WireError};
use super::schema::{check, check_field, Msg};

/// Where the span views of one request keep their attributes and events: one vector each
/// for the whole request instead of one per span (a vector allocated and freed per span was
/// 4.5 % of the server's CPU on 1000-span tool-call requests, in glibc's malloc and free).
/// A span's attributes are one contiguous run of `span_attributes` (they are read while its
/// fields are walked, and an event's attributes go to `event_attributes`, so an event between
/// two attributes does not split the run).
#[derive(Debug, Default)]
pub struct ViewArena<'a> {
    /// Every span's attributes, span after span, each span's in wire order.
    pub span_attributes: Vec<KeyValueView<'a>>,
    /// Every event's attributes, event after event.
    pub event_attributes: Vec<KeyValueView<'a>>,
    /// Every span's events, span after span.
    pub events: Vec<EventRecord<'a>>,
}

impl ViewArena<'_> {
    /// An arena with room for the attributes of about `bytes` bytes of spans (a GenAI tool
    /// span's attribute is rarely under 48 bytes on the wire), at most `max_values`: about
    /// `bytes` of address space, touched only as far as attributes are read.
    pub fn for_request(bytes: usize, max_values: usize) -> Self {
        ViewArena {
            span_attributes: Vec::with_capacity((bytes / 48).min(max_values)),
            ..ViewArena::default()
        }
    }
}

/// One event read into a [`ViewArena`]: its attributes are `event_attributes[attributes]`.
#[derive(Debug, Clone, PartialEq)]
pub struct EventRecord<'a> {
    /// Nanoseconds since the Unix epoch.
    pub time_unix_nano: u64,
    /// The event name.
    pub name: Cow<'a, str>,
    /// Index range into [`ViewArena::event_attributes`].
    pub attributes: Range<usize>,
}

/// One span read into a [`ViewArena`]: its view without attributes and events (empty), and
/// where they are.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanRecord<'a> {
    /// Ids, name, kind, times and status; `attributes` and `events` empty.
    pub fields: SpanView<'a>,
    /// Index range into [`ViewArena::span_attributes`].
    pub attributes: Range<usize>,
    /// Index range into [`ViewArena::events`].
    pub events: Range<usize>,
}

impl<'a> SpanRecord<'a> {
    /// The whole view, its attributes borrowed from `arena` (the one it was read into); only
    /// a span with events allocates (its event list).
    pub fn view<'s>(&'s self, arena: &'s ViewArena<'a>) -> SpanView<'s> {
        let fields = &self.fields;
        SpanView {
            trace_id: fields.trace_id,
            span_id: fields.span_id,
            parent_span_id: fields.parent_span_id,
            // Borrowed from the record even when lossy (owned there): no second copy.
            name: Cow::Borrowed(&fields.name),
            kind: fields.kind,
            start_time_unix_nano: fields.start_time_unix_nano,
            end_time_unix_nano: fields.end_time_unix_nano,
            attributes: List::Borrowed(&arena.span_attributes[self.attributes.clone()]),
            events: arena.events[self.events.clone()]
                .iter()
                .map(|event| EventView {
                    time_unix_nano: event.time_unix_nano,
                    name: Cow::Borrowed(&event.name),
                    attributes: List::Borrowed(&arena.event_attributes[event.attributes.clone()]),
                })
                .collect(),
            status: fields.status.as_ref().map(|status| StatusView {
                message: Cow::Borrowed(&status.message),
                code: status.code,
            }),
        }
    }
}

/// The view of the `Span` in `buf[range]` on its own: as [`span_into`], its attributes and
/// events owned instead of kept in a request's arena. For tests and tools that read one
/// span; a request's spans are read with [`span_into`] ([`super::WireRequest`]).
pub fn span<'a>(
    buf: &'a [u8],
    range: Range<usize>,
    budget: u32,
    values: &mut ValueBudget,
) -> Result<SpanView<'a>, WireError> {
    let mut arena = ViewArena::default();
    let record = span_into(buf, range, budget, values, &mut arena)?;
    let events = arena
        .events
        .iter()
        .map(|event| EventView {
            time_unix_nano: event.time_unix_nano,
            name: event.name.clone(),
            attributes: List::Owned(arena.event_attributes[event.attributes.clone()].to_vec()),
        })
        .collect();
    Ok(SpanView {
        attributes: List::Owned(arena.span_attributes),
        events,
        ..record.fields
    })
}

/// Reads the `Span` in `buf[range]`: ids, name, kind, times and status into the returned
/// record, attributes and events appended to `arena`. Validates the whole span (links
/// included) as [`super::schema::check`] would; `budget` is prost's recursion budget at
/// the span. Takes every attribute, event and array or kvlist element from `values`
/// ([`WireError::TooManyValues`] when it runs out).
///
/// Then checks the span's ids as the Collector does, which prost does not: a trace id
/// (the span's, each link's) empty or 16 bytes, a span id (the span's, its parent's, each
/// link's) empty or 8, the last occurrence of each field counting (prost's merge); else
/// [`WireError::IdLength`] naming the first wrong one (traceId, spanId, parentSpanId, then
/// the links in order, as `receiver::partial` checks OTLP/JSON spans). A malformed field
/// anywhere in the span is reported before a wrong id.
pub fn span_into<'a>(
    buf: &'a [u8],
    range: Range<usize>,
    budget: u32,
    values: &mut ValueBudget,
    arena: &mut ViewArena<'a>,
) -> Result<SpanRecord<'a>, WireError> {
    let mut span = SpanView::default();
    let attributes_start = arena.span_attributes.len();
    let events_start = arena.events.len();
    // The first link with a wrong id, reported once the span's own ids are checked.
    let (mut links, mut bad_link) = (0, None);
    for field in Fields::new(buf, range, budget) {
        let field = field?;
        let nested = check_field(Msg::Span, &field, budget)?;
        match (field.number, nested) {
            (1, _) => span.trace_id = bytes_of(buf, &field),
            (2, _) => span.span_id = bytes_of(buf, &field),
            (4, _) => span.parent_span_id = bytes_of(buf, &field),
            (5, _) => span.name = text(bytes_of(buf, &field)),
            (6, _) => span.kind = varint(&field) as i32,
            (7, _) => span.start_time_unix_nano = fixed64(&field),
            (8, _) => span.end_time_unix_nano = fixed64(&field),
            (9, Some((_, r, b))) => {
                let attribute = key_value(buf, r, b, values)?;
                arena.span_attributes.push(attribute);
            }
            (11, Some((_, r, b))) => {
                let event = event(buf, r, b, values, &mut arena.event_attributes)?;
                arena.events.push(event);
            }
            (15, Some((_, r, b))) => merge_status(
                span.status.get_or_insert_with(StatusView::default),
                buf,
                r,
                b,
            )?,
            (13, Some((_, r, b))) => {
                let wrong = link_ids(buf, r, b, links)?;
                bad_link = bad_link.or(wrong);
                links += 1;
            }
            (_, Some((msg, r, b))) => check(msg, buf, r, b)?,
            _ => {}
        }
    }
    let own = [
        ("traceId", span.trace_id, TRACE_ID_LEN),
        ("spanId", span.span_id, SPAN_ID_LEN),
        ("parentSpanId", span.parent_span_id, SPAN_ID_LEN),
    ];
    if let Some(wrong) = own
        .into_iter()
        .find_map(|(field, id, len)| wrong_id(|| field.into(), id, len))
        .or(bad_link)
    {
        return Err(wrong);
    }
    Ok(SpanRecord {
        fields: span,
        attributes: attributes_start..arena.span_attributes.len(),
        events: events_start..arena.events.len(),
    })
}

/// OTLP's trace id length in bytes.
const TRACE_ID_LEN: usize = 16;
/// OTLP's span id length in bytes.
const SPAN_ID_LEN: usize = 8;

/// `None` when `id` is empty or `len` bytes long, else the [`WireError::IdLength`] for it,
/// `field` naming it.
fn wrong_id(field: impl FnOnce() -> Cow<'static, str>, id: &[u8], len: usize) -> Option<WireError> {
    (!id.is_empty() && id.len() != len).then(|| WireError::IdLength {
        field: field(),
        len: id.len(),
        expected: len,
    })
}

/// Validates the `Span.Link` in `buf[range]` (the `index`th of its span) as
/// [`super::schema::check`] would, then returns the error for its trace or span id when
/// either has the wrong length (see [`span_into`]).
fn link_ids(
    buf: &[u8],
    range: Range<usize>,
    budget: u32,
    index: usize,
) -> Result<Option<WireError>, WireError> {
    let (mut trace_id, mut span_id): (&[u8], &[u8]) = (&[], &[]);
    for field in Fields::new(buf, range, budget) {
        let field = field?;
        match (field.number, check_field(Msg::Link, &field, budget)?) {
            (1, _) => trace_id = bytes_of(buf, &field),
            (2, _) => span_id = bytes_of(buf, &field),
            (_, Some((msg, r, b))) => check(msg, buf, r, b)?,
            _ => {}
        }
    }
    let name = |id: &str| Cow::Owned(format!("links[{index}].{id}"));
    Ok(wrong_id(|| name("traceId"), trace_id, TRACE_ID_LEN)
        .or_else(|| wrong_id(|| name("spanId"), span_id, SPAN_ID_LEN)))
}

pub(super) fn key_value<'a>(
    buf: &'a [u8],
    range: Range<usize>,
    budget: u32,
    values: &mut ValueBudget,
) -> Result<KeyValueView<'a>, WireError> {
    values.take()?;
    if budget >= 1 {
        if let Some(kv) = plain_key_value(&buf[range.clone()]) {
            return Ok(kv);
        }
    }
    let mut kv = KeyValueView::default();
    for field in Fields::new(buf, range, budget) {
        let field = field?;
        let nested = check_field(Msg::KeyValue, &field, budget)?;
        match (field.number, nested) {
            (1, _) => kv.key = Text::new(bytes_of(buf, &field)),
            (2, Some((_, r, b))) => merge_any_value(
                kv.value.get_or_insert_with(AnyValueView::default),
                buf,
                r,
                b,
                values,
            )?,
            _ => {}
        }
    }
    Ok(kv)
}

/// The most common attribute, read directly: a `KeyValue` of exactly a key (field 1) and
/// a value (field 2) whose `AnyValue` holds exactly one string, bool, int or double, each
/// well formed and in that order. `None` for any other shape, which the field walk of
/// [`key_value`] reads (and validates) instead; where this returns a view, the walk would
/// return the same one (the recursion budget is checked by the caller: at least 1).
fn plain_key_value(bytes: &[u8]) -> Option<KeyValueView<'_>> {
    let (key, rest) = len_field(bytes, 0x0a)?;
    let (value, rest) = len_field(rest, 0x12)?;
    if !rest.is_empty() {
        return None;
    }
    let (&tag, body) = value.split_first()?;
    let kind = match tag {
        // string_value (1, length-delimited)
        0x0a => match len_field(value, 0x0a)? {
            (text_bytes, []) => ValueView::StringValue(Text::new(text_bytes)),
            _ => return None,
        },
        // bool_value (2) and int_value (3), varints
        0x10 | 0x18 => {
            let mut rest = body;
            let v = prost::encoding::decode_varint(&mut rest).ok()?;
            if !rest.is_empty() {
                return None;
            }
            match tag {
                0x10 => ValueView::BoolValue(v != 0),
                _ => ValueView::IntValue(v as i64),
            }
        }
        // double_value (4, fixed64)
        0x21 => ValueView::DoubleValue(f64::from_le_bytes(body.try_into().ok()?)),
        _ => return None,
    };
    Some(KeyValueView {
        key: Text::new(key),
        value: Some(AnyValueView { value: Some(kind) }),
    })
}

/// A length-delimited field with the one-byte key `key` at the start of `bytes`: its value
/// and what follows it. `None` when `bytes` starts otherwise or the length runs past.
fn len_field(bytes: &[u8], key: u8) -> Option<(&[u8], &[u8])> {
    let (&first, mut rest) = bytes.split_first()?;
    if first != key {
        return None;
    }
    let len = prost::encoding::decode_varint(&mut rest).ok()?;
    let len = usize::try_from(len).ok().filter(|&len| len <= rest.len())?;
    Some(rest.split_at(len))
}

fn merge_any_value<'a>(
    value: &mut AnyValueView<'a>,
    buf: &'a [u8],
    range: Range<usize>,
    budget: u32,
    values: &mut ValueBudget,
) -> Result<(), WireError> {
    for field in Fields::new(buf, range, budget) {
        let field = field?;
        let nested = check_field(Msg::AnyValue, &field, budget)?;
        let kind = match (field.number, nested) {
            (1, _) => ValueView::StringValue(Text::new(bytes_of(buf, &field))),
            (2, _) => ValueView::BoolValue(varint(&field) != 0),
            (3, _) => ValueView::IntValue(varint(&field) as i64),
            (4, _) => ValueView::DoubleValue(f64::from_bits(fixed64(&field))),
            (5, Some((_, r, b))) => {
                let mut array = match value.value.take() {
                    Some(ValueView::ArrayValue(a)) => a,
                    _ => Vec::new(),
                };
                for item in Fields::new(buf, r, b) {
                    let item = item?;
                    if let Some((_, ir, ib)) = check_field(Msg::ArrayValue, &item, b)? {
                        values.take()?;
                        let mut v = AnyValueView::default();
                        merge_any_value(&mut v, buf, ir, ib, values)?;
                        array.push(v);
                    }
                }
                ValueView::ArrayValue(array)
            }
            (6, Some((_, r, b))) => {
                let mut list = match value.value.take() {
                    Some(ValueView::KvlistValue(l)) => l,
                    _ => Vec::new(),
                };
                for item in Fields::new(buf, r, b) {
                    let item = item?;
                    if let Some((_, ir, ib)) = check_field(Msg::KeyValueList, &item, b)? {
                        list.push(key_value(buf, ir, ib, values)?);
                    }
                }
                ValueView::KvlistValue(list)
            }
            (7, _) => ValueView::BytesValue(bytes_of(buf, &field)),
            (8, _) => ValueView::StringValueStrindex(varint(&field) as i32),
            _ => continue,
        };
        value.value = Some(kind);
    }
    Ok(())
}

/// The `Span.Event` in `buf[range]`, its attributes appended to `attributes`.
fn event<'a>(
    buf: &'a [u8],
    range: Range<usize>,
    budget: u32,
    values: &mut ValueBudget,
    attributes: &mut Vec<KeyValueView<'a>>,
) -> Result<EventRecord<'a>, WireError> {
    values.take()?;
    let start = attributes.len();
    let mut event = EventRecord {
        time_unix_nano: 0,
        name: Cow::Borrowed(""),
        attributes: start..start,
    };
    for field in Fields::new(buf, range, budget) {
        let field = field?;
        let nested = check_field(Msg::Event, &field, budget)?;
        match (field.number, nested) {
            (1, _) => event.time_unix_nano = fixed64(&field),
            (2, _) => event.name = text(bytes_of(buf, &field)),
            (3, Some((_, r, b))) => attributes.push(key_value(buf, r, b, values)?),
            _ => {}
        }
    }
    event.attributes = start..attributes.len();
    Ok(event)
}

fn merge_status<'a>(
    status: &mut StatusView<'a>,
    buf: &'a [u8],
    range: Range<usize>,
    budget: u32,
) -> Result<(), WireError> {
    for field in Fields::new(buf, range, budget) {
        let field = field?;
        check_field(Msg::Status, &field, budget)?;
        match field.number {
            2 => status.message = text(bytes_of(buf, &field)),
            3 => status.code = varint(&field) as i32,
            _ => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
