//! OTLP export files as `scan` and `replay` read them: which requests one file holds.
//!
//! By name (case-insensitive), after an optional compression suffix is taken off:
//! - `.pb`, `.binpb`: protobuf `ExportTraceServiceRequest` (the same message as OTLP's
//!   `TracesData`): one message, or a sequence of messages each preceded by its length as a
//!   4-byte big-endian unsigned integer, as the Collector's `file` exporter writes with
//!   `format: proto`. A protobuf message never starts with a zero byte (field number 0 is
//!   invalid), so a file that starts with one is read as a sequence; one whose last frame
//!   is cut short (an exporter still writing, a copy cut off) is an error naming that
//!   request; any other file is one message.
//! - `.json`, `.jsonl`, `.ndjson`: OTLP/JSON, one request or several one after the other
//!   (JSON lines: the OTLP file exporter specification, and the Collector's `file` exporter
//!   with its default `format: json`), each decoded as the receivers decode OTLP/JSON. The
//!   length-prefixed framing above is read here too.
//! - `.gz` or `.zst` / `.zstd` after either: the file is decompressed first (gzip members
//!   or zstd frames one after another, as `gzip -c a b` and `zstd -c` write them).
//!
//! A length-prefixed message that starts with the zstd frame magic is decompressed before it
//! is decoded: the Collector's `file` exporter with `compression: zstd` compresses each
//! message on its own.

use std::path::Path;

use bytes::Bytes;

use super::ScanError;
use crate::otlp::ExportTraceServiceRequest;
use crate::pipeline::IncomingRequest;
use crate::receiver::decode::{
    decode_json_value_counted, decode_protobuf, decompress, read_protobuf, Compression,
};
use crate::receiver::error::ReceiveError;

/// How a file's requests are encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// Protobuf (`.pb`, `.binpb`).
    Protobuf,
    /// OTLP/JSON (`.json`, `.jsonl`, `.ndjson`).
    Json,
}

/// A file's encoding and the compression of the whole file, from its name; `None` for a
/// name that is no export file.
pub fn classify(path: &Path) -> Option<(Encoding, Compression)> {
    let name = path.file_name()?.to_str()?.to_ascii_lowercase();
    let (stem, compression) = if let Some(stem) = name.strip_suffix(".gz") {
        (stem, Compression::Gzip)
    } else if let Some(stem) = name
        .strip_suffix(".zst")
        .or_else(|| name.strip_suffix(".zstd"))
    {
        (stem, Compression::Zstd)
    } else {
        (name.as_str(), Compression::Identity)
    };
    let (_, extension) = stem.rsplit_once('.')?;
    let encoding = match extension {
        "pb" | "binpb" => Encoding::Protobuf,
        "json" | "jsonl" | "ndjson" => Encoding::Json,
        _ => return None,
    };
    Some((encoding, compression))
}

/// The requests `path` holds, in file order, read as the receivers read them (protobuf
/// through the wire reader, OTLP/JSON through the OTLP/JSON decoder, whose unknown fields
/// are warned about once per file).
///
/// Errors: the file cannot be read ([`ScanError::Io`]), its name is no export file
/// ([`ScanError::UnknownType`]), or one request does not decode ([`ScanError::Decode`] for
/// a file of one request, [`ScanError::DecodeRequest`] naming the request's position
/// otherwise).
pub fn read_incoming_requests(path: &Path) -> Result<Vec<IncomingRequest>, ScanError> {
    read_file(
        path,
        |message| {
            read_protobuf(message, crate::otlp::wire::ReadLimits::NONE)
                .map(IncomingRequest::Protobuf)
        },
        IncomingRequest::Json,
    )
}

/// The requests `path` holds (as [`read_incoming_requests`] reads them), decoded by prost.
pub fn read_requests(path: &Path) -> Result<Vec<ExportTraceServiceRequest>, ScanError> {
    read_file(path, |message| decode_protobuf(&message), |request| request)
}

/// The requests `path` holds, encoded for sending: each protobuf message as it is in the
/// file (checked by the wire reader, which accepts what prost decodes; prost would drop the
/// fields it does not know, such as the pre-1.0 `instrumentation_library_spans`), each
/// OTLP/JSON request decoded (as [`read_incoming_requests`] does) and encoded.
pub fn read_encoded_requests(path: &Path) -> Result<Vec<Bytes>, ScanError> {
    read_file(
        path,
        |message| {
            read_protobuf(message.clone(), crate::otlp::wire::ReadLimits::NONE).map(|_| message)
        },
        |request| Bytes::from(prost::Message::encode_to_vec(&request)),
    )
}

