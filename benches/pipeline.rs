//! Cost of loopwatch's per-span work on corpus-like input, next to the pass-through cost.
//!
//! - `extract/corpus`: `conventions::extract` over every span of every corpus request.
//! - `fingerprint/*`: `Fingerprinter::call_fingerprint` / `result_fingerprint` on typical
//!   argument strings (small object, the same object with keys reordered, a ~100 B object
//!   with keys out of order, a ~5 KB result, and the arguments and result of a call of the
//!   load generator's tool-call traffic: `call_loadgen`, `result_loadgen`).
//! - `engine/corpus`: `Engine::process` over every corpus request in arrival order, with a
//!   fresh engine per iteration (so runs never saturate and detections fire as in the corpus).
//! - `baseline/decode_encode_corpus`: prost decode + encode of the same requests, i.e. what
//!   a plain OTLP pass-through does per request.
//! - `wire/read_corpus`: the zero-copy wire reader alone (validate, locate, materialise the
//!   detection view of every span).
//! - `wire/span_path_corpus`: what a receiver's request costs now: bytes → wire reader →
//!   engine → bytes to forward (annotated in place), fresh engine per iteration.
//! - `wire/prost_span_path_corpus`: the same through prost (decode → engine → encode), the
//!   path before the wire reader.
//!
//! Throughput is reported per span (criterion's `elem/s`); divide the time by the span
//! count printed at start to get ns/span. Run with `cargo bench --bench pipeline`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use loopwatch::conventions::event::{CallStatus, Payload};
use loopwatch::engine::Engine;
use loopwatch::fingerprint::Fingerprinter;
use loopwatch::otlp::wire::WireRequest;
use loopwatch::otlp::ExportTraceServiceRequest;
use prost::Message;

mod support;

fn decode(bytes: &[Vec<u8>]) -> Vec<ExportTraceServiceRequest> {
    bytes
        .iter()
        .map(|b| ExportTraceServiceRequest::decode(b.as_slice()).expect("corpus request decodes"))
        .collect()
}

fn span_count(requests: &[ExportTraceServiceRequest]) -> u64 {
    requests
        .iter()
        .map(loopwatch::receiver::decode::span_count)
        .sum()
}

