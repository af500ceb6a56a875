//! One received `ExportTraceServiceRequest` read from its bytes: validated as prost would
//! (minus UTF-8), every span located by byte range, and only what detection reads
//! materialised: per resource its `service.name` (other attributes on demand, e.g. the
//! run-key attribute), per span its borrowed [`SpanView`], which borrows from the request's
//! `Bytes` and, for its attributes and events, from one [`super::view::ViewArena`] for the
//! whole request. Two cells ([`self_cell`]) hold them: `Parsed` the bytes and what the
//! validating walk read ([`super::view::span_into`]), `Located` that and the views built
//! from it once the arena is complete. Nothing else is copied.
//!
//! Spans are read from `ResourceSpans.scope_spans` and, in a `ResourceSpans` without any
//! `scope_spans`, from the pre-1.0 `instrumentation_library_spans` (field 1000,
//! [`super::schema::INSTRUMENTATION_LIBRARY_SPANS`]; an entry prost could not decode as a
//! `ScopeSpans` is skipped, as prost skips the whole field): the spans of old exporters are
//! detected on, and forwarded as received.

use std::ops::Range;
use std::sync::Arc;

use bytes::Bytes;
use opentelemetry_proto::tonic::resource::v1::Resource;

use super::decode;
use super::reader::{Fields, ValueBudget, WireError, RECURSION_LIMIT};
use super::schema::{check, check_field, Msg, INSTRUMENTATION_LIBRARY_SPANS};
use super::view;
use crate::otlp::view::SpanView;

/// The resource of one `ResourceSpans`: where it is, and its `service.name`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WireResource {
    /// Byte ranges of the `resource` field's values (prost merges repeated occurrences).
    pub ranges: Vec<Range<usize>>,
    /// `service.name`, when it is a string attribute.
    pub service_name: Option<Arc<str>>,
}

/// One span of the request, borrowing from the request's bytes.
#[derive(Debug, Clone, PartialEq)]
pub struct WireSpan<'a> {
    /// Index into [`WireRequest::resources`].
    pub resource: usize,
    /// (resource_spans, scope_spans, span) indices, as in the decoded request; the spans of
    /// `instrumentation_library_spans` entries (read when the `ResourceSpans` has no
    /// `scope_spans`) count those entries as its `scope_spans`, as the Collector's
    /// migration makes them.
    pub index: (usize, usize, usize),
    /// Absolute byte range of the span message (without its key and length prefix).
    pub range: Range<usize>,
    /// What detection reads of the span.
    pub span: SpanView<'a>,
}

type WireSpans<'a> = Vec<WireSpan<'a>>;

/// What the validating walk reads: every span's record, its attributes and events in one
/// arena for the request.
#[derive(Debug)]
struct Read<'a> {
    arena: view::ViewArena<'a>,
    /// Every span read, in request order.
    spans: Vec<ReadSpan<'a>>,
    /// Spans that could not be read (see [`RejectedSpan`]), with their byte ranges.
    rejected: Vec<(Range<usize>, RejectedSpan)>,
}

/// A span the reader could not read, left out of the request (issue 31 item 5): its fields
/// were malformed or nested past the recursion limit, while the request around it was
/// sound. The rest of the request is read and forwarded without it, and the receiver
/// reports it in OTLP `partial_success`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedSpan {
    /// (resource_spans, scope_spans, span) indices in the request as received.
    pub index: (usize, usize, usize),
    /// Why it could not be read (the reader's error).
    pub reason: String,
}

impl RejectedSpan {
    /// `resourceSpans[r].scopeSpans[s].spans[i]: reason` (a reason starting with `.` names
    /// a field of the span and follows without the colon), for the partial-success message.
    pub fn describe(&self) -> String {
        let (r, s, i) = self.index;
        let sep = if self.reason.starts_with('.') {
            ""
        } else {
            ": "
        };
        format!(
            "resourceSpans[{r}].scopeSpans[{s}].spans[{i}]{sep}{}",
            self.reason
        )
    }
}