/// The requests of `path`, each protobuf message read by `protobuf`, each decoded OTLP/JSON
/// request wrapped by `json` (see [`read_incoming_requests`]).
fn read_file<T>(
    path: &Path,
    protobuf: impl Fn(Bytes) -> Result<T, ReceiveError>,
    json: impl Fn(ExportTraceServiceRequest) -> T,
) -> Result<Vec<T>, ScanError> {
    let (encoding, compression) = classify(path).ok_or_else(|| ScanError::UnknownType {
        path: path.to_path_buf(),
    })?;
    let bytes = std::fs::read(path).map_err(|error| ScanError::Io {
        path: path.to_path_buf(),
        error,
    })?;
    let decode_error = |error| ScanError::Decode {
        path: path.to_path_buf(),
        error,
    };
    let bytes = decompress(compression, Bytes::from(bytes), usize::MAX).map_err(decode_error)?;
    if bytes.is_empty() {
        // An empty file holds no request, whatever its encoding (an empty protobuf message
        // would otherwise count as one).
        tracing::warn!(path = %path.display(), "empty file: no request read");
        return Ok(Vec::new());
    }
    let messages = match length_prefixed(&bytes) {
        Framing::Frames(frames) => frames
            .into_iter()
            .map(|frame| unwrap_zstd(bytes.slice(frame)))
            .collect::<Result<Vec<_>, _>>()
            .map_err(decode_error)?,
        Framing::Cut {
            request,
            length,
            left,
        } => {
            return Err(ScanError::Truncated {
                path: path.to_path_buf(),
                request,
                length,
                left,
            })
        }
        Framing::None => vec![bytes],
    };
    let several = messages.len() > 1;
    let mut requests = Vec::with_capacity(messages.len());
    let mut unknown_fields = crate::otlp::json::UnknownFields::default();
    for message in messages {
        let read = match encoding {
            Encoding::Protobuf => protobuf(message)
                .map(|request| vec![request])
                .map_err(|error| (0, error)),
            Encoding::Json => json_requests(&message, &mut unknown_fields)
                .map(|requests| requests.into_iter().map(&json).collect()),
        };
        match read {
            Ok(read) => requests.extend(read),
            Err((offset, error)) if several || offset > 0 => {
                return Err(ScanError::DecodeRequest {
                    path: path.to_path_buf(),
                    request: requests.len() + offset + 1,
                    error,
                })
            }
            Err((_, error)) => return Err(decode_error(error)),
        }
    }
    if unknown_fields.count > 0 {
        tracing::warn!(
            path = %path.display(),
            field = unknown_fields.first.as_deref().unwrap_or(""),
            count = unknown_fields.count,
            "fields OTLP does not define are ignored"
        );
    }
    Ok(requests)
}

/// The OTLP/JSON requests of one message: JSON values one after the other (whitespace,
/// newlines included, between them; none in an empty message), after a UTF-8 byte order
/// mark if there is one. An error carries the failing value's position (0 for
/// the first) in the message.
fn json_requests(
    message: &[u8],
    unknown_fields: &mut crate::otlp::json::UnknownFields,
) -> Result<Vec<ExportTraceServiceRequest>, (usize, ReceiveError)> {
    let mut requests = Vec::new();
    // A byte order mark (some Windows tools write one) is no JSON.
    let message = message.strip_prefix(b"\xef\xbb\xbf").unwrap_or(message);
    for value in serde_json::Deserializer::from_slice(message).into_iter::<serde_json::Value>() {
        let position = requests.len();
        let value = value.map_err(|e| {
            let error = ReceiveError::InvalidJson {
                path: ".".to_owned(),
                message: e.to_string(),
            };
            (position, error)
        })?;
        let (request, unknown) =
            decode_json_value_counted(value).map_err(|error| (position, error))?;
        if unknown_fields.first.is_none() {
            unknown_fields.first = unknown.first;
        }
        unknown_fields.count += unknown.count;
        requests.push(request);
    }
    Ok(requests)
}

/// How a file's bytes are framed.
#[derive(Debug, PartialEq, Eq)]
enum Framing {
    /// Not length-prefixed: one message (or JSON text).
    None,
    /// The byte ranges of the messages of a length-prefixed file.
    Frames(Vec<std::ops::Range<usize>>),
    /// A length-prefixed file whose `request`-th message (from 1) is cut: its prefix says
    /// `length` bytes (0 when the prefix itself is cut) and `left` remain.
    Cut {
        request: usize,
        length: u64,
        left: usize,
    },
}

