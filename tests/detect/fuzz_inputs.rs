//! The fuzz targets of `fuzz/` (libFuzzer, nightly) as a plain test on stable: seeded
//! random and mutated inputs from the corpus through the same functions. Nothing may
//! panic; the functions assert their own invariants (see `tests/support/fuzz.rs`).

use crate::support;

use std::path::{Path, PathBuf};

use opentelemetry_proto::tonic::common::v1::{any_value::Value, AnyValue, KeyValue};
use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// The corpus folders the seeds come from: the first five frameworks' recordings (46
/// requests, every convention family the wire reader and the decoders meet). The later
/// recordings (`tools/record/`) triple the corpus with more of the same shapes and would
/// make this debug-build run take minutes; they go through the engine in
/// `tests/detect/recorded_frameworks.rs`.
const SEED_FRAMEWORKS: [&str; 5] = [
    "google-adk",
    "langchain/openinference",
    "openai-agents/openinference",
    "pydantic-ai",
    "strands",
];

fn corpus(ext: &str) -> Vec<Vec<u8>> {
    fn walk(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, ext, out);
            } else if path.extension().and_then(|e| e.to_str()) == Some(ext)
                && path.file_name().and_then(|n| n.to_str()) != Some("expected.json")
                && path.file_name().and_then(|n| n.to_str()) != Some("runs.json")
            {
                out.push(path);
            }
        }
    }
    let mut paths = Vec::new();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus");
    for framework in SEED_FRAMEWORKS {
        walk(&root.join(framework), ext, &mut paths);
    }
    paths.sort();
    assert!(
        paths.len() > 20,
        "corpus .{ext} files found: {}",
        paths.len()
    );
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// libFuzzer-style byte mutations: flips, truncation, insertion, deletion, splicing.
fn mutate(rng: &mut StdRng, seeds: &[Vec<u8>], data: &[u8]) -> Vec<u8> {
    let mut out = data.to_vec();
    for _ in 0..rng.random_range(1..=4) {
        let len = out.len();
        match rng.random_range(0..6) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                out[i] ^= 1 << rng.random_range(0..8);
            }
            1 if len > 0 => out.truncate(rng.random_range(0..len)),
            2 => {
                let i = rng.random_range(0..=len);
                let b = [0u8, 0xff, b'{', b'"', b'[', b'0', 0x80, 0x0a][rng.random_range(0..8)];
                out.insert(i, b);
            }
            3 if len > 0 => {
                let i = rng.random_range(0..len);
                let j = (i + rng.random_range(1..64)).min(len);
                out.drain(i..j);
            }
            4 if len > 1 => {
                let i = rng.random_range(0..len);
                let j = (i + rng.random_range(1..256)).min(len);
                let chunk = out[i..j].to_vec();
                let at = rng.random_range(0..=len);
                out.splice(at..at, chunk);
            }
            _ => {
                let other = &seeds[rng.random_range(0..seeds.len())];
                let cut = rng.random_range(0..=out.len());
                let from = rng.random_range(0..=other.len());
                out.truncate(cut);
                out.extend_from_slice(&other[from..]);
            }
        }
    }
    out
}

/// Argument and id values that have broken parsers before.
fn nasty_text(rng: &mut StdRng) -> String {
    let depth = rng.random_range(1..3000);
    match rng.random_range(0..9) {
        0 => "[".repeat(depth) + &"]".repeat(depth),
        1 => "{\"a\":".repeat(depth) + "1" + &"}".repeat(depth),
        2 => "[".repeat(depth),
        3 => format!("\"{}\"", "\\\"[".repeat(depth)),
        4 => "1e999999".into(),
        5 => "-0.0000000000000000000000000000001e-400".into(),
        6 => "18446744073709551616123".into(),
        7 => "\u{0}\u{fffd}\u{10ffff}".repeat(depth),
        _ => format!(
            "{{\"n\":{},\"timestamp\":{}}}",
            rng.random::<u64>(),
            rng.random::<f64>()
        ),
    }
}

