//! Extraction over the real corpus (`tests/fixtures/corpus/`): every run of `runs.json` is
//! decoded from its `req-NNNN.pb` files and checked against what the recording says: tool
//! call count, tool-name sequence in start order, arguments (as JSON, key order ignored),
//! call ids, whether arguments/results were captured, convention, skipped pseudo tool
//! spans, and text-only model responses.

use std::path::{Path, PathBuf};

use loopwatch::conventions::event::{EventKind, ModelResponse, Payload, ToolCall};
use loopwatch::conventions::{self, frameworks::genai};
use loopwatch::otlp::{ExportTraceServiceRequest, Span};
use prost::Message;
use serde_json::Value as Json;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/corpus")
}

fn runs() -> Vec<Json> {
    let text = std::fs::read_to_string(corpus_dir().join("runs.json")).expect("read runs.json");
    match serde_json::from_str(&text).expect("parse runs.json") {
        Json::Array(runs) => runs,
        other => panic!("runs.json is not a list: {other}"),
    }
}

fn spans_of(run: &Json) -> Vec<Span> {
    let dir = corpus_dir().join(run["run"].as_str().expect("run name"));
    let files = run["request_files"].as_array().expect("request_files");
    assert!(!files.is_empty(), "{dir:?}: no request files");
    let mut spans = Vec::new();
    for file in files {
        let path = dir.join(file.as_str().expect("file name"));
        let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("read {path:?}: {e}"));
        let request = ExportTraceServiceRequest::decode(bytes.as_slice())
            .unwrap_or_else(|e| panic!("decode {path:?}: {e}"));
        for rs in request.resource_spans {
            for ss in rs.scope_spans {
                spans.extend(ss.spans);
            }
        }
    }
    spans
}

/// Arguments as JSON where they parse; text that is not JSON stays a JSON string.
fn payload_json(payload: &Payload) -> Json {
    let text = match payload {
        Payload::Json(v) => return v.clone(),
        Payload::Text(t) => t.clone(),
        Payload::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
    };
    serde_json::from_str(&text).unwrap_or(Json::String(text))
}

/// `"fetch_url({...})"` → (`"fetch_url"`, `Some(json)`); `"fetch_url(?)"` → args `None`.
/// runs.json keeps LangChain's bare one-parameter values as recorded (`check_status(42)`,
/// `search(genai semconv)`): JSON where it parses, else a JSON string.
fn parse_sequence_entry(entry: &str) -> (String, Option<Json>) {
    let open = entry.find('(').expect("sequence entry has '('");
    let name = entry[..open].to_owned();
    let inner = entry[open + 1..]
        .strip_suffix(')')
        .expect("sequence entry ends with ')'");
    if inner == "?" {
        return (name, None);
    }
    let args = serde_json::from_str(inner).unwrap_or_else(|_| Json::String(inner.to_owned()));
    (name, Some(args))
}

/// runs.json `convention` names → our convention labels.
fn convention_label(name: &str) -> &'static str {
    match name {
        "genai-semconv" => "genai",
        "openinference" => "openinference",
        "pydantic-ai-v2" => "pydantic-legacy",
        other => panic!("unknown convention in runs.json: {other}"),
    }
}

/// Text-only model responses we expect where runs.json's `text_responses` is not what the
/// spans hold (checked by reading the req-*.json files):
/// - runs.json counts 0 for every non-pydantic run, although each of those runs ends with
///   one final text answer that the spans capture (google-adk `generate_content`
///   `gen_ai.output.messages`; strands `gen_ai.choice` / operation-details events;
///   OpenInference `llm.output_messages.0.message.content`);
/// - `pydantic-ai/v5-nocontent`: runs.json counts the final answer, but with
///   `include_content=False` its text part has no content, so there is no text to compare
///   and extraction yields no event.
fn expected_text_responses(run: &Json) -> u64 {
    let name = run["run"].as_str().expect("run name");
    let recorded = run["text_responses"].as_u64().expect("text_responses");
    if name.starts_with("pydantic-ai/v5-nocontent/") {
        0
    } else if !name.starts_with("pydantic-ai/") {
        assert_eq!(recorded, 0, "{name}: runs.json changed, revisit this table");
        1
    } else {
        recorded
    }
}

struct Extracted<'a> {
    span: &'a Span,
    call: ToolCall,
    convention: &'static str,
}

