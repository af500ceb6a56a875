//! Property tests (proptest):
//! - batching, arrival order and exporter retries never change a run's final detections,
//!   and every final detection is reported exactly once;
//! - key order and number spelling never change a fingerprint at any depth, and volatile
//!   keys never matter.

use std::collections::HashMap;
use std::time::Instant;

use crate::support::spans::{one_span_per_request, scenario_request};
use loopwatch::config::Config;
use loopwatch::conventions::event::Payload;
use loopwatch::engine::Engine;
use loopwatch::fingerprint::Fingerprinter;
use loopwatch::registry::RunDetection;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value as Json};

/// `PROPTEST_CASES` when set, else `default`.
fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

const TRACE_ID: [u8; 16] = [0x5c; 16];

// ---- scenarios ------------------------------------------------------------------------

/// One tool call from small alphabets (so loops happen), sometimes without arguments or
/// result, sometimes an error.
fn call() -> impl Strategy<Value = Json> {
    (
        prop::sample::select(vec!["read", "list", "grep"]),
        prop::option::weighted(0.9, prop::sample::select(vec![0u8, 1, 2])),
        prop::option::weighted(0.8, prop::sample::select(vec!["ok", "same", "other"])),
        prop::option::weighted(0.1, Just("boom")),
    )
        .prop_map(|(tool, args, result, error)| {
            let mut c = json!({ "tool": tool });
            if let Some(a) = args {
                c["args"] = json!({ "path": format!("/f{a}") });
            }
            if let Some(r) = result {
                c["result"] = json!(r);
            }
            if let Some(e) = error {
                c["error"] = json!(e);
            }
            c
        })
}

/// A model response: 1–3 calls (parallel calls when several), or a text.
fn response() -> impl Strategy<Value = Json> {
    prop_oneof![
        4 => prop::collection::vec(call(), 1..=3).prop_map(|calls| json!({ "calls": calls })),
        1 => prop::sample::select(vec!["Same answer", "same   ANSWER", "different"])
            .prop_map(|t| json!({ "text": t })),
    ]
}

fn scenario() -> impl Strategy<Value = Json> {
    prop::collection::vec(response(), 1..40).prop_map(|r| json!({ "responses": r }))
}

/// (call, response, pattern, tools, count, severity, profile, occurrence)
type Key = (
    Option<usize>,
    Option<usize>,
    &'static str,
    Vec<String>,
    usize,
    &'static str,
    String,
    u32,
);

fn key(d: &RunDetection) -> Key {
    (
        d.detection.call,
        d.detection.response,
        d.detection.pattern.as_str(),
        d.detection
            .tool_names
            .iter()
            .map(|t| t.to_string())
            .collect(),
        d.detection.count,
        d.detection.severity.as_str(),
        d.profile.name.clone(),
        d.occurrence,
    )
}

fn engine() -> Engine {
    Engine::from_config(&Config::default()).unwrap()
}

fn final_detections(engine: &Engine) -> Vec<Key> {
    engine
        .registry
        .detections(&hex::encode(TRACE_ID))
        .unwrap_or_default()
        .iter()
        .map(key)
        .collect()
}

