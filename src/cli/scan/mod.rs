//! Offline scan of recorded OTLP export requests (`loopwatch scan`): the same engine as
//! the sidecar, fed from files ([`files`]: which requests one file holds).

pub mod files;

use std::path::{Path, PathBuf};
use std::time::Instant;

use crate::engine::report::DetectionRecord;
use crate::engine::Engine;
use crate::otlp::ExportTraceServiceRequest;
use crate::pipeline::IncomingRequest;
use crate::registry::RunDetection;

/// Errors reading request files.
#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("{path}: {error}")]
    Io {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("{path}: not a valid OTLP ExportTraceServiceRequest: {error}")]
    Decode {
        path: PathBuf,
        error: crate::receiver::error::ReceiveError,
    },
    #[error("{path}: request {request} of the file is not a valid OTLP ExportTraceServiceRequest: {error}")]
    DecodeRequest {
        path: PathBuf,
        /// Position of the request in the file, from 1.
        request: usize,
        error: crate::receiver::error::ReceiveError,
    },
    #[error("{path}: request {request} of the file is cut short: its length prefix says {length} bytes, {left} remain (a file still being written, or cut)")]
    Truncated {
        path: PathBuf,
        /// Position of the cut request in the file, from 1.
        request: usize,
        /// The length its 4-byte prefix gives (0 when the prefix itself is cut).
        length: u64,
        /// Bytes left in the file after the prefix.
        left: usize,
    },
    #[error("{path}: unknown file type (expected {EXPORT_FILE_TYPES})")]
    UnknownType { path: PathBuf },
    #[error("no request files ({EXPORT_FILE_TYPES}) found in {0}")]
    NoFiles(String),
}

/// The export file names `scan` and `replay` read ([`files::classify`]).
pub const EXPORT_FILE_TYPES: &str = ".pb, .binpb, .json, .jsonl or .ndjson, optionally .gz or .zst";

/// Expands `paths` into request files: files as given, folders recursively with entries
/// in name order. Only export files ([`EXPORT_FILE_TYPES`]) inside folders are taken, and a
/// `.json` file whose `.pb` twin (same name) is beside it is skipped: the two hold one
/// request.
pub fn request_files(paths: &[PathBuf]) -> Result<Vec<PathBuf>, ScanError> {
    let mut files = Vec::new();
    for path in paths {
        collect(path, true, &mut files)?;
    }
    if files.is_empty() {
        let names: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(ScanError::NoFiles(names.join(", ")));
    }
    Ok(files)
}

fn collect(path: &Path, explicit: bool, out: &mut Vec<PathBuf>) -> Result<(), ScanError> {
    let io = |error| ScanError::Io {
        path: path.to_path_buf(),
        error,
    };
    let meta = std::fs::metadata(path).map_err(io)?;
    if meta.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(io)?
            .map(|e| e.map(|e| e.path()))
            .collect::<Result<_, _>>()
            .map_err(io)?;
        entries.sort();
        for entry in &entries {
            // A recording often holds each request twice (req-0001.pb and its OTLP/JSON
            // twin req-0001.json): take the protobuf one only.
            if entry.extension().and_then(|e| e.to_str()) == Some("json")
                && entries.contains(&entry.with_extension("pb"))
            {
                continue;
            }
            collect(entry, false, out)?;
        }
    } else if explicit || is_request_file(path) {
        out.push(path.to_path_buf());
    }
    Ok(())
}

fn is_request_file(path: &Path) -> bool {
    files::classify(path).is_some()
        && path.file_name().and_then(|n| n.to_str()) != Some("runs.json")
        && path.file_name().and_then(|n| n.to_str()) != Some("expected.json")
}

/// Reads one request file as one request: the requests it holds ([`files::read_requests`])
/// merged, their `resource_spans` in file order (what protobuf makes of their encodings
/// concatenated). Decoded exactly as the receivers decode them, so errors name the same
/// problems.
pub fn read_request(path: &Path) -> Result<ExportTraceServiceRequest, ScanError> {
    let mut requests = files::read_requests(path)?.into_iter();
    let mut merged = requests.next().unwrap_or_default();
    for request in requests {
        merged.resource_spans.extend(request.resource_spans);
    }
    Ok(merged)
}

