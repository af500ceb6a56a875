//! Fingerprints remembered within a request ([`crate::fingerprint::RecentFingerprints`]):
//! the engine takes them, and they are the ones it would compute for each span alone.

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValueList;
use proptest::prelude::*;

use super::*;
use crate::conventions;
use crate::conventions::event::{CallStatus, Payload};
use crate::fingerprint::RecentFingerprints;
use crate::otlp::test_support::kv;

fn tool_span(i: u8, tool: &str, arguments: &str, result: &str, error: bool) -> otlp::Span {
    let text = |s: &str| Value::StringValue(s.into());
    otlp::Span {
        trace_id: vec![7; 16],
        span_id: vec![i + 1; 8],
        start_time_unix_nano: u64::from(i) * 1_000,
        end_time_unix_nano: u64::from(i) * 1_000 + 500,
        attributes: vec![
            kv("gen_ai.operation.name", text("execute_tool")),
            kv("gen_ai.tool.name", text(tool)),
            kv("gen_ai.tool.call.arguments", text(arguments)),
            kv("gen_ai.tool.call.result", text(result)),
        ],
        status: error.then(|| opentelemetry_proto::tonic::trace::v1::Status {
            code: 2,
            message: result.into(),
        }),
        ..Default::default()
    }
}

/// `before` (TOML) and a `[[tools]]` rule for `fetch`: volatile argument key `page`,
/// volatile result key `at`, transient errors matching `429`.
fn fetch_rules(before: &str) -> crate::config::Config {
    crate::config::Config::from_toml(&format!(
        r#"{before}
        [[tools]]
        match = "fetch"
        volatile_keys = ["page"]
        result_volatile_keys = ["at"]
        transient_errors = "429"
        "#
    ))
    .unwrap()
}

#[test]
fn fingerprints_remembered_within_a_request_are_the_ones_computed() {
    let config = fetch_rules("");
    let engine = Engine::from_config(&config).unwrap();
    let arguments = r#"{"q":"x","page":1}"#;
    let result = r#"{"hits":1,"at":5}"#;
    let spans = [
        tool_span(0, "search", arguments, result, false),
        tool_span(1, "search", arguments, result, false),
        // The same texts for a tool with volatile keys: its own fingerprints.
        tool_span(2, "fetch", arguments, result, false),
        tool_span(3, "fetch", arguments, result, false),
        tool_span(4, "search", arguments, result, false),
        // Transient errors of the same text: each its own result fingerprint.
        tool_span(5, "fetch", arguments, "429 too many", true),
        tool_span(6, "fetch", arguments, "429 too many", true),
        // The same result text under an error status: an error's fingerprint.
        tool_span(7, "search", arguments, result, true),
    ];
    let views: Vec<SpanView> = spans.iter().map(SpanView::from).collect();
    let (events, _, _, _) = engine.events_of(views.iter().map(|v| ((), v, None, None::<Arc<str>>)));
    let fingerprints: Vec<_> = events
        .iter()
        .map(|e| match &e.observation {
            Observation::ToolCall {
                call_fingerprint,
                result_fingerprint,
                ..
            } => (call_fingerprint.unwrap(), result_fingerprint.unwrap()),
            other => panic!("not a tool call: {other:?}"),
        })
        .collect();
    assert_eq!(fingerprints.len(), 8);
    let fresh = Fingerprinter::new(&config.detection.fingerprint_config());
    let rules = config.fingerprint_rules().unwrap();
    let fetch = rules.treatment("fetch").unwrap();
    let text = |s: &str| Payload::Text(s.into());
    let search_call = fresh.call_fingerprint("search", &text(arguments));
    let search_result = fresh
        .result_fingerprint(&CallStatus::Ok, Some(&text(result)))
        .unwrap();
    let fetch_call = fresh.call_fingerprint_with("fetch", &text(arguments), &fetch.volatile_keys);
    let fetch_result = fresh
        .result_fingerprint_with(
            &CallStatus::Ok,
            Some(&text(result)),
            &fetch.result_volatile_keys,
        )
        .unwrap();
    assert_ne!(search_call, fetch_call);
    assert_ne!(search_result, fetch_result);
    for i in [0, 1, 4] {
        assert_eq!(fingerprints[i], (search_call, search_result), "span {i}");
    }
    for i in [2, 3] {
        assert_eq!(fingerprints[i], (fetch_call, fetch_result), "span {i}");
    }
    assert_eq!(fingerprints[5].0, fetch_call);
    assert_ne!(fingerprints[5].1, fingerprints[6].1);
    let error = CallStatus::Error {
        message: result.into(),
    };
    assert_eq!(
        fingerprints[7],
        (
            search_call,
            fresh
                .result_fingerprint(&error, Some(&text(result)))
                .unwrap()
        )
    );
}

const ARGUMENTS: &str = r#"{"q":"x","page":1}"#;
const RESULT: &str = r#"{"hits":1,"at":5}"#;