/// One span as the walk read it: a [`WireSpan`] whose view is still a record.
#[derive(Debug)]
struct ReadSpan<'a> {
    resource: usize,
    index: (usize, usize, usize),
    range: Range<usize>,
    record: view::SpanRecord<'a>,
}

self_cell::self_cell!(
    /// The request's bytes and what the walk read from them.
    struct Parsed {
        owner: Bytes,
        #[covariant]
        dependent: Read,
    }
    impl {Debug}
);

self_cell::self_cell!(
    /// The span views, borrowing from the bytes and the arena of [`Parsed`].
    struct Located {
        owner: Parsed,
        #[covariant]
        dependent: WireSpans,
    }
    impl {Debug}
);

/// Caps on what [`WireRequest::read_limited`] builds from one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Span views (`limits.max_spans_per_request`).
    pub max_spans: usize,
    /// Attributes, events and array/kvlist elements (`limits.max_values_per_request`).
    pub max_values: usize,
}

impl ReadLimits {
    /// No caps.
    pub const NONE: ReadLimits = ReadLimits {
        max_spans: usize::MAX,
        max_values: usize::MAX,
    };
}

/// A request read from its bytes, kept whole for forwarding.
#[derive(Debug, Clone)]
pub struct WireRequest {
    /// The request exactly as received (after decompression).
    pub bytes: Bytes,
    /// One entry per `ResourceSpans`, in order.
    pub resources: Vec<WireResource>,
    /// Every span, in request order (shared by clones).
    spans: Arc<Located>,
    /// How many of them [`WireRequest::spans`] shows ([`WireRequest::truncate_spans`]).
    shown: usize,
    /// Spans left out because they could not be read (empty for a sound request: no
    /// allocation).
    rejected: Vec<RejectedSpan>,
    /// Byte ranges of the rejected spans, between the two walks of
    /// [`WireRequest::read_limited`] only.
    cut: Option<Vec<Range<usize>>>,
}

impl WireRequest {
    /// Reads `bytes` as an OTLP `ExportTraceServiceRequest`. Fails with a [`WireError`]
    /// exactly where prost's decoding fails, except that invalid UTF-8 is read lossily.
    pub fn read(bytes: Bytes) -> Result<WireRequest, WireError> {
        Self::read_limited(bytes, ReadLimits::NONE)
    }

    /// As [`WireRequest::read`], building at most `limits.max_spans` span views and
    /// `limits.max_values` attribute values ([`ValueBudget`]): past either, reading
    /// stops with [`WireError::TooManySpans`] / [`WireError::TooManyValues`] before the
    /// next one is built. A span view costs a few hundred bytes and a value 32–80 even when
    /// empty (two bytes on the wire), so the caps bound what one request can make the
    /// reader allocate.
    ///
    /// A span whose own fields are malformed (a wrong wire type, a length past its end,
    /// nesting past the recursion limit) while the messages around it are sound does not
    /// fail the request: it is cut out of the bytes ([`super::prune`]), the rest is read
    /// again and kept, and the span is listed in [`WireRequest::rejected`]. Only such a
    /// request is read twice.
    pub fn read_limited(bytes: Bytes, limits: ReadLimits) -> Result<WireRequest, WireError> {
        Self::read_budgeted(bytes, limits, None)
    }

