//! Helpers of the tests that drive the whole server in-process: config on port 0, corpus
//! runs over gRPC, the admin API over HTTP and a strict OpenMetrics text parser.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use loopwatch::config::Config;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use prost::Message;

/// Every listener on 127.0.0.1:0, forwarding to `downstream` when given.
pub fn test_config(downstream: Option<SocketAddr>) -> Config {
    let mut config = Config::default();
    config.receiver.grpc_listen = "127.0.0.1:0".parse().unwrap();
    config.receiver.http_listen = "127.0.0.1:0".parse().unwrap();
    config.admin.listen = "127.0.0.1:0".into();
    config.exporter.endpoint = downstream.map(|a| format!("http://{a}"));
    config.shutdown.drain_timeout = Duration::from_secs(5);
    config
}

/// A server configured by the TOML `config`, with every listener of [`test_config`]
/// (port 0, detect-only).
pub async fn start_with_toml(config: &str) -> loopwatch::server::RunningServer {
    let mut cfg = Config::from_toml(config).expect("valid config");
    let listeners = test_config(None);
    cfg.receiver = listeners.receiver;
    cfg.admin = listeners.admin;
    cfg.shutdown = listeners.shutdown;
    loopwatch::server::start(cfg).await.expect("server starts")
}

/// The requests of one corpus run, in arrival order.
pub fn run_requests(run: &str) -> Vec<ExportTraceServiceRequest> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/corpus")
        .join(run);
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().and_then(|e| e.to_str()) == Some("pb"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "{run}: no requests");
    files
        .iter()
        .map(|f| ExportTraceServiceRequest::decode(std::fs::read(f).unwrap().as_slice()).unwrap())
        .collect()
}

pub fn span_count(request: &ExportTraceServiceRequest) -> usize {
    request
        .resource_spans
        .iter()
        .flat_map(|rs| rs.scope_spans.iter())
        .map(|ss| ss.spans.len())
        .sum()
}

/// Lowercase hex trace_id of the first span of a request.
pub fn trace_id_of(request: &ExportTraceServiceRequest) -> String {
    hex::encode(&request.resource_spans[0].scope_spans[0].spans[0].trace_id)
}

/// Replaces every span's trace_id.
pub fn with_trace_id(
    mut request: ExportTraceServiceRequest,
    trace_id: [u8; 16],
) -> ExportTraceServiceRequest {
    for rs in &mut request.resource_spans {
        for ss in &mut rs.scope_spans {
            for span in &mut ss.spans {
                span.trace_id = trace_id.to_vec();
            }
        }
    }
    request
}

/// Sends the requests through OTLP/gRPC, each must be accepted.
pub async fn export_all(grpc: SocketAddr, requests: &[ExportTraceServiceRequest]) {
    let mut client = TraceServiceClient::connect(format!("http://{grpc}"))
        .await
        .expect("connect to the OTLP/gRPC receiver")
        .max_encoding_message_size(64 << 20);
    for request in requests {
        client
            .export(request.clone())
            .await
            .expect("export accepted");
    }
}

/// `GET http://{admin}{path}` → (status, body).
pub async fn get(admin: SocketAddr, path: &str) -> (u16, String) {
    let response = reqwest::get(format!("http://{admin}{path}"))
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    let status = response.status().as_u16();
    (status, response.text().await.expect("body"))
}

/// `GET` a JSON body, asserting 200.
pub async fn get_json(admin: SocketAddr, path: &str) -> serde_json::Value {
    let (status, body) = get(admin, path).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: {e}: {body}"))
}

/// One sample of the exposition: name, labels, value.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed scrape: metric families (name → type) and samples.
#[derive(Debug, Default)]
pub struct Scrape {
    pub types: BTreeMap<String, String>,
    pub samples: Vec<Sample>,
}

impl Scrape {
    /// Sum of the samples named `name` whose labels include all of `labels`.
    pub fn sum(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.samples
            .iter()
            .filter(|s| s.name == name)
            .filter(|s| {
                labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            .sum()
    }

    /// The single sample named `name` with exactly `labels`; panics when absent.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let want: BTreeMap<String, String> = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        self.samples
            .iter()
            .find(|s| s.name == name && s.labels == want)
            .unwrap_or_else(|| panic!("no sample {name}{want:?}"))
            .value
    }

    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }
}

fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Which sample names a family of `kind` may expose.
fn family_of<'a>(types: &'a BTreeMap<String, String>, sample: &str) -> Option<&'a str> {
    types.iter().find_map(|(family, kind)| {
        let suffixes: &[&str] = match kind.as_str() {
            "counter" => &["_total", "_created"],
            "histogram" => &["_bucket", "_count", "_sum", "_created"],
            "gauge" | "unknown" => &[""],
            "info" => &["_info"],
            _ => &[],
        };
        suffixes
            .iter()
            .any(|s| sample == format!("{family}{s}"))
            .then_some(family.as_str())
    })
}

fn parse_labels(text: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    // text starts after '{'; returns the labels and the rest after '}'.
    let mut labels = BTreeMap::new();
    let mut rest = text;
    loop {
        if let Some(after) = rest.strip_prefix('}') {
            return Ok((labels, after));
        }
        let eq = rest.find('=').ok_or("label without '='")?;
        let name = &rest[..eq];
        if !valid_label_name(name) {
            return Err(format!("bad label name {name:?}"));
        }
        let mut chars = rest[eq + 1..].char_indices();
        if chars.next().map(|(_, c)| c) != Some('"') {
            return Err("label value not quoted".into());
        }
        let mut value = String::new();
        let mut end = None;
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next().map(|(_, c)| c) {
                    Some('\\') => value.push('\\'),
                    Some('"') => value.push('"'),
                    Some('n') => value.push('\n'),
                    other => return Err(format!("bad escape {other:?}")),
                },
                '"' => {
                    end = Some(eq + 1 + i + 1);
                    break;
                }
                '\n' => return Err("newline in label value".into()),
                c => value.push(c),
            }
        }
        let end = end.ok_or("unterminated label value")?;
        if labels.insert(name.to_string(), value).is_some() {
            return Err(format!("duplicate label {name}"));
        }
        rest = &rest[end..];
        if let Some(after) = rest.strip_prefix(',') {
            rest = after;
        } else if !rest.starts_with('}') {
            return Err("expected ',' or '}' after a label".into());
        }
    }
}

fn parse_value(text: &str) -> Result<f64, String> {
    match text {
        "+Inf" => Ok(f64::INFINITY),
        "-Inf" => Ok(f64::NEG_INFINITY),
        "NaN" => Ok(f64::NAN),
        t => t.parse::<f64>().map_err(|e| format!("value {t:?}: {e}")),
    }
}