/// Structured mutations of a decoded request: ids of odd lengths, extreme and equal
/// times, nasty argument/result values, spans duplicated.
fn mutate_request(rng: &mut StdRng, bytes: &[u8]) -> Option<Vec<u8>> {
    let mut request =
        opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(bytes)
            .ok()?;
    for rs in &mut request.resource_spans {
        for ss in &mut rs.scope_spans {
            let mut extra = Vec::new();
            for span in &mut ss.spans {
                match rng.random_range(0..10) {
                    0 => span.trace_id = vec![0; rng.random_range(0..20)],
                    1 => span.span_id = vec![rng.random(); rng.random_range(0..10)],
                    2 => span.start_time_unix_nano = [0, u64::MAX, 1][rng.random_range(0..3)],
                    3 => span.end_time_unix_nano = span.start_time_unix_nano,
                    4 | 5 => {
                        let key = [
                            "gen_ai.tool.call.arguments",
                            "gen_ai.tool.call.result",
                            "input.value",
                            "gen_ai.output.messages",
                        ][rng.random_range(0..4)];
                        let value = match rng.random_range(0..3) {
                            0 => Value::StringValue(nasty_text(rng)),
                            1 => Value::BytesValue(nasty_text(rng).into_bytes()),
                            _ => Value::IntValue(rng.random()),
                        };
                        span.attributes.push(KeyValue {
                            key: key.into(),
                            value: Some(AnyValue { value: Some(value) }),
                            ..Default::default()
                        });
                    }
                    6 => extra.push(span.clone()),
                    7 => span.attributes.retain(|_| rng.random_bool(0.5)),
                    _ => {}
                }
            }
            ss.spans.extend(extra);
        }
    }
    Some(request.encode_to_vec())
}

#[test]
fn protobuf_inputs_never_panic() {
    let seeds = corpus("pb");
    let mut rng = StdRng::seed_from_u64(0x10_0b);
    for seed in &seeds {
        support::fuzz::protobuf_input(seed);
    }
    for round in 0..400 {
        let seed = &seeds[rng.random_range(0..seeds.len())];
        let input = match round % 4 {
            0 => (0..rng.random_range(0..512))
                .map(|_| rng.random())
                .collect(),
            1 | 2 => mutate_request(&mut rng, seed).unwrap_or_default(),
            _ => mutate(&mut rng, &seeds, seed),
        };
        support::fuzz::protobuf_input(&input);
    }
}

#[test]
fn json_inputs_never_panic() {
    let seeds = corpus("json");
    let mut rng = StdRng::seed_from_u64(0x15_0b);
    for seed in &seeds {
        support::fuzz::json_input(seed);
    }
    let mut decoded = 0;
    for _ in 0..600 {
        let seed = &seeds[rng.random_range(0..seeds.len())];
        let input = mutate(&mut rng, &seeds, seed);
        if loopwatch::receiver::decode::decode_json(&input).is_ok() {
            decoded += 1;
        }
        support::fuzz::json_input(&input);
    }
    assert!(
        decoded > 0,
        "some mutated JSON still decodes (the path is exercised)"
    );
}

#[test]
fn fingerprint_inputs_never_panic() {
    let mut rng = StdRng::seed_from_u64(0xf1_9e);
    let seeds: Vec<Vec<u8>> = (0..64).map(|_| nasty_text(&mut rng).into_bytes()).collect();
    for round in 0..1500 {
        let mut input = vec![rng.random_range(0..8u8)];
        input.extend(match round % 3 {
            0 => (0..rng.random_range(0..256))
                .map(|_| rng.random())
                .collect::<Vec<u8>>(),
            1 => seeds[rng.random_range(0..seeds.len())].clone(),
            _ => {
                let seed = seeds[rng.random_range(0..seeds.len())].clone();
                mutate(&mut rng, &seeds, &seed)
            }
        });
        support::fuzz::fingerprint_input(&input);
    }
}

/// Replaces one ASCII letter of `bytes` with 0xfe: inside a string field this makes the
/// request invalid UTF-8 for prost while every other byte stays valid.
fn break_utf8(rng: &mut StdRng, bytes: &[u8]) -> Vec<u8> {
    let mut out = bytes.to_vec();
    let letters: Vec<usize> = (0..out.len())
        .filter(|&i| out[i].is_ascii_lowercase())
        .collect();
    if !letters.is_empty() {
        out[letters[rng.random_range(0..letters.len())]] = 0xfe;
    }
    out
}

#[test]
fn wire_reader_agrees_with_prost() {
    let seeds = corpus("pb");
    let mut rng = StdRng::seed_from_u64(0x3172e);
    let mut decoded = 0;
    for seed in &seeds {
        assert!(support::fuzz::wire_input(seed), "corpus requests decode");
    }
    let mut lossy = 0;
    for round in 0..600 {
        let seed = &seeds[rng.random_range(0..seeds.len())];
        let input = match round % 5 {
            0 => (0..rng.random_range(0..512))
                .map(|_| rng.random())
                .collect(),
            1 | 2 => mutate_request(&mut rng, seed).unwrap_or_default(),
            3 => {
                let broken = break_utf8(&mut rng, seed);
                let wire = loopwatch::otlp::wire::WireRequest::read(broken.clone().into());
                let prost = opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest::decode(broken.as_slice());
                if wire.is_ok() && prost.is_err() {
                    lossy += 1;
                }
                broken
            }
            _ => mutate(&mut rng, &seeds, seed),
        };
        if support::fuzz::wire_input(&input) {
            decoded += 1;
        }
    }
    assert!(
        decoded > 200,
        "mutated requests that still decode: {decoded}"
    );
    assert!(
        lossy > 20,
        "requests with a broken string read lossily instead of refused: {lossy}"
    );
}