    /// As [`WireRequest::read_limited`], paying for the views it builds with `grow` (bytes
    /// wanted → granted?; see [`ValueBudget::with_memory`]): when it refuses,
    /// reading stops with [`WireError::OverBudget`] before the memory is allocated.
    pub fn read_budgeted(
        bytes: Bytes,
        limits: ReadLimits,
        mut grow: Option<&mut dyn FnMut(usize) -> bool>,
    ) -> Result<WireRequest, WireError> {
        let first: Option<&mut dyn FnMut(usize) -> bool> = match &mut grow {
            Some(grow) => Some(&mut **grow),
            None => None,
        };
        let mut request = Self::read_once(bytes, limits, first)?;
        if request.rejected.is_empty() {
            return Ok(request);
        }
        let rejected = std::mem::take(&mut request.rejected);
        let cut: Vec<Range<usize>> = request.cut.take().unwrap_or_default();
        let pruned = Bytes::from(super::prune::without_spans(&request.bytes, &cut)?);
        drop(request);
        let mut request = Self::read_once(pruned, limits, grow)?;
        if !request.rejected.is_empty() {
            // Cannot happen: the pruned request holds only spans that were read.
            return Err(WireError::Truncated);
        }
        request.rejected = rejected;
        Ok(request)
    }

    /// One validating walk of `bytes` (see [`WireRequest::read_limited`]); spans that could
    /// not be read are listed, not cut.
    fn read_once(
        bytes: Bytes,
        limits: ReadLimits,
        grow: Option<&mut dyn FnMut(usize) -> bool>,
    ) -> Result<WireRequest, WireError> {
        let max_spans = limits.max_spans;
        let mut values = match grow {
            Some(grow) => ValueBudget::with_memory(limits.max_values, grow),
            None => ValueBudget::new(limits.max_values),
        };
        let mut resources = Vec::new();
        let mut parsed = Parsed::try_new(bytes.clone(), |bytes| {
            walk(bytes, max_spans, &mut values, &mut resources)
        })?;
        let (cut, rejected) = parsed.with_dependent_mut(|_, read| {
            std::mem::take(&mut read.rejected)
                .into_iter()
                .unzip::<_, _, Vec<_>, Vec<_>>()
        });
        let located = Located::new(parsed, |parsed| {
            let read = parsed.borrow_dependent();
            read.spans
                .iter()
                .map(|read_span| WireSpan {
                    resource: read_span.resource,
                    index: read_span.index,
                    range: read_span.range.clone(),
                    span: read_span.record.view(&read.arena),
                })
                .collect()
        });
        Ok(WireRequest {
            bytes,
            resources,
            shown: located.borrow_dependent().len(),
            spans: Arc::new(located),
            cut: (!cut.is_empty()).then_some(cut),
            rejected,
        })
    }

    /// The spans left out because they could not be read (see
    /// [`WireRequest::read_limited`]); empty for a sound request.
    pub fn rejected(&self) -> &[RejectedSpan] {
        &self.rejected
    }

    /// Every span, in request order.
    pub fn spans(&self) -> &[WireSpan<'_>] {
        let spans = self.spans.borrow_dependent();
        &spans[..self.shown.min(spans.len())]
    }

    /// Keeps only the first `len` spans for processing (the bytes are unchanged).
    pub fn truncate_spans(&mut self, len: usize) {
        self.shown = self.shown.min(len);
    }

    /// The attributes named `keys` of resource `index` (in wire order, every occurrence),
    /// as a `Resource` holding only them.
    pub fn resource(&self, index: usize, keys: &[&str]) -> Result<Resource, WireError> {
        match self.resources.get(index) {
            Some(r) => resource_attributes(&self.bytes, &r.ranges, keys),
            None => Ok(Resource::default()),
        }
    }

    /// The number of spans in the request.
    pub fn span_count(&self) -> u64 {
        self.spans().len() as u64
    }
}

