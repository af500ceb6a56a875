//! `deploy/prometheus/rules.yaml`, its runbooks and `deploy/grafana/loopwatch.json`
//! against the real Prometheus (Debian's `prometheus` and `promtool`): the rules pass
//! `promtool check rules`; a Prometheus started here scrapes a running loopwatch fed with
//! the corpus and loads the rules; then every dashboard expression returns data through
//! the query API with the dashboard's `$service`/`$agent` at All, only the chosen
//! service's series for one service and nothing for an unknown one; every metric an alert
//! reads exists (an alert on a metric loopwatch does not export fails here), every alert
//! expression evaluates, and the sink-failing alert (a webhook sink pointed at a closed
//! port) goes pending. `promtool test rules` runs the rules' unit tests
//! (`deploy/prometheus/rules.test.yaml`, one case or more per alert: down, absent,
//! restarting, spans dropped, requests refused, queue near full, downstream down, sink
//! failing, signals dropped, kill storm, per-service kill-rate spike). Every alert links a
//! runbook page under `docs/runbooks/`, and every dashboard panel uses its variables.

use crate::support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::ops::{repo, run, tool};
use serde_json::Value;

/// Ends the Prometheus child when the test ends, however it ends.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn start_prometheus(binary: &std::path::Path, target: SocketAddr) -> Prometheus {
    let dir = tempfile::tempdir().unwrap();
    let rules = repo().join("deploy/prometheus/rules.yaml");
    let config = format!(
        "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: loopwatch\n    static_configs:\n      - targets: ['{target}']\n",
        rules.display()
    );
    let config_path = dir.path().join("prometheus.yml");
    std::fs::write(&config_path, config).unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
    let child = Command::new(binary)
        .arg(format!("--config.file={}", config_path.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address={addr}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start prometheus");
    Prometheus {
        child,
        addr,
        _dir: dir,
    }
}

/// An instant query's answer, or the transport error (Prometheus still starting).
async fn try_query(prom: SocketAddr, expr: &str) -> Result<Value, reqwest::Error> {
    let url = format!("http://{prom}/api/v1/query");
    reqwest::Client::new()
        .get(url)
        .query(&[("query", expr)])
        .send()
        .await?
        .json()
        .await
}

/// An instant query; panics unless Prometheus answers `success`.
async fn query(prom: SocketAddr, expr: &str) -> Vec<Value> {
    let body = try_query(prom, expr)
        .await
        .unwrap_or_else(|e| panic!("query {expr}: {e}"));
    assert_eq!(body["status"], "success", "{expr}: {body}");
    body["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

async fn wait_for(timeout: Duration, mut check: impl AsyncFnMut() -> bool) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    false
}

/// Grafana's interval variables, as Grafana would fill them for a short range, and the
/// dashboard's `$service` / `$agent` as Grafana sends them (`.*` for All, the value's regex
/// for one).
fn grafana_expr(expr: &str, service: &str, agent: &str) -> String {
    expr.replace("$__rate_interval", "1m")
        .replace("$__interval", "1s")
        .replace("$__range", "5m")
        .replace("$service", service)
        .replace("$agent", agent)
}

/// Metric names an expression reads: `loopwatch_…` (counters as exposed, `_total`),
/// `process_…`, and `up`.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let bytes = expr.as_bytes();
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    for prefix in ["loopwatch_", "process_", "up{"] {
        let mut i = 0;
        while let Some(at) = expr[i..].find(prefix) {
            let start = i + at;
            let mut end = start;
            while end < bytes.len() && word(bytes[end]) {
                end += 1;
            }
            if start == 0 || !word(bytes[start - 1]) {
                names.insert(expr[start..end].to_string());
            }
            i = end.max(start + 1);
        }
    }
    names
}

/// `value` as a PromQL string holding an RE2 regex that matches it literally.
fn regex_escape(value: &str) -> String {
    let mut out = String::new();
    for c in value.chars() {
        if c == '\\' {
            out.push_str("\\\\\\\\");
            continue;
        }
        if ".+*?()|[]{}^$".contains(c) {
            out.push_str("\\\\");
        }
        if c == '"' {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The base of every alert's `runbook_url`: the pages of `docs/runbooks/`.
const RUNBOOK_BASE: &str = "https://github.com/loopwatch/loopwatch/blob/main/docs/runbooks/";

/// The alerting rules of `deploy/prometheus/rules.yaml`, as JSON.
fn alert_rules() -> Vec<Value> {
    let rules = run(Command::new("python3")
        .arg("-c")
        .arg("import json, sys, yaml\nprint(json.dumps(yaml.safe_load(open(sys.argv[1]))))")
        .arg(repo().join("deploy/prometheus/rules.yaml")));
    let rules: Value = serde_json::from_str(&rules).unwrap();
    rules["groups"][0]["rules"].as_array().unwrap().clone()
}

/// Every alert links its own runbook page, and every page has the four parts a person on
/// call reads (meaning, impact, diagnosis, fix), names a metric the alert reads, and is
/// listed in the index; no page is left without its alert.
#[test]
fn every_alert_links_a_runbook_that_explains_it() {
    let dir = repo().join("docs/runbooks");
    let index = std::fs::read_to_string(dir.join("README.md")).unwrap();
    let mut alerts = BTreeSet::new();
    for rule in alert_rules() {
        let alert = rule["alert"].as_str().unwrap();
        assert_eq!(
            rule["annotations"]["runbook_url"],
            format!("{RUNBOOK_BASE}{alert}.md"),
            "{alert}"
        );
        assert!(
            rule["annotations"]["summary"].is_string(),
            "{alert}: summary"
        );
        let page = std::fs::read_to_string(dir.join(format!("{alert}.md")))
            .unwrap_or_else(|e| panic!("docs/runbooks/{alert}.md: {e}"));
        assert!(page.starts_with(&format!("# {alert}\n")), "{alert}: title");
        for part in ["## Meaning", "## Impact", "## Diagnose", "## Fix"] {
            assert!(page.contains(part), "{alert}.md has no {part:?}");
        }
        let names = metric_names(rule["expr"].as_str().unwrap());
        assert!(
            names.iter().any(|n| page.contains(n.trim_end_matches('{'))),
            "{alert}.md names none of {names:?}"
        );
        assert!(
            index.contains(&format!("[{alert}]({alert}.md)")),
            "index: {alert}"
        );
        alerts.insert(format!("{alert}.md"));
    }
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            name == "README.md" || alerts.contains(&name),
            "docs/runbooks/{name} has no alert"
        );
    }
    assert!(alerts.len() >= 12, "{alerts:?}");
}

/// The dashboard's variables (data source, service, agent) are used by every panel, and
/// it links the fleet page.
#[test]
fn dashboard_panels_use_its_variables_and_link_the_fleet_page() {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("deploy/grafana/loopwatch.json")).unwrap(),
    )
    .unwrap();
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    for wanted in ["datasource", "service", "agent", "ui_url"] {
        assert!(
            variables.contains(&wanted),
            "no variable {wanted}: {variables:?}"
        );
    }
    let mut targets = 0;
    for panel in dashboard_panels(&dashboard) {
        assert_eq!(
            panel["datasource"]["uid"], "${datasource}",
            "{}",
            panel["title"]
        );
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            assert!(
                expr.contains("$service") && expr.contains("$agent"),
                "panel {}: {expr} ignores $service or $agent",
                panel["title"]
            );
            assert_eq!(target["datasource"]["uid"], "${datasource}");
            targets += 1;
        }
    }
    assert!(targets >= 20, "{targets}");
    assert!(
        dashboard["links"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["url"]
                .as_str()
                .unwrap()
                .starts_with("${ui_url}/ui?service=")),
        "no link to the fleet page"
    );
}

