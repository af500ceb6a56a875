//! In-place annotation of a request's bytes: the spans that complete a detection get their
//! `loop.*` attributes and `loop.detected` event appended, an existing attribute with one
//! of the written keys and an existing event with the written event's name are dropped (as
//! [`crate::annotate::annotate_span`] replaces them), and only the length prefixes of the
//! enclosing `scope_spans` (or `instrumentation_library_spans`) and `resource_spans` are
//! rewritten. Every other byte stays where
//! it arrived (the request is forwarded as slices of it); nothing is re-encoded.

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;

use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::Span;

pub use encoded::{value, EncodedAttributes};

use crate::otlp::view::SpanView;
use crate::otlp::wire::decode::bytes_field;
use crate::otlp::wire::reader::{put_len_key, put_varint, Field, Fields, WireError};
use crate::otlp::wire::schema::INSTRUMENTATION_LIBRARY_SPANS;
use prost::encoding::encoded_len_varint;

/// Field numbers from the request down to a span: `ExportTraceServiceRequest.resource_spans`,
/// `ResourceSpans.scope_spans` or its pre-1.0 `instrumentation_library_spans` (the reader
/// reads spans there too: [`INSTRUMENTATION_LIBRARY_SPANS`]), `ScopeSpans.spans`.
const PATH: [&[u32]; 3] = [&[1], &[2, INSTRUMENTATION_LIBRARY_SPANS], &[2]];
/// `Span.attributes`
const SPAN_ATTRIBUTES: u32 = 9;
/// `Span.events`
const SPAN_EVENTS: u32 = 11;
/// `Span.Event.name`
const EVENT_NAME: u32 = 2;
/// `Span.Event.attributes`
const EVENT_ATTRIBUTES: u32 = 3;

/// What to change in one span.
#[derive(Debug, Clone, PartialEq)]
pub struct SpanEdit {
    /// Absolute byte range of the span message (as in [`super::WireSpan::range`]).
    pub range: Range<usize>,
    /// Attribute keys to drop from the span (the keys being written).
    pub remove_keys: Vec<Cow<'static, str>>,
    /// Names of events to drop from the span (the events being written).
    pub remove_events: Vec<String>,
    /// Encoded `Span` fields to append (attributes, events).
    pub append: Vec<u8>,
}

impl SpanEdit {
    /// This edit without its removals when the span it edits (read as `span`) holds none
    /// of the attribute keys or event names it would drop: the rewrite then appends to the
    /// span's bytes without reading its fields again (twice). The common case: only a span
    /// that went through a loopwatch before carries `loop.*` attributes.
    pub fn without_absent_removals(mut self, span: &SpanView) -> SpanEdit {
        let present = span
            .attributes
            .iter()
            .any(|kv| self.remove_keys.iter().any(|key| kv.key.is(key)))
            || span
                .events
                .iter()
                .any(|event| self.remove_events.iter().any(|name| *name == event.name));
        if !present {
            self.remove_keys.clear();
            self.remove_events.clear();
        }
        self
    }

    /// True when the edit drops no field of its span.
    fn removes_nothing(&self) -> bool {
        self.remove_keys.is_empty() && self.remove_events.is_empty()
    }

    /// The edit that adds `added`'s attributes and events to the span at `range` (e.g.
    /// what [`crate::annotate::annotate_span`] wrote on an empty span), replacing attributes
    /// with the same keys and events with the same names.
    pub fn adding(range: Range<usize>, added: &Span) -> SpanEdit {
        let mut append = Vec::new();
        for kv in &added.attributes {
            prost::encoding::message::encode(SPAN_ATTRIBUTES, kv, &mut append);
        }
        for event in &added.events {
            prost::encoding::message::encode(SPAN_EVENTS, event, &mut append);
        }
        SpanEdit {
            range,
            remove_keys: added
                .attributes
                .iter()
                .map(|kv| Cow::Owned(kv.key.clone()))
                .collect(),
            remove_events: added.events.iter().map(|e| e.name.clone()).collect(),
            append,
        }
    }
}