/// The validating walk of [`WireRequest::read_limited`]: the spans of `bytes` (at most
/// `max_spans`, their values taken from `values`), and each `ResourceSpans`' resource
/// pushed to `resources`.
fn walk<'a>(
    bytes: &'a Bytes,
    max_spans: usize,
    values: &mut ValueBudget,
    resources: &mut Vec<WireResource>,
) -> Result<Read<'a>, WireError> {
    let buf = bytes.as_ref();
    // Sized for spans of ~256 bytes or more (GenAI tool spans are larger), so that a large
    // request does not move its records while they are read.
    let mut spans = Vec::with_capacity((buf.len() / 256).min(max_spans));
    let mut arena = view::ViewArena::for_request(buf.len(), values.left());
    // One validating pass: spans are validated while their view is read, everything
    // else is checked without being read.
    let mut rejected = Vec::new();
    let mut r = 0;
    for field in Fields::new(buf, 0..buf.len(), RECURSION_LIMIT) {
        let field = field?;
        let Some((_, resource_spans, budget)) = check_field(Msg::Request, &field, RECURSION_LIMIT)?
        else {
            continue;
        };
        let resource_index = resources.len();
        let mut resource = WireResource::default();
        let mut s = 0;
        // `instrumentation_library_spans` entries, read only when there is no `scope_spans`.
        let mut legacy = Vec::new();
        let mut has_scope_spans = false;
        let mut read_scope_spans = |range, budget, s| {
            scope_spans(
                buf,
                range,
                budget,
                (resource_index, (r, s)),
                max_spans,
                values,
                &mut arena,
                &mut spans,
                &mut rejected,
            )
        };
        for field in Fields::new(buf, resource_spans, budget) {
            let field = field?;
            match check_field(Msg::ResourceSpans, &field, budget)? {
                Some((Msg::ScopeSpans, range, budget)) => {
                    has_scope_spans = true;
                    read_scope_spans(range, budget, s)?;
                    s += 1;
                }
                Some((msg, range, budget)) => {
                    check(msg, buf, range.clone(), budget)?;
                    if msg == Msg::Resource {
                        resource.ranges.push(range);
                    }
                }
                None if field.number == INSTRUMENTATION_LIBRARY_SPANS => {
                    legacy.extend(field.len_range());
                }
                None => {}
            }
        }
        if !has_scope_spans {
            // At the depth of `scope_spans`; `check_field` refused an unknown field with no
            // budget left, so there is some.
            let budget = budget.saturating_sub(1);
            for range in legacy {
                // prost skips the field unread: one it could not decode is skipped here too
                // (forwarded as received, read for nothing), never an error.
                if check(Msg::ScopeSpans, buf, range.clone(), budget).is_ok() {
                    read_scope_spans(range, budget, s)?;
                    s += 1;
                }
            }
        }
        let attributes = resource_attributes(buf, &resource.ranges, &["service.name"])?;
        resource.service_name = crate::otlp::service_name(Some(&attributes)).map(Arc::from);
        resources.push(resource);
        r += 1;
    }
    Ok(Read {
        arena,
        spans,
        rejected,
    })
}

/// Reads the spans of the `ScopeSpans` in `buf[range]` (`budget`: prost's recursion budget
/// at it) into `spans`, as spans `(r, s, 0..)` of resource `resource`.
#[allow(clippy::too_many_arguments)]
fn scope_spans<'a>(
    buf: &'a [u8],
    range: Range<usize>,
    budget: u32,
    (resource, (r, s)): (usize, (usize, usize)),
    max_spans: usize,
    values: &mut ValueBudget,
    arena: &mut view::ViewArena<'a>,
    spans: &mut Vec<ReadSpan<'a>>,
    rejected: &mut Vec<(Range<usize>, RejectedSpan)>,
) -> Result<(), WireError> {
    let mut i = 0;
    for field in Fields::new(buf, range, budget) {
        let field = field?;
        match check_field(Msg::ScopeSpans, &field, budget)? {
            Some((Msg::Span, range, budget)) => {
                if spans.len() >= max_spans {
                    return Err(WireError::TooManySpans { limit: max_spans });
                }
                values.take_span()?;
                let record = match view::span_into(buf, range.clone(), budget, values, arena) {
                    Ok(record) => record,
                    // The request-wide caps stop the whole read.
                    Err(
                        e @ (WireError::TooManyValues { .. }
                        | WireError::TooManySpans { .. }
                        | WireError::OverBudget),
                    ) => return Err(e),
                    // The span's own bytes are bad, its framing is sound: it alone is left
                    // out (what it put in the arena is never looked at: the request is
                    // read again without it).
                    Err(error) => {
                        rejected.push((
                            range,
                            RejectedSpan {
                                index: (r, s, i),
                                reason: error.to_string(),
                            },
                        ));
                        i += 1;
                        continue;
                    }
                };
                spans.push(ReadSpan {
                    resource,
                    index: (r, s, i),
                    range,
                    record,
                });
                i += 1;
            }
            Some((msg, range, budget)) => check(msg, buf, range, budget)?,
            None => {}
        }
    }
    Ok(())
}

