//! Tool-span shapes of framework versions and settings the recorded corpus does not cover
//! (`tests/fixtures/shapes/`, OTLP/JSON built from each framework's source: see that
//! folder's README and the convention's module docs). Every file holds two traces: trace
//! `a1…` makes the same call three times with the same result, and the default `nudge`
//! profile must warn `repeated_result` at call 3 (`stop` says nothing); trace `b2…` makes
//! three distinct calls and must give nothing. Detections are read through `loopwatch scan`.

use crate::support;

use crate::support::spans::{fixtures, Key};
use loopwatch::conventions;
use loopwatch::conventions::event::{EventKind, SplitSpan};
use loopwatch::otlp::view::SpanView;

/// Fixture file and the convention label its tool spans must be read by.
const SHAPES: &[(&str, &str)] = &[
    (
        "logfire_openai_agents_function_span.json",
        "logfire-openai-agents",
    ),
    ("strands_0_1_tool_span.json", "strands-legacy"),
    ("google_genai_code_function_parameters.json", "google-genai"),
    (
        "google_genai_code_function_parameters_reordered.json",
        "google-genai",
    ),
    ("mastra_old_exporter_tool_execute.json", "mastra-legacy"),
    ("haystack_3_agent_step_tool.json", "haystack"),
    ("langsmith_otel_tool_run.json", "langsmith"),
    ("agent_framework_execute_tool.json", "genai"),
    ("livekit_function_tool.json", "livekit"),
    ("openllmetry_openai_agents_tool.json", "openllmetry"),
];

/// Files whose looping trace must warn at call 3: [`SHAPES`] and shapes read by existing
/// conventions with new rules (OpenInference over ADK with ADK's capture off or on, AG2's
/// failure marked by `error.type` alone, OpenInference's CrewAI `_use` spans whose agent
/// text differs call to call).
const LOOPS_AT_CALL_3: &[&str] = &[
    "logfire_openai_agents_function_span.json",
    "strands_0_1_tool_span.json",
    "google_genai_code_function_parameters.json",
    "google_genai_code_function_parameters_reordered.json",
    "mastra_old_exporter_tool_execute.json",
    "haystack_3_agent_step_tool.json",
    "langsmith_otel_tool_run.json",
    "agent_framework_execute_tool.json",
    "livekit_function_tool.json",
    "openllmetry_openai_agents_tool.json",
    "openinference_adk_capture_off.json",
    "openinference_adk_content_on.json",
    "ag2_failure_error_type_only.json",
    "openinference_crewai_tool_use_varying_thought.json",
    ADK_SPLIT,
    ADK_SPLIT_PARALLEL,
    HAYSTACK_OPENINFERENCE,
    HAYSTACK_TRACER,
];

/// Haystack 2.x `ToolInvoker` component spans, each running several calls (trace A: one
/// call, then two in one span; trace B: three in one span), traced by OpenInference's
/// haystack instrumentor and by Haystack's own tracer.
const HAYSTACK_OPENINFERENCE: &str = "haystack_openinference_tool_invoker.json";
const HAYSTACK_TRACER: &str = "haystack_tracer_tool_invoker.json";

/// Semantic Kernel Python ≤ 1.18 chat spans with `gen_ai.content.prompt` /
/// `gen_ai.content.completion` events: calls in the completions, results in later prompts.
const SEMANTIC_KERNEL: &str = "semantic_kernel_python_content_events.json";

/// google-adk 0.1.0–1.1.x: each call is a `tool_call [get_weather]` span (arguments) and a
/// `tool_response [get_weather]` span after it under the same parent (result); the
/// parallel variant makes the three calls in one model response, so ADK adds its merged
/// `tool_response` span.
const ADK_SPLIT: &str = "adk_0_1_tool_call_tool_response_spans.json";
const ADK_SPLIT_PARALLEL: &str = "adk_0_1_parallel_merged_tool_response.json";

const TRACE_A: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";

fn request(file: &str) -> loopwatch::otlp::ExportTraceServiceRequest {
    let path = fixtures().join("shapes").join(file);
    loopwatch::cli::scan::read_request(&path).unwrap_or_else(|e| panic!("{file}: {e}"))
}

#[test]
fn every_tool_span_is_one_call_with_arguments_and_result() {
    for (file, convention) in SHAPES {
        let request = request(file);
        let mut calls = 0;
        for rs in &request.resource_spans {
            for ss in &rs.scope_spans {
                for span in &ss.spans {
                    let event = conventions::extract_with(&[], &SpanView::from(span))
                        .unwrap_or_else(|| panic!("{file}: span {} not read", span.name));
                    assert_eq!(event.convention, *convention, "{file}");
                    let EventKind::ToolCall(call) = event.kind else {
                        panic!("{file}: not a tool call")
                    };
                    assert_eq!(call.tool_name, "get_weather", "{file}");
                    assert!(call.arguments.is_some(), "{file}: arguments");
                    assert!(call.result.is_some(), "{file}: result");
                    calls += 1;
                }
            }
        }
        assert_eq!(calls, 6, "{file}: tool calls");
    }
}