/// The request in `buf` with `edits` applied, as pieces to be sent back to back: slices
/// of `buf` between the bytes that change (the rewritten length prefixes and each edited
/// span's appended fields, which share one new buffer). Edits must name span ranges of
/// this request (from [`super::WireRequest::read`]); an edit that does not is ignored.
/// With no edits the pieces join to `buf`.
///
/// Two passes over the enclosing messages: the first measures every rewritten message (so
/// each length prefix is known before its message is written), the second lists the
/// pieces; no received byte is copied, and no nested message is built apart. An annotated
/// request of a thousand spans is thus forwarded without a second request-sized buffer
/// (the exporter copies every piece into its gRPC frame, as it copies an unannotated
/// request).
pub fn rewrite_pieces(buf: &Bytes, edits: &[SpanEdit]) -> Result<Vec<Bytes>, WireError> {
    let mut sorted: Vec<&SpanEdit> = edits.iter().collect();
    sorted.sort_by_key(|e| (e.range.start, e.range.end));
    sorted.dedup_by(|a, b| a.range == b.range);
    let mut lengths = Vec::new();
    let total = measure(buf, 0..buf.len(), 0, &sorted, &mut lengths)?;
    let appended: usize = sorted.iter().map(|e| e.append.len()).sum();
    let mut out = Pieces {
        pieces: Vec::with_capacity(4 * sorted.len() + 4),
        new: Vec::with_capacity(appended + 24 * (sorted.len() + 2)),
    };
    let mut next = 0;
    write_message(buf, 0..buf.len(), 0, &sorted, &lengths, &mut next, &mut out)?;
    let pieces = out.into_bytes(buf);
    debug_assert_eq!(pieces.iter().map(Bytes::len).sum::<usize>(), total);
    Ok(pieces)
}

/// `pieces` joined into one buffer (no copy for one piece).
pub fn joined(pieces: &[Bytes]) -> Bytes {
    match pieces {
        [one] => one.clone(),
        pieces => Bytes::from(pieces.concat()),
    }
}

/// The request as pieces: ranges of the received bytes and ranges of `new`.
struct Pieces {
    pieces: Vec<Piece>,
    new: Vec<u8>,
}

enum Piece {
    Received(Range<usize>),
    New(Range<usize>),
}

impl Pieces {
    /// Appends `range` of the received bytes.
    fn copy(&mut self, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        match self.pieces.last_mut() {
            Some(Piece::Received(last)) if last.end == range.start => last.end = range.end,
            _ => self.pieces.push(Piece::Received(range)),
        }
    }

    /// Appends the new bytes `write` writes.
    fn put(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        let start = self.new.len();
        write(&mut self.new);
        let end = self.new.len();
        if start == end {
            return;
        }
        match self.pieces.last_mut() {
            Some(Piece::New(last)) if last.end == start => last.end = end,
            _ => self.pieces.push(Piece::New(start..end)),
        }
    }

    /// The pieces as slices of `received` and of the new bytes (no byte copied).
    fn into_bytes(self, received: &Bytes) -> Vec<Bytes> {
        let new = Bytes::from(self.new);
        self.pieces
            .into_iter()
            .map(|piece| match piece {
                Piece::Received(range) => received.slice(range),
                Piece::New(range) => new.slice(range),
            })
            .collect()
    }
}

/// One field on the path to an edited span: the field, its value's range, and the edits
/// inside it (sorted; at the span level, the one edit naming exactly this span).
type EditedField<'e, 'a> = (Field, Range<usize>, &'e [&'a SpanEdit]);