/// The value ranges of the length-delimited fields numbered `number` of the message in
/// `buf[range]`.
fn len_fields(
    buf: &[u8],
    range: Range<usize>,
    number: u32,
) -> impl Iterator<Item = Result<Range<usize>, WireError>> + '_ {
    Fields::new(buf, range, u32::MAX).filter_map(move |field| match field {
        Err(e) => Some(Err(e)),
        Ok(f) if f.number == number => f.len_range().map(Ok),
        Ok(_) => None,
    })
}

fn resource_attributes(
    buf: &[u8],
    ranges: &[Range<usize>],
    keys: &[&str],
) -> Result<Resource, WireError> {
    let mut resource = Resource::default();
    for range in ranges {
        for attribute in len_fields(buf, range.clone(), 1) {
            let attribute = attribute?;
            let key = decode::key_of(buf, attribute.clone())?;
            if keys.iter().any(|k| k.as_bytes() == key) {
                resource
                    .attributes
                    .push(decode::key_value(buf, attribute, u32::MAX)?);
            }
        }
    }
    Ok(resource)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;

    fn kv(key: &str, value: &str) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(value.into())),
            }),
            ..Default::default()
        }
    }

    fn request() -> ExportTraceServiceRequest {
        let span = |id: u8| Span {
            trace_id: vec![1; 16],
            span_id: vec![id; 8],
            name: format!("span {id}"),
            attributes: vec![kv("gen_ai.tool.name", "search")],
            ..Default::default()
        };
        ExportTraceServiceRequest {
            resource_spans: vec![
                ResourceSpans {
                    resource: Some(Resource {
                        attributes: vec![
                            kv("host.name", "h"),
                            kv("service.name", "svc"),
                            kv("session.id", "s-1"),
                        ],
                        ..Default::default()
                    }),
                    scope_spans: vec![
                        ScopeSpans {
                            spans: vec![span(1), span(2)],
                            ..Default::default()
                        },
                        ScopeSpans {
                            spans: vec![span(3)],
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                },
                ResourceSpans {
                    scope_spans: vec![ScopeSpans {
                        spans: vec![span(4)],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
        }
    }

    #[test]
    fn locates_every_span_and_keeps_only_the_asked_resource_attributes() {
        let decoded = request();
        let bytes = Bytes::from(decoded.encode_to_vec());
        let read = WireRequest::read(bytes.clone()).unwrap();
        assert_eq!(read.span_count(), 4);
        let indices: Vec<_> = read.spans().iter().map(|s| s.index).collect();
        assert_eq!(indices, vec![(0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0)]);
        for wire in read.spans() {
            let (r, s, i) = wire.index;
            let expected = &decoded.resource_spans[r].scope_spans[s].spans[i];
            assert_eq!(wire.span, SpanView::from(expected));
            assert_eq!(
                &bytes[wire.range.clone()],
                expected.encode_to_vec().as_slice()
            );
        }
        assert_eq!(read.resources.len(), 2);
        assert_eq!(read.resources[0].service_name.as_deref(), Some("svc"));
        assert_eq!(
            read.resource(0, &["session.id", "service.name"])
                .unwrap()
                .attributes,
            vec![kv("service.name", "svc"), kv("session.id", "s-1")]
        );
        assert_eq!(read.resource(0, &[]).unwrap(), Resource::default());
        assert_eq!(read.resources[1], WireResource::default());
        assert_eq!(read.spans()[3].resource, 1);
    }

    #[test]
    fn reading_stops_at_the_span_and_value_caps() {
        let bytes = Bytes::from(request().encode_to_vec());
        let limits = |max_spans, max_values| ReadLimits {
            max_spans,
            max_values,
        };
        // 4 spans of one attribute each.
        assert_eq!(
            WireRequest::read_limited(bytes.clone(), limits(4, 4)).map(|r| r.span_count()),
            Ok(4)
        );
        assert_eq!(
            WireRequest::read_limited(bytes.clone(), limits(3, 4)).err(),
            Some(WireError::TooManySpans { limit: 3 })
        );
        assert_eq!(
            WireRequest::read_limited(bytes, limits(4, 3)).err(),
            Some(WireError::TooManyValues { limit: 3 })
        );
    }

    /// A request of one `ResourceSpans` holding `fields` (encoded fields, in this order).
    fn one_resource_spans(fields: &[Vec<u8>]) -> Bytes {
        let mut out = Vec::new();
        prost::encoding::bytes::encode(1, &fields.concat(), &mut out);
        Bytes::from(out)
    }

    /// `ScopeSpans` of `spans` as field `number` of a `ResourceSpans`.
    fn scope_spans_field(number: u32, spans: Vec<Span>) -> Vec<u8> {
        let mut out = Vec::new();
        let scope_spans = ScopeSpans {
            spans,
            ..Default::default()
        };
        prost::encoding::message::encode(number, &scope_spans, &mut out);
        out
    }

    fn named(name: &str) -> Span {
        Span {
            name: name.into(),
            ..Default::default()
        }
    }

    #[test]
    fn instrumentation_library_spans_are_read_only_without_scope_spans() {
        let names = |bytes: Bytes| -> Vec<(String, (usize, usize, usize))> {
            let read = WireRequest::read(bytes).expect("prost reads it");
            read.spans()
                .iter()
                .map(|s| (s.span.name.to_string(), s.index))
                .collect()
        };
        let old = |name: &str| scope_spans_field(INSTRUMENTATION_LIBRARY_SPANS, vec![named(name)]);
        let new = |name: &str| scope_spans_field(2, vec![named(name)]);
        let mut resource = Vec::new();
        prost::encoding::message::encode(1, &Resource::default(), &mut resource);
        // Old field alone, its entries in order, a resource around them.
        assert_eq!(
            names(one_resource_spans(&[old("a"), resource.clone(), old("b")])),
            [("a".into(), (0, 0, 0)), ("b".into(), (0, 1, 0))]
        );
        // A `scope_spans` entry, before or after it, even an empty one, hides it.
        assert_eq!(
            names(one_resource_spans(&[old("a"), new("n")])),
            [("n".into(), (0, 0, 0))]
        );
        assert_eq!(
            names(one_resource_spans(&[new("n"), old("a")])),
            [("n".into(), (0, 0, 0))]
        );
        let empty = scope_spans_field(2, Vec::new());
        assert_eq!(names(one_resource_spans(&[old("a"), empty])), []);
        // An entry prost could not decode as `ScopeSpans` is skipped (prost skips the
        // field); a field 1000 of another wire type too.
        let mut broken = Vec::new();
        prost::encoding::bytes::encode(
            INSTRUMENTATION_LIBRARY_SPANS,
            &vec![0x12, 0x05, 0x01],
            &mut broken,
        );
        let mut varint = Vec::new();
        prost::encoding::uint64::encode(INSTRUMENTATION_LIBRARY_SPANS, &7, &mut varint);
        let request = one_resource_spans(&[broken, varint, old("b")]);
        assert!(ExportTraceServiceRequest::decode(request.clone()).is_ok());
        assert_eq!(names(request), [("b".into(), (0, 0, 0))]);
        // Its spans count towards the span cap.
        let two = one_resource_spans(&[old("a"), old("b")]);
        let limits = ReadLimits {
            max_spans: 1,
            max_values: usize::MAX,
        };
        assert_eq!(
            WireRequest::read_limited(two, limits).err(),
            Some(WireError::TooManySpans { limit: 1 })
        );
    }

    /// An attribute holding a kvlist holding a kvlist … `depth` levels down.
    fn nested(depth: usize) -> AnyValue {
        use opentelemetry_proto::tonic::common::v1::KeyValueList;
        let mut value = AnyValue {
            value: Some(Value::StringValue("leaf".into())),
        };
        for _ in 0..depth {
            value = AnyValue {
                value: Some(Value::KvlistValue(KeyValueList {
                    values: vec![KeyValue {
                        key: "k".into(),
                        value: Some(value),
                        ..Default::default()
                    }],
                })),
            };
        }
        value
    }

    #[test]
    fn a_span_nested_past_the_recursion_limit_is_left_out_alone() {
        let mut request = request();
        let deep = Span {
            name: "deep".into(),
            attributes: vec![KeyValue {
                key: "deep".into(),
                value: Some(nested(48)),
                ..Default::default()
            }],
            ..Default::default()
        };
        request.resource_spans[0].scope_spans[0]
            .spans
            .insert(1, deep);
        let bytes = Bytes::from(request.encode_to_vec());
        assert!(
            ExportTraceServiceRequest::decode(bytes.clone()).is_err(),
            "prost refuses the whole request"
        );
        let read = WireRequest::read(bytes).expect("the rest is read");
        assert_eq!(read.span_count(), 4);
        assert_eq!(read.rejected().len(), 1);
        assert_eq!(read.rejected()[0].index, (0, 0, 1));
        assert!(read.rejected()[0].reason.contains("recursion limit"));
        // What is forwarded is the request without that span, every other byte kept.
        let mut expected = request.clone();
        expected.resource_spans[0].scope_spans[0].spans.remove(1);
        assert_eq!(
            ExportTraceServiceRequest::decode(read.bytes.clone()).ok(),
            Some(expected.clone())
        );
        assert_eq!(read.bytes.len(), expected.encoded_len());
        // A request-wide cap still stops the whole read.
        let limits = ReadLimits {
            max_spans: 2,
            max_values: usize::MAX,
        };
        let bytes = Bytes::from(request.encode_to_vec());
        assert_eq!(
            WireRequest::read_limited(bytes, limits).err(),
            Some(WireError::TooManySpans { limit: 2 })
        );
    }

    #[test]
    fn a_memory_grant_that_refuses_stops_the_read() {
        let bytes = Bytes::from(request().encode_to_vec());
        let mut asked = 0;
        let mut refuse = |bytes: usize| {
            asked += bytes;
            false
        };
        assert_eq!(
            WireRequest::read_budgeted(bytes.clone(), ReadLimits::NONE, Some(&mut refuse)).err(),
            Some(WireError::OverBudget)
        );
        assert_eq!(asked, super::super::reader::GRANT_STEP);
        let mut granted = 0;
        let mut grant = |bytes: usize| {
            granted += bytes;
            true
        };
        let read = WireRequest::read_budgeted(bytes, ReadLimits::NONE, Some(&mut grant));
        assert_eq!(read.map(|r| r.span_count()).ok(), Some(4));
        assert_eq!(granted, super::super::reader::GRANT_STEP);
    }

    #[test]
    fn malformed_requests_fail_without_panicking() {
        let bytes = request().encode_to_vec();
        for cut in 1..bytes.len() {
            let truncated = Bytes::copy_from_slice(&bytes[..cut]);
            let ours = WireRequest::read(truncated.clone()).is_ok();
            let prost = ExportTraceServiceRequest::decode(truncated).is_ok();
            assert_eq!(ours, prost, "cut at {cut}");
        }
    }
}