/// (trace_id, profile, detection) of every detection `loopwatch scan` prints for `file`
/// with the default configuration (both built-in profiles), sorted.
fn scan(file: &str) -> Vec<(String, String, Key)> {
    support::spans::scan_keys("", &fixtures().join("shapes").join(file))
}

/// What a looping fixture gives: `nudge` warns `repeated_result` on `tool` at call 3 of
/// trace A, and nothing else.
fn loop_at_call_3(tool: &str) -> Vec<(String, String, Key)> {
    let warn: Key = (
        Some(3),
        None,
        "repeated_result".into(),
        vec![tool.into()],
        3,
        "warn".into(),
    );
    vec![(TRACE_A.to_owned(), "nudge".to_owned(), warn)]
}

/// `nudge` warns `repeated_result` at call 3 of trace A; `stop` finds nothing; trace B
/// gives nothing in either profile.
fn assert_loop_at_call_3(file: &str, tool: &str) {
    assert_eq!(scan(file), loop_at_call_3(tool), "{file}");
}

#[test]
fn looping_traces_warn_at_call_3_and_healthy_traces_give_nothing() {
    for file in LOOPS_AT_CALL_3 {
        assert_loop_at_call_3(file, "get_weather");
    }
}

/// Known limit (`src/conventions/genai.rs` module docs): ADK writes a no-argument tool
/// returning `{}` exactly as its capture-off placeholders, so it reads as not captured.
#[test]
fn adk_no_argument_tool_returning_empty_dict_reads_as_not_captured() {
    assert_eq!(scan("adk_noarg_empty_dict_result.json"), vec![]);
}

/// The spans of an ADK 0.1–1.1 fixture in file order, with what each is read as.
fn adk_split_spans(file: &str) -> Vec<(opentelemetry_proto::tonic::trace::v1::Span, String)> {
    let request = request(file);
    let mut out = Vec::new();
    for rs in &request.resource_spans {
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                let read = match conventions::extract_with(&[], &SpanView::from(span)) {
                    None => "-".to_owned(),
                    Some(event) => {
                        assert_eq!(event.convention, "adk-legacy", "{file}: {}", span.name);
                        let EventKind::ToolCall(call) = event.kind else {
                            panic!("{file}: {} not a tool call", span.name)
                        };
                        assert_eq!(call.tool_name, "get_weather");
                        match call.split {
                            SplitSpan::Call => {
                                assert!(call.arguments.is_some() && call.result.is_none());
                                "call".to_owned()
                            }
                            SplitSpan::Result => {
                                assert!(call.arguments.is_none());
                                let result = call.result.expect("result");
                                format!(
                                    "result {}",
                                    serde_json::to_string(&json_of(&result)).unwrap()
                                )
                            }
                            SplitSpan::Whole => panic!("{file}: {} read whole", span.name),
                        }
                    }
                };
                out.push((span.clone(), read));
            }
        }
    }
    out
}

fn json_of(payload: &loopwatch::conventions::event::Payload) -> serde_json::Value {
    match payload {
        loopwatch::conventions::event::Payload::Json(value) => value.clone(),
        other => panic!("not JSON: {other:?}"),
    }
}

#[test]
fn adk_0_1_tool_call_and_tool_response_spans_are_read_apart() {
    let paris = r#"result {"conditions":"cloudy","temp_c":18}"#;
    for (file, merged) in [(ADK_SPLIT, 0), (ADK_SPLIT_PARALLEL, 1)] {
        let spans = adk_split_spans(file);
        let reads: Vec<(&str, &str)> = spans
            .iter()
            .filter(|(span, _)| span.trace_id[0] == 0xa1)
            .map(|(span, read)| (span.name.as_str(), read.as_str()))
            .collect();
        let mut want = [
            ("tool_call [get_weather]", "call"),
            ("tool_response [get_weather]", paris),
        ]
        .repeat(3);
        // ADK's merged response of parallel calls, then the agent and invocation spans.
        want.extend(vec![("tool_response", "-"); merged]);
        want.extend([("agent_run [weather_agent]", "-"), ("invocation", "-")]);
        assert_eq!(reads, want, "{file}");
    }
}

/// An order of a fixture's spans, from their (name, in trace A) in file order.
type Order = fn(&[(String, bool)]) -> Vec<usize>;

