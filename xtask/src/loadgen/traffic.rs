//! What the clients send: recorded corpus runs or synthetic tool-call requests, each kept
//! as encoded bytes with the offsets of its trace ids so every send gets fresh ones.

use std::path::{Path, PathBuf};

use anyhow::Context;
use loopwatch::otlp::ExportTraceServiceRequest;
use prost::Message;

use synthetic_traffic as synthetic;

/// One request as bytes, with the offsets of its trace ids (to rewrite per send).
pub struct Template {
    pub bytes: Vec<u8>,
    /// (offset of a 16-byte trace id, index of the original trace id in this run).
    pub trace_ids: Vec<(usize, u32)>,
    pub spans: u64,
}

/// The requests of one run (a corpus run, or one synthetic request), in arrival order.
pub struct Run {
    pub requests: Vec<Template>,
}

/// Loads the corpus runs: every folder holding `req-*.pb` is one run.
pub fn load_corpus(root: &Path) -> anyhow::Result<Vec<Run>> {
    // ScanError's message already names the path and the cause.
    let files = loopwatch::cli::scan::request_files(&[root.to_path_buf()])
        .map_err(|e| anyhow::anyhow!("corpus: {e}"))?;
    let mut by_run: Vec<(PathBuf, Vec<PathBuf>)> = Vec::new();
    for file in files {
        let is_request = file.extension().is_some_and(|e| e == "pb")
            && file
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("req-"));
        if !is_request {
            continue;
        }
        let dir = file.parent().unwrap_or(Path::new("")).to_path_buf();
        match by_run.last_mut() {
            Some((d, files)) if *d == dir => files.push(file),
            _ => by_run.push((dir, vec![file])),
        }
    }
    anyhow::ensure!(
        !by_run.is_empty(),
        "no req-*.pb files under {}",
        root.display()
    );
    by_run
        .into_iter()
        .map(|(_, files)| {
            let mut originals: Vec<Vec<u8>> = Vec::new();
            let requests = files
                .iter()
                .map(|f| {
                    let raw = std::fs::read(f).with_context(|| f.display().to_string())?;
                    let request = ExportTraceServiceRequest::decode(raw.as_slice())
                        .with_context(|| format!("{}: not an OTLP request", f.display()))?;
                    template(request, &mut originals).with_context(|| f.display().to_string())
                })
                .collect::<anyhow::Result<_>>()?;
            Ok(Run { requests })
        })
        .collect()
}

/// Spans per corpus request, on average.
pub fn spans_per_request(runs: &[Run]) -> f64 {
    let (requests, spans) = runs
        .iter()
        .flat_map(|r| r.requests.iter())
        .fold((0u64, 0u64), |(n, s), t| (n + 1, s + t.spans));
    spans as f64 / requests.max(1) as f64
}

/// Calls per synthetic trace (one agent run) in the throughput cells.
pub const CALLS_PER_TRACE: usize = 10;

/// Synthetic GenAI `execute_tool` traffic: `variants` distinct requests of `spans` spans
/// each, grouped in traces (runs) of `calls_per_trace` calls. `loop_heavy`: every trace
/// repeats one call with the same arguments and result (each trace is a stuck loop,
/// detected and annotated); otherwise every call of a trace has its own arguments and
/// result (0 % loops). Spans are ~430 bytes encoded.
pub fn synthetic(
    spans: usize,
    calls_per_trace: usize,
    loop_heavy: bool,
    variants: usize,
) -> anyhow::Result<Vec<Run>> {
    (0..variants)
        .map(|variant| {
            let request = synthetic::request(spans, calls_per_trace.max(1), loop_heavy, variant);
            let mut originals = Vec::new();
            Ok(Run {
                requests: vec![template(request, &mut originals)?],
            })
        })
        .collect()
}

/// Encodes `request` with each valid trace id replaced by a random sentinel and records
/// where the sentinels landed. `originals` maps trace ids to indices across a run.
fn template(
    mut request: ExportTraceServiceRequest,
    originals: &mut Vec<Vec<u8>>,
) -> anyhow::Result<Template> {
    // Sentinels are per call: index i of `originals` → sentinels[i].
    let mut sentinels: Vec<[u8; 16]> = Vec::new();
    let mut replaced = 0usize;
    let mut replace = |id: &mut Vec<u8>| {
        if !loopwatch::otlp::is_valid_trace_id(id) {
            return;
        }
        let index = match originals.iter().position(|o| o == id) {
            Some(i) => i,
            None => {
                originals.push(id.clone());
                originals.len() - 1
            }
        };
        while sentinels.len() <= index {
            sentinels.push(rand::random());
        }
        *id = sentinels[index].to_vec();
        replaced += 1;
    };
    let mut spans = 0u64;
    for rs in &mut request.resource_spans {
        for ss in &mut rs.scope_spans {
            for span in &mut ss.spans {
                spans += 1;
                replace(&mut span.trace_id);
                for link in &mut span.links {
                    replace(&mut link.trace_id);
                }
            }
        }
    }
    let bytes = request.encode_to_vec();
    let by_sentinel: std::collections::HashMap<[u8; 16], u32> = sentinels
        .iter()
        .enumerate()
        .map(|(index, s)| (*s, index as u32))
        .collect();
    let mut trace_ids = Vec::new();
    let mut at = 0;
    while at + 16 <= bytes.len() {
        let window: [u8; 16] = bytes[at..at + 16].try_into().expect("16 bytes");
        match by_sentinel.get(&window) {
            Some(&index) => {
                trace_ids.push((at, index));
                at += 16;
            }
            None => at += 1,
        }
    }
    anyhow::ensure!(
        trace_ids.len() == replaced,
        "trace id sentinels found {} times for {replaced} ids",
        trace_ids.len()
    );
    Ok(Template {
        bytes,
        trace_ids,
        spans,
    })
}
