//! Model-response shapes (`repeated_text`) of framework versions and settings the recorded
//! corpus does not cover (`tests/fixtures/shapes/response_*.json`, OTLP/JSON built from
//! each framework's source: see that folder's README and the convention's module docs).
//! Every file holds two traces: trace `a1…` has three consecutive text-only responses with
//! the same text, and the default `nudge` profile must warn `repeated_text` at response 3
//! (`stop`, at 6, says nothing); trace `b2…` must give nothing: its responses differ, are
//! interleaved with tool-call responses (or tool calls), or hide their text. Detections are
//! read through `loopwatch scan`. A streamed call's request span carries no output: it is
//! read as nothing, beside its stream's log.
//!
//! `response_nested_*.json` hold one LLM call traced by two instrumentations (a
//! framework's model span with a provider span of the same response nested in it): trace
//! `a1…` three such calls (warn at response 3), `b2…` two (nothing: one response each).

use crate::support;

use crate::support::spans::{fixtures, Key};
use loopwatch::conventions;
use loopwatch::conventions::event::EventKind;
use loopwatch::otlp::view::SpanView;

/// Fixture file and the convention label its responses must be read by.
const SHAPES: &[(&str, &str)] = &[
    (
        "response_openinference_openai_agents_reasoning.json",
        "openinference",
    ),
    (
        "response_openinference_hide_output_text.json",
        "openinference",
    ),
    ("response_langfuse_generation.json", "langfuse"),
    ("response_logfire_openai_response_data.json", "logfire"),
    ("response_logfire_openai_agents_responses.json", "logfire"),
    (
        "response_logfire_openai_agents_generation.json",
        "logfire-openai-agents",
    ),
    ("response_strands_0_1_model_invoke.json", "strands-legacy"),
    ("response_semantic_kernel_dotnet_choice_event.json", "genai"),
    (
        "response_mastra_old_exporter_model_generation.json",
        "mastra-legacy",
    ),
    ("response_logfire_openai_chat_stream.json", "logfire"),
    ("response_logfire_anthropic_stream.json", "logfire"),
    ("response_logfire_openai_responses_stream.json", "logfire"),
    (
        "response_openinference_hide_output_messages.json",
        "openinference",
    ),
    (
        "response_openinference_anthropic_hide_outputs.json",
        "openinference",
    ),
];

const TRACE_A: &str = "a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1a1";

#[test]
fn trace_a_responses_are_read_as_text_by_their_convention() {
    for (file, convention) in SHAPES {
        let path = fixtures().join("shapes").join(file);
        let request =
            loopwatch::cli::scan::read_request(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let mut texts = Vec::new();
        for span in request
            .resource_spans
            .iter()
            .flat_map(|rs| &rs.scope_spans)
            .flat_map(|ss| &ss.spans)
            .filter(|s| hex(&s.trace_id) == TRACE_A)
        {
            let Some(event) = conventions::extract_with(&[], &SpanView::from(span)) else {
                continue; // a streamed call's request span
            };
            assert_eq!(event.convention, *convention, "{file}");
            let EventKind::ModelResponse(loopwatch::conventions::event::ModelResponse::Text(text)) =
                event.kind
            else {
                panic!("{file}: not a text response: {:?}", event.kind)
            };
            texts.push(text);
        }
        assert_eq!(texts.len(), 3, "{file}");
        assert!(texts.iter().all(|t| *t == texts[0]), "{file}: {texts:?}");
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// (trace_id, profile, detection) of every detection `loopwatch scan` prints for `file`
/// with the default configuration (both built-in profiles), sorted.
fn scan(file: &str) -> Vec<(String, String, Key)> {
    support::spans::scan_keys("", &fixtures().join("shapes").join(file))
}

#[test]
fn repeated_answers_warn_at_response_3_and_the_others_give_nothing() {
    let warn: Key = (
        None,
        Some(3),
        "repeated_text".into(),
        vec![],
        3,
        "warn".into(),
    );
    for (file, _) in SHAPES {
        assert_eq!(
            scan(file),
            vec![(TRACE_A.to_owned(), "nudge".to_owned(), warn.clone())],
            "{file}"
        );
    }
}

/// One call traced twice: the provider span nested in the framework's is the same
/// response. Three calls warn at response 3, completed by the third call's inner span;
/// two calls (four spans of the same text) are two responses, nothing.
#[test]
fn one_call_traced_by_two_instrumentations_is_one_response() {
    let file = "response_nested_pydantic_ai_logfire_openai.json";
    let path = fixtures().join("shapes").join(file);
    let warn: Key = (
        None,
        Some(3),
        "repeated_text".into(),
        vec![],
        3,
        "warn".into(),
    );
    assert_eq!(
        scan(file),
        vec![(TRACE_A.to_owned(), "nudge".to_owned(), warn)],
    );
    let found = support::spans::scan_json("", &path);
    let span_ids: Vec<&str> = found.iter().filter_map(|d| d["span_id"].as_str()).collect();
    // Spans of trace A: the run's root, then (outer, inner) per call.
    assert_eq!(span_ids, vec!["a1a1a1a100000007"]);
}