/// The framing of `bytes`: length-prefixed (each message preceded by its length as a 4-byte
/// big-endian unsigned integer) when it starts with a zero byte, which no protobuf message
/// or JSON text does; then the frames must end exactly at its end, or the first one that
/// does not is [`Framing::Cut`].
fn length_prefixed(bytes: &[u8]) -> Framing {
    if bytes.first() != Some(&0) {
        return Framing::None;
    }
    let mut frames = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let request = frames.len() + 1;
        let Some(prefix) = bytes.get(at..at + 4) else {
            let left = bytes.len() - at;
            return Framing::Cut {
                request,
                length: 0,
                left,
            };
        };
        let length = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]);
        let start = at + 4;
        let end = start.saturating_add(length as usize);
        if end > bytes.len() {
            return Framing::Cut {
                request,
                length: length.into(),
                left: bytes.len() - start,
            };
        }
        frames.push(start..end);
        at = end;
    }
    Framing::Frames(frames)
}

/// The zstd frame magic number (RFC 8878 §3.1.1), little-endian.
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// `message` decompressed when it is zstd (starts with the frame magic), else as it is.
fn unwrap_zstd(message: Bytes) -> Result<Bytes, ReceiveError> {
    if message.starts_with(&ZSTD_MAGIC) {
        decompress(Compression::Zstd, message, usize::MAX)
    } else {
        Ok(message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_give_the_encoding_and_the_compression() {
        let cases = [
            (
                "req-0001.pb",
                Some((Encoding::Protobuf, Compression::Identity)),
            ),
            (
                "traces.binpb",
                Some((Encoding::Protobuf, Compression::Identity)),
            ),
            ("traces.JSON", Some((Encoding::Json, Compression::Identity))),
            (
                "traces.jsonl",
                Some((Encoding::Json, Compression::Identity)),
            ),
            (
                "traces.ndjson.gz",
                Some((Encoding::Json, Compression::Gzip)),
            ),
            (
                "traces.pb.zst",
                Some((Encoding::Protobuf, Compression::Zstd)),
            ),
            (
                "traces.json.zstd",
                Some((Encoding::Json, Compression::Zstd)),
            ),
            ("traces.gz", None),
            ("notes.txt", None),
            ("pb", None),
        ];
        for (name, expected) in cases {
            assert_eq!(classify(Path::new(name)), expected, "{name}");
        }
    }

    #[test]
    fn json_values_one_after_another_with_or_without_a_byte_order_mark() {
        let mut unknown = crate::otlp::json::UnknownFields::default();
        let count = |text: &[u8], unknown: &mut _| json_requests(text, unknown).map(|r| r.len());
        assert_eq!(count(b"", &mut unknown).ok(), Some(0));
        assert_eq!(count(b"{}\n{} {}\r\n", &mut unknown).ok(), Some(3));
        assert_eq!(count(b"\xef\xbb\xbf{}\n{}", &mut unknown).ok(), Some(2));
        let failed = count(b"{}\n{\"resourceSpans\":1}\n{}", &mut unknown).err();
        assert_eq!(failed.map(|(position, _)| position), Some(1));
        let counted = count(
            b"{\"resourceSpans\":[],\"a\":1}\n{\"b\":2,\"resourceSpans\":[]}",
            &mut unknown,
        );
        assert_eq!(counted.ok(), Some(2));
        assert_eq!((unknown.count, unknown.first.as_deref()), (2, Some("a")));
    }

    #[test]
    fn length_prefixed_frames_must_end_at_the_end() {
        let mut bytes = Vec::new();
        for message in [&b"\x0a\x00"[..], b"", b"\x0a\x02\x0a\x00"] {
            bytes.extend_from_slice(&(message.len() as u32).to_be_bytes());
            bytes.extend_from_slice(message);
        }
        assert_eq!(
            length_prefixed(&bytes),
            Framing::Frames(vec![4..6, 10..10, 14..18])
        );
        // A message cut short, a prefix cut short.
        assert_eq!(
            length_prefixed(&bytes[..bytes.len() - 1]),
            Framing::Cut {
                request: 3,
                length: 4,
                left: 3
            }
        );
        assert_eq!(
            length_prefixed(&bytes[..12]),
            Framing::Cut {
                request: 3,
                length: 0,
                left: 2
            }
        );
        // A protobuf message or JSON text is never read as frames.
        assert_eq!(length_prefixed(b"\x0a\x00"), Framing::None);
        assert_eq!(length_prefixed(b"{}"), Framing::None);
        assert_eq!(length_prefixed(b""), Framing::None);
    }
}
