//! Tool-span shapes of framework versions the recorded corpus does not cover
//! (`tests/fixtures/shapes/`, OTLP/JSON built from each framework's source, cited in the
//! convention's module docs). Every file holds two traces: trace `a1…` makes the same
//! call (`get_weather({"city":"Paris","units":"metric"})`, same result) three times, and
//! the default `nudge` profile must warn `repeated_result` at call 3 (`stop` says
//! nothing); trace `b2…` makes three distinct calls and must give nothing.

mod common;

use common::{fixtures, keys_of, Key};
use loopwatch::config::Config;
use loopwatch::conventions;
use loopwatch::engine::Engine;
use loopwatch::event::EventKind;
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
];

const LOOPING: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";
const HEALTHY: &str = "b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2";

fn request(file: &str) -> loopwatch::otlp::ExportTraceServiceRequest {
    let path = fixtures().join("shapes").join(file);
    loopwatch::scan::read_request(&path).unwrap_or_else(|e| panic!("{file}: {e}"))
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

#[test]
fn looping_trace_warns_at_call_3_and_healthy_trace_gives_nothing() {
    let warn: Key = (
        Some(3),
        None,
        "repeated_result".into(),
        vec!["get_weather".into()],
        3,
        "warn".into(),
    );
    for (file, _) in SHAPES {
        let engine = Engine::from_config(&Config::default()).expect("default config builds");
        engine.process(&mut request(file), std::time::Instant::now());
        let runs = engine.registry.runs();
        assert_eq!(runs.len(), 2, "{file}: runs");
        for run in runs {
            assert_eq!(run.tool_calls, 3, "{file}: {}", run.run_key);
            let (nudge, stop) = (
                keys_of(&run.detections, "nudge"),
                keys_of(&run.detections, "stop"),
            );
            match run.run_key.as_ref() {
                LOOPING => assert_eq!(nudge, vec![warn.clone()], "{file}: nudge"),
                HEALTHY => assert_eq!(nudge, Vec::<Key>::new(), "{file}: nudge"),
                other => panic!("{file}: unexpected run {other}"),
            }
            assert_eq!(stop, Vec::<Key>::new(), "{file}: stop");
        }
    }
}
