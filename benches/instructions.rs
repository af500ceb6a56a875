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
//! result fingerprint of a ~5 KB JSON text), `fingerprint_5kb_match` (its matching hash
//! instead), `fingerprint_small` (one call fingerprint of a
//! ~100 B argument object, keys out of order; both after one uncollected warm-up call),
//! `wire_tools` / `passthrough_tools` (10 synthetic requests of 1000 GenAI `execute_tool`
//! spans, 0 % loops) and `wire_loops` / `passthrough_loops` (the same, every trace one
//! repeated call), `idle_runs` (`LOOPWATCH_RUNS`, 100 000, one-call runs in requests of 1000 through
//! one engine; prints the resident bytes per run it keeps), `field` (the recorded agent runs of `shared/field/runs`, or the folder
//! in `LOOPWATCH_FIELD`: OTLP/JSON read and encoded outside the workload, then the wire
//! path as `wire`; plain-text tool results, where the issue-29 comparison works). The binary prints the number of spans (or bytes) the workload covered,
//! to divide the instruction count by. `fingerprint_cpu` (no callgrind) prints on-CPU
//! nanoseconds per fingerprint call instead. With `LOOPWATCH_TIME` set, the `wire*` and
//! `field` workloads also print their wall-clock nanoseconds (`workload_ns`, on stderr) for
//! a native side-by-side of two builds. `LOOPWATCH_CONFIG=<file.toml>` builds the engines
//! from that config instead of the defaults. Under valgrind SHA-256 runs its portable code
//! (valgrind hides SHA-NI), about 3 400 instructions per 64-byte block.

use std::hint::black_box;
use std::time::Instant;

use bytes::Bytes;
use loopwatch::conventions::event::{CallStatus, Payload};
use loopwatch::engine::Engine;
use loopwatch::fingerprint::Fingerprinter;
use loopwatch::otlp::wire::WireRequest;
use loopwatch::otlp::ExportTraceServiceRequest;
use prost::Message;

mod support;

#[inline(never)]
fn workload_wire(engine: &Engine, raw: &[Bytes]) -> usize {
    process_wire_all(engine, raw)
}

/// Reads and processes every request of `raw` (called outside the collected workloads too:
/// its name has no `workload`).
fn process_wire_all(engine: &Engine, raw: &[Bytes]) -> usize {
    let now = Instant::now();
    raw.iter()
        .map(|request| {
            let read = WireRequest::read(request.clone()).expect("corpus request reads");
            engine
                .process_wire(read, now)
                .expect("annotates")
                .forwarded_len()
        })
        .sum()
}

