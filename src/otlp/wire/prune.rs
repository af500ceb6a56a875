//! A request without some of its spans: the spans the reader could not read (nesting past
//! the recursion limit, a malformed field inside the span, an id of the wrong length) are
//! cut out of the bytes, so the
//! rest of the request is read, detected on and forwarded, and the downstream is never sent
//! a span it would refuse with the whole request (issue 31 item 5, OTLP partial success).
//!
//! Only the length prefixes of the `resource_spans` and `scope_spans` (or
//! `instrumentation_library_spans`) entries that held a cut span change; every other byte is
//! copied as it arrived. This runs only for a request that had such a span.

use std::ops::Range;

use super::reader::{put_len_key, put_varint, Fields, WireError};
use super::schema::INSTRUMENTATION_LIBRARY_SPANS;

/// Field numbers from the request down to a span: `ExportTraceServiceRequest.resource_spans`,
/// `ResourceSpans.scope_spans` (or its pre-1.0 `instrumentation_library_spans`),
/// `ScopeSpans.spans`.
const PATH: [&[u32]; 3] = [&[1], &[2, INSTRUMENTATION_LIBRARY_SPANS], &[2]];

/// The request in `buf` without the span fields whose values are exactly the ranges in
/// `cut` (span ranges as [`super::WireSpan::range`] gives them). A range that is no span of
/// the request is ignored.
///
/// # Errors
/// A [`WireError`] when the enclosing messages are malformed (the reader read them already,
/// so only for bytes it did not read).
pub fn without_spans(buf: &[u8], cut: &[Range<usize>]) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(buf.len());
    write(buf, 0..buf.len(), 0, cut, &mut out)?;
    Ok(out)
}

fn write(
    buf: &[u8],
    range: Range<usize>,
    level: usize,
    cut: &[Range<usize>],
    out: &mut Vec<u8>,
) -> Result<(), WireError> {
    let mut copied = range.start;
    for field in Fields::new(buf, range.clone(), u32::MAX) {
        let field = field?;
        let Some(value) = field
            .len_range()
            .filter(|_| PATH[level].contains(&field.number))
        else {
            continue;
        };
        let holds_a_cut = cut
            .iter()
            .any(|c| c.start >= value.start && c.end <= value.end);
        if !holds_a_cut {
            continue;
        }
        out.extend_from_slice(&buf[copied..field.range.start]);
        copied = field.range.end;
        if level + 1 == PATH.len() {
            if cut.contains(&value) {
                // The span itself: left out, key and length prefix too.
                continue;
            }
            out.extend_from_slice(&buf[field.range.clone()]);
            continue;
        }
        let mut inner = Vec::with_capacity(value.len());
        write(buf, value, level + 1, cut, &mut inner)?;
        put_len_key(field.number, out);
        put_varint(inner.len() as u64, out);
        out.extend_from_slice(&inner);
    }
    out.extend_from_slice(&buf[copied..range.end]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::wire::WireRequest;
    use crate::otlp::ExportTraceServiceRequest;
    use bytes::Bytes;
    use opentelemetry_proto::tonic::resource::v1::Resource;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
    use prost::Message;

    fn span(name: &str) -> Span {
        Span {
            name: name.into(),
            span_id: vec![1; 8],
            ..Default::default()
        }
    }

    #[test]
    fn cut_spans_leave_the_rest_byte_for_byte() {
        let request = ExportTraceServiceRequest {
            resource_spans: vec![
                ResourceSpans {
                    resource: Some(Resource::default()),
                    scope_spans: vec![
                        ScopeSpans {
                            spans: vec![span("a"), span("b"), span("c")],
                            ..Default::default()
                        },
                        ScopeSpans {
                            spans: vec![span("d")],
                            ..Default::default()
                        },
                    ],
                    ..Default::default()
                },
                ResourceSpans {
                    scope_spans: vec![ScopeSpans {
                        spans: vec![span("e")],
                        ..Default::default()
                    }],
                    ..Default::default()
                },
            ],
        };
        let bytes = Bytes::from(request.encode_to_vec());
        let read = WireRequest::read(bytes.clone()).expect("reads");
        let ranges: Vec<_> = read.spans().iter().map(|s| s.range.clone()).collect();
        // Cut b and d: the rest decodes to the request without them.
        let pruned = without_spans(&bytes, &[ranges[1].clone(), ranges[3].clone()]).expect("ok");
        let mut expected = request.clone();
        expected.resource_spans[0].scope_spans[0].spans.remove(1);
        expected.resource_spans[0].scope_spans[1].spans.clear();
        assert_eq!(
            ExportTraceServiceRequest::decode(pruned.as_slice()).ok(),
            Some(expected)
        );
        // Nothing cut: the same bytes.
        assert_eq!(without_spans(&bytes, &[]).ok(), Some(bytes.to_vec()));
        // The last resource's only span: its ResourceSpans stays, empty.
        let pruned = without_spans(&bytes, &[ranges[4].clone()]).expect("ok");
        let decoded = ExportTraceServiceRequest::decode(pruned.as_slice()).expect("decodes");
        assert!(decoded.resource_spans[1].scope_spans[0].spans.is_empty());
        assert_eq!(decoded.resource_spans[0], request.resource_spans[0]);
    }
}
