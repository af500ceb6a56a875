//! Fixed workloads for counting instructions with callgrind, which is repeatable on a
//! loaded machine where criterion's timings are not. Each workload runs once, inside a
//! function whose name contains `workload`:
//!
//! ```text
//! cargo bench --bench instructions --no-run        # prints the binary's path
//! valgrind --tool=callgrind --toggle-collect='*workload*' <binary> <name>
//! ```
//!
//! Names: `wire` (bytes → wire reader → engine → bytes, fresh engine), `prost` (decode →
//! engine → encode), `passthrough` (prost decode + encode only), `fingerprint_5kb` (one
//! result fingerprint of a ~5 KB JSON text), `fingerprint_small` (one call fingerprint of a
//! ~100 B argument object, keys out of order). The binary prints the number of spans (or
//! bytes) the workload covered, to divide the instruction count by.

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use loopwatch::engine::Engine;
use loopwatch::event::{CallStatus, Payload};
use loopwatch::fingerprint::Fingerprinter;
use loopwatch::otlp::ExportTraceServiceRequest;
use loopwatch::wire::WireRequest;
use prost::Message;

mod support;

#[inline(never)]
fn workload_wire(engine: &Engine, raw: &[Bytes]) -> usize {
    let now = Instant::now();
    raw.iter()
        .map(|request| {
            let read = WireRequest::read(request.clone()).expect("corpus request reads");
            engine
                .process_wire(read, now)
                .expect("annotates")
                .bytes
                .len()
        })
        .sum()
}

#[inline(never)]
fn workload_prost(engine: &Engine, raw: &[Bytes]) -> usize {
    let now = Instant::now();
    raw.iter()
        .map(|request| {
            let mut decoded = ExportTraceServiceRequest::decode(request.clone()).expect("decodes");
            engine.process(&mut decoded, now);
            decoded.encode_to_vec().len()
        })
        .sum()
}

#[inline(never)]
fn workload_passthrough(raw: &[Bytes]) -> usize {
    raw.iter()
        .map(|request| {
            ExportTraceServiceRequest::decode(request.clone())
                .expect("decodes")
                .encode_to_vec()
                .len()
        })
        .sum()
}

#[inline(never)]
fn workload_fingerprint(fingerprinter: &Fingerprinter, payload: &Payload) -> bool {
    fingerprinter
        .result_fingerprint(&CallStatus::Ok, Some(payload))
        .is_some()
}

#[inline(never)]
fn workload_fingerprint_call(fingerprinter: &Fingerprinter, payload: &Payload) -> u8 {
    fingerprinter.call_fingerprint("read_file", payload)[0]
}

fn main() {
    let name = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    let config = support::config();
    let raw: Vec<Bytes> = support::corpus_bytes()
        .into_iter()
        .map(Bytes::from)
        .collect();
    let spans: u64 = raw
        .iter()
        .map(|b| {
            let request = ExportTraceServiceRequest::decode(b.clone()).expect("decodes");
            loopwatch::receiver::decode::span_count(&request)
        })
        .sum();
    let engine = || Engine::from_config(&config).expect("default config");
    match name.as_str() {
        "wire" => black_box(workload_wire(&engine(), &raw)),
        "prost" => black_box(workload_prost(&engine(), &raw)),
        "passthrough" => black_box(workload_passthrough(&raw)),
        "fingerprint_5kb" => {
            let text = support::large_json(5 * 1024);
            println!("bytes {}", text.len());
            let fingerprinter = Fingerprinter::new(&config.detection.fingerprint_config());
            let payload = Payload::Text(text);
            black_box(workload_fingerprint(&fingerprinter, &payload));
            return;
        }
        "fingerprint_small" => {
            let text = support::small_json();
            println!("bytes {}", text.len());
            let fingerprinter = Fingerprinter::new(&config.detection.fingerprint_config());
            let payload = Payload::Text(text);
            black_box(workload_fingerprint_call(&fingerprinter, &payload));
            return;
        }
        _ => {
            // `cargo bench` runs every bench binary: nothing to do without a name.
            eprintln!(
                "usage: instructions wire|prost|passthrough|fingerprint_5kb|fingerprint_small"
            );
            return;
        }
    };
    println!("spans {spans}");
}