/// The fields of the message at `range` (depth `level` on [`PATH`]) that hold an edit, in
/// wire order.
fn edited_fields<'b, 'e, 'a>(
    buf: &'b [u8],
    range: Range<usize>,
    level: usize,
    edits: &'e [&'a SpanEdit],
) -> impl Iterator<Item = Result<EditedField<'e, 'a>, WireError>> + 'b
where
    'e: 'b,
    'a: 'b,
{
    // Fields come in wire order and edits sorted by start: the edits before a field are
    // passed once, not searched again for every field (a request has thousands of spans).
    let mut passed = 0;
    Fields::new(buf, range, u32::MAX).filter_map(move |field| {
        let field = match field {
            Ok(field) => field,
            Err(e) => return Some(Err(e)),
        };
        let value = field
            .len_range()
            .filter(|_| PATH[level].contains(&field.number))?;
        while edits
            .get(passed)
            .is_some_and(|e| e.range.start < value.start)
        {
            passed += 1;
        }
        let inside = &edits[passed..];
        let count = inside
            .iter()
            .take_while(|e| e.range.start < value.end)
            .count();
        let inside = &inside[..count];
        let holds_one = if level + 1 == PATH.len() {
            inside.iter().any(|e| e.range == value)
        } else {
            inside.iter().any(|e| e.range.end <= value.end)
        };
        holds_one.then_some(Ok((field, value, inside)))
    })
}

/// The length of the message at `range` once its edits are applied; pushes the new length
/// of every rewritten field value inside it to `lengths`, in the order [`write_message`]
/// writes them.
fn measure(
    buf: &[u8],
    range: Range<usize>,
    level: usize,
    edits: &[&SpanEdit],
    lengths: &mut Vec<usize>,
) -> Result<usize, WireError> {
    let mut len = range.len();
    for edited in edited_fields(buf, range, level, edits) {
        let (field, value, inside) = edited?;
        let slot = lengths.len();
        lengths.push(0);
        let new = match span_edit(level, &value, inside) {
            Some(edit) => {
                let mut removed = 0;
                for field in removed_fields(buf, value.clone(), edit) {
                    removed += field?.len();
                }
                value.len() - removed + edit.append.len()
            }
            None => measure(buf, value, level + 1, inside, lengths)?,
        };
        lengths[slot] = new;
        let prefix = prost::encoding::key_len(field.number) + encoded_len_varint(new as u64);
        len = len - field.range.len() + prefix + new;
    }
    Ok(len)
}

/// At the span level, the edit of the span at `value`.
fn span_edit<'a>(
    level: usize,
    value: &Range<usize>,
    inside: &[&'a SpanEdit],
) -> Option<&'a SpanEdit> {
    (level + 1 == PATH.len())
        .then(|| inside.iter().find(|e| e.range == *value).copied())
        .flatten()
}

fn write_message(
    buf: &[u8],
    range: Range<usize>,
    level: usize,
    edits: &[&SpanEdit],
    lengths: &[usize],
    next: &mut usize,
    out: &mut Pieces,
) -> Result<(), WireError> {
    let mut copied_to = range.start;
    for edited in edited_fields(buf, range.clone(), level, edits) {
        let (field, value, inside) = edited?;
        let new = lengths[*next];
        *next += 1;
        out.copy(copied_to..field.range.start);
        out.put(|out| {
            put_len_key(field.number, out);
            put_varint(new as u64, out);
        });
        match span_edit(level, &value, inside) {
            Some(edit) => write_span(buf, value, edit, out)?,
            None => write_message(buf, value, level + 1, inside, lengths, next, out)?,
        }
        copied_to = field.range.end;
    }
    out.copy(copied_to..range.end);
    Ok(())
}

impl SpanEdit {
    /// The edit that adds `attributes` and one event `event_name` at `time_unix_nano`
    /// carrying the same attributes (what [`crate::annotate::annotate_span`] writes), to
    /// the span at `range`: the bytes [`SpanEdit::adding`] writes for such a span, with
    /// each attribute encoded once and nothing cloned.
    pub fn adding_with_event(
        range: Range<usize>,
        attributes: &[KeyValue],
        event_name: &str,
        time_unix_nano: u64,
    ) -> SpanEdit {
        let encoded = EncodedAttributes::from_key_values(attributes);
        Self::adding_encoded_with_event(range, &encoded, event_name, time_unix_nano)
    }

