//! Shared decoding for both receivers: compression names, decompression under a size
//! limit, protobuf and OTLP/JSON decoding (with the offending field named on error).

use std::io::Read;

use bytes::Bytes;
use prost::Message;

use crate::otlp::json::UnknownFields;
use crate::otlp::ExportTraceServiceRequest;

use super::error::ReceiveError;

/// A request body compression we accept (OTLP: `gzip` required, `zstd` optional;
/// `deflate` as the Collector's receivers and exporters offer it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    /// No compression (`identity`, or the header absent).
    Identity,
    /// `gzip` (RFC 1952).
    Gzip,
    /// `zstd` (RFC 8878).
    Zstd,
    /// `deflate` (HTTP, RFC 9110 §8.4.1.2, and gRPC: the zlib format of RFC 1950), also
    /// named `zlib` (the Collector's `confighttp` reads both names as zlib).
    Deflate,
}

impl Compression {
    /// Parses a `Content-Encoding` / `grpc-encoding` value (case-insensitive; empty is
    /// identity). Errors with [`ReceiveError::UnsupportedEncoding`] listing what we accept.
    pub fn parse(value: &str) -> Result<Self, ReceiveError> {
        let v = value.trim();
        if v.is_empty() || v.eq_ignore_ascii_case("identity") {
            Ok(Self::Identity)
        } else if v.eq_ignore_ascii_case("gzip") || v.eq_ignore_ascii_case("x-gzip") {
            Ok(Self::Gzip)
        } else if v.eq_ignore_ascii_case("zstd") {
            Ok(Self::Zstd)
        } else if v.eq_ignore_ascii_case("deflate") || v.eq_ignore_ascii_case("zlib") {
            Ok(Self::Deflate)
        } else {
            Err(ReceiveError::UnsupportedEncoding(v.to_owned()))
        }
    }

    /// The header token.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Identity => "identity",
            Self::Gzip => "gzip",
            Self::Zstd => "zstd",
            Self::Deflate => "deflate",
        }
    }
}

/// Decompresses `body` and returns at most `limit` bytes; a body that grows past `limit`
/// is [`ReceiveError::TooLarge`] (decompression stops there, so bombs cost `limit`).
pub fn decompress(
    compression: Compression,
    body: Bytes,
    limit: usize,
) -> Result<Bytes, ReceiveError> {
    let reader: Box<dyn Read + '_> = match compression {
        Compression::Identity => {
            return if body.len() > limit {
                Err(ReceiveError::TooLarge { limit })
            } else {
                Ok(body)
            };
        }
        Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(body.as_ref())),
        Compression::Deflate => Box::new(flate2::read::ZlibDecoder::new(body.as_ref())),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::new(body.as_ref()).map_err(
            |source| ReceiveError::Decompress {
                encoding: "zstd",
                source,
            },
        )?),
    };
    let cap = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    let mut out = Vec::with_capacity(body.len().saturating_mul(4).min(limit));
    reader
        .take(cap)
        .read_to_end(&mut out)
        .map_err(|source| ReceiveError::Decompress {
            encoding: compression.as_str(),
            source,
        })?;
    if out.len() > limit {
        return Err(ReceiveError::TooLarge { limit });
    }
    Ok(Bytes::from(out))
}

/// Decodes a protobuf `ExportTraceServiceRequest`.
pub fn decode_protobuf(bytes: &[u8]) -> Result<ExportTraceServiceRequest, ReceiveError> {
    Ok(ExportTraceServiceRequest::decode(bytes)?)
}

/// Reads a protobuf `ExportTraceServiceRequest` from its bytes with the zero-copy wire
/// reader (strings that are not UTF-8 are read lossily instead of failing the request),
/// stopping with [`ReceiveError::TooManySpans`] / [`ReceiveError::TooManyValues`] past
/// `limits`.
pub fn read_protobuf(
    bytes: Bytes,
    limits: crate::otlp::wire::ReadLimits,
) -> Result<crate::otlp::wire::WireRequest, ReceiveError> {
    use crate::otlp::wire::WireError;
    crate::otlp::wire::WireRequest::read_limited(bytes, limits).map_err(|e| match e {
        WireError::TooManySpans { limit } => ReceiveError::TooManySpans { limit },
        WireError::TooManyValues { limit } => ReceiveError::TooManyValues { limit },
        WireError::OverBudget => ReceiveError::Refused(crate::ingest::AcceptError::InFlightLimit),
        other => ReceiveError::InvalidWire(other),
    })
}

