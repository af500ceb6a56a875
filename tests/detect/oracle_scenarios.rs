//! The detector against the reference semantics (`tests/fixtures/oracle/reference.py`):
//! every scripted scenario must give exactly its expected detections for both built-in
//! profiles, and seeded random scenarios must give exactly what the reference prints.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use loopwatch::conventions::event::{CallStatus, Payload};
use loopwatch::detector::{detect_all, Detection, Observation, ProfileSettings};
use loopwatch::fingerprint::{text_fingerprint, Fingerprinter};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

fn oracle_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/oracle")
}

/// A scenario value as the span would carry it: a JSON string is text, anything else is a
/// structured value.
fn payload(value: &Value) -> Payload {
    match value {
        Value::String(s) => Payload::Text(s.clone()),
        other => Payload::Json(other.clone()),
    }
}

/// Observations for a scenario (README: responses with calls → a tool-call response then
/// its calls; other responses → a text response).
fn observations(scenario: &Value, fingerprinter: &Fingerprinter) -> Vec<Observation> {
    let mut out = Vec::new();
    let responses = scenario["responses"].as_array().expect("responses array");
    for response in responses {
        let calls = response.get("calls").and_then(Value::as_array);
        match calls {
            Some(calls) if !calls.is_empty() => {
                out.push(Observation::ToolCallResponse);
                for call in calls {
                    let tool = call["tool"].as_str().expect("tool name");
                    let status = match call.get("error") {
                        None | Some(Value::Null) => CallStatus::Ok,
                        Some(Value::String(message)) => CallStatus::Error {
                            message: message.clone(),
                        },
                        Some(other) => CallStatus::Error {
                            message: other.to_string(),
                        },
                    };
                    let result = call.get("result").map(payload);
                    out.push(Observation::ToolCall {
                        tool_name: tool.into(),
                        call_fingerprint: call
                            .get("args")
                            .map(|args| fingerprinter.call_fingerprint(tool, &payload(args))),
                        result_fingerprint: fingerprinter
                            .result_fingerprint(&status, result.as_ref()),
                    });
                }
            }
            _ => out.push(Observation::TextResponse {
                text_fingerprint: text_fingerprint(
                    response.get("text").and_then(Value::as_str).unwrap_or(""),
                ),
            }),
        }
    }
    out
}

/// A detection in the reference's output shape.
fn reference_shape(d: &Detection) -> Value {
    json!({
        "call": d.call,
        "response": d.response,
        "pattern": d.pattern.as_str(),
        "tools": d.tool_names.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
        "count": d.count,
        "severity": d.severity.as_str(),
    })
}

/// `{"nudge": [...], "stop": [...]}` for a scenario, as `reference.py` prints it.
fn run_profiles(scenario: &Value) -> Value {
    let fingerprinter = Fingerprinter::default();
    let obs = observations(scenario, &fingerprinter);
    let mut out = serde_json::Map::new();
    for settings in [ProfileSettings::nudge(), ProfileSettings::stop()] {
        let name = settings.name.clone();
        let detections = detect_all(&Arc::new(settings), &obs);
        check_members(&detections, &obs);
        out.insert(name, detections.iter().map(reference_shape).collect());
    }
    Value::Object(out)
}

/// Members are ascending observation indices ending at the completing observation.
fn check_members(detections: &[Detection], obs: &[Observation]) {
    for d in detections {
        assert!(d.members.windows(2).all(|w| w[0] < w[1]), "{d:?}");
        let last = *d.members.last().expect("members");
        assert!(last < obs.len());
        match &obs[last] {
            Observation::ToolCall { .. } => assert!(d.call.is_some()),
            Observation::TextResponse { .. } => assert!(d.response.is_some()),
            Observation::ToolCallResponse => panic!("a tool-call response completes nothing"),
            Observation::ToolResult { .. } => panic!("a result span completes nothing"),
            Observation::OuterResponse => panic!("an outer response completes nothing"),
        }
    }
}

