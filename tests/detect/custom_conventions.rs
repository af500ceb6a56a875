//! `[[conventions.custom]]`: a made-up framework's tool spans, read through a user mapping
//! from a config file, loop like any built-in convention; a mapping that can never match is
//! refused at start-up with its name.

use crate::support::spans::{kv, s};
use loopwatch::config::Config;
use loopwatch::engine::Engine;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{span::Event, ResourceSpans, ScopeSpans, Span};

const MAPPING: &str = r#"
[[conventions.custom]]
name = "acme-agents"
match = { span_name = "acme.tool.*", attribute = "acme.kind", equals = "tool" }
tool_name = "acme.tool"
arguments = { event = "acme.input", attribute = "body" }
result = "acme.output"
call_id = "acme.call_id"
"#;

fn acme_span(i: u64) -> Span {
    Span {
        trace_id: vec![0xac; 16],
        span_id: (0x100 + i).to_be_bytes().to_vec(),
        name: "acme.tool.invoke".into(),
        start_time_unix_nano: 1_000 * i,
        end_time_unix_nano: 1_000 * i + 500,
        attributes: vec![
            kv("acme.kind", s("tool")),
            kv("acme.tool", s("fetch_page")),
            kv("acme.output", s("HTTP 404")),
            kv("acme.call_id", s(&format!("call-{i}"))),
        ],
        events: vec![Event {
            name: "acme.input".into(),
            attributes: vec![kv("body", s(r#"{"url": "https://example.com/x"}"#))],
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn load(text: &str) -> Result<Config, String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("loopwatch.toml");
    std::fs::write(&path, text).unwrap();
    Config::load(Some(&path), &[])
        .and_then(|c| c.validate().map(|()| c))
        .map_err(|e| e.to_string())
}

fn detections(config: &Config) -> Vec<(String, String, Option<usize>)> {
    let engine = Engine::from_config(config).unwrap();
    let mut request = ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans: (1..=3).map(acme_span).collect(),
                ..Default::default()
            }],
            ..Default::default()
        }],
    };
    engine
        .process(&mut request, std::time::Instant::now())
        .detections
        .iter()
        .map(|d| {
            (
                d.profile.name.clone(),
                d.detection.pattern.as_str().to_owned(),
                d.detection.call,
            )
        })
        .collect()
}

#[test]
fn a_made_up_framework_loops_through_its_mapping() {
    let config = load(MAPPING).expect("valid mapping");
    assert_eq!(config.conventions.custom[0].name, "acme-agents");
    assert_eq!(
        detections(&config),
        vec![("nudge".into(), "repeated_result".into(), Some(3))]
    );
    // Without the mapping the spans are not tool calls.
    assert!(detections(&Config::default()).is_empty());
}

#[test]
fn a_mapping_that_can_never_match_is_refused_naming_it() {
    let never = MAPPING.replace(
        r#"match = { span_name = "acme.tool.*", attribute = "acme.kind", equals = "tool" }"#,
        r#"match = { equals = "tool" }"#,
    );
    let err = load(&never).expect_err("refused");
    assert!(
        err.contains("conventions.custom[0] (acme-agents)") && err.contains("match"),
        "{err}"
    );
    let unknown = MAPPING.replace("result =", "resultt =");
    let err = load(&unknown).expect_err("unknown key refused");
    assert!(err.contains("resultt"), "{err}");
}