/// As [`read_protobuf`], paying for the views the reader builds out of `budget` (the
/// request's decoded-bytes reservation, issue 31 item 1): when the budget has no room the
/// read stops before allocating them and the request is refused retryably
/// ([`crate::ingest::AcceptError::InFlightLimit`]). A span that cannot be read is left out
/// ([`crate::otlp::wire::WireRequest::rejected`]).
pub fn read_protobuf_budgeted(
    bytes: Bytes,
    limits: crate::otlp::wire::ReadLimits,
    budget: &mut crate::ingest::limits::DecodedBytes,
) -> Result<crate::otlp::wire::WireRequest, ReceiveError> {
    use crate::otlp::wire::WireError;
    let mut grow = |bytes: usize| budget.try_grow(bytes);
    crate::otlp::wire::WireRequest::read_budgeted(bytes, limits, Some(&mut grow)).map_err(|e| {
        match e {
            WireError::TooManySpans { limit } => ReceiveError::TooManySpans { limit },
            WireError::TooManyValues { limit } => ReceiveError::TooManyValues { limit },
            WireError::OverBudget => {
                ReceiveError::Refused(crate::ingest::AcceptError::InFlightLimit)
            }
            other => ReceiveError::InvalidWire(other),
        }
    })
}

/// [`ReceiveError::TooManySpans`] when a decoded OTLP/JSON request holds more than
/// `max_spans` spans.
pub fn check_span_count(
    request: &ExportTraceServiceRequest,
    max_spans: usize,
) -> Result<(), ReceiveError> {
    if span_count(request) > max_spans as u64 {
        return Err(ReceiveError::TooManySpans { limit: max_spans });
    }
    Ok(())
}

/// Measures an OTLP/JSON body before it is parsed ([`crate::otlp::json::shape::scan`]):
/// its spans and values against `limits`, counted as the protobuf reader counts them
/// (links, resource and scope attributes too: the JSON decoding builds them), its nesting,
/// and what decoding it takes.
///
/// # Errors
/// [`ReceiveError::TooManySpans`] / [`ReceiveError::TooManyValues`] past a cap (HTTP 413,
/// as for protobuf); [`ReceiveError::InvalidJson`] for nesting past
/// [`crate::otlp::json::shape::MAX_DEPTH`].
pub fn check_json_shape(
    bytes: &[u8],
    limits: crate::otlp::wire::ReadLimits,
) -> Result<crate::otlp::json::shape::Shape, ReceiveError> {
    use crate::otlp::json::shape::{scan, ShapeError};
    scan(bytes, limits).map_err(|e| match e {
        ShapeError::TooManySpans { limit } => ReceiveError::TooManySpans { limit },
        ShapeError::TooManyValues { limit } => ReceiveError::TooManyValues { limit },
        ShapeError::TooDeep { .. } => ReceiveError::InvalidJson {
            path: ".".to_owned(),
            message: e.to_string(),
        },
    })
}

/// Decodes an OTLP/JSON `ExportTraceServiceRequest` (see [`decode_json_counted`]),
/// dropping the count of unknown fields.
pub fn decode_json(bytes: &[u8]) -> Result<ExportTraceServiceRequest, ReceiveError> {
    decode_json_counted(bytes).map(|(request, _)| request)
}

/// Decodes an OTLP/JSON `ExportTraceServiceRequest` as the protobuf JSON mapping defines
/// it ([`crate::otlp::json`]: lowerCamelCase or proto field names, enum names or numbers,
/// hex ids, 64-bit integers as strings or numbers, doubles as numbers or strings, `"NaN"`
/// and `"Infinity"` included), then checks id lengths (trace 16
/// bytes, span 8 bytes, empty allowed) and that no message nests deeper than the protobuf
/// path allows (the JSON read up to [`crate::otlp::json::shape::MAX_DEPTH`] levels, past
/// serde_json's 128). Returns the request and the unknown fields it
/// ignored. Errors name the field path, e.g. `resourceSpans[0].scopeSpans[0].spans[2].traceId`;
/// a body that is not a JSON object, or an object without any OTLP field (`{"foo":1}`),
/// is an error too.
pub fn decode_json_counted(
    bytes: &[u8],
) -> Result<(ExportTraceServiceRequest, UnknownFields), ReceiveError> {
    let value =
        crate::otlp::json::shape::parse(bytes).map_err(|message| ReceiveError::InvalidJson {
            path: ".".to_owned(),
            message,
        })?;
    decode_json_value_counted(value)
}

