//! `detection.run_key` (DESIGN §2 "Run key"): with `run_key_attribute`, spans of several
//! traces that share a session form one run, and the admin API still finds the run by any
//! of its trace ids; with `trace_and_agent`, the sub-agents of one trace are separate runs.

use crate::support;

use crate::support::spans::*;
use loopwatch::config::Config;
use loopwatch::engine::Engine;
use opentelemetry_proto::tonic::common::v1::any_value::Value;

/// s05 (12 identical calls, same result) with its spans spread over two traces that share
/// `session.id` (on every span, as frameworks put `gen_ai.conversation.id` on all of a run's
/// spans).
fn split_over_two_traces(
) -> opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest {
    let scenario =
        read_json(&fixtures().join("oracle/scenarios/s05_same_call_same_result_x12.json"));
    let mut request = scenario_request(&scenario, [0xa1; 16], false);
    let spans = &mut request.resource_spans[0].scope_spans[0].spans;
    for (i, span) in spans.iter_mut().enumerate() {
        if i % 4 >= 2 {
            span.trace_id = vec![0xb2; 16];
        }
        span.attributes
            .push(kv("session.id", Value::StringValue("session-17".into())));
    }
    request
}

fn calls(detections: &[loopwatch::registry::RunDetection], profile: &str) -> Vec<Option<usize>> {
    detections
        .iter()
        .filter(|d| d.profile.name == profile)
        .map(|d| d.detection.call)
        .collect()
}

#[test]
fn one_session_over_two_traces_is_one_run() {
    let expected =
        read_json(&fixtures().join("oracle/expected/s05_same_call_same_result_x12.json"));
    let mut config = Config::default();
    config.detection.run_key_attribute = "session.id".into();
    let engine = Engine::from_config(&config).unwrap();
    engine.process(&mut split_over_two_traces(), std::time::Instant::now());
    let detections = engine
        .registry
        .detections("session-17")
        .expect("the session is a run");
    for profile in ["nudge", "stop"] {
        assert_eq!(
            keys_of(&detections, profile),
            expected_keys(&expected, profile),
            "{profile}"
        );
    }
    // Both traces lead to the session's run.
    for trace in [[0xa1u8; 16], [0xb2; 16]] {
        assert_eq!(
            engine
                .registry
                .run_key_for_trace(&hex::encode(trace))
                .as_deref(),
            Some("session-17")
        );
    }
    assert_eq!(
        engine
            .registry
            .run_key_for_trace(&hex::encode([0xc3u8; 16])),
        None
    );
}

#[test]
fn without_the_attribute_each_trace_is_its_own_run() {
    let engine = Engine::from_config(&Config::default()).unwrap();
    engine.process(&mut split_over_two_traces(), std::time::Instant::now());
    // six identical calls per trace: nudge fires at its 3rd and 6th call in each trace
    for trace in [[0xa1u8; 16], [0xb2; 16]] {
        let detections = engine.registry.detections(&hex::encode(trace)).unwrap();
        assert_eq!(calls(&detections, "nudge"), vec![Some(3), Some(6)]);
        assert_eq!(calls(&detections, "stop"), vec![Some(6)]);
    }
    assert!(engine.registry.detections("session-17").is_none());
}

// ---------------------------------------------------------------------------------------
// `detection.run_key = "trace_and_agent"`: two sub-agents interleaving in one trace.

use std::collections::BTreeSet;

use loopwatch::registry::RunDetection;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use prost::Message;

const TRACE: [u8; 16] = [0x5a; 16];
/// Run keys under `trace_and_agent`: the researcher names itself by `gen_ai.agent.name`,
/// the writer by `gen_ai.agent.id` (which wins over its name).
const RESEARCHER: &str = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a/researcher";
const WRITER: &str = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a/writer-7";
const TRACE_KEY: &str = "5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a5a";

fn span(id: u8, parent: u8, name: &str, start: u64, attributes: Vec<KeyValue>) -> Span {
    Span {
        trace_id: TRACE.to_vec(),
        span_id: vec![id; 8],
        parent_span_id: if parent == 0 { vec![] } else { vec![parent; 8] },
        name: name.into(),
        start_time_unix_nano: start,
        end_time_unix_nano: start + 50,
        attributes,
        ..Default::default()
    }
}