    /// As [`SpanEdit::adding_with_event`], for attributes already encoded.
    pub fn adding_encoded_with_event(
        range: Range<usize>,
        attributes: &EncodedAttributes,
        event_name: &str,
        time_unix_nano: u64,
    ) -> SpanEdit {
        use prost::encoding::{encode_key, WireType};

        let field_len = |len: usize| 1 + encoded_len_varint(len as u64) + len;
        let fields_len: usize = attributes.bodies().map(|b| field_len(b.len())).sum();
        let time_len = if time_unix_nano == 0 { 0 } else { 1 + 8 };
        let event_len = time_len + field_len(event_name.len()) + fields_len;
        let mut append = Vec::with_capacity(fields_len + 1 + 10 + event_len);
        for body in attributes.bodies() {
            put_len_key(SPAN_ATTRIBUTES, &mut append);
            put_varint(body.len() as u64, &mut append);
            append.extend_from_slice(body);
        }
        put_len_key(SPAN_EVENTS, &mut append);
        put_varint(event_len as u64, &mut append);
        // Event fields in prost's order: time (1, omitted when 0), name (2), attributes (3).
        if time_unix_nano != 0 {
            encode_key(1, WireType::SixtyFourBit, &mut append);
            append.extend_from_slice(&time_unix_nano.to_le_bytes());
        }
        put_len_key(EVENT_NAME, &mut append);
        put_varint(event_name.len() as u64, &mut append);
        append.extend_from_slice(event_name.as_bytes());
        for body in attributes.bodies() {
            put_len_key(EVENT_ATTRIBUTES, &mut append);
            put_varint(body.len() as u64, &mut append);
            append.extend_from_slice(body);
        }
        SpanEdit {
            range,
            remove_keys: attributes.entries.iter().map(|(k, _)| k.clone()).collect(),
            remove_events: vec![event_name.to_owned()],
            append,
        }
    }
}

/// The fields of the span at `range` that `edit` drops: attributes with a key it writes,
/// events with a name it writes (absolute ranges, in wire order).
fn removed_fields<'b>(
    buf: &'b [u8],
    range: Range<usize>,
    edit: &'b SpanEdit,
) -> impl Iterator<Item = Result<Range<usize>, WireError>> + 'b {
    // Nothing to drop: no field to read.
    let range = if edit.removes_nothing() {
        range.start..range.start
    } else {
        range
    };
    // Most attributes of a span have a length no removed key has: rejected without
    // comparing them to each key.
    let key_lengths = edit
        .remove_keys
        .iter()
        .fold(0u64, |bits, key| bits | length_bit(key.len()));
    Fields::new(buf, range, u32::MAX).filter_map(move |field| {
        let field = match field {
            Ok(field) => field,
            Err(e) => return Some(Err(e)),
        };
        let number = match field.number {
            SPAN_ATTRIBUTES => 1,
            SPAN_EVENTS => EVENT_NAME,
            _ => return None,
        };
        let value = field.len_range()?;
        match bytes_field(buf, value, number) {
            Err(e) => Some(Err(e)),
            Ok(name) => {
                let removed = match field.number {
                    SPAN_ATTRIBUTES => {
                        key_lengths & length_bit(name.len()) != 0
                            && edit.remove_keys.iter().any(|k| k.as_bytes() == name)
                    }
                    _ => edit.remove_events.iter().any(|k| k.as_bytes() == name),
                };
                removed.then_some(Ok(field.range))
            }
        }
    })
}

/// Bit `n` for a key of `n` bytes (`n` < 63), bit 63 for longer keys.
fn length_bit(len: usize) -> u64 {
    1 << len.min(63)
}

fn write_span(
    buf: &[u8],
    range: Range<usize>,
    edit: &SpanEdit,
    out: &mut Pieces,
) -> Result<(), WireError> {
    let mut copied_to = range.start;
    for removed in removed_fields(buf, range.clone(), edit) {
        let removed = removed?;
        out.copy(copied_to..removed.start);
        copied_to = removed.end;
    }
    out.copy(copied_to..range.end);
    out.put(|out| out.extend_from_slice(&edit.append));
    Ok(())
}

mod encoded;
#[cfg(test)]
mod tests;