/// The same comparison on requests whose spans are under the pre-1.0
/// `instrumentation_library_spans` (field 1000, read by the wire reader when a
/// `ResourceSpans` has no `scope_spans`; by prost as `support::fuzz::migrated_request`
/// reads it): the corpus re-encoded, mutated (bytes flipped, cut, spliced; the requests
/// mutated first; a string broken), and with a `scope_spans` entry added in front, which
/// leaves the old field unread.
#[test]
fn wire_reader_agrees_with_prost_on_instrumentation_library_spans() {
    use crate::support::legacy::to_legacy_bytes;
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    let seeds: Vec<Vec<u8>> = corpus("pb")
        .iter()
        .map(|seed| to_legacy_bytes(&ExportTraceServiceRequest::decode(seed.as_slice()).unwrap()))
        .collect();
    for seed in &seeds {
        assert!(
            support::fuzz::wire_input(seed),
            "legacy corpus requests decode"
        );
        let read = loopwatch::otlp::wire::WireRequest::read(seed.clone().into()).unwrap();
        assert!(read.span_count() > 0, "their spans are read");
        // A `scope_spans` entry in a `ResourceSpans`, even an empty one, hides the old field.
        let mut both = support::legacy::LegacyRequest::decode(seed.as_slice()).unwrap();
        for rs in &mut both.resource_spans {
            rs.scope_spans.push(Default::default());
        }
        let both = both.encode_to_vec();
        assert!(support::fuzz::wire_input(&both));
        let read = loopwatch::otlp::wire::WireRequest::read(both.into()).unwrap();
        assert_eq!(read.span_count(), 0);
    }
    let mut rng = StdRng::seed_from_u64(0x1000);
    let mut decoded = 0;
    for round in 0..300 {
        let seed = &seeds[rng.random_range(0..seeds.len())];
        let input = match round % 3 {
            0 => mutate(&mut rng, &seeds, seed),
            1 => {
                let current = mutate_request(&mut rng, &corpus_seed_of(seed)).unwrap_or_default();
                to_legacy_bytes(
                    &ExportTraceServiceRequest::decode(current.as_slice()).unwrap_or_default(),
                )
            }
            _ => break_utf8(&mut rng, seed),
        };
        if support::fuzz::wire_input(&input) {
            decoded += 1;
        }
    }
    assert!(
        decoded > 100,
        "mutated legacy requests that still decode: {decoded}"
    );
}

/// The current encoding of a legacy request of the corpus (field 1000 read as
/// `scope_spans`).
fn corpus_seed_of(legacy: &[u8]) -> Vec<u8> {
    support::legacy::decode_migrated(legacy).0.encode_to_vec()
}

/// Found by a longer run of `wire_reader_agrees_with_prost`: a copy of the span that
/// completes a loop (same span_id) sent with another end time is annotated too, and its
/// `loop.detected` event must sit at its own end, on both paths (`check_loop_events`).
#[test]
fn a_copy_of_the_completing_span_gets_its_event_at_its_own_end() {
    use crate::support::spans::{kv, s};
    use opentelemetry_proto::tonic::trace::v1::Span;
    let text = |key: &str, value: &str| kv(key, s(value));
    let call = |id: u8, end: u64| Span {
        trace_id: vec![7; 16],
        span_id: vec![id; 8],
        name: "execute_tool fetch_url".into(),
        start_time_unix_nano: u64::from(id) * 1_000,
        end_time_unix_nano: end,
        attributes: vec![
            text("gen_ai.operation.name", "execute_tool"),
            text("gen_ai.tool.name", "fetch_url"),
            text(
                "gen_ai.tool.call.arguments",
                r#"{"url":"https://example.com"}"#,
            ),
            text("gen_ai.tool.call.result", "503 Service Unavailable"),
        ],
        ..Default::default()
    };
    // The third identical call completes repeated_result (nudge: 3); its copy ends later.
    let spans = vec![
        call(1, 1_500),
        call(2, 2_500),
        call(3, 3_500),
        call(3, 3_900),
    ];
    let request = support::spans::request_of(spans);
    assert!(support::fuzz::wire_input(&request.encode_to_vec()));
    // Both copies are annotated, so the check above covered two different end times.
    let mut annotated = request.clone();
    let engine = loopwatch::engine::Engine::from_config(&loopwatch::config::Config::default())
        .expect("default config");
    let processed = engine.process(&mut annotated, std::time::Instant::now());
    assert_eq!(processed.annotated_spans, 2);
    let events: Vec<u64> = annotated.resource_spans[0].scope_spans[0]
        .spans
        .iter()
        .flat_map(|s| &s.events)
        .filter(|e| e.name == "loop.detected")
        .map(|e| e.time_unix_nano)
        .collect();
    assert_eq!(events, [3_500, 3_900]);
}