/// The orchestrator (root) and its two sub-agents, as `invoke_agent` spans; the
/// sub-agents' spans end after their calls, as real agent spans do.
fn agent_spans() -> Vec<Span> {
    let agent = |id, parent, name: &str, extra: Vec<KeyValue>| {
        let mut attributes = vec![
            kv("gen_ai.operation.name", s("invoke_agent")),
            kv("gen_ai.agent.name", s(name)),
        ];
        attributes.extend(extra);
        let mut span = span(
            id,
            parent,
            &format!("invoke_agent {name}"),
            1_000,
            attributes,
        );
        span.end_time_unix_nano = 100_000;
        span
    };
    vec![
        agent(0x01, 0, "orchestrator", vec![]),
        agent(0x02, 0x01, "researcher", vec![]),
        agent(
            0x03,
            0x01,
            "writer",
            vec![kv("gen_ai.agent.id", s("writer-7"))],
        ),
    ]
}

/// Six `execute_tool` calls of one tool with the same arguments, alternately by the
/// researcher (even calls, under span 2) and the writer (odd calls, under span 3), each
/// agent three times; the tool spans carry no agent attribute (inherited from the
/// sub-agent span). `results[agent]` is each agent's result (`None`: not captured).
fn interleaved_calls(tool: &str, arguments: &str, results: [Option<&str>; 2]) -> Vec<Span> {
    (0..6u8)
        .map(|i| {
            let agent = usize::from(i % 2);
            let mut attributes = vec![
                kv("gen_ai.operation.name", s("execute_tool")),
                kv("gen_ai.tool.name", s(tool)),
                kv("gen_ai.tool.call.arguments", s(arguments)),
            ];
            if let Some(result) = results[agent] {
                attributes.push(kv("gen_ai.tool.call.result", s(result)));
            }
            span(
                0x10 + i,
                0x02 + agent as u8,
                &format!("execute_tool {tool}"),
                2_000 + u64::from(i) * 100,
                attributes,
            )
        })
        .collect()
}

fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: vec![kv("service.name", s("multi-agent"))],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Fakes a loop under `trace`: both agents search once per step for the same thing, three
/// times each, results not captured (no progress can show). Per trace that is 6 identical
/// calls (nudge's repeated_call fires at the 5th); per agent 3, below the threshold.
fn fake_loop() -> Vec<Span> {
    let mut spans = agent_spans();
    spans.extend(interleaved_calls(
        "search",
        r#"{"q":"quarterly revenue"}"#,
        [None, None],
    ));
    spans
}

/// Hides a loop under `trace`: each agent polls the same status three times and gets its
/// own unchanging answer (a repeated_result loop per agent). Interleaved, the call's last
/// three results differ, so the trace only shows a repeated_call with progress (`info`).
fn hidden_loop() -> Vec<Span> {
    let mut spans = agent_spans();
    spans.extend(interleaved_calls(
        "fetch_url",
        r#"{"url":"https://status.example/job/42"}"#,
        [Some("pending"), Some("done")],
    ));
    spans
}

/// (run key, profile, call ordinal, pattern, count, severity, completing span id).
type AgentAnswer = (String, String, u64, String, u64, String, u8);

fn agent_answer(
    run: &str,
    call: u64,
    pattern: &str,
    count: u64,
    severity: &str,
    span: u8,
) -> AgentAnswer {
    (
        run.into(),
        "nudge".into(),
        call,
        pattern.into(),
        count,
        severity.into(),
        span,
    )
}

fn answers_of(detections: &[RunDetection]) -> BTreeSet<AgentAnswer> {
    detections
        .iter()
        .map(|d| {
            (
                d.run_key.to_string(),
                d.profile.name.clone(),
                d.detection.call.unwrap() as u64,
                d.detection.pattern.as_str().to_string(),
                d.detection.count as u64,
                d.detection.severity.as_str().to_string(),
                d.span_id[0],
            )
        })
        .collect()
}

fn engine_answers(config: &str, requests: Vec<ExportTraceServiceRequest>) -> BTreeSet<AgentAnswer> {
    let engine = Engine::from_config(&Config::from_toml(config).unwrap()).unwrap();
    let mut all = Vec::new();
    for mut request in requests {
        engine.process(&mut request, std::time::Instant::now());
    }
    for run in [TRACE_KEY, RESEARCHER, WRITER] {
        all.extend(engine.registry.detections(run).unwrap_or_default());
    }
    answers_of(&all)
}

const TRACE_AND_AGENT: &str = "[detection]\nrun_key = \"trace_and_agent\"\n";