/// [`decode_json_counted`] of an already parsed JSON value (one line of a JSON-lines export
/// file, say).
pub fn decode_json_value_counted(
    mut value: serde_json::Value,
) -> Result<(ExportTraceServiceRequest, UnknownFields), ReceiveError> {
    let normalized =
        crate::otlp::json::normalize(&mut value).map_err(|e| ReceiveError::InvalidJson {
            path: ".".to_owned(),
            message: e.to_string(),
        })?;
    // NaN and ±Infinity cannot be JSON numbers: taken out before the typed decoding, put
    // back after it (only when the request has any: it costs a second walk).
    let non_finite = if normalized.non_finite_doubles > 0 {
        crate::otlp::json::doubles::NonFinite::take(&mut value)
    } else {
        Default::default()
    };
    let mut request: ExportTraceServiceRequest =
        serde_path_to_error::deserialize(value).map_err(|e| {
            let path = e.path().to_string();
            let mut message = e.inner().to_string();
            if path.ends_with("Id") {
                message.push_str(" (OTLP/JSON ids are hex strings, not base64)");
            } else if message.contains("expected f64") {
                message.push_str(
                    " (an OTLP/JSON doubleValue is a number, a number in a string, \
                     or \"NaN\", \"Infinity\", \"-Infinity\")",
                );
            }
            ReceiveError::InvalidJson { path, message }
        })?;
    non_finite.restore(&mut request);
    check_id_lengths(&request)?;
    check_nesting(&request)?;
    Ok((request, normalized.unknown))
}

/// [`ReceiveError::InvalidJson`] naming the first span, or resource spans, whose messages
/// nest deeper than prost's recursion limit ([`crate::otlp::json::nesting`]): the protobuf
/// path would leave such a span out, or refuse the request.
pub(super) fn check_nesting(request: &ExportTraceServiceRequest) -> Result<(), ReceiveError> {
    use crate::otlp::json::nesting;
    let error = |path: String| ReceiveError::InvalidJson {
        path,
        message: crate::otlp::wire::WireError::RecursionLimit.to_string(),
    };
    for (r, rs) in request.resource_spans.iter().enumerate() {
        if !nesting::outside_spans_fit(rs) {
            return Err(error(format!("resourceSpans[{r}]")));
        }
        for (s, ss) in rs.scope_spans.iter().enumerate() {
            if let Some(i) = ss.spans.iter().position(|span| !nesting::span_fits(span)) {
                return Err(error(format!(
                    "resourceSpans[{r}].scopeSpans[{s}].spans[{i}]"
                )));
            }
        }
    }
    Ok(())
}

fn check_id(path: impl FnOnce() -> String, id: &[u8], len: usize) -> Result<(), ReceiveError> {
    if id.is_empty() || id.len() == len {
        Ok(())
    } else {
        Err(ReceiveError::InvalidJson {
            path: path(),
            message: format!(
                "id has {} bytes, expected {len} (hex-encoded: {} characters)",
                id.len(),
                len * 2
            ),
        })
    }
}

fn check_id_lengths(request: &ExportTraceServiceRequest) -> Result<(), ReceiveError> {
    for (r, rs) in request.resource_spans.iter().enumerate() {
        for (s, ss) in rs.scope_spans.iter().enumerate() {
            for (i, span) in ss.spans.iter().enumerate() {
                let at =
                    |field: &str| format!("resourceSpans[{r}].scopeSpans[{s}].spans[{i}].{field}");
                check_id(|| at("traceId"), &span.trace_id, 16)?;
                check_id(|| at("spanId"), &span.span_id, 8)?;
                check_id(|| at("parentSpanId"), &span.parent_span_id, 8)?;
                for (l, link) in span.links.iter().enumerate() {
                    check_id(|| at(&format!("links[{l}].traceId")), &link.trace_id, 16)?;
                    check_id(|| at(&format!("links[{l}].spanId")), &link.span_id, 8)?;
                }
            }
        }
    }
    Ok(())
}