/// The fixture's spans sent one span per request (`scan` reads a folder's files in name
/// order as requests) in the order `order` gives, and scanned.
fn scan_one_span_per_request(file: &str, order: Order) -> Vec<(String, String, Key)> {
    use prost::Message;
    let request = request(file);
    let rs = &request.resource_spans[0];
    let spans = &rs.scope_spans[0].spans;
    let names: Vec<(String, bool)> = spans
        .iter()
        .map(|s| (s.name.clone(), s.trace_id[0] == 0xa1))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    for (n, i) in order(&names).into_iter().enumerate() {
        let mut one = request.clone();
        one.resource_spans[0].scope_spans[0].spans = vec![spans[i].clone()];
        std::fs::write(
            dir.path().join(format!("req-{n:03}.pb")),
            one.encode_to_vec(),
        )
        .unwrap();
    }
    support::spans::scan_keys("", dir.path())
}

#[test]
fn adk_0_1_pairs_hold_in_any_arrival_order() {
    let want = loop_at_call_3("get_weather");
    let orders: [(&str, Order); 3] = [
        ("reversed", |spans| (0..spans.len()).rev().collect()),
        ("responses first", |spans| {
            let (responses, rest): (Vec<usize>, Vec<usize>) =
                (0..spans.len()).partition(|&i| spans[i].0.starts_with("tool_response"));
            responses.into_iter().chain(rest).collect()
        }),
        ("interleaved traces, calls last", |spans| {
            let mut order: Vec<usize> = (0..spans.len()).collect();
            order.sort_by_key(|&i| (spans[i].0.starts_with("tool_call"), !spans[i].1, i));
            order
        }),
    ];
    for file in [ADK_SPLIT, ADK_SPLIT_PARALLEL] {
        for (label, order) in orders {
            assert_eq!(
                scan_one_span_per_request(file, order),
                want,
                "{file}: {label}"
            );
        }
    }
}