/// prost decode + encode of `raw`, under its own name for `corpus_request`.
#[inline(never)]
fn workload_passthrough_request(raw: &[Bytes]) -> usize {
    workload_passthrough(raw)
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
fn workload_fingerprint_match(fingerprinter: &Fingerprinter, payload: &Payload) -> bool {
    fingerprinter
        .result_match(&CallStatus::Ok, Some(payload))
        .is_some()
}

#[inline(never)]
fn workload_fingerprint_call(fingerprinter: &Fingerprinter, payload: &Payload) -> u8 {
    fingerprinter.call_fingerprint("read_file", payload)[0]
}

/// The text of a fingerprint workload, and whether it is a call (else a result).
fn fingerprint_input(name: &str) -> (String, bool) {
    match name {
        "fingerprint_small" => (support::small_json(), true),
        _ => (support::large_json(5 * 1024), false),
    }
}

fn fingerprint_once(fingerprinter: &Fingerprinter, payload: &Payload, call: bool) -> bool {
    match call {
        true => fingerprinter.call_fingerprint("read_file", payload)[0] > 0,
        false => fingerprinter
            .result_fingerprint(&CallStatus::Ok, Some(payload))
            .is_some(),
    }
}

/// Nanoseconds this thread has spent on a CPU (`/proc/thread-self/schedstat`, Linux).
fn on_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// On-CPU time per call (not wall time, so other load on the machine matters less than
/// for criterion): best of 5 rounds of 20 000 calls, for both fingerprint workloads and,
/// as the floor, SHA-256 alone over the 5 KB text.
fn fingerprint_cpu(fingerprinter: &Fingerprinter) {
    use sha2::{Digest, Sha256};
    const CALLS: u32 = 20_000;
    let per_call = |f: &dyn Fn() -> bool| {
        (0..5)
            .map(|_| {
                let start = on_cpu_ns();
                for _ in 0..CALLS {
                    black_box(f());
                }
                (on_cpu_ns() - start) as f64 / f64::from(CALLS)
            })
            .fold(f64::INFINITY, f64::min)
    };
    for name in ["fingerprint_5kb", "fingerprint_small"] {
        let (text, call) = fingerprint_input(name);
        let payload = Payload::Text(text);
        let ns = per_call(&|| fingerprint_once(fingerprinter, black_box(&payload), call));
        println!("{name}: {ns:.0} ns per call on CPU");
    }
    let text = support::large_json(5 * 1024);
    let payload = Payload::Text(text.clone());
    let ns = per_call(&|| {
        fingerprinter
            .result_match(&CallStatus::Ok, Some(black_box(&payload)))
            .is_some()
    });
    println!("matching hash (XXH3-128) of the 5 KB result: {ns:.0} ns per call on CPU");
    let ns = per_call(&|| {
        fingerprinter
            .result_both_with(
                &CallStatus::Ok,
                Some(black_box(&payload)),
                &Default::default(),
            )
            .is_some()
    });
    println!("matching hash and SHA-256 of the 5 KB result: {ns:.0} ns per call on CPU");
    let ns = per_call(&|| Sha256::digest(black_box(text.as_bytes()))[0] > 0);
    println!("sha256 of the 5 KB text alone: {ns:.0} ns per call on CPU");
    let secret = [7u8; 192];
    let ns = per_call(&|| {
        xxhash_rust::xxh3::xxh3_128_with_secret(black_box(text.as_bytes()), &secret) > 0
    });
    println!("xxh3-128 of the 5 KB text alone: {ns:.0} ns per call on CPU");
    // SipHash-1-3 (the standard library's keyed hasher, 64-bit output; the 128-bit
    // variant adds one finalisation), for the speed comparison in docs/security.md
    let keyed = std::collections::hash_map::RandomState::new();
    let ns = per_call(&|| {
        use std::hash::{BuildHasher, Hasher};
        let mut h = keyed.build_hasher();
        h.write(black_box(text.as_bytes()));
        h.finish() > 0
    });
    println!("siphash-1-3 of the 5 KB text alone: {ns:.0} ns per call on CPU");
}

/// Time of every corpus request on the span path (bytes → wire reader → engine →
/// bytes) next to prost's decode + encode of the same bytes, best of 5 passes over the
/// corpus (wall time: run it on a quiet machine) (a fresh engine per pass, so detections repeat): prints the totals and the ten
/// requests with the most time added, to find where the tail latency comes from.
fn corpus_time(config: &loopwatch::config::Config, raw: &[Bytes]) {
    let mut ours = vec![u64::MAX; raw.len()];
    let mut prost = vec![u64::MAX; raw.len()];
    let now = Instant::now();
    for _ in 0..5 {
        let engine = Engine::from_config(config).expect("default config");
        for (i, request) in raw.iter().enumerate() {
            let start = Instant::now();
            let read = WireRequest::read(request.clone()).expect("corpus request reads");
            black_box(
                engine
                    .process_wire(read, now)
                    .expect("annotates")
                    .forwarded_len(),
            );
            ours[i] = ours[i].min(start.elapsed().as_nanos() as u64);
            let start = Instant::now();
            let decoded = ExportTraceServiceRequest::decode(request.clone()).expect("decodes");
            black_box(decoded.encode_to_vec().len());
            prost[i] = prost[i].min(start.elapsed().as_nanos() as u64);
        }
    }
    let total = |v: &[u64]| v.iter().sum::<u64>() as f64 / 1e6;
    println!(
        "corpus: {} requests, span path {:.2} ms, prost decode + encode {:.2} ms",
        raw.len(),
        total(&ours),
        total(&prost)
    );
    let mut order: Vec<usize> = (0..raw.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(ours[i].saturating_sub(prost[i])));
    for &i in order.iter().take(10) {
        println!(
            "request {i}: {} bytes, span path {:.3} ms, prost {:.3} ms",
            raw[i].len(),
            ours[i] as f64 / 1e6,
            prost[i] as f64 / 1e6
        );
    }
}

/// The recorded agent runs (`LOOPWATCH_FIELD`, default `../shared/field/runs` beside the
/// checkout), one encoded request per run file, in path order.
fn field_bytes() -> Vec<Vec<u8>> {
    let root = std::env::var_os("LOOPWATCH_FIELD").map_or_else(
        || std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/field/runs"),
        std::path::PathBuf::from,
    );
    let files = loopwatch::cli::scan::request_files(&[root]).expect("field folder");
    assert!(!files.is_empty(), "no field runs found");
    files
        .iter()
        .map(|f| {
            loopwatch::cli::scan::read_request(f)
                .expect("field run reads")
                .encode_to_vec()
        })
        .collect()
}

fn main() {
    let name = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .unwrap_or_default();
    // `LOOPWATCH_CONFIG`: a loopwatch TOML file to build the engines from instead of the
    // defaults (say, `near_repeat = 0` in every profile to weigh what the rule costs).
    let config = match std::env::var_os("LOOPWATCH_CONFIG") {
        Some(path) => {
            let text = std::fs::read_to_string(&path).expect("LOOPWATCH_CONFIG reads");
            let mut config =
                loopwatch::config::Config::from_toml(&text).expect("LOOPWATCH_CONFIG parses");
            config.detection.fingerprint_key = Some("bench".into());
            config
        }
        None => support::config(),
    };
    // `wire_tools` / `wire_loops`: 10 synthetic requests of 1000 `execute_tool` spans
    // (0 % loops / every trace a loop) instead of the corpus.
    // `LOOPWATCH_REQUESTS` (default 10) requests of the synthetic workloads: more for a
    // sampling profiler (`perf record`), which needs seconds of work.
    let requests = std::env::var("LOOPWATCH_REQUESTS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(10);
    let raw: Vec<Bytes> = match name.as_str() {
        "wire_tools" | "passthrough_tools" => support::tool_call_requests(requests, 1000, false),
        "wire_loops" | "passthrough_loops" => support::tool_call_requests(requests, 1000, true),
        "field" => field_bytes(),
        "idle_runs" => support::one_call_runs(
            std::env::var("LOOPWATCH_RUNS")
                .ok()
                .and_then(|n| n.parse().ok())
                .unwrap_or(100_000),
        ),
        _ => support::corpus_bytes(),
    }
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
        "wire" | "wire_tools" | "wire_loops" | "field" => {
            if std::env::var_os("LOOPWATCH_WARM").is_some() {
                // Not collected: the same requests through another engine first, so what
                // a running server has built once (the built-in volatile patterns' lazy DFA
                // states, per-thread scratch buffers) is there; the measured engine's runs
                // start empty as before.
                black_box(process_wire_all(&engine(), &raw));
            }
            // `LOOPWATCH_ROUNDS` (for a sampling profiler): the whole workload again on a
            // fresh engine after the measured one, so every round does the same work.
            for _ in 1..std::env::var("LOOPWATCH_ROUNDS")
                .ok()
                .and_then(|n| n.parse::<usize>().ok())
                .unwrap_or(1)
            {
                black_box(process_wire_all(&engine(), &raw));
            }
            let engine = engine();
            let started = Instant::now();
            let covered = black_box(workload_wire(&engine, &raw));
            if std::env::var_os("LOOPWATCH_TIME").is_some() {
                // Natively (not under valgrind): SHA-256 then runs on SHA-NI where the CPU
                // has it, so the time weighs it as a server does.
                eprintln!("workload_ns {}", started.elapsed().as_nanos());
            }
            covered
        }
        "idle_runs" => {
            // The engine's state after `LOOPWATCH_RUNS` (100 000) one-call runs: resident
            // bytes per run (for heap attribution, run it under `valgrind --tool=massif`).
            let rss = || loopwatch::ingest::limits::memory::resident_bytes().unwrap_or(0);
            let engine = engine();
            let before = rss();
            black_box(workload_wire(&engine, &raw));
            let grown = rss().saturating_sub(before);
            println!("resident bytes per run {}", grown / spans.max(1));
            black_box(&engine);
            spans as usize
        }
        "prost" => black_box(workload_prost(&engine(), &raw)),
        "passthrough" | "passthrough_tools" | "passthrough_loops" => {
            black_box(workload_passthrough(&raw))
        }
        "fingerprint_5kb" | "fingerprint_small" | "fingerprint_5kb_match" => {
            let (text, call) = fingerprint_input(&name);
            println!("bytes {}", text.len());
            let fingerprinter = Fingerprinter::new(&config.detection.fingerprint_config());
            let payload = Payload::Text(text);
            // Warm-up, not collected: lazy symbol binding and the first allocation of the
            // per-thread scratch buffer happen once per process, not per call.
            black_box(fingerprint_once(&fingerprinter, &payload, call));
            match call {
                false if name == "fingerprint_5kb_match" => {
                    black_box(workload_fingerprint_match(&fingerprinter, &payload))
                }
                false => black_box(workload_fingerprint(&fingerprinter, &payload)),
                true => black_box(workload_fingerprint_call(&fingerprinter, &payload) > 0),
            };
            return;
        }
        "corpus_time" => {
            corpus_time(&config, &raw);
            return;
        }
        "corpus_request" => {
            // `corpus_request <i>`: the requests before i uncollected (the engine's state as
            // the whole corpus leaves it), then request i alone in the workload, with its
            // prost decode + encode (`passthrough_request`) for comparison.
            let i: usize = std::env::args()
                .filter_map(|a| a.parse().ok())
                .next()
                .unwrap_or(0)
                .min(raw.len() - 1);
            let engine = engine();
            black_box(process_wire_all(&engine, &raw[..i]));
            println!("request {i}: {} bytes", raw[i].len());
            black_box(workload_wire(&engine, &raw[i..=i]));
            black_box(workload_passthrough_request(&raw[i..=i]));
            return;
        }
        "fingerprint_cpu" => {
            fingerprint_cpu(&Fingerprinter::new(&config.detection.fingerprint_config()));
            return;
        }
        _ => {
            // `cargo bench` runs every bench binary: nothing to do without a name.
            eprintln!(
                "usage: instructions wire|prost|passthrough|wire_tools|passthrough_tools|\
                 wire_loops|passthrough_loops|field|idle_runs|fingerprint_5kb|fingerprint_5kb_match|\
                 fingerprint_small|fingerprint_cpu"
            );
            return;
        }
    };
    println!("spans {spans}");
}