/// The dashboard's panels with queries (row panels left out).
fn dashboard_panels(dashboard: &Value) -> Vec<&Value> {
    dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] != "row")
        .collect()
}

#[test]
fn alert_rules_pass_their_promtool_unit_tests() {
    let Some(promtool) = tool("promtool", &[], "runs the alert rules' unit tests") else {
        return;
    };
    let tests = repo().join("deploy/prometheus/rules.test.yaml");
    let out = run(Command::new(&promtool).arg("test").arg("rules").arg(&tests));
    assert!(out.contains("SUCCESS"), "{out}");
    // The file holds the case a full queue makes: only the requests counter grows.
    let text = std::fs::read_to_string(&tests).unwrap();
    assert!(
        text.contains(
            r#"loopwatch_requests_rejected_total{instance="lw-0:8787", reason="queue_full"}"#
        ) && text.contains("alertname: LoopwatchRequestsRefused"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn dashboard_and_alerts_query_a_real_prometheus_scraping_loopwatch() {
    let Some(promtool) = tool("promtool", &[], "checks the alert rules") else {
        return;
    };
    let Some(prometheus) = tool("prometheus", &[], "scrapes loopwatch") else {
        return;
    };
    let rules_path = repo().join("deploy/prometheus/rules.yaml");
    let out = run(Command::new(&promtool)
        .arg("check")
        .arg("rules")
        .arg(&rules_path));
    assert!(out.contains("SUCCESS"), "{out}");

    let (server, _downstream) = support::corpus_server::start().await;
    let runs = support::corpus_server::feed_corpus(&server).await;
    let admin = server.admin_addr.unwrap();
    let prom = start_prometheus(&prometheus, admin);

    // Three scrapes at least, so rate() and increase() have samples to work on.
    let scraped = wait_for(Duration::from_secs(60), async || {
        try_query(
            prom.addr,
            "count_over_time(loopwatch_spans_received_total[1m])",
        )
        .await
        .ok()
        .and_then(|body| {
            body["data"]["result"][0]["value"][1]
                .as_str()?
                .parse::<f64>()
                .ok()
        })
        .is_some_and(|n| n >= 3.0)
    })
    .await;
    assert!(scraped, "Prometheus did not scrape loopwatch at {admin}");
    let started = query(prom.addr, "sum(loopwatch_runs_started_total)").await;
    let started: f64 = started[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!(
        started >= runs as f64 / 2.0,
        "runs started: {started}, corpus runs: {runs}"
    );

    // Every dashboard expression returns data for All; for one service, the agent panels
    // show that service only; for a service nobody runs, nothing.
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("deploy/grafana/loopwatch.json")).unwrap(),
    )
    .unwrap();
    // The service with the most kill detections, so its kill panels have data too.
    let services = query(
        prom.addr,
        "topk(1, sum by (service_name) (loopwatch_loop_detections_total{severity=\"kill\"}))",
    )
    .await;
    let service = services[0]["metric"]["service_name"]
        .as_str()
        .unwrap()
        .to_string();
    let one = regex_escape(&service);
    let mut checked = 0;
    for panel in dashboard_panels(&dashboard) {
        for target in panel["targets"].as_array().unwrap() {
            let raw = target["expr"].as_str().unwrap();
            let expr = grafana_expr(raw, ".*", ".*");
            for name in metric_names(&expr) {
                assert!(
                    !query(prom.addr, &format!("count({{__name__=\"{name}\"}})"))
                        .await
                        .is_empty(),
                    "panel {:?}: loopwatch exports no {name}",
                    panel["title"]
                );
            }
            let result = query(prom.addr, &expr).await;
            assert!(
                !result.is_empty(),
                "panel {:?}: {expr} returned no data",
                panel["title"]
            );
            let filtered = query(prom.addr, &grafana_expr(raw, &one, ".*")).await;
            assert!(
                !filtered.is_empty(),
                "panel {:?} for {service}: no data",
                panel["title"]
            );
            for series in &filtered {
                if let Some(s) = series["metric"]["service_name"].as_str() {
                    assert_eq!(s, service, "panel {:?}: {series}", panel["title"]);
                }
            }
            let none = query(prom.addr, &grafana_expr(raw, "no-such-service", ".*")).await;
            assert!(
                none.is_empty(),
                "panel {:?} ignores $service: {none:?}",
                panel["title"]
            );
            checked += 1;
        }
    }
    assert!(checked >= 20, "dashboard expressions checked: {checked}");

    // Every alert reads metrics loopwatch exports, and evaluates.
    let mut alerts = BTreeSet::new();
    for rule in &alert_rules() {
        let alert = rule["alert"].as_str().unwrap();
        let expr = rule["expr"].as_str().unwrap();
        let names = metric_names(expr);
        assert!(!names.is_empty(), "{alert}: reads no loopwatch metric");
        let names: BTreeSet<String> = names
            .into_iter()
            .map(|n| n.trim_end_matches('{').to_string())
            .collect();
        for name in names {
            assert!(
                !query(prom.addr, &format!("count({{__name__=\"{name}\"}})"))
                    .await
                    .is_empty(),
                "alert {alert}: loopwatch exports no {name}"
            );
        }
        query(prom.addr, expr).await;
        alerts.insert(alert.to_string());
    }
    for wanted in [
        "LoopwatchSpansDropped",
        "LoopwatchRequestsRefused",
        "LoopwatchForwardQueueNearFull",
        "LoopwatchDownstreamDown",
        "LoopwatchSignalSinkFailing",
        "LoopwatchKillStorm",
        "LoopwatchRunsEvictedEarly",
        "LoopwatchDown",
        "LoopwatchAbsent",
        "LoopwatchRestarting",
        "LoopwatchSignalsDropped",
        "LoopwatchKillRateSpike",
    ] {
        assert!(alerts.contains(wanted), "no alert {wanted}");
    }

    // Prometheus loaded the rules, and the failing webhook sink makes its alert pending.
    let loaded: Value = reqwest::get(format!("http://{}/api/v1/rules", prom.addr))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let loaded_rules = loaded["data"]["groups"][0]["rules"].as_array().unwrap();
    assert_eq!(loaded_rules.len(), alerts.len());
    assert!(loaded_rules.iter().all(|r| r["health"] == "ok"), "{loaded}");
    let pending = wait_for(Duration::from_secs(30), async || {
        !query(
            prom.addr,
            "ALERTS{alertname=\"LoopwatchSignalSinkFailing\",sink=\"webhook\"}",
        )
        .await
        .is_empty()
    })
    .await;
    assert!(pending, "LoopwatchSignalSinkFailing did not go pending");
    server.shutdown().await.unwrap();
}

/// `/metrics` negotiates its format: OpenMetrics for Prometheus' `Accept` header, the
/// Prometheus text format 0.0.4 otherwise, and that one passes `promtool check metrics`
/// (which reads 0.0.4 only: on the OpenMetrics answer it reported "no help text" for every
/// counter, whose HELP/TYPE lines name the family without `_total`).
#[tokio::test(flavor = "multi_thread")]
async fn metrics_answers_both_formats_and_promtool_accepts_the_text_one() {
    let Some(promtool) = tool("promtool", &[], "checks the text exposition") else {
        return;
    };
    let (server, _downstream) = support::corpus_server::start().await;
    support::corpus_server::feed_corpus(&server).await;
    let admin = server.admin_addr.unwrap();

    let (status, content_type, om) =
        support::server::get_metrics(admin, support::server::PROMETHEUS_ACCEPT).await;
    assert_eq!(status, 200);
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(
        om.contains("\n# TYPE loopwatch_spans_received counter\n"),
        "{om}"
    );
    let om_scrape = support::server::parse_openmetrics(&om).unwrap_or_else(|e| panic!("{e}"));

    for accept in [
        "text/plain;version=0.0.4",
        "text/plain; version=0.0.4; charset=utf-8",
        "*/*",
        "",
    ] {
        let (status, content_type, text) = support::server::get_metrics(admin, accept).await;
        assert_eq!(status, 200, "{accept:?}");
        assert_eq!(
            content_type, "text/plain; version=0.0.4; charset=utf-8",
            "{accept:?}"
        );
        assert!(!text.contains("# EOF"), "{accept:?}: {text}");
        assert!(!text.contains("# UNIT"), "{accept:?}: {text}");
        assert!(!text.contains("_created"), "{accept:?}: {text}");
        for line in [
            "# HELP loopwatch_spans_received_total ",
            "# TYPE loopwatch_spans_received_total counter\n",
            "# TYPE loopwatch_forward_latency_seconds histogram\n",
        ] {
            assert!(text.contains(line), "{accept:?}: no {line:?} in\n{text}");
        }
        // Every counter's metadata names its `_total` sample.
        for (family, kind) in &om_scrape.types {
            if kind == "counter" {
                assert!(
                    text.contains(&format!("# TYPE {family}_total counter\n")),
                    "{family}"
                );
            }
        }
    }

    let (_, _, text) = support::server::get_metrics(admin, "text/plain;version=0.0.4").await;
    let (ok, said) = promtool_check_metrics(&promtool, &text);
    assert!(ok, "promtool check metrics: {said}\n{text}");
    assert_eq!(said.trim(), "", "promtool check metrics found problems");
    // The OpenMetrics answer is what promtool cannot read (the reported problem).
    let (ok, said) = promtool_check_metrics(&promtool, &om);
    assert!(!ok && said.contains("no help text"), "{said}");
    server.shutdown().await.unwrap();
}

/// `promtool check metrics` on `exposition` (stdin): success, and what it printed.
fn promtool_check_metrics(promtool: &std::path::Path, exposition: &str) -> (bool, String) {
    let mut child = Command::new(promtool)
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start promtool");
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().expect("stdin");
        stdin
            .write_all(exposition.as_bytes())
            .expect("write to promtool");
    }
    let out = child.wait_with_output().expect("promtool");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}