#[test]
fn adk_0_1_result_spans_are_no_calls_for_budgets() {
    // Three calls per trace, six tool spans: `max_tool_calls = 3` holds, 2 is passed.
    let budget = |limit: u32| -> Vec<(String, u64)> {
        let config = format!("[budgets]\nmax_tool_calls = {limit}\n");
        support::spans::scan_json(&config, &fixtures().join("shapes").join(ADK_SPLIT_PARALLEL))
            .iter()
            .filter(|d| d["pattern"] == "budget_exceeded")
            .map(|d| {
                (
                    d["trace_id"].as_str().unwrap()[..4].to_owned(),
                    d["count"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    assert_eq!(budget(3), vec![]);
    let mut passed = budget(2);
    passed.sort();
    assert_eq!(passed, vec![("a1a1".into(), 3), ("b2b2".into(), 3)]);
}

/// A call as [`span_events`] shows it: tool name, its `city` argument, its result.
type Shown = (String, String, String);

/// (trace prefix, span name, the calls the span yields) of every span of `file`, in order.
fn span_events(file: &str) -> Vec<(String, String, Vec<Shown>)> {
    let request = request(file);
    let mut out = Vec::new();
    for rs in &request.resource_spans {
        for ss in &rs.scope_spans {
            for span in &ss.spans {
                let events =
                    conventions::extract_all_with_recorded_arguments(&[], &SpanView::from(span));
                let calls = events
                    .into_iter()
                    .filter_map(|event| match event.kind {
                        EventKind::ToolCall(call) => Some((
                            call.tool_name,
                            arguments_json(&call.arguments.expect("arguments"))["city"].to_string(),
                            format!("{:?}", call.result),
                        )),
                        EventKind::ModelResponse(_) => None,
                    })
                    .collect();
                out.push((hex(&span.trace_id[..2]), span.name.clone(), calls));
            }
        }
    }
    out
}

/// Arguments as JSON: structured, or JSON text (Semantic Kernel's `function.arguments`).
fn arguments_json(payload: &loopwatch::conventions::event::Payload) -> serde_json::Value {
    match payload {
        loopwatch::conventions::event::Payload::Text(text) => {
            serde_json::from_str(text).expect("JSON text")
        }
        other => json_of(other),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn haystack_tool_invoker_span_is_one_call_per_tool_call_in_list_order() {
    let weather = |city: &str, conditions: &str, temp: u32| {
        (
            "get_weather".to_owned(),
            format!("\"{city}\""),
            format!(
                "Some(Text(\"{{\\\"conditions\\\": \\\"{conditions}\\\", \\\"temp_c\\\": {temp}}}\"))"
            ),
        )
    };
    let paris = weather("Paris", "cloudy", 18);
    for (file, invoker) in [
        (HAYSTACK_OPENINFERENCE, "ToolInvoker.run"),
        (HAYSTACK_TRACER, "haystack.component.run"),
    ] {
        let calls: Vec<(String, Vec<Shown>)> = span_events(file)
            .into_iter()
            .filter(|(_, name, calls)| name == invoker && !calls.is_empty())
            .map(|(trace, _, calls)| (trace, calls))
            .collect();
        assert_eq!(
            calls,
            vec![
                ("a1a1".into(), vec![paris.clone()]),
                ("a1a1".into(), vec![paris.clone(), paris.clone()]),
                (
                    "b2b2".into(),
                    vec![
                        paris.clone(),
                        weather("Rome", "sunny", 27),
                        weather("Oslo", "rain", 9)
                    ]
                ),
            ],
            "{file}"
        );
        // The agent's and the chat generator's spans hold the same messages: no calls.
        let others: usize = span_events(file)
            .iter()
            .filter(|(_, name, _)| name != invoker)
            .map(|(_, _, calls)| calls.len())
            .sum();
        assert_eq!(others, 0, "{file}");
    }
}

#[test]
fn a_call_inside_a_several_call_span_annotates_that_span() {
    for file in [HAYSTACK_OPENINFERENCE, HAYSTACK_TRACER] {
        let found: Vec<(String, String, u64)> =
            support::spans::scan_json("", &fixtures().join("shapes").join(file))
                .iter()
                .map(|d| {
                    (
                        d["span_id"].as_str().unwrap().to_owned(),
                        d["profile"].as_str().unwrap().to_owned(),
                        d["call"].as_u64().unwrap(),
                    )
                })
                .collect();
        // Calls 2 and 3 of trace A are the second ToolInvoker span's.
        assert_eq!(
            found,
            vec![("a1a1a1a100000005".into(), "nudge".into(), 3)],
            "{file}"
        );
    }
}

#[test]
fn several_call_spans_hold_when_re_exported_or_reversed() {
    for (file, tool) in [
        (HAYSTACK_OPENINFERENCE, "get_weather"),
        (HAYSTACK_TRACER, "get_weather"),
        (SEMANTIC_KERNEL, "WeatherPlugin-get_weather"),
    ] {
        let want = loop_at_call_3(tool);
        // The same export twice: every call's copy is a duplicate, no call counts twice.
        let dir = tempfile::tempdir().unwrap();
        for copy in ["1.json", "2.json"] {
            std::fs::copy(fixtures().join("shapes").join(file), dir.path().join(copy)).unwrap();
        }
        assert_eq!(
            support::spans::scan_keys("", dir.path()),
            want,
            "{file}: twice"
        );
        assert_eq!(
            scan_one_span_per_request(file, |spans| (0..spans.len()).rev().collect()),
            want,
            "{file}: reversed"
        );
    }
}

#[test]
fn several_call_spans_count_each_call_for_budgets() {
    // Three calls per trace (trace B's in one span): `max_tool_calls = 3` holds, 2 is passed.
    let budget = |limit: u32| -> Vec<(String, u64, String)> {
        let config = format!("[budgets]\nmax_tool_calls = {limit}\n");
        let mut found: Vec<_> = support::spans::scan_json(
            &config,
            &fixtures().join("shapes").join(HAYSTACK_OPENINFERENCE),
        )
        .iter()
        .filter(|d| d["pattern"] == "budget_exceeded")
        .map(|d| {
            (
                d["trace_id"].as_str().unwrap()[..4].to_owned(),
                d["count"].as_u64().unwrap(),
                d["span_id"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
        found.sort();
        found
    };
    assert_eq!(budget(3), vec![]);
    assert_eq!(
        budget(2),
        vec![
            ("a1a1".into(), 3, "a1a1a1a100000005".into()),
            ("b2b2".into(), 3, "b2b2b2b200000003".into())
        ]
    );
}

#[test]
fn semantic_kernel_python_calls_are_read_from_chat_span_events() {
    assert_loop_at_call_3(SEMANTIC_KERNEL, "WeatherPlugin-get_weather");
    // Each chat span that asked for a call yields it (arguments, no result: the result is
    // joined from the next chat span's prompt); the function's own span is not read.
    let calls: Vec<(String, String, Vec<Shown>)> = span_events(SEMANTIC_KERNEL)
        .into_iter()
        .filter(|(_, _, calls)| !calls.is_empty())
        .collect();
    let call = |city: &str| {
        vec![(
            "WeatherPlugin-get_weather".to_owned(),
            format!("\"{city}\""),
            "None".to_owned(),
        )]
    };
    let chat = "chat.completions gpt-4o-mini".to_owned();
    assert_eq!(
        calls,
        vec![
            ("a1a1".into(), chat.clone(), call("Paris")),
            ("a1a1".into(), chat.clone(), call("Paris")),
            ("a1a1".into(), chat.clone(), call("Paris")),
            ("b2b2".into(), chat.clone(), call("Paris")),
            ("b2b2".into(), chat.clone(), call("Rome")),
            ("b2b2".into(), chat.clone(), call("Oslo")),
        ]
    );
}
