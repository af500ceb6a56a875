//! Loops across agents and money (issue 29 item 6), on recorded OpenAI Agents SDK runs
//! (`tests/fixtures/shapes/openai_agents_otel_handoff_cycle.json`: trace A, a triage agent
//! and a billing agent hand the run back and forth four times; trace B, one handoff) and
//! on recorded-cost model spans (`genai_usage_cost_total.json`): the `delegation_cycle`
//! pattern, the `max_handoffs` budget and the `max_cost_usd` budget, through `loopwatch
//! scan` on OTLP/JSON and protobuf, in any arrival order, and their config errors.

use crate::support;

use crate::support::spans::{fixtures, loopwatch};
use loopwatch::config::Config;
use prost::Message;
use serde_json::Value as Json;

const HANDOFFS: &str = "openai_agents_otel_handoff_cycle.json";
const COST: &str = "genai_usage_cost_total.json";

fn path(file: &str) -> std::path::PathBuf {
    fixtures().join("shapes").join(file)
}

/// (trace prefix, span, profile, pattern, tools, count) of every detection, sorted.
type Row = (String, String, String, String, Vec<String>, u64);

fn rows(detections: &[Json]) -> Vec<Row> {
    let mut out: Vec<Row> = detections
        .iter()
        .map(|d| {
            (
                d["trace_id"].as_str().unwrap()[..4].to_owned(),
                d["span_id"].as_str().unwrap().to_owned(),
                d["profile"].as_str().unwrap().to_owned(),
                d["pattern"].as_str().unwrap().to_owned(),
                d["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_owned())
                    .collect(),
                d["count"].as_u64().unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn cycle_warning() -> Row {
    (
        "a1a1".into(),
        // The third hand-back to the triage agent: its handoff span.
        "a1a1a1a10000001a".into(),
        "nudge".into(),
        "delegation_cycle".into(),
        vec!["Triage Agent".into(), "Billing Agent".into()],
        3,
    )
}

#[test]
fn a_handoff_ping_pong_warns_after_three_round_trips_and_one_handoff_does_not() {
    // Default config: nudge's delegation_cycle is 3, stop's 6 (A goes round 4 times).
    assert_eq!(
        rows(&support::spans::scan_json("", &path(HANDOFFS))),
        vec![cycle_warning()]
    );
    // The same spans as protobuf (the wire reader), one span per request in reverse
    // order (spans re-ordered in flight): the same detection on the same span.
    let request = loopwatch::cli::scan::read_request(&path(HANDOFFS)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let spans = request.resource_spans[0].scope_spans[0].spans.clone();
    for (n, span) in spans.iter().rev().enumerate() {
        let mut one = request.clone();
        one.resource_spans[0].scope_spans[0].spans = vec![span.clone()];
        std::fs::write(
            dir.path().join(format!("req-{n:03}.pb")),
            one.encode_to_vec(),
        )
        .unwrap();
    }
    assert_eq!(
        rows(&support::spans::scan_json("", dir.path())),
        vec![cycle_warning()]
    );
    // Off, and a stricter profile.
    assert_eq!(
        rows(&support::spans::scan_json(
            "[profiles.nudge]\ndelegation_cycle = 0\n",
            &path(HANDOFFS)
        )),
        vec![]
    );
    let strict = rows(&support::spans::scan_json(
        "[profiles.stop]\ndelegation_cycle = 4\n",
        &path(HANDOFFS),
    ));
    assert_eq!(strict.len(), 2);
    assert_eq!(
        (strict[1].1.as_str(), strict[1].2.as_str(), strict[1].5),
        ("a1a1a1a100000022", "stop", 4)
    );
}

#[test]
fn max_handoffs_counts_every_change_of_agent() {
    let config = "[profiles.nudge]\ndelegation_cycle = 0\n[budgets]\nmax_handoffs = 5\n";
    let found = support::spans::scan_json(config, &path(HANDOFFS));
    assert_eq!(
        rows(&found),
        vec![(
            "a1a1".into(),
            "a1a1a1a10000001a".into(),
            "budgets".into(),
            "budget_exceeded".into(),
            vec!["Triage Agent".into()],
            6
        )]
    );
    // Trace B's single handoff stays under a limit of 1.
    let one = "[profiles.nudge]\ndelegation_cycle = 0\n[budgets]\nmax_handoffs = 1\n";
    let traces: Vec<String> = rows(&support::spans::scan_json(one, &path(HANDOFFS)))
        .into_iter()
        .map(|r| r.0)
        .collect();
    assert_eq!(traces, ["a1a1"]);
}

#[test]
fn cost_from_the_price_table_when_spans_record_none() {
    // Each model call is 1200 input + 80 output tokens of gpt-4o-mini: 1200 × 0.15 +
    // 80 × 0.6 = 228 micro-dollars. Trace A makes 10 calls, B 2: a $0.002 limit is passed
    // at A's 9th call ($0.002052).
    let config = "[profiles.nudge]\ndelegation_cycle = 0\n[budgets]\nmax_cost_usd = 0.002\n\
                  [budgets.prices.\"gpt-4o-mini*\"]\ninput_per_mtok = 0.15\noutput_per_mtok = 0.6\n\
                  [budgets.prices.\"gpt-4o*\"]\ninput_per_mtok = 2.5\noutput_per_mtok = 10.0\n";
    let found = support::spans::scan_json(config, &path(HANDOFFS));
    assert_eq!(
        rows(&found),
        vec![(
            "a1a1".into(),
            "a1a1a1a100000025".into(),
            "budgets".into(),
            "budget_exceeded".into(),
            vec![],
            2052
        )]
    );
    // Without a price for the model nothing is spent that loopwatch can see.
    let unpriced = "[profiles.nudge]\ndelegation_cycle = 0\n[budgets]\nmax_cost_usd = 0.002\n";
    assert_eq!(
        rows(&support::spans::scan_json(unpriced, &path(HANDOFFS))),
        vec![]
    );
    // explain says so.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, unpriced).unwrap();
    let out = loopwatch()
        .args(["explain", "--config"])
        .arg(&file)
        .arg(path(HANDOFFS))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("max_cost_usd $0.00/$0.002 (10 model call(s) without a price)"),
        "{text}"
    );
}

#[test]
fn recorded_cost_wins_and_the_reason_names_dollars() {
    // $0.004 per call recorded on the span (its gpt-4o price would say $0.004 too, so the
    // table here is deliberately wrong: the recorded figure must win).
    let config = "[budgets]\nmax_cost_usd = 0.01\n[budgets.prices.\"gpt-4o*\"]\n\
                  input_per_mtok = 1000.0\noutput_per_mtok = 1000.0\n";
    let found = support::spans::scan_json(config, &path(COST));
    assert_eq!(
        rows(&found),
        vec![(
            "a1a1".into(),
            "a1a1a1a100000003".into(),
            "budgets".into(),
            "budget_exceeded".into(),
            vec![],
            12_000
        )]
    );
    // The reason, as `loop.reason` carries it.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.toml");
    std::fs::write(&file, config).unwrap();
    let out = loopwatch()
        .args(["explain", "--config"])
        .arg(&file)
        .arg(path(COST))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("budget max_cost_usd exceeded: $0.012 spent on model calls (limit $0.01)"),
        "{text}"
    );
}

/// `check-config F` fails, naming `key`; so does building the config in-process.
fn rejected(config: &str, key: &str) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.toml");
    std::fs::write(&file, config).unwrap();
    let out = loopwatch().arg("check-config").arg(&file).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "accepted:\n{config}");
    assert!(stderr.contains(key), "{key} not named in: {stderr}");
    let err = Config::from_toml(config).expect_err("invalid").to_string();
    assert!(err.contains(key), "{key} not named in: {err}");
}

#[test]
fn impossible_settings_are_errors_naming_the_key() {
    rejected(
        "[profiles.nudge]\ndelegation_cycle = 1\n",
        "profiles.nudge.delegation_cycle",
    );
    rejected("[budgets]\nmax_cost_usd = -1.0\n", "budgets.max_cost_usd");
    rejected(
        "[budgets.prices.\"gpt-[\"]\ninput_per_mtok = 1.0\n",
        "budgets.prices.\"gpt-[\"",
    );
    rejected(
        "[budgets.prices.\"gpt-4o\"]\noutput_per_mtok = -2.0\n",
        "budgets.prices.\"gpt-4o\".output_per_mtok",
    );
    // Valid: the documented example.
    let ok = "[profiles.nudge]\ndelegation_cycle = 2\n[budgets]\nmax_cost_usd = 5.0\n\
              max_handoffs = 20\n[budgets.prices.\"gpt-4o*\"]\ninput_per_mtok = 2.5\n\
              output_per_mtok = 10.0\n";
    Config::from_toml(ok).expect("valid");
}