pub use crate::otlp::span_count;

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn compression_names() {
        assert_eq!(Compression::parse("").ok(), Some(Compression::Identity));
        assert_eq!(Compression::parse("GZIP").ok(), Some(Compression::Gzip));
        assert_eq!(Compression::parse("zstd").ok(), Some(Compression::Zstd));
        assert_eq!(
            Compression::parse("deflate").ok(),
            Some(Compression::Deflate)
        );
        assert_eq!(Compression::parse("zlib").ok(), Some(Compression::Deflate));
        let err = Compression::parse("br").err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("unsupported compression `br`; accepted encodings: identity, gzip, zstd, deflate")
        );
    }

    #[test]
    fn deflate_is_zlib_and_stops_at_limit() {
        let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&vec![7u8; 1 << 20]).ok();
        let zlib = Bytes::from(enc.finish().unwrap_or_default());
        let ok = decompress(Compression::Deflate, zlib.clone(), 1 << 20);
        assert_eq!(ok.ok(), Some(Bytes::from(vec![7u8; 1 << 20])));
        let err = decompress(Compression::Deflate, zlib, 1000).err();
        assert!(matches!(err, Some(ReceiveError::TooLarge { limit: 1000 })));
        // Raw deflate without the zlib header is not what `deflate` means.
        let mut raw = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::fast());
        raw.write_all(b"{}").ok();
        let raw = Bytes::from(raw.finish().unwrap_or_default());
        assert!(matches!(
            decompress(Compression::Deflate, raw, 100).err(),
            Some(ReceiveError::Decompress {
                encoding: "deflate",
                ..
            })
        ));
    }

    #[test]
    fn gzip_bomb_stops_at_limit() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&vec![0u8; 1 << 20]).ok();
        let gz = Bytes::from(enc.finish().unwrap_or_default());
        assert!(gz.len() < 10_000);
        let err = decompress(Compression::Gzip, gz.clone(), 1000).err();
        assert!(matches!(err, Some(ReceiveError::TooLarge { limit: 1000 })));
        let ok = decompress(Compression::Gzip, gz, 1 << 20).map(|b| b.len());
        assert_eq!(ok.ok(), Some(1 << 20));
    }

    #[test]
    fn corrupt_zstd_is_decompress_error() {
        let err = decompress(Compression::Zstd, Bytes::from_static(b"not zstd"), 100).err();
        assert!(matches!(
            err,
            Some(ReceiveError::Decompress {
                encoding: "zstd",
                ..
            })
        ));
    }

    #[test]
    fn json_short_id_names_field() {
        let body = br#"{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"0102","spanId":"0102030405060708"}]}]}]}"#;
        match decode_json(body) {
            Err(ReceiveError::InvalidJson { path, .. }) => {
                assert_eq!(path, "resourceSpans[0].scopeSpans[0].spans[0].traceId")
            }
            other => panic!("expected InvalidJson, got {other:?}"),
        }
    }

    #[test]
    fn a_double_string_protojson_does_not_allow_is_refused_naming_its_field() {
        for bad in [r#""nan""#, r#""+Inf""#, r#"" 1""#, r#""""#, "true"] {
            let body = format!(
                r#"{{"resourceSpans":[{{"scopeSpans":[{{"spans":[{{"attributes":[{{"key":"k","value":{{"doubleValue":{bad}}}}}]}}]}}]}}]}}"#
            );
            match decode_json(body.as_bytes()) {
                Err(ReceiveError::InvalidJson { path, message }) => {
                    assert!(
                        path.starts_with("resourceSpans[0].scopeSpans[0].spans[0].attributes[0]"),
                        "{bad}: {path}"
                    );
                    assert!(message.contains("NaN"), "{bad}: {message}");
                }
                other => panic!("{bad}: expected InvalidJson, got {other:?}"),
            }
        }
    }

    #[test]
    fn json_request_must_be_an_object() {
        for body in [&b"[]"[..], b"  [1,2]", b"null", b"\"x\""] {
            assert!(
                matches!(decode_json(body), Err(ReceiveError::InvalidJson { .. })),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert!(decode_json(b" {}").is_ok());
        let err = decode_json(br#"{"foo":1}"#).err().map(|e| e.to_string());
        assert!(
            err.as_deref().is_some_and(|e| e.contains("no OTLP field")),
            "{err:?}"
        );
    }
}