#[test]
fn every_scenario_gives_its_expected_detections() {
    let dir = oracle_dir();
    let mut names: Vec<_> = std::fs::read_dir(dir.join("scenarios"))
        .expect("scenarios dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    names.sort();
    assert!(names.len() >= 29, "scenarios missing: {names:?}");
    let mut failures = Vec::new();
    for name in &names {
        let read = |sub: &str| -> Value {
            let text = std::fs::read_to_string(dir.join(sub).join(name)).expect("fixture");
            serde_json::from_str(&text).expect("fixture JSON")
        };
        let got = run_profiles(&read("scenarios"));
        let want = read("expected");
        if got != want {
            failures.push(format!("{name:?}\n  got  {got}\n  want {want}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// A random scenario with small alphabets so loops happen. `changing` picks how results
/// vary: either every call has a result drawn at random, or results may be missing but a
/// captured one is a function of the call (where the reference's `progress` would depend on
/// Python's set iteration order, the two never mix).
fn random_scenario(rng: &mut StdRng) -> Value {
    let tools = ["read_file", "grep", "ls"];
    let texts = ["Done.", "done", "  DONE \n", "Working on it", ""];
    let random_results = [
        json!("r0"),
        json!("r1"),
        json!({"v": 1, "tool_call_id": "call_1"}),
        json!({"v": 1, "tool_call_id": "call_2"}),
        json!("{\"v\": 1}"),
        json!(1),
        json!(1.0),
        json!(null),
        json!([1, 2]),
    ];
    let changing = rng.random_bool(0.5);
    let make_call = |rng: &mut StdRng, tool: usize, arg: u64| -> Value {
        let mut call = serde_json::Map::new();
        call.insert("tool".into(), json!(tools[tool]));
        if rng.random_bool(0.93) {
            let mut args = json!({"path": format!("f{arg}"), "opts": {"n": arg}});
            if rng.random_bool(0.3) {
                args["opts"]["request_id"] = json!(rng.random_range(0..1000));
                args["timestamp"] = json!(rng.random_range(0..1000));
            }
            let args = if rng.random_bool(0.3) {
                json!(args.to_string())
            } else {
                args
            };
            call.insert("args".into(), args);
        }
        if changing {
            if rng.random_bool(0.1) {
                call.insert(
                    "error".into(),
                    json!(["boom", "bang"][rng.random_range(0..2)]),
                );
            } else {
                let i = rng.random_range(0..random_results.len());
                call.insert("result".into(), random_results[i].clone());
            }
        } else if (tool + arg as usize) % 4 == 3 {
            call.insert("error".into(), json!(format!("failed {arg}")));
        } else if rng.random_bool(0.75) {
            call.insert("result".into(), json!(format!("out-{tool}-{arg}")));
        }
        Value::Object(call)
    };
    let mut responses = Vec::new();
    let length = rng.random_range(10..60);
    while responses.len() < length {
        match rng.random_range(0..10) {
            // a loop: a short pattern of calls repeated
            0..=4 => {
                let period = rng.random_range(1..=3);
                let pattern: Vec<(usize, u64)> = (0..period)
                    .map(|_| (rng.random_range(0..tools.len()), rng.random_range(0..3)))
                    .collect();
                for _ in 0..rng.random_range(2..12) {
                    for &(tool, arg) in &pattern {
                        responses.push(json!({"calls": [make_call(rng, tool, arg)]}));
                    }
                }
            }
            // parallel calls in one response
            5 | 6 => {
                let calls: Vec<Value> = (0..rng.random_range(1..4))
                    .map(|_| {
                        let (tool, arg) =
                            (rng.random_range(0..tools.len()), rng.random_range(0..4));
                        make_call(rng, tool, arg)
                    })
                    .collect();
                responses.push(json!({"calls": calls}));
            }
            7 => responses.push(json!({"calls": []})),
            _ => {
                for _ in 0..rng.random_range(1..8) {
                    responses.push(json!({"text": texts[rng.random_range(0..texts.len())]}));
                }
            }
        }
    }
    json!({"description": "random", "responses": responses})
}

/// Runs `reference.py`'s `run` on each scenario in one Python process.
fn reference_answers(scenarios: &[Value]) -> Vec<Value> {
    let dir = tempfile::tempdir().expect("temp dir");
    let input = dir.path().join("scenarios.json");
    std::fs::write(&input, serde_json::to_vec(scenarios).expect("json")).expect("write");
    let script = "import json, sys\n\
        sys.path.insert(0, sys.argv[1])\n\
        import reference\n\
        scns = json.load(open(sys.argv[2]))\n\
        print(json.dumps([{k: reference.run(s, k) for k in reference.PROFILES} for s in scns], ensure_ascii=False))\n";
    let output = Command::new("python3")
        .env("PYTHONHASHSEED", "0")
        .arg("-c")
        .arg(script)
        .arg(oracle_dir())
        .arg(&input)
        .output()
        .expect("python3 must be installed to run the differential test");
    assert!(
        output.status.success(),
        "reference.py failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("reference output JSON")
}

#[test]
fn random_scenarios_agree_with_the_reference() {
    let mut rng = StdRng::seed_from_u64(0x100b_3a7c);
    let scenarios: Vec<Value> = (0..60).map(|_| random_scenario(&mut rng)).collect();
    let want = reference_answers(&scenarios);
    assert_eq!(want.len(), scenarios.len());
    let mut patterns = std::collections::BTreeMap::<String, usize>::new();
    for (i, (scenario, want)) in scenarios.iter().zip(&want).enumerate() {
        let got = run_profiles(scenario);
        assert_eq!(got, *want, "scenario {i}: {scenario}");
        for d in want
            .as_object()
            .into_iter()
            .flat_map(|m| m.values())
            .flat_map(|v| v.as_array().cloned().unwrap_or_default())
        {
            let key = format!(
                "{}/{}",
                d["pattern"].as_str().unwrap_or("?"),
                d["severity"].as_str().unwrap_or("?")
            );
            *patterns.entry(key).or_default() += 1;
        }
    }
    // the generator must actually exercise every pattern and both kinds of severity
    for pattern in [
        "repeated_result",
        "alternating_calls",
        "cycle",
        "repeated_call",
        "repeated_text",
    ] {
        assert!(
            patterns
                .keys()
                .any(|k| k.starts_with(&format!("{pattern}/"))),
            "no {pattern} generated: {patterns:?}"
        );
    }
    assert!(
        patterns.keys().any(|k| k.ends_with("/info")),
        "{patterns:?}"
    );
    assert!(
        patterns.keys().any(|k| k.ends_with("/kill")),
        "{patterns:?}"
    );
}
