//! The fleet aggregates through the running server: after the corpus goes in, `/v1/summary`
//! → `fleet` (last window, per-minute buckets, kills by reason) and the
//! `loopwatch_runs_started_total` / `loopwatch_loop_runs_total` / `loopwatch_kills_total`
//! / `loopwatch_loop_detections_total` metrics agree with the runs and detections the
//! server reports in `/v1/runs`.

use crate::support;

use std::collections::BTreeMap;

use crate::support::server::{get_json, scrape};
use serde_json::Value;

fn looping(run: &Value) -> bool {
    run["detections"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d["severity"] != "info")
}

#[tokio::test(flavor = "multi_thread")]
async fn fleet_view_counts_the_corpus_runs_loops_and_kills() {
    let (server, _downstream) = support::corpus_server::start().await;
    support::corpus_server::feed_corpus(&server).await;
    let admin = server.admin_addr.unwrap();

    // What the server holds, run by run.
    let runs = get_json(admin, "/v1/runs?limit=100000").await;
    let runs = runs["data"].as_array().unwrap().clone();
    assert!(runs.len() > 10, "corpus runs: {}", runs.len());
    let mut by_agent: BTreeMap<String, (u64, u64)> = BTreeMap::new();
    let mut kills: BTreeMap<String, u64> = BTreeMap::new();
    for run in &runs {
        let agent = run["agent_name"].as_str().unwrap_or("unknown").to_string();
        let e = by_agent.entry(agent).or_default();
        e.0 += 1;
        e.1 += u64::from(looping(run));
        for d in run["detections"].as_array().unwrap() {
            if d["severity"] == "kill" {
                *kills
                    .entry(d["pattern"].as_str().unwrap().to_string())
                    .or_default() += 1;
            }
        }
    }
    let loop_runs: u64 = by_agent.values().map(|v| v.1).sum();
    assert!(
        loop_runs > 0 && !kills.is_empty(),
        "the corpus has loops and kills"
    );

    let summary = get_json(admin, "/v1/summary").await;
    let fleet = &summary["fleet"];
    assert_eq!(fleet["bucket_seconds"], 60);
    assert_eq!(fleet["window_seconds"], 600);
    let last = &fleet["last_window"];
    assert_eq!(last["runs"], runs.len() as u64);
    assert_eq!(last["loop_runs"], loop_runs);
    let rate = last["loop_rate"].as_f64().unwrap();
    assert!((rate - loop_runs as f64 / runs.len() as f64).abs() < 1e-9);
    for (agent, (n, loops)) in &by_agent {
        assert_eq!(last["by_agent"][agent]["runs"], *n, "{agent}");
        assert_eq!(last["by_agent"][agent]["loop_runs"], *loops, "{agent}");
    }
    assert_eq!(
        last["kills_by_reason"],
        serde_json::to_value(&kills).unwrap()
    );
    assert_eq!(
        fleet["kills_by_reason"],
        serde_json::to_value(&kills).unwrap()
    );
    // Nothing happened before this process started.
    assert_eq!(fleet["previous_window"]["runs"], 0);
    // 60 one-minute buckets, oldest first; their runs add up to the window's.
    let buckets = fleet["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 60);
    let starts: Vec<u64> = buckets
        .iter()
        .map(|b| b["start_unix"].as_u64().unwrap())
        .collect();
    assert!(starts.windows(2).all(|w| w[1] == w[0] + 60));
    let bucket_runs: u64 = buckets.iter().map(|b| b["runs"].as_u64().unwrap()).sum();
    let bucket_kills: u64 = buckets.iter().map(|b| b["kills"].as_u64().unwrap()).sum();
    assert_eq!(bucket_runs, runs.len() as u64);
    assert_eq!(bucket_kills, kills.values().sum::<u64>());

    // The same numbers as Prometheus counters.
    let m = scrape(admin).await;
    assert_eq!(
        m.sum("loopwatch_runs_started_total", &[]),
        runs.len() as f64
    );
    assert_eq!(m.sum("loopwatch_loop_runs_total", &[]), loop_runs as f64);
    for (agent, (n, loops)) in &by_agent {
        let l = [("gen_ai_agent_name", agent.as_str())];
        assert_eq!(m.sum("loopwatch_runs_started_total", &l), *n as f64);
        assert_eq!(m.sum("loopwatch_loop_runs_total", &l), *loops as f64);
    }
    for (pattern, n) in &kills {
        assert_eq!(
            m.sum("loopwatch_kills_total", &[("pattern", pattern)]),
            *n as f64
        );
        assert_eq!(
            m.sum(
                "loopwatch_loop_detections_total",
                &[("pattern", pattern), ("severity", "kill")]
            ),
            *n as f64
        );
    }
    assert_eq!(
        m.sum("loopwatch_loop_detections_total", &[]),
        m.sum("loopwatch_detections_total", &[])
    );
    server.shutdown().await.unwrap();
}