/// Sends `request`'s spans in random batches (spans of a batch in random order, some sent
/// twice), batches in random order (from `arrangement`), and checks the final detections
/// are `expected` and each was reported exactly once.
fn split_gives(
    request: &ExportTraceServiceRequest,
    arrangement: u64,
    expected: &[Key],
) -> Result<(), TestCaseError> {
    let now = Instant::now();
    let mut rng = StdRng::seed_from_u64(arrangement);
    let mut spans = one_span_per_request(request);
    let duplicates: Vec<_> = spans
        .iter()
        .filter(|_| rng.random_bool(0.1))
        .cloned()
        .collect();
    spans.extend(duplicates);
    spans.shuffle(&mut rng);
    let split = engine();
    let mut reported: HashMap<(usize, Vec<u8>, &'static str), usize> = HashMap::new();
    let mut rest = spans.as_slice();
    while !rest.is_empty() {
        let n = rng.random_range(1..=rest.len().min(8));
        let (batch, tail) = rest.split_at(n);
        rest = tail;
        let mut merged = batch[0].clone();
        for other in &batch[1..] {
            merged.resource_spans.extend(other.resource_spans.clone());
        }
        for d in split.process(&mut merged, now).detections {
            *reported
                .entry((
                    d.profile_index,
                    d.span_id.to_vec(),
                    d.detection.pattern.as_str(),
                ))
                .or_default() += 1;
        }
    }
    prop_assert_eq!(&final_detections(&split), &expected.to_vec());
    prop_assert!(
        reported.values().all(|&n| n == 1),
        "a detection reported twice: {:?}",
        reported
    );
    for d in split
        .registry
        .detections(&hex::encode(TRACE_ID))
        .unwrap_or_default()
    {
        prop_assert!(
            reported.contains_key(&(
                d.profile_index,
                d.span_id.to_vec(),
                d.detection.pattern.as_str()
            )),
            "final detection never reported: {:?}",
            key(&d)
        );
    }
    Ok(())
}

/// `request` with each inference span traced twice: a copy of it (same output, a span id
/// of its own) nested in it, as a provider instrumentation's span inside a framework's.
fn responses_traced_twice(request: &ExportTraceServiceRequest) -> ExportTraceServiceRequest {
    let mut doubled = request.clone();
    for scope in doubled
        .resource_spans
        .iter_mut()
        .flat_map(|rs| &mut rs.scope_spans)
    {
        let mut spans = Vec::new();
        for span in scope.spans.drain(..) {
            let inner = span.name.starts_with("chat").then(|| {
                let mut inner = span.clone();
                inner.parent_span_id = span.span_id.clone();
                inner.span_id = [&[0xee_u8][..], &span.span_id[1..]].concat();
                inner.start_time_unix_nano += 100_000;
                inner.end_time_unix_nano -= 100_000;
                inner
            });
            spans.push(span);
            spans.extend(inner);
        }
        scope.spans = spans;
    }
    doubled
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(64), ..ProptestConfig::default() })]

    #[test]
    fn batching_and_arrival_order_never_change_detections(
        scenario in scenario(),
        structured in any::<bool>(),
        arrangement in any::<u64>(),
    ) {
        let request = scenario_request(&scenario, TRACE_ID, structured);
        let whole = engine();
        whole.process(&mut request.clone(), Instant::now());
        split_gives(&request, arrangement, &final_detections(&whole))?;
    }

    /// One LLM call traced by two instrumentations (DESIGN §2 "One response traced
    /// twice") is one response, whatever the batching and order: the detections are those
    /// of the run traced once.
    #[test]
    fn responses_traced_twice_are_one_in_any_batching(
        scenario in scenario(),
        arrangement in any::<u64>(),
    ) {
        let request = scenario_request(&scenario, TRACE_ID, false);
        let once = engine();
        once.process(&mut request.clone(), Instant::now());
        let doubled = responses_traced_twice(&request);
        let whole = engine();
        whole.process(&mut doubled.clone(), Instant::now());
        prop_assert_eq!(&final_detections(&whole), &final_detections(&once));
        split_gives(&doubled, arrangement, &final_detections(&once))?;
    }
}

// ---- fingerprints ---------------------------------------------------------------------

/// Arguments: nested objects and arrays of small integers, decimals, strings, bools.
fn value() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        (-100_000i64..100_000).prop_map(|n| json!(n)),
        (-1000i64..1000).prop_map(|n| json!(n as f64 / 8.0)),
        prop::sample::select(vec!["x", "y", "1", "", "é"]).prop_map(|s| json!(s)),
    ];
    leaf.prop_recursive(5, 48, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
            prop::collection::btree_map(
                prop::sample::select(vec!["a", "b", "c", "path", "query"]).prop_map(String::from),
                inner,
                0..4
            )
            .prop_map(|m| Json::Object(m.into_iter().collect())),
        ]
    })
}