/// Parses the OpenMetrics text exposition strictly: every line is a `# HELP`, `# TYPE`,
/// `# UNIT` or a sample of a declared family; the text ends with `# EOF\n`; no sample
/// (name + labels) appears twice; counters are non-negative; histogram buckets are
/// cumulative and `+Inf` equals `_count`.
pub fn parse_openmetrics(text: &str) -> Result<Scrape, String> {
    let body = text
        .strip_suffix("# EOF\n")
        .ok_or("exposition must end with \"# EOF\\n\"")?;
    let mut scrape = Scrape::default();
    for (n, line) in body.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        if let Some(comment) = line.strip_prefix("# ") {
            let mut parts = comment.splitn(3, ' ');
            let keyword = parts.next().unwrap_or("");
            let family = parts
                .next()
                .ok_or_else(|| at("comment without name".into()))?;
            if !valid_metric_name(family) {
                return Err(at(format!("bad family name {family:?}")));
            }
            match keyword {
                "HELP" | "UNIT" => {}
                "TYPE" => {
                    let kind = parts.next().unwrap_or("");
                    if ![
                        "counter",
                        "gauge",
                        "histogram",
                        "gaugehistogram",
                        "stateset",
                        "info",
                        "summary",
                        "unknown",
                    ]
                    .contains(&kind)
                    {
                        return Err(at(format!("bad type {kind:?}")));
                    }
                    if scrape
                        .types
                        .insert(family.to_string(), kind.to_string())
                        .is_some()
                    {
                        return Err(at(format!("family {family} declared twice")));
                    }
                }
                other => return Err(at(format!("unknown comment {other:?}"))),
            }
            continue;
        }
        let name_end = line
            .find(['{', ' '])
            .ok_or_else(|| at("sample without value".into()))?;
        let name = &line[..name_end];
        if !valid_metric_name(name) {
            return Err(at(format!("bad metric name {name:?}")));
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end + 1..]).map_err(at)?
        } else {
            (BTreeMap::new(), &line[name_end..])
        };
        let rest = rest
            .strip_prefix(' ')
            .ok_or_else(|| at("expected one space before the value".into()))?;
        let mut fields = rest.split(' ');
        let value = parse_value(fields.next().unwrap_or("")).map_err(at)?;
        if let Some(ts) = fields.next() {
            ts.parse::<f64>()
                .map_err(|e| at(format!("timestamp: {e}")))?;
        }
        if fields.next().is_some() {
            return Err(at("trailing fields".into()));
        }
        let family = family_of(&scrape.types, name)
            .ok_or_else(|| at(format!("{name} belongs to no declared family")))?;
        if scrape.types[family] == "counter" && (value.is_nan() || value < 0.0) {
            return Err(at("negative or NaN counter".into()));
        }
        let sample = Sample {
            name: name.to_string(),
            labels,
            value,
        };
        if scrape
            .samples
            .iter()
            .any(|s| s.name == sample.name && s.labels == sample.labels)
        {
            return Err(at("duplicate sample".into()));
        }
        scrape.samples.push(sample);
    }
    for (family, kind) in &scrape.types {
        if kind != "histogram" {
            continue;
        }
        // One series per label set without `le` (a labelled histogram has several).
        let mut series: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
        for s in scrape
            .samples
            .iter()
            .filter(|s| s.name == format!("{family}_bucket"))
        {
            let le = s
                .labels
                .get("le")
                .ok_or(format!("{family}: bucket without le"))?;
            let key: Vec<(String, String)> = s
                .labels
                .iter()
                .filter(|(k, _)| k.as_str() != "le")
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            series
                .entry(key)
                .or_default()
                .push((parse_value(le)?, s.value));
        }
        for (labels, buckets) in &mut series {
            buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
            if buckets.windows(2).any(|w| w[1].1 < w[0].1) {
                return Err(format!("{family}{labels:?}: buckets not cumulative"));
            }
            let count: f64 = scrape
                .samples
                .iter()
                .filter(|s| s.name == format!("{family}_count"))
                .filter(|s| {
                    s.labels.len() == labels.len()
                        && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v))
                })
                .map(|s| s.value)
                .sum();
            match buckets.last() {
                Some((le, v)) if le.is_infinite() && *v == count => {}
                _ => return Err(format!("{family}{labels:?}: +Inf bucket must equal _count")),
            }
        }
    }
    Ok(scrape)
}

/// The `Accept` header of a scrape asking for OpenMetrics, as Prometheus 2.x sends it
/// (`prometheus/prometheus`, `scrape/scrape.go`, `scrapeAcceptHeader`).
pub const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

/// `GET /metrics` with an `Accept` header: status, `Content-Type` and body.
pub async fn get_metrics(admin: SocketAddr, accept: &str) -> (u16, String, String) {
    let response = reqwest::Client::new()
        .get(format!("http://{admin}/metrics"))
        .header("accept", accept)
        .send()
        .await
        .unwrap_or_else(|e| panic!("GET /metrics: {e}"));
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (status, content_type, response.text().await.expect("body"))
}

/// A series' labels without `le`, in name order.
type Labels = Vec<(String, String)>;

/// Scrapes `/metrics` as Prometheus does (OpenMetrics) and parses it, asserting 200 and a
/// valid exposition.
pub async fn scrape(admin: SocketAddr) -> Scrape {
    let (status, content_type, body) = get_metrics(admin, PROMETHEUS_ACCEPT).await;
    assert_eq!(status, 200, "/metrics: {body}");
    assert_eq!(
        content_type,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    parse_openmetrics(&body).unwrap_or_else(|e| panic!("/metrics does not parse: {e}\n{body}"))
}

/// Polls `/metrics` for up to 10 s until the sum of `name` over all its series is `value`
/// (counters the server updates after answering, e.g. from its reporter or forwarder).
pub async fn metric_sum_reaches(admin: SocketAddr, name: &str, value: f64) -> bool {
    eventually(Duration::from_secs(10), || async move {
        scrape(admin).await.sum(name, &[]) == value
    })
    .await
}

/// Polls `check` every 20 ms until it is true or `timeout` passes; returns its last value.
pub async fn eventually<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
