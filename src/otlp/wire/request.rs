//! One received `ExportTraceServiceRequest` read from its bytes: validated as prost would
//! (minus UTF-8; plus the length of the spans' ids, as the Collector checks them), every
//! span located by byte range, and only what detection reads materialised: per resource
//! its `service.name` (other attributes on demand, e.g. the run-key attribute), per span
//! its borrowed [`SpanView`], which borrows from the request's `Bytes` and, for its
//! attributes and events, from one [`super::view::ViewArena`] for the whole request. Two
//! cells ([`self_cell`]) hold them: `Parsed` the bytes and what the validating walk read
//! ([`super::view::span_into`]), `Located` that and the views built from it once the
//! arena is complete. Nothing else is copied.
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
/// were malformed or nested past the recursion limit, or one of its ids had the wrong
/// length ([`WireError::IdLength`]), while the request around it was sound. The rest of the request is read and forwarded without it, and the receiver
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
    /// Attributes, events, array/kvlist elements and the entries around spans
    /// (`limits.max_values_per_request`; see [`ValueBudget`]).
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
    /// `limits.max_values` values ([`ValueBudget`]: attributes, events, array and kvlist
    /// elements, and the `ResourceSpans`, `resource`, `scope_spans` and
    /// `instrumentation_library_spans` entries around the spans): past either, reading
    /// stops with [`WireError::TooManySpans`] / [`WireError::TooManyValues`] before the
    /// next one is built. A span view costs a few hundred bytes and a value 32–80 even when
    /// empty (two bytes on the wire), so the caps bound what one request can make the
    /// reader allocate.
    ///
    /// A span whose own fields are malformed (a wrong wire type, a length past its end,
    /// nesting past the recursion limit) or which holds an id of the wrong length (which
    /// prost reads but the Collector refuses with the whole request:
    /// [`WireError::IdLength`]) while the messages around it are sound does not fail the
    /// request: it is cut out of the bytes ([`super::prune`]), the rest is read
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
            Some(r) => resource_attributes(&self.bytes, &r.ranges, keys, || Ok(())),
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
///
/// Every entry the walk keeps or builds something for is taken from `values` before it
/// is kept, as attributes are: each `ResourceSpans` (its [`WireResource`]), each
/// occurrence of its `resource` (a range) and each `service.name` attribute read from it,
/// each `scope_spans` entry and each `instrumentation_library_spans` entry (a range). An
/// empty one is two bytes on the wire (issue D1: 7 M empty `ResourceSpans`, a 14 MB
/// request of 14 KB gzipped, were kept as 7 M uncounted resources, ~800 MB).
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
        values.take()?;
        let resource_index = resources.len();
        let mut resource = WireResource::default();
        let mut s = 0;
        // `instrumentation_library_spans` entries, read only when there is no `scope_spans`.
        let mut legacy = Vec::new();
        let mut has_scope_spans = false;
        let mut read_scope_spans = |range, budget, s, values: &mut ValueBudget| {
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
                    values.take()?;
                    read_scope_spans(range, budget, s, values)?;
                    s += 1;
                }
                Some((msg, range, budget)) => {
                    check(msg, buf, range.clone(), budget)?;
                    if msg == Msg::Resource {
                        values.take()?;
                        resource.ranges.push(range);
                    }
                }
                None if field.number == INSTRUMENTATION_LIBRARY_SPANS => {
                    if let Some(range) = field.len_range() {
                        values.take()?;
                        legacy.push(range);
                    }
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
                    read_scope_spans(range, budget, s, values)?;
                    s += 1;
                }
            }
        }
        let attributes =
            resource_attributes(buf, &resource.ranges, &["service.name"], || values.take())?;
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
                    // The span's own bytes are bad (or an id of it), its framing is sound:
                    // it alone is left out (what it put in the arena is never looked at: the request is
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

/// The attributes named `keys` of the resource whose occurrences are `ranges` of `buf`, each
/// paid for with `take` before it is decoded.
fn resource_attributes(
    buf: &[u8],
    ranges: &[Range<usize>],
    keys: &[&str],
    mut take: impl FnMut() -> Result<(), WireError>,
) -> Result<Resource, WireError> {
    let mut resource = Resource::default();
    for range in ranges {
        for attribute in len_fields(buf, range.clone(), 1) {
            let attribute = attribute?;
            let key = decode::key_of(buf, attribute.clone())?;
            if keys.iter().any(|k| k.as_bytes() == key) {
                take()?;
                resource
                    .attributes
                    .push(decode::key_value(buf, attribute, u32::MAX)?);
            }
        }
    }
    Ok(resource)
}

#[cfg(test)]
mod tests;
