//! Partial acceptance (issue 31 item 5): a span that cannot be read is left out alone, a
//! string that is not valid text is read with U+FFFD, and the rest of its request goes
//! through. The client is told in OTLP `partial_success`: `rejected_spans` with a message
//! naming the spans, or, when nothing was left out but text was replaced, `rejected_spans`
//! 0 and a message (the OTLP specification's form of a warning).
//!
//! The protobuf reader cuts unreadable spans itself ([`crate::otlp::wire::WireRequest::read_limited`]).
//! For OTLP/JSON, [`decode_json_partial`] first decodes as always; only a request that
//! fails is decoded again leniently: text that serde_json refuses (invalid UTF-8, a lone
//! `\ud800` escape, a number out of the f64 range: [`text`]) is repaired, and each span is
//! decoded on its own, a span that does not decode (or whose ids have the wrong length, or
//! that holds such a number, or nests past prost's recursion limit as the protobuf reader
//! counts it: [`crate::otlp::json::nesting`]) being left out. A request whose fault is
//! outside its spans (not JSON, not an object, a bad resource, nesting past
//! [`crate::otlp::json::shape::MAX_DEPTH`] JSON levels) is refused as before.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTracePartialSuccess;
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::Value;

use crate::otlp::json::UnknownFields;
use crate::otlp::wire::RejectedSpan;
use crate::otlp::ExportTraceServiceRequest;

use super::decode::decode_json_counted;
use super::error::ReceiveError;

mod text;
pub use text::sanitize_json_text;

/// Rejected spans named in the partial-success message (the count is always exact).
const NAMED: usize = 3;

/// What a request lost or had replaced while it was read: reported to the client in
/// `partial_success` and counted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Partial {
    /// Spans left out because they could not be read.
    pub rejected: Vec<RejectedSpan>,
    /// Strings read with U+FFFD in place of invalid UTF-8 or a lone surrogate escape.
    pub replaced_strings: usize,
}

impl Partial {
    /// True when the request was read whole and unchanged.
    pub fn is_empty(&self) -> bool {
        self.rejected.is_empty() && self.replaced_strings == 0
    }

    /// The OTLP `partial_success` to answer with (`None` when nothing was lost or replaced).
    pub fn to_otlp(&self) -> Option<ExportTracePartialSuccess> {
        if self.is_empty() {
            return None;
        }
        let mut message = String::new();
        if !self.rejected.is_empty() {
            let named: Vec<String> = self
                .rejected
                .iter()
                .take(NAMED)
                .map(RejectedSpan::describe)
                .collect();
            message = format!(
                "{} span(s) could not be read and were left out; the rest of the request was accepted: {}{}",
                self.rejected.len(),
                named.join("; "),
                if self.rejected.len() > NAMED { "; …" } else { "" }
            );
        }
        if self.replaced_strings > 0 {
            if !message.is_empty() {
                message.push_str(". ");
            }
            message.push_str(&format!(
                "{} string(s) held invalid UTF-8 or a lone surrogate escape and were read with U+FFFD",
                self.replaced_strings
            ));
        }
        Some(ExportTracePartialSuccess {
            rejected_spans: self.rejected.len() as i64,
            error_message: message,
        })
    }
}

/// An OTLP/JSON request decoded with what it lost.
#[derive(Debug)]
pub struct JsonDecoded {
    /// The request, without the spans left out.
    pub request: ExportTraceServiceRequest,
    /// Unknown fields ignored (as [`decode_json_counted`] reports them).
    pub unknown: UnknownFields,
    /// Spans left out and strings replaced.
    pub partial: Partial,
}

/// Decodes an OTLP/JSON request as [`decode_json_counted`] does; when that fails, decodes it
/// again leniently (see the module docs) and returns what could be read with what was lost.
/// The first error is returned when the fault is not in a span.
///
/// # Errors
/// [`ReceiveError::InvalidJson`] for a body whose fault is outside its spans.
pub fn decode_json_partial(bytes: &[u8]) -> Result<JsonDecoded, ReceiveError> {
    match decode_json_counted(bytes) {
        Ok((request, unknown)) => Ok(JsonDecoded {
            request,
            unknown,
            partial: Partial::default(),
        }),
        Err(first) => match decode_lenient(bytes) {
            // Not one span read: the request is refused as it was, naming the fault.
            Ok(decoded)
                if !decoded.partial.rejected.is_empty()
                    && crate::otlp::span_count(&decoded.request) == 0 =>
            {
                Err(first)
            }
            Ok(decoded) => Ok(decoded),
            Err(_) => Err(first),
        },
    }
}