/// Writes `v` as JSON text with object keys in a random order, numbers spelled one of
/// several equivalent ways, and (when `volatile`) volatile keys added to every object.
fn spell(v: &Json, rng: &mut StdRng, volatile: bool, out: &mut String) {
    match v {
        Json::Object(map) => {
            let mut entries: Vec<(String, Option<&Json>)> =
                map.iter().map(|(k, x)| (k.clone(), Some(x))).collect();
            if volatile {
                for k in ["timestamp", "request_id", "nonce", "_ts", "correlation_id"] {
                    if rng.random_bool(0.5) {
                        entries.push((k.to_string(), None));
                    }
                }
            }
            entries.shuffle(rng);
            out.push('{');
            for (i, (k, x)) in entries.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Json::String(k.clone()).to_string());
                out.push(':');
                match x {
                    Some(x) => spell(x, rng, volatile, out),
                    None => out.push_str(&rng.random::<u32>().to_string()),
                }
            }
            out.push('}');
        }
        Json::Array(items) => {
            out.push('[');
            for (i, x) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                spell(x, rng, volatile, out);
            }
            out.push(']');
        }
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                let s = match rng.random_range(0..4) {
                    0 => format!("{i}"),
                    1 => format!("{i}.0"),
                    2 => format!("{i}e0"),
                    _ => format!("{}e-1", i * 10),
                };
                out.push_str(&s);
            } else {
                let f = n.as_f64().unwrap_or(0.0);
                let s = match rng.random_range(0..3) {
                    0 => format!("{f:?}"),
                    1 => format!("{}e-3", f * 1000.0),
                    _ => format!("{f:e}"),
                };
                out.push_str(&s);
            }
        }
        other => out.push_str(&other.to_string()),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(256), ..ProptestConfig::default() })]

    #[test]
    fn key_order_number_spelling_and_volatile_keys_never_change_a_fingerprint(
        // Arguments are an object (a top-level JSON string would be unwrapped once more
        // when it arrives as text, by design).
        v in value().prop_map(|v| json!({ "args": v })),
        seed in any::<u64>(),
    ) {
        let f = Fingerprinter::default();
        let mut rng = StdRng::seed_from_u64(seed);
        let plain = f.call_fingerprint("tool", &Payload::Text(v.to_string()));
        prop_assert_eq!(plain, f.call_fingerprint("tool", &Payload::Json(v.clone())));
        for volatile in [false, true] {
            let mut text = String::new();
            spell(&v, &mut rng, volatile, &mut text);
            prop_assert_eq!(plain, f.call_fingerprint("tool", &Payload::Text(text.clone())), "{}", text);
            prop_assert_eq!(plain, f.call_fingerprint("tool", &Payload::Bytes(text.clone().into_bytes())));
            // One level of string-wrapped JSON is the same value.
            let wrapped = Json::String(text.clone()).to_string();
            prop_assert_eq!(plain, f.call_fingerprint("tool", &Payload::Text(wrapped)));
        }
        // The tool name always matters.
        prop_assert_ne!(plain, f.call_fingerprint("other", &Payload::Json(v)));
    }
}

// ---- recorded arguments -----------------------------------------------------------------

/// `json` as a Python literal the way LangChain records a dict (`str(dict)`): single
/// quotes, `True`, `False`, `None`.
fn as_python_literal(json: &str) -> String {
    json.replace('"', "'")
        .replace("true", "True")
        .replace("false", "False")
        .replace("null", "None")
}

/// Text tool arguments in the shapes frameworks record: JSON, the same value as a Python
/// literal, either of them cut short, or any text at all; behind no blank, JSON blanks or
/// Unicode ones (which only the Python-literal reading skips).
fn recorded_arguments() -> impl Strategy<Value = String> {
    let shaped = (value(), 0..5u8, any::<prop::sample::Index>()).prop_map(|(v, shape, cut)| {
        let json = match shape {
            4 => json!([v, 1]).to_string(),
            _ => json!({ "args": v }).to_string(),
        };
        match shape {
            1 => as_python_literal(&json),
            2 | 3 => {
                let text = if shape == 3 {
                    as_python_literal(&json)
                } else {
                    json
                };
                let mut end = cut.index(text.len());
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text[..end].to_string()
            }
            _ => json,
        }
    });
    let text = prop_oneof![shaped, ".{0,40}", "[\\[{][ -~]{0,40}"];
    (
        prop::sample::select(vec!["", " ", "\n\t ", "\u{a0}", "\u{2003} "]),
        text,
    )
        .prop_map(|(lead, text)| format!("{lead}{text}"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(512), ..ProptestConfig::default() })]

    /// The engine's one-pass argument fingerprint (JSON arguments parsed once) equals the
    /// fingerprint of the arguments normalized first (Python literals read as JSON), with
    /// the default volatile keys and with a tool's own.
    #[test]
    fn recorded_arguments_fingerprint_as_if_normalized_first(text in recorded_arguments()) {
        use loopwatch::conventions::wrappers::{normalize_arguments, python_literal_arguments};
        let f = Fingerprinter::default();
        let recorded = Payload::Text(text.clone());
        let normalized = normalize_arguments(recorded.clone());
        prop_assert_eq!(
            f.call_fingerprint_normalized("tool", &recorded, None, python_literal_arguments),
            f.call_fingerprint("tool", &normalized),
            "{:?}", text
        );
        let own: std::collections::HashSet<String> = ["args".to_string()].into();
        prop_assert_eq!(
            f.call_fingerprint_normalized("tool", &recorded, Some(&own), python_literal_arguments),
            f.call_fingerprint_with("tool", &normalized, &own),
            "{:?}", text
        );
    }
}
