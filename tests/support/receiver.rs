//! Helpers shared by the receiver/forwarder integration tests.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use loopwatch::ingest::{AcceptError, Admission, IncomingRequest, SpanSink};
use loopwatch::otlp::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

/// Every corpus request file with the given extension (`pb` / `json`), sorted.
pub fn corpus(ext: &str) -> Vec<PathBuf> {
    fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries.flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, ext, out);
            } else if path
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("req-") && n.ends_with(&format!(".{ext}")))
            {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus"),
        ext,
        &mut out,
    );
    out.sort();
    assert!(
        out.len() >= 40,
        "corpus has only {} .{ext} files",
        out.len()
    );
    out
}

pub fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

pub fn decode_pb(bytes: &[u8]) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest::decode(bytes).unwrap_or_else(|e| panic!("corpus decode: {e}"))
}

/// A request whose single span carries a `size`-byte string attribute.
pub fn big_request(size: usize) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: vec![Span {
                    trace_id: vec![1; 16],
                    span_id: vec![2; 8],
                    name: "big".into(),
                    attributes: vec![KeyValue {
                        key: "blob".into(),
                        value: Some(AnyValue {
                            value: Some(any_value::Value::StringValue("x".repeat(size))),
                        }),
                        ..KeyValue::default()
                    }],
                    ..Span::default()
                }],
                ..ScopeSpans::default()
            }],
            ..ResourceSpans::default()
        }],
    }
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap_or_else(|e| panic!("gzip: {e}"));
    enc.finish().unwrap_or_else(|e| panic!("gzip: {e}"))
}

/// `deflate` as HTTP and gRPC mean it: the zlib format (RFC 1950).
pub fn deflate(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut enc = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(bytes).unwrap_or_else(|e| panic!("zlib: {e}"));
    enc.finish().unwrap_or_else(|e| panic!("zlib: {e}"))
}

pub fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).unwrap_or_else(|e| panic!("zstd: {e}"))
}

const ACCEPT: u8 = 0;
const FULL: u8 = 1;
const SHUTTING_DOWN: u8 = 2;
const ADMISSION_FULL: u8 = 3;

/// A SpanSink that records what it accepts, or refuses on demand.
#[derive(Default)]
pub struct RecordingSink {
    mode: AtomicU8,
    got: Mutex<Vec<IncomingRequest>>,
}

impl RecordingSink {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }
    pub fn refuse_queue_full(&self) {
        self.mode.store(FULL, Ordering::SeqCst);
    }
    pub fn refuse_shutting_down(&self) {
        self.mode.store(SHUTTING_DOWN, Ordering::SeqCst);
    }
    /// Refuses at admission (before the receiver reads the body) with `QueueFull`.
    pub fn refuse_admission(&self) {
        self.mode.store(ADMISSION_FULL, Ordering::SeqCst);
    }
    pub fn accept_all(&self) {
        self.mode.store(ACCEPT, Ordering::SeqCst);
    }
    pub fn take(&self) -> Vec<IncomingRequest> {
        std::mem::take(&mut *self.got.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl SpanSink for RecordingSink {
    fn admit(&self) -> BoxFuture<'_, Result<Admission, AcceptError>> {
        let answer = match self.mode.load(Ordering::SeqCst) {
            ADMISSION_FULL => Err(AcceptError::QueueFull),
            _ => Ok(Admission::unlimited()),
        };
        Box::pin(std::future::ready(answer))
    }

    fn accept(&self, _admission: Admission, request: IncomingRequest) -> Result<(), AcceptError> {
        match self.mode.load(Ordering::SeqCst) {
            FULL => Err(AcceptError::QueueFull),
            SHUTTING_DOWN => Err(AcceptError::ShuttingDown),
            _ => {
                self.got
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(request);
                Ok(())
            }
        }
    }
}