#[test]
fn every_corpus_run_extracts_as_recorded() {
    let runs = runs();
    assert_eq!(runs.len(), 33, "corpus size");
    let mut bare_value_args = 0;
    for run in &runs {
        let name = run["run"].as_str().expect("run name");
        let spans = spans_of(run);
        assert_eq!(
            spans.len() as u64,
            run["spans"].as_u64().expect("spans"),
            "{name}: span count"
        );

        let mut calls: Vec<Extracted> = Vec::new();
        let mut text_responses = 0u64;
        let mut pseudo = 0u64;
        for span in &spans {
            let view = loopwatch::otlp::view::SpanView::from(span);
            if genai::is_tool_span(&view) && genai::is_merged_pseudo_span(&view) {
                pseudo += 1;
                assert_eq!(
                    conventions::extract(span),
                    None,
                    "{name}: merged span must be skipped"
                );
                continue;
            }
            let Some(event) = conventions::extract(span) else {
                continue;
            };
            match event.kind {
                EventKind::ToolCall(call) => calls.push(Extracted {
                    span,
                    call,
                    convention: event.convention,
                }),
                EventKind::ModelResponse(ModelResponse::Text(text)) => {
                    assert!(!text.trim().is_empty(), "{name}: empty text response");
                    text_responses += 1;
                }
                EventKind::ModelResponse(ModelResponse::ToolCalls) => {}
            }
        }
        calls.sort_by(|a, b| {
            (
                a.span.start_time_unix_nano,
                a.span.end_time_unix_nano,
                &a.span.span_id,
            )
                .cmp(&(
                    b.span.start_time_unix_nano,
                    b.span.end_time_unix_nano,
                    &b.span.span_id,
                ))
        });

        assert_eq!(
            pseudo,
            run["pseudo_tool_spans"].as_u64().expect("pseudo"),
            "{name}: pseudo tool spans"
        );
        assert_eq!(
            calls.len() as u64,
            run["tool_calls"].as_u64().expect("tool_calls"),
            "{name}: tool calls"
        );
        assert_eq!(
            text_responses,
            expected_text_responses(run),
            "{name}: text responses"
        );

        let conventions: Vec<&str> = run["convention"]
            .as_array()
            .expect("convention")
            .iter()
            .map(|c| convention_label(c.as_str().expect("convention name")))
            .collect();
        for c in &calls {
            assert!(
                conventions.contains(&c.convention),
                "{name}: convention {} not in {conventions:?}",
                c.convention
            );
        }

        let sequence = run["sequence"].as_array().expect("sequence");
        let call_ids = run["call_ids"].as_array().expect("call_ids");
        let args_present = run["args_present"].as_bool().expect("args_present");
        let results_present = run["results_present"].as_bool().expect("results_present");
        for (i, (c, entry)) in calls.iter().zip(sequence).enumerate() {
            let (tool, args) = parse_sequence_entry(entry.as_str().expect("entry"));
            let call = &c.call;
            assert_eq!(call.tool_name, tool, "{name} #{i}: tool name");
            assert_eq!(
                call.call_id.as_deref(),
                call_ids[i].as_str(),
                "{name} #{i}: call id"
            );
            assert_eq!(
                call.arguments.is_some(),
                args_present,
                "{name} #{i}: args present"
            );
            assert_eq!(
                call.result.is_some(),
                results_present,
                "{name} #{i}: result present"
            );
            match (&call.arguments, args) {
                (None, None) => {}
                (Some(payload), Some(want)) => {
                    let got = payload_json(payload);
                    assert_eq!(got, want, "{name} #{i}: arguments");
                    // Trap 2: OpenInference-LangChain records a one-parameter tool's bare value.
                    if !got.is_object() {
                        bare_value_args += 1;
                        assert!(
                            name.starts_with("langchain/"),
                            "{name} #{i}: non-object args {got}"
                        );
                    }
                }
                (got, want) => panic!("{name} #{i}: args {got:?} vs recorded {want:?}"),
            }
        }
    }
    // s2 (6), s3 (4 of 8: read_file and grep take one parameter), s4 (12) in LangChain;
    // s1 has two parameters and must match as an object.
    assert_eq!(bare_value_args, 6 + 8 + 12, "bare-value arguments seen");
}

#[test]
fn s7_text_responses_are_the_scripted_answers() {
    for run in [
        "pydantic-ai/v5-default/s7_repeated_text",
        "pydantic-ai/v6-newest/s7_repeated_text",
    ] {
        let meta = runs()
            .into_iter()
            .find(|r| r["run"] == run)
            .expect("run listed");
        let mut spans = spans_of(&meta);
        spans.sort_by_key(|s| s.start_time_unix_nano);
        let texts: Vec<String> = spans
            .iter()
            .filter_map(conventions::extract)
            .filter_map(|e| match e.kind {
                EventKind::ModelResponse(ModelResponse::Text(t)) => Some(t),
                _ => None,
            })
            .collect();
        let wrong = "The answer is probably forty-two.".to_owned();
        assert_eq!(
            texts,
            vec![wrong.clone(), wrong.clone(), wrong, "42".to_owned()],
            "{run}"
        );
    }
}