#[test]
fn the_engine_takes_a_remembered_fingerprint_instead_of_computing_it() {
    let engine = Engine::from_config(&crate::config::Config::default()).unwrap();
    let observe = |span: &otlp::Span, recent: &RecentFingerprints| {
        let view = SpanView::from(span);
        let extracted =
            conventions::extract_with_recorded_arguments(&[], &view).expect("a tool span");
        match engine.observation(&extracted.kind, &view, recent, false).0 {
            Observation::ToolCall {
                call_fingerprint,
                result_fingerprint,
                ..
            } => (call_fingerprint, result_fingerprint),
            other => panic!("not a tool call: {other:?}"),
        }
    };
    let ok = tool_span(0, "search", ARGUMENTS, RESULT, false);
    let failed = tool_span(1, "search", ARGUMENTS, RESULT, true);
    let computed = observe(&ok, &RecentFingerprints::default());
    let computed_error = observe(&failed, &RecentFingerprints::default()).1;
    // Planted fingerprints no computation gives: taken for the same tool and texts.
    let mut recent = RecentFingerprints::default();
    let search: Arc<str> = Arc::from("search");
    assert_eq!(recent.arguments("search", ARGUMENTS), None);
    recent.keep_arguments(&search, ARGUMENTS.into(), ([1; 32], 0));
    assert_eq!(recent.result("search", RESULT, &[1; 32]), None);
    recent.keep_result(&search, RESULT.into(), [1; 32], ([2; 32], 0));
    assert_eq!(observe(&ok, &recent), (Some([1; 32]), Some([2; 32])));
    // An error's result is never taken from a remembered ok result of the same text.
    assert_eq!(observe(&failed, &recent), (Some([1; 32]), computed_error));
    // Another tool with the same texts computes its own.
    let other = tool_span(2, "fetch", ARGUMENTS, RESULT, false);
    let fetch = observe(&other, &recent);
    assert_ne!(fetch.0, Some([1; 32]));
    assert_ne!(fetch.1, Some([2; 32]));
    assert_ne!(computed.0, Some([1; 32]));
}

const TOOLS: [&str; 3] = ["search", "fetch", "read_file"];

/// Argument values: JSON (with a key `fetch` drops), the same value spelled otherwise, a
/// Python literal, plain text, a kvlist, bytes, and none.
fn argument_value(choice: usize) -> Option<Value> {
    let text = |s: &str| Some(Value::StringValue(s.into()));
    match choice {
        0 => text(r#"{"q":"x","page":1}"#),
        1 => text(r#"{ "page": 2, "q": "x" }"#),
        2 => text("{'q': 'x', 'page': 1}"),
        3 => text("abc"),
        4 => Some(Value::KvlistValue(KeyValueList {
            values: vec![kv("q", Value::StringValue("x".into()))],
        })),
        5 => Some(Value::BytesValue(br#"{"q":"x"}"#.to_vec())),
        _ => None,
    }
}

/// Result texts: JSON with a key `fetch` drops, the same value otherwise, plain text.
const RESULTS: [&str; 3] = [
    r#"{"hits":1,"at":5}"#,
    r#"{"at":6,"hits":1}"#,
    "429 slow down",
];

/// Span `i` of one trace: `tool` called with argument `arguments`, returning result
/// `result`; `status` 0 ok, 1 error, 2 error with the result as its message.
fn span_of(i: usize, tool: usize, arguments: usize, result: usize, status: u8) -> otlp::Span {
    let text = |s: &str| Value::StringValue(s.into());
    let mut attributes = vec![
        kv("gen_ai.operation.name", text("execute_tool")),
        kv("gen_ai.tool.name", text(TOOLS[tool])),
        kv("gen_ai.tool.call.result", text(RESULTS[result])),
    ];
    if let Some(value) = argument_value(arguments) {
        attributes.push(kv("gen_ai.tool.call.arguments", value));
    }
    otlp::Span {
        trace_id: vec![7; 16],
        span_id: (i as u64 + 1).to_be_bytes().to_vec(),
        start_time_unix_nano: i as u64 * 1_000,
        end_time_unix_nano: i as u64 * 1_000 + 500,
        attributes,
        status: (status > 0).then(|| opentelemetry_proto::tonic::trace::v1::Status {
            code: 2,
            message: if status == 2 { RESULTS[result] } else { "boom" }.into(),
        }),
        ..Default::default()
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Every call of a request is observed as it would be in a request of its own.
    #[test]
    fn a_request_observes_its_calls_as_single_span_requests_would(
        calls in prop::collection::vec((0..3usize, 0..7usize, 0..3usize, 0..3u8), 1..40)
    ) {
        let config = fetch_rules("[detection]\nmatch_tool_name_without_arguments = true\n");
        prop_assert!(config.detection.match_tool_name_without_arguments);
        let engine = Engine::from_config(&config).unwrap();
        let spans: Vec<otlp::Span> = calls
            .iter()
            .enumerate()
            .map(|(i, &(tool, arguments, result, status))| span_of(i, tool, arguments, result, status))
            .collect();
        let views: Vec<SpanView> = spans.iter().map(SpanView::from).collect();
        let observations = |views: &[SpanView]| -> Vec<Observation> {
            let (events, _, _, _) =
                engine.events_of(views.iter().map(|v| ((), v, None, None::<Arc<str>>)));
            events.into_iter().map(|e| e.observation).collect()
        };
        let together = observations(&views);
        let alone: Vec<Observation> = views
            .chunks(1)
            .flat_map(observations)
            .collect();
        prop_assert_eq!(together.len(), spans.len());
        prop_assert_eq!(together, alone);
    }
}