fn benches(c: &mut Criterion) {
    let bytes = support::corpus_bytes();
    let requests = decode(&bytes);
    let spans = span_count(&requests);
    let total_bytes: usize = bytes.iter().map(Vec::len).sum();
    eprintln!(
        "corpus: {} requests, {spans} spans, {total_bytes} bytes",
        requests.len()
    );

    let mut group = c.benchmark_group("extract");
    group.throughput(Throughput::Elements(spans));
    group.bench_function("corpus", |b| {
        b.iter(|| {
            let mut found = 0usize;
            for request in &requests {
                for rs in &request.resource_spans {
                    for ss in &rs.scope_spans {
                        for span in &ss.spans {
                            found += usize::from(
                                loopwatch::conventions::extract(black_box(span)).is_some(),
                            );
                        }
                    }
                }
            }
            found
        })
    });
    group.finish();

    let fingerprinter = Fingerprinter::new(&support::config().detection.fingerprint_config());
    let small = Payload::Text(r#"{"url":"https://example.com/a","limit":1}"#.into());
    let reordered = Payload::Text(r#"{"limit":1,"url":"https://example.com/a"}"#.into());
    let large = Payload::Text(support::large_json(5 * 1024));
    let mut group = c.benchmark_group("fingerprint");
    group.throughput(Throughput::Elements(1));
    group.bench_function("call_small_object", |b| {
        b.iter(|| fingerprinter.call_fingerprint(black_box("fetch_url"), black_box(&small)))
    });
    let argument_100b = Payload::Text(support::small_json());
    group.bench_function("call_100b_object", |b| {
        b.iter(|| fingerprinter.call_fingerprint(black_box("read_file"), black_box(&argument_100b)))
    });
    group.bench_function("call_key_order_variant", |b| {
        b.iter(|| fingerprinter.call_fingerprint(black_box("fetch_url"), black_box(&reordered)))
    });
    group.bench_function("call_5kb", |b| {
        b.iter(|| fingerprinter.call_fingerprint(black_box("search"), black_box(&large)))
    });
    group.bench_function("result_5kb", |b| {
        b.iter(|| fingerprinter.result_fingerprint(black_box(&CallStatus::Ok), Some(&large)))
    });
    let (arguments, result) = support::tool_call_texts();
    let (arguments, result) = (Payload::Text(arguments), Payload::Text(result));
    group.bench_function("call_loadgen", |b| {
        b.iter(|| fingerprinter.call_fingerprint(black_box("search_docs"), black_box(&arguments)))
    });
    group.bench_function("result_loadgen", |b| {
        b.iter(|| fingerprinter.result_fingerprint(black_box(&CallStatus::Ok), Some(&result)))
    });
    group.finish();
    assert_eq!(
        fingerprinter.call_fingerprint("fetch_url", &small),
        fingerprinter.call_fingerprint("fetch_url", &reordered),
        "key order must not change the fingerprint"
    );

    let config = support::config();
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(spans));
    group.bench_function("corpus", |b| {
        b.iter_batched(
            || {
                (
                    Engine::from_config(&config).expect("default config"),
                    requests.clone(),
                )
            },
            |(engine, mut requests)| {
                let now = Instant::now();
                let mut annotated = 0;
                for request in &mut requests {
                    annotated += engine.process(request, now).annotated_spans;
                }
                (annotated, engine, requests)
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();

    let mut group = c.benchmark_group("baseline");
    group.throughput(Throughput::Elements(spans));
    group.bench_function("decode_encode_corpus", |b| {
        b.iter(|| {
            let mut out = 0usize;
            for raw in &bytes {
                let request =
                    ExportTraceServiceRequest::decode(black_box(raw.as_slice())).expect("decodes");
                out += request.encode_to_vec().len();
            }
            out
        })
    });
    group.finish();

    // The span path as the receivers run it now: bytes → wire reader → engine → bytes to
    // forward (annotated in place), next to the prost path (decode → engine → encode).
    let raw: Vec<bytes::Bytes> = bytes
        .iter()
        .map(|b| bytes::Bytes::from(b.clone()))
        .collect();
    let mut group = c.benchmark_group("wire");
    group.throughput(Throughput::Elements(spans));
    group.bench_function("read_corpus", |b| {
        b.iter(|| {
            let mut found = 0usize;
            for request in &raw {
                found += WireRequest::read(black_box(request.clone()))
                    .expect("corpus request reads")
                    .spans()
                    .len();
            }
            found
        })
    });
    group.bench_function("span_path_corpus", |b| {
        b.iter_batched(
            || Engine::from_config(&config).expect("default config"),
            |engine| {
                let now = Instant::now();
                let mut out = 0usize;
                for request in &raw {
                    let read = WireRequest::read(request.clone()).expect("corpus request reads");
                    out += engine
                        .process_wire(read, now)
                        .expect("annotates")
                        .forwarded_len();
                }
                (out, engine)
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("prost_span_path_corpus", |b| {
        b.iter_batched(
            || Engine::from_config(&config).expect("default config"),
            |engine| {
                let now = Instant::now();
                let mut out = 0usize;
                for request in &raw {
                    let mut decoded =
                        ExportTraceServiceRequest::decode(request.clone()).expect("decodes");
                    engine.process(&mut decoded, now);
                    out += decoded.encode_to_vec().len();
                }
                (out, engine)
            },
            BatchSize::LargeInput,
        )
    });
    group.finish();
}

criterion_group! {
    name = pipeline;
    config = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .sample_size(20);
    targets = benches
}
criterion_main!(pipeline);