/// What a scan read and found.
#[derive(Debug, Default)]
pub struct ScanOutcome {
    /// Final detections: runs in order of first appearance, then profile order, then
    /// sequence order.
    pub detections: Vec<RunDetection>,
    pub requests: usize,
    pub spans: usize,
    /// Runs with at least one tool call or model response.
    pub runs: usize,
}

/// Feeds every request file through `engine` as one stream and returns the final
/// detections with counts of what was read.
pub fn scan(engine: &Engine, paths: &[PathBuf]) -> Result<ScanOutcome, ScanError> {
    let mut run_order: Vec<std::sync::Arc<str>> = Vec::new();
    let mut outcome = ScanOutcome::default();
    let now = Instant::now();
    for file in paths {
        for incoming in files::read_incoming_requests(file)? {
            outcome.requests += 1;
            outcome.spans += incoming.span_count() as usize;
            let processed = match incoming {
                IncomingRequest::Protobuf(wire) => {
                    let path = file.clone();
                    engine
                        .process_wire(wire, now)
                        .map_err(|error| ScanError::Decode {
                            path,
                            error: error.into(),
                        })?
                        .processed
                }
                IncomingRequest::Json(mut request) => engine.process(&mut request, now),
            };
            for d in processed.detections {
                if !run_order.contains(&d.run_key) {
                    run_order.push(d.run_key.clone());
                }
            }
        }
    }
    for run_key in &run_order {
        let mut detections = engine.registry.detections(run_key).unwrap_or_default();
        if let Some(budgets) = &engine.budgets {
            detections.extend(budgets.detections(run_key));
        }
        if let Some(delegations) = &engine.delegations {
            detections.extend(delegations.detections(run_key));
        }
        detections.sort_by_key(|d| d.profile_index);
        outcome.detections.extend(detections);
    }
    outcome.runs = engine.registry.run_count();
    Ok(outcome)
}

/// Renders detections as an aligned text table (one header line).
pub fn render_table(detections: &[DetectionRecord]) -> String {
    let header = [
        "TRACE_ID", "SPAN_ID", "PROFILE", "PATTERN", "TOOLS", "COUNT", "SEVERITY", "OCC", "CALL",
        "RESPONSE",
    ];
    let rows: Vec<[String; 10]> = detections
        .iter()
        .map(|d| {
            [
                d.trace_id.clone(),
                d.span_id.clone(),
                d.profile.clone(),
                d.pattern.clone(),
                d.tools.join(","),
                d.count.to_string(),
                d.severity.clone(),
                d.occurrence.to_string(),
                d.call.map_or("-".into(), |c| c.to_string()),
                d.response.map_or("-".into(), |r| r.to_string()),
            ]
        })
        .collect();
    let mut widths = header.map(str::len);
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        cells
            .iter()
            .zip(widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect::<Vec<_>>()
            .join("  ")
            .trim_end()
            .to_string()
    };
    let mut out = line(header.to_vec());
    out.push('\n');
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
        out.push('\n');
    }
    if rows.is_empty() {
        out.push_str("(no loops detected)\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn folders_expand_in_name_order_and_skip_json_twins_of_pb_files() {
        let dir = tempfile::tempdir().unwrap();
        for name in [
            "req-0002.json",
            "req-0001.pb",
            "req-0001.json",
            "runs.json",
            "notes.txt",
            "req-0003.pb",
        ] {
            std::fs::write(dir.path().join(name), b"").unwrap();
        }
        let files = request_files(&[dir.path().to_path_buf()]).unwrap();
        let names: Vec<_> = files
            .iter()
            .map(|f| f.file_name().unwrap().to_str().unwrap().to_string())
            .collect();
        assert_eq!(names, ["req-0001.pb", "req-0002.json", "req-0003.pb"]);
        // a file named explicitly is always taken
        let explicit = request_files(&[dir.path().join("req-0001.json")]).unwrap();
        assert_eq!(explicit.len(), 1);
        assert!(matches!(
            request_files(&[dir.path().join("missing")]),
            Err(ScanError::Io { .. })
        ));
    }
}