/// [`ReceiveError::NoReadableSpan`] when spans of `request` were left out and none was
/// read: a request made only of unreadable spans is refused, not accepted empty.
pub fn some_span_read(request: &crate::otlp::wire::WireRequest) -> Result<(), ReceiveError> {
    match request.rejected().first() {
        Some(first) if request.span_count() == 0 => {
            Err(ReceiveError::NoReadableSpan(first.describe()))
        }
        _ => Ok(()),
    }
}

/// The lenient decoding of [`decode_json_partial`].
fn decode_lenient(bytes: &[u8]) -> Result<JsonDecoded, ReceiveError> {
    let invalid = |message: String| ReceiveError::InvalidJson {
        path: ".".to_owned(),
        message,
    };
    let parse = crate::otlp::json::shape::parse;
    let (mut value, replaced_strings, marked) = match parse(bytes) {
        Ok(value) => (value, 0, 0),
        Err(_) => {
            let (text, replaced) = sanitize_json_text(bytes);
            let (text, marked) = text::mark_out_of_range_numbers(text);
            (parse(&text).map_err(invalid)?, replaced, marked)
        }
    };
    let normalized =
        crate::otlp::json::normalize(&mut value).map_err(|e| invalid(e.to_string()))?;
    let non_finite = if normalized.non_finite_doubles > 0 {
        crate::otlp::json::doubles::NonFinite::take(&mut value)
    } else {
        Default::default()
    };
    // Each span on its own: one that does not decode is replaced by an empty span (so the
    // indices of the others, and of the doubles taken out above, stay) and left out below.
    let mut rejected = Vec::new();
    for_each_span(&mut value, |index, span| {
        let reason = match (marked > 0).then(|| text::find_marked(span)).flatten() {
            Some((path, number)) => Some(format!("{path}: number out of range: {number}")),
            None => match serde_path_to_error::deserialize::<_, Span>(&*span) {
                Err(e) => {
                    let path = e.path().to_string();
                    let hint = if path.ends_with("Id") {
                        " (OTLP/JSON ids are hex strings, not base64)"
                    } else {
                        ""
                    };
                    Some(format!(".{path}: {}{hint}", e.inner()))
                }
                // As the protobuf reader leaves out a span nested past prost's limit.
                Ok(decoded) if !crate::otlp::json::nesting::span_fits(&decoded) => {
                    Some(crate::otlp::wire::WireError::RecursionLimit.to_string())
                }
                Ok(_) => None,
            },
        };
        if let Some(reason) = reason {
            rejected.push(RejectedSpan { index, reason });
            *span = Value::Object(Default::default());
        }
    });
    // A number out of range outside every span refuses the request, as serde_json did.
    if let Some((path, number)) = (marked > 0).then(|| text::find_marked(&value)).flatten() {
        return Err(ReceiveError::InvalidJson {
            path: path.trim_start_matches('.').to_owned(),
            message: format!("number out of range: {number}"),
        });
    }
    let mut request: ExportTraceServiceRequest =
        serde_path_to_error::deserialize(value).map_err(|e| ReceiveError::InvalidJson {
            path: e.path().to_string(),
            message: e.inner().to_string(),
        })?;
    non_finite.restore(&mut request);
    // A resource or scope nested past prost's limit refuses the request, as over protobuf.
    super::decode::check_nesting(&request)?;
    for (r, rs) in request.resource_spans.iter().enumerate() {
        for (s, ss) in rs.scope_spans.iter().enumerate() {
            for (i, span) in ss.spans.iter().enumerate() {
                if rejected.iter().any(|x: &RejectedSpan| x.index == (r, s, i)) {
                    continue;
                }
                if let Some(reason) = bad_id(span) {
                    rejected.push(RejectedSpan {
                        index: (r, s, i),
                        reason,
                    });
                }
            }
        }
    }
    rejected.sort_by_key(|x| x.index);
    for x in rejected.iter().rev() {
        let (r, s, i) = x.index;
        if let Some(spans) = request
            .resource_spans
            .get_mut(r)
            .and_then(|rs| rs.scope_spans.get_mut(s))
            .map(|ss| &mut ss.spans)
        {
            if i < spans.len() {
                spans.remove(i);
            }
        }
    }
    Ok(JsonDecoded {
        request,
        unknown: normalized.unknown,
        partial: Partial {
            rejected,
            replaced_strings,
        },
    })
}