fn expected_fake(mode: &str) -> BTreeSet<AgentAnswer> {
    match mode {
        "trace" => [agent_answer(TRACE_KEY, 5, "repeated_call", 5, "warn", 0x14)].into(),
        _ => BTreeSet::new(),
    }
}

fn expected_hidden(mode: &str) -> BTreeSet<AgentAnswer> {
    match mode {
        "trace" => [agent_answer(TRACE_KEY, 5, "repeated_call", 5, "info", 0x14)].into(),
        _ => [
            agent_answer(RESEARCHER, 3, "repeated_result", 3, "warn", 0x14),
            agent_answer(WRITER, 3, "repeated_result", 3, "warn", 0x15),
        ]
        .into(),
    }
}

#[test]
fn interleaved_sub_agents_are_judged_separately_with_trace_and_agent() {
    for (mode, config) in [("trace", ""), ("trace_and_agent", TRACE_AND_AGENT)] {
        assert_eq!(
            engine_answers(config, vec![request(fake_loop())]),
            expected_fake(mode),
            "fake loop, {mode}"
        );
        assert_eq!(
            engine_answers(config, vec![request(hidden_loop())]),
            expected_hidden(mode),
            "hidden loop, {mode}"
        );
    }
    // An explicit `trace` is the default.
    assert_eq!(
        engine_answers(
            "[detection]\nrun_key = \"trace\"\n",
            vec![request(hidden_loop())]
        ),
        expected_hidden("trace")
    );
}

#[test]
fn agents_are_found_whatever_the_arrival_order() {
    let mut calls = hidden_loop();
    let agents: Vec<Span> = calls.drain(..3).collect();
    // The agent spans first, the calls in later requests, one span each: each call finds
    // its agent when it arrives.
    let mut requests = vec![request(agents.clone())];
    requests.extend(calls.iter().map(|c| request(vec![c.clone()])));
    assert_eq!(
        engine_answers(TRACE_AND_AGENT, requests.clone()),
        expected_hidden("trace_and_agent")
    );
    let engine = Engine::from_config(&Config::from_toml(TRACE_AND_AGENT).unwrap()).unwrap();
    for mut r in requests {
        engine.process(&mut r, std::time::Instant::now());
    }
    let run = engine
        .registry
        .run(RESEARCHER)
        .expect("the researcher's run");
    assert_eq!(run.agent_name.as_deref(), Some("researcher"));
    // The calls first, as exporters send them (an agent span ends after its calls): they
    // are placed under the trace alone, then moved to their agents' runs when the agent
    // spans arrive; the trace's own run, emptied, is dropped.
    let mut requests: Vec<_> = calls.iter().map(|c| request(vec![c.clone()])).collect();
    requests.push(request(agents.clone()));
    assert_eq!(
        engine_answers(TRACE_AND_AGENT, requests),
        expected_hidden("trace_and_agent")
    );
    // The late detections are reported by the request that brought the agents.
    let engine = Engine::from_config(&Config::from_toml(TRACE_AND_AGENT).unwrap()).unwrap();
    let now = std::time::Instant::now();
    let first = engine.process(&mut request(calls.clone()), now);
    assert_eq!(answers_of(&first.detections), expected_hidden("trace"));
    let second = engine.process(&mut request(agents), now);
    assert_eq!(
        answers_of(&second.detections),
        expected_hidden("trace_and_agent")
    );
    assert_eq!(
        second.annotated_spans, 0,
        "the completing spans were sent before"
    );
    assert!(engine.registry.detections(TRACE_KEY).is_none());
    // The tool spans name no agent: the runs name the one they inherited.
    let agent_of = |run: &str| engine.registry.run(run).and_then(|r| r.agent_name);
    assert_eq!(agent_of(RESEARCHER).as_deref(), Some("researcher"));
    assert_eq!(agent_of(WRITER).as_deref(), Some("writer-7"));
    // Calls whose agent never arrives stay in the trace's run.
    assert_eq!(
        engine_answers(TRACE_AND_AGENT, vec![request(calls)]),
        expected_hidden("trace")
    );
}