/// Calls `visit` with (resource_spans, scope_spans, span) indices and each span object of a
/// normalized OTLP/JSON request (lowerCamelCase names).
fn for_each_span(value: &mut Value, mut visit: impl FnMut((usize, usize, usize), &mut Value)) {
    let Some(resource_spans) = value.get_mut("resourceSpans").and_then(Value::as_array_mut) else {
        return;
    };
    for (r, rs) in resource_spans.iter_mut().enumerate() {
        let Some(scope_spans) = rs.get_mut("scopeSpans").and_then(Value::as_array_mut) else {
            continue;
        };
        for (s, ss) in scope_spans.iter_mut().enumerate() {
            let Some(spans) = ss.get_mut("spans").and_then(Value::as_array_mut) else {
                continue;
            };
            for (i, span) in spans.iter_mut().enumerate() {
                visit((r, s, i), span);
            }
        }
    }
}

/// Why `span`'s ids cannot be OTLP ids (trace 16 bytes, span 8, empty allowed), if so.
fn bad_id(span: &Span) -> Option<String> {
    let check = |name: &str, id: &[u8], len: usize| {
        (!id.is_empty() && id.len() != len).then(|| {
            format!(
                ".{name}: id has {} bytes, expected {len} (hex-encoded: {} characters)",
                id.len(),
                len * 2
            )
        })
    };
    check("traceId", &span.trace_id, 16)
        .or_else(|| check("spanId", &span.span_id, 8))
        .or_else(|| check("parentSpanId", &span.parent_span_id, 8))
        .or_else(|| {
            span.links.iter().find_map(|link| {
                check("links.traceId", &link.trace_id, 16)
                    .or_else(|| check("links.spanId", &link.span_id, 8))
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans_json(spans: &[&str]) -> String {
        format!(
            r#"{{"resourceSpans":[{{"resource":{{}},"scopeSpans":[{{"spans":[{}]}}]}}]}}"#,
            spans.join(",")
        )
    }

    #[test]
    fn a_span_that_does_not_decode_is_left_out_alone() {
        let good = |id: &str| {
            format!(
                r#"{{"traceId":"{}","spanId":"{id}","name":"ok"}}"#,
                "01".repeat(16)
            )
        };
        let bad_double =
            r#"{"name":"bad","attributes":[{"key":"k","value":{"doubleValue":"nope"}}]}"#;
        let short_id = r#"{"name":"short","traceId":"0102"}"#;
        let body = spans_json(&[
            &good("0000000000000001"),
            bad_double,
            &good("0000000000000002"),
            short_id,
        ]);
        assert!(decode_json_counted(body.as_bytes()).is_err());
        let decoded = decode_json_partial(body.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<&str> = decoded.request.resource_spans[0].scope_spans[0]
            .spans
            .iter()
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(names, ["ok", "ok"]);
        let indices: Vec<_> = decoded.partial.rejected.iter().map(|r| r.index).collect();
        assert_eq!(indices, [(0, 0, 1), (0, 0, 3)]);
        let otlp = decoded.partial.to_otlp().unwrap_or_default();
        assert_eq!(otlp.rejected_spans, 2);
        assert!(
            otlp.error_message
                .contains("resourceSpans[0].scopeSpans[0].spans[1]"),
            "{}",
            otlp.error_message
        );
    }

    #[test]
    fn a_lone_surrogate_is_read_as_a_replacement_and_warned_about() {
        let body = spans_json(&[r#"{"name":"a\ud800b"}"#, r#"{"name":"fine"}"#]);
        let decoded = decode_json_partial(body.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        let spans = &decoded.request.resource_spans[0].scope_spans[0].spans;
        assert_eq!(spans.len(), 2);
        assert_eq!(spans[0].name, "a\u{FFFD}b");
        let otlp = decoded.partial.to_otlp().unwrap_or_default();
        assert_eq!(otlp.rejected_spans, 0);
        assert!(otlp.error_message.contains("U+FFFD"));
    }

    #[test]
    fn a_request_of_unreadable_spans_only_is_refused_as_before() {
        let body = spans_json(&[r#"{"name":"short","traceId":"0102"}"#]);
        match decode_json_partial(body.as_bytes()) {
            Err(ReceiveError::InvalidJson { path, .. }) => {
                assert_eq!(path, "resourceSpans[0].scopeSpans[0].spans[0].traceId")
            }
            other => panic!("expected InvalidJson, got {other:?}"),
        }
    }

    /// A span attribute of arrays nested `depth` deep, named `name`.
    fn deep_span(name: &str, depth: usize) -> String {
        let mut value = r#"{"stringValue":"leaf"}"#.to_owned();
        for _ in 0..depth {
            value = format!(r#"{{"arrayValue":{{"values":[{value}]}}}}"#);
        }
        format!(r#"{{"name":"{name}","attributes":[{{"key":"d","value":{value}}}]}}"#)
    }

    fn names(decoded: &JsonDecoded) -> Vec<&str> {
        let spans = &decoded.request.resource_spans[0].scope_spans[0].spans;
        spans.iter().map(|s| s.name.as_str()).collect()
    }

    /// Past serde_json's 128 levels (an array 40 deep is 130) a span is read as over
    /// protobuf: accepted while prost's budget holds it (47 array levels), left out alone
    /// past it; the request is refused only past what can be read at all.
    #[test]
    fn a_deep_span_is_read_or_left_out_alone_as_over_protobuf() {
        for (depth, kept) in [(40, true), (47, true), (48, false), (63, false)] {
            let body = spans_json(&[
                r#"{"name":"a"}"#,
                &deep_span("deep", depth),
                r#"{"name":"b"}"#,
            ]);
            let decoded =
                decode_json_partial(body.as_bytes()).unwrap_or_else(|e| panic!("{depth}: {e}"));
            let expected: &[&str] = if kept {
                &["a", "deep", "b"]
            } else {
                &["a", "b"]
            };
            assert_eq!(names(&decoded), expected, "{depth}");
            let message = decoded.partial.to_otlp().map(|p| p.error_message);
            if kept {
                assert_eq!(message, None);
            } else {
                assert_eq!(
                    message.as_deref(),
                    Some("1 span(s) could not be read and were left out; the rest of the request was accepted: resourceSpans[0].scopeSpans[0].spans[1]: message nested deeper than the recursion limit of 100"),
                );
            }
        }
        let body = spans_json(&[r#"{"name":"a"}"#, &deep_span("deep", 64)]);
        match decode_json_partial(body.as_bytes()) {
            Err(ReceiveError::InvalidJson { message, .. }) => {
                assert!(
                    message.contains("nested deeper than 201 levels"),
                    "{message}"
                )
            }
            other => panic!("expected InvalidJson, got {other:?}"),
        }
    }

    #[test]
    fn a_number_out_of_range_leaves_its_span_out_alone() {
        let bad = r#"{"name":"bad","attributes":[{"key":"d","value":{"doubleValue":1e400}}]}"#;
        let body = spans_json(&[r#"{"name":"a"}"#, bad, r#"{"name":"b"}"#]);
        let decoded = decode_json_partial(body.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(names(&decoded), ["a", "b"]);
        assert_eq!(
            decoded.partial.to_otlp().map(|p| (p.rejected_spans, p.error_message)),
            Some((1, "1 span(s) could not be read and were left out; the rest of the request was accepted: resourceSpans[0].scopeSpans[0].spans[1].attributes[0].value.doubleValue: number out of range: 1e400".to_owned()))
        );
        // In a name (a string field) too; outside every span the request is refused.
        let body = spans_json(&[r#"{"name":1e999}"#, r#"{"name":"b"}"#]);
        let decoded = decode_json_partial(body.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(names(&decoded), ["b"]);
        let body = r#"{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":{"doubleValue":-1e400}}]},"scopeSpans":[{"spans":[{"name":"a"}]}]}]}"#;
        match decode_json_partial(body.as_bytes()) {
            // The first error, serde_json's, as before.
            Err(ReceiveError::InvalidJson { path, message }) => {
                assert_eq!(path, ".");
                assert!(message.starts_with("number out of range"), "{message}");
            }
            other => panic!("expected InvalidJson, got {other:?}"),
        }
    }

    #[test]
    fn a_fault_outside_the_spans_still_refuses_the_request() {
        for body in [&b"{not json"[..], b"[]", br#"{"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":{"doubleValue":"x"}}]}}]}"#] {
            assert!(matches!(
                decode_json_partial(body),
                Err(ReceiveError::InvalidJson { .. })
            ));
        }
    }
}