/// `loopwatch scan --config F --format json DIR/` over `spans` written as one `.pb` request.
fn scan_answers(config: &str, spans: Vec<Span>) -> BTreeSet<(u64, String, u64, String, u8)> {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("req-000.pb");
    std::fs::write(&data, request(spans).encode_to_vec()).unwrap();
    scan_json(config, &data)
        .iter()
        .filter(|d| d["profile"] == "nudge")
        .map(|d| {
            (
                d["call"].as_u64().unwrap(),
                d["pattern"].as_str().unwrap().to_string(),
                d["count"].as_u64().unwrap(),
                d["severity"].as_str().unwrap().to_string(),
                hex::decode(d["span_id"].as_str().unwrap()).unwrap()[0],
            )
        })
        .collect()
}

/// The run key is not in scan's output: compare the rest.
fn without_run_key(answers: BTreeSet<AgentAnswer>) -> BTreeSet<(u64, String, u64, String, u8)> {
    answers
        .into_iter()
        .map(|(_, _, call, pattern, count, severity, span)| (call, pattern, count, severity, span))
        .collect()
}

#[test]
fn scan_with_config_keys_runs_by_agent() {
    for (mode, config) in [("trace", ""), ("trace_and_agent", TRACE_AND_AGENT)] {
        assert_eq!(
            scan_answers(config, fake_loop()),
            without_run_key(expected_fake(mode)),
            "scan, fake loop, {mode}"
        );
        assert_eq!(
            scan_answers(config, hidden_loop()),
            without_run_key(expected_hidden(mode)),
            "scan, hidden loop, {mode}"
        );
    }
}

#[test]
fn the_running_server_keys_runs_by_agent() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        for (mode, config) in [("trace", ""), ("trace_and_agent", TRACE_AND_AGENT)] {
            let server = support::server::start_with_toml(config).await;
            // One span per request, each agent span after its calls (as exporters send
            // them: an agent span ends last).
            let mut spans = hidden_loop();
            spans.rotate_left(3);
            let mut fake = fake_loop();
            fake.rotate_left(3);
            for s in &mut fake {
                s.trace_id = vec![0x6b; 16];
            }
            spans.extend(fake);
            let requests: Vec<_> = spans.into_iter().map(|s| request(vec![s])).collect();
            support::server::export_all(server.grpc_addr, &requests).await;
            let mut detections = Vec::new();
            for run in server.engine.registry.runs() {
                detections.extend(
                    server
                        .engine
                        .registry
                        .detections(&run.run_key)
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|d| d.profile.name == "nudge"),
                );
            }
            let fake_trace = hex::encode([0x6b; 16]);
            let mut want = expected_hidden(mode);
            want.extend(expected_fake(mode).into_iter().map(|mut a| {
                a.0 = a.0.replace(TRACE_KEY, &fake_trace);
                a
            }));
            assert_eq!(answers_of(&detections), want, "server, {mode}");
            server.shutdown().await.unwrap();
        }
    });
}

/// `check-config F` fails naming `detection.run_key`.
fn rejected(config: &str, why: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, config).unwrap();
    let out = loopwatch().arg("check-config").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted:\n{config}");
    assert!(
        stderr.contains("detection.run_key") && stderr.contains(why),
        "{config}: {stderr}"
    );
    let err = Config::from_toml(config).expect_err("invalid").to_string();
    assert!(err.contains("detection.run_key"), "{err}");
}

#[test]
fn run_key_settings_are_checked_at_start_up() {
    rejected("[detection]\nrun_key = \"agent\"\n", "trace_and_agent");
    rejected(
        "[detection]\nrun_key = \"attribute\"\n",
        "needs detection.run_key_attribute",
    );
    rejected(
        "[detection]\nrun_key = \"trace_and_agent\"\nrun_key_attribute = \"session.id\"\n",
        "ignores detection.run_key_attribute",
    );
    // As before `run_key` existed: the attribute alone selects it.
    let legacy = Config::from_toml("[detection]\nrun_key_attribute = \"session.id\"\n").unwrap();
    assert_eq!(
        legacy.detection.run_key_mode().unwrap(),
        loopwatch::conventions::run_key::RunKeyMode::Attribute
    );
    let explicit = Config::from_toml(
        "[detection]\nrun_key = \"attribute\"\nrun_key_attribute = \"session.id\"\n",
    )
    .unwrap();
    assert_eq!(
        explicit.detection.run_key_mode().unwrap(),
        loopwatch::conventions::run_key::RunKeyMode::Attribute
    );
    let dir = tempfile::tempdir().unwrap();
    let ok = dir.path().join("ok.toml");
    std::fs::write(&ok, "[detection]\nrun_key = \"trace_and_agent\"\n").unwrap();
    let out = loopwatch().arg("check-config").arg(&ok).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
