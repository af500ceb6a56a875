//! Signals through the running server: corpus runs go in over OTLP/gRPC and the signals
//! are read where a runtime reads them: real Redis (SUBSCRIBE, GET of the kill flag), real
//! NATS (subscriber), the gRPC `loopwatch.v1.Signals/Watch` stream on the OTLP port and
//! `GET /v1/signals` on the admin port. Also: per-profile switch, a sink that is down
//! while spans flow, and the detection-to-signal latency on loopback.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::support::downstream::Downstream;
use crate::support::server::*;
use crate::support::signals::{
    fast_retry, service_up, unique, Action, NATS_ADDR, NATS_URL, REDIS_ADDR, REDIS_URL,
};
use futures::StreamExt;
use loopwatch::config::Config;
use loopwatch::signals::grpc::proto::WatchRequest;
use loopwatch::signals::grpc::SignalsClient;
use loopwatch::signals::Signal;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;

const STUCK: &str = "pydantic-ai/v5-default/s1_stuck_repeat";
const SERVICE: &str = "corpus-pydantic-ai";
const KEY: &str = "signals-server-test-key";

/// Unique Redis channel / key prefix and NATS subject prefix / stream of one test.
struct Names {
    channel: String,
    key_prefix: String,
    subject_prefix: String,
    stream: String,
}

impl Names {
    fn new(test: &str) -> Names {
        Names {
            channel: unique(&format!("loopwatch:test:{test}:signals")),
            key_prefix: format!("{}:", unique(&format!("loopwatch:test:{test}:kill"))),
            subject_prefix: format!("loopwatch.test.{}", unique(test)),
            stream: unique(&format!("LOOPWATCH_TEST_{}", test.to_ascii_uppercase())),
        }
    }
}

/// Server with the Redis sink at `redis_url` and, when `nats`, the NATS sink (JetStream).
fn sink_config(
    names: &Names,
    downstream: Option<SocketAddr>,
    redis_url: &str,
    nats: bool,
) -> Config {
    let mut config = test_config(downstream);
    config.detection.fingerprint_key = Some(KEY.into());
    config.signals.retry = fast_retry();
    config.signals.redis.url = Some(redis_url.into());
    config.signals.redis.channel = names.channel.clone();
    config.signals.redis.key_prefix = names.key_prefix.clone();
    if nats {
        config.signals.nats.url = Some(NATS_URL.into());
        config.signals.nats.subject_prefix = names.subject_prefix.clone();
        config.signals.nats.jetstream = true;
        config.signals.nats.stream = names.stream.clone();
    }
    config
}

async fn services_up() -> bool {
    service_up(REDIS_ADDR).await && service_up(NATS_ADDR).await
}

async fn redis() -> redis::aio::MultiplexedConnection {
    redis::Client::open(REDIS_URL)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("redis connection")
}

async fn redis_subscriber(channel: &str) -> impl futures::Stream<Item = redis::Msg> {
    let client = redis::Client::open(REDIS_URL).unwrap();
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub.subscribe(channel).await.expect("subscribe");
    pubsub.into_on_message()
}

async fn redis_get(key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(&mut redis().await)
        .await
        .expect("GET")
}

async fn redis_del(keys: &[String]) {
    if !keys.is_empty() {
        let _: i64 = redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut redis().await)
            .await
            .expect("DEL");
    }
}

async fn delete_stream(name: &str) {
    let client = async_nats::connect(NATS_URL).await.expect("nats");
    let _ = async_nats::jetstream::new(client).delete_stream(name).await;
}

/// Reads `n` messages from `stream` (each within 20 s) and parses them as signals.
async fn take_signals<S, M>(
    stream: &mut S,
    n: usize,
    mut payload: impl FnMut(M) -> Vec<u8>,
) -> Vec<Signal>
where
    S: futures::Stream<Item = M> + Unpin,
{
    let mut out = Vec::new();
    for i in 0..n {
        let msg = tokio::time::timeout(Duration::from_secs(20), stream.next())
            .await
            .unwrap_or_else(|_| panic!("signal {i} of {n} within 20 s"))
            .expect("subscription open");
        out.push(serde_json::from_slice(&payload(msg)).expect("signal JSON"));
    }
    out
}

fn by_key(mut signals: Vec<Signal>) -> Vec<Signal> {
    signals.sort_by(|a, b| (&a.profile, a.occurrence).cmp(&(&b.profile, b.occurrence)));
    signals
}

async fn recent(admin: SocketAddr, trace_id: &str) -> Vec<Signal> {
    let body = get_json(admin, &format!("/v1/signals?trace_id={trace_id}")).await;
    serde_json::from_value(body["data"].clone()).expect("signals")
}

/// The recent signals of `trace_id` once there are at least `count` (or after 5 s, as they
/// are then): the reporter task publishes detections after Export has returned.
async fn recent_at_least(admin: SocketAddr, trace_id: &str, count: usize) -> Vec<Signal> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    loop {
        let signals = recent(admin, trace_id).await;
        if signals.len() >= count || tokio::time::Instant::now() >= deadline {
            return signals;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Tool spans of a run, in start order.
fn tool_spans(requests: &[ExportTraceServiceRequest]) -> Vec<Span> {
    let mut spans: Vec<Span> = requests
        .iter()
        .flat_map(|r| r.resource_spans.iter())
        .flat_map(|rs| rs.scope_spans.iter())
        .flat_map(|ss| ss.spans.iter().cloned())
        .filter(|s| s.name.starts_with("execute_tool"))
        .collect();
    spans.sort_by_key(|s| s.start_time_unix_nano);
    spans
}

/// Waits until the sink's delivered counter reaches `n`; returns the last scrape.
async fn wait_delivered(admin: SocketAddr, sink: &str, n: usize) -> Scrape {
    let ok = eventually(Duration::from_secs(30), || async {
        scrape(admin).await.sum(
            "loopwatch_signals_total",
            &[("sink", sink), ("outcome", "delivered")],
        ) == n as f64
    })
    .await;
    let m = scrape(admin).await;
    assert!(
        ok,
        "{sink}: delivered {n}: {:?}",
        m.samples
            .iter()
            .filter(|s| s.name.starts_with("loopwatch_signal"))
            .collect::<Vec<_>>()
    );
    m
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stuck_run_signals_reach_redis_nats_grpc_and_http() {
    if !services_up().await {
        return;
    }
    let names = Names::new("stuck");
    let requests = run_requests(STUCK);
    let trace_id = trace_id_of(&requests[0]);
    let kill_key = format!("{}{trace_id}", names.key_prefix);
    let mut redis_messages = redis_subscriber(&names.channel).await;
    let nats = async_nats::connect(NATS_URL).await.expect("nats");
    let mut nats_messages = nats
        .subscribe(format!("{}.>", names.subject_prefix))
        .await
        .expect("nats subscribe");
    nats.flush().await.expect("flush");

    let (downstream, downstream_addr) = Downstream::start(false).await;
    let server =
        loopwatch::server::start(sink_config(&names, Some(downstream_addr), REDIS_URL, true))
            .await
            .unwrap();
    let admin = server.admin_addr.unwrap();
    let mut watcher = SignalsClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .expect("connect Signals");
    let mut watch = watcher
        .watch(WatchRequest {
            trace_id: trace_id.clone(),
            ..Default::default()
        })
        .await
        .expect("Watch")
        .into_inner();
    let mut other = watcher
        .watch(WatchRequest {
            trace_id: "ab".repeat(16),
            ..Default::default()
        })
        .await
        .expect("Watch")
        .into_inner();

    export_all(server.grpc_addr, &requests).await;

    // Detection happens before Export returns, publishing just after (the reporter task).
    let signals = by_key(recent_at_least(admin, &trace_id, 3).await);
    let tools = tool_spans(&requests);
    assert_eq!(tools.len(), 6);
    let loops = get_json(admin, &format!("/v1/traces/{trace_id}/loops")).await;
    let short = loops["data"][0]["fingerprint"].as_str().unwrap()[..16].to_string();
    let expected = [
        ("nudge", 1, "warn", 3, 10, 0..3),
        ("nudge", 2, "warn", 3, 10, 3..6),
        ("stop", 1, "kill", 6, 20, 0..6),
    ];
    assert_eq!(signals.len(), expected.len(), "{signals:#?}");
    for (s, (profile, occurrence, action, count, window, members)) in signals.iter().zip(expected) {
        let span_ids: Vec<String> = tools[members.clone()]
            .iter()
            .map(|t| hex::encode(&t.span_id))
            .collect();
        let completing = &tools[members.end - 1];
        assert_eq!(s.schema, "loopwatch.signal.v1");
        assert_eq!((s.profile.as_str(), s.occurrence), (profile, occurrence));
        assert_eq!((s.action.as_str(), s.severity.as_str()), (action, action));
        assert_eq!(
            (s.count, s.window),
            (count, window),
            "{profile} {occurrence}"
        );
        assert_eq!(s.pattern, "repeated_result");
        assert_eq!(s.tool_names[..], vec!["fetch_url".to_string()]);
        assert_eq!(
            (s.trace_id.as_str(), s.run_key.as_str()),
            (trace_id.as_str(), trace_id.as_str())
        );
        assert_eq!(s.service_name.as_deref(), Some(SERVICE));
        assert_eq!(s.span_ids, span_ids, "{profile} {occurrence}");
        assert_eq!(s.first_span_id, span_ids[0]);
        assert_eq!(s.time_unix_nano, completing.end_time_unix_nano);
        assert_eq!(s.fingerprints[..], vec![short.clone()]);
        assert!(s.message.contains("fetch_url"), "{}", s.message);
        assert!(s.id.len() == 32 && s.id.bytes().all(|b| b.is_ascii_hexdigit()));
    }
    assert!(
        signals[0].message.len() > 40,
        "a nudge text: {}",
        signals[0].message
    );
    let ids: HashSet<&str> = signals.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids.len(), 3, "distinct ids");

    // Redis: PUBLISH of each, SET of the kill flag.
    let from_redis = take_signals(&mut redis_messages, 3, |m: redis::Msg| {
        m.get_payload::<Vec<u8>>().unwrap()
    })
    .await;
    assert_eq!(by_key(from_redis), signals);
    let flag: Signal =
        serde_json::from_str(&redis_get(&kill_key).await.expect("kill flag set")).unwrap();
    assert_eq!(flag, signals[2]);
    // NATS: subject per action and service.
    let mut subjects = Vec::new();
    let from_nats = take_signals(&mut nats_messages, 3, |m: async_nats::Message| {
        subjects.push(m.subject.to_string());
        m.payload.to_vec()
    })
    .await;
    assert_eq!(by_key(from_nats), signals);
    subjects.sort();
    let p = &names.subject_prefix;
    assert_eq!(
        subjects,
        vec![
            format!("{p}.kill.{SERVICE}"),
            format!("{p}.warn.{SERVICE}"),
            format!("{p}.warn.{SERVICE}")
        ]
    );
    // gRPC Watch filtered by trace_id, on the OTLP port.
    let mut from_grpc = Vec::new();
    for _ in 0..3 {
        let s = tokio::time::timeout(Duration::from_secs(10), watch.message())
            .await
            .expect("Watch message within 10 s")
            .expect("stream ok")
            .expect("stream open");
        from_grpc.push(Signal::try_from(s).expect("known severity and action"));
    }
    assert_eq!(
        from_grpc
            .iter()
            .filter(|s| s.action == Action::Kill)
            .count(),
        1
    );
    assert_eq!(by_key(from_grpc), signals);
    let nothing = tokio::time::timeout(Duration::from_millis(300), other.message()).await;
    assert!(
        nothing.is_err(),
        "a watcher of another trace gets nothing: {nothing:?}"
    );

    // Exactly these three, delivered once by each sink.
    for sink in ["redis", "nats"] {
        let m = wait_delivered(admin, sink, 3).await;
        assert_eq!(
            m.value(
                "loopwatch_signals_total",
                &[("sink", sink), ("outcome", "failed_attempt")]
            ),
            0.0
        );
        assert_eq!(
            m.value(
                "loopwatch_signals_total",
                &[("sink", sink), ("outcome", "dropped")]
            ),
            0.0
        );
        assert_eq!(
            m.value("loopwatch_signal_queue_depth", &[("sink", sink)]),
            0.0
        );
    }
    let m = scrape(admin).await;
    assert_eq!(
        m.value(
            "loopwatch_signals_published_total",
            &[("profile", "nudge"), ("action", "warn")]
        ),
        2.0
    );
    assert_eq!(
        m.value(
            "loopwatch_signals_published_total",
            &[("profile", "stop"), ("action", "kill")]
        ),
        1.0
    );
    let spans: usize = requests.iter().map(span_count).sum();
    assert_eq!(
        downstream
            .wait_for_spans(spans, Duration::from_secs(10))
            .await,
        spans
    );
    // Open Watch streams end with the server instead of holding its shutdown up.
    tokio::time::timeout(Duration::from_secs(30), server.shutdown())
        .await
        .expect("shutdown not held up by open Watch streams")
        .unwrap();
    for stream in [&mut watch, &mut other] {
        let end = tokio::time::timeout(Duration::from_secs(10), stream.message())
            .await
            .expect("Watch stream ended");
        assert!(matches!(end, Ok(None)), "a clean end of stream: {end:?}");
    }

    // The same run into a new server with the same key: the same ids and fingerprints.
    let mut config = test_config(None);
    config.detection.fingerprint_key = Some(KEY.into());
    let again = loopwatch::server::start(config).await.unwrap();
    export_all(again.grpc_addr, &requests).await;
    // Published by the reporter task just after Export returns: wait for all of them.
    let replayed = recent_at_least(again.admin_addr.unwrap(), &trace_id, signals.len()).await;
    let replayed = by_key(replayed);
    let strip_time = |v: &[Signal]| {
        v.iter()
            .map(|s| {
                (
                    s.id.clone(),
                    s.fingerprints.clone(),
                    s.occurrence,
                    s.profile.clone(),
                )
            })
            .collect::<Vec<_>>()
    };
    assert_eq!(strip_time(&replayed), strip_time(&signals));
    assert_eq!(replayed, signals, "the whole record is reproducible");
    again.shutdown().await.unwrap();

    redis_del(&[kill_key]).await;
    delete_stream(&names.stream).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_never_signals() {
    if !services_up().await {
        return;
    }
    let names = Names::new("progress");
    let server = loopwatch::server::start(sink_config(&names, None, REDIS_URL, false))
        .await
        .unwrap();
    let admin = server.admin_addr.unwrap();
    let requests = run_requests("pydantic-ai/v5-default/s2_poll_progress");
    let trace_id = trace_id_of(&requests[0]);
    export_all(server.grpc_addr, &requests).await;
    let runs = get_json(admin, "/v1/runs").await;
    let run = &runs["data"][0];
    assert_eq!(run["run_key"], trace_id.as_str());
    let severities: Vec<&str> = run["detections"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["severity"].as_str().unwrap())
        .collect();
    assert_eq!(severities, vec!["info"], "progress is detected, as info");
    assert_eq!(recent(admin, &trace_id).await, vec![]);
    let m = scrape(admin).await;
    assert_eq!(m.sum("loopwatch_signals_published_total", &[]), 0.0);
    assert_eq!(m.sum("loopwatch_signals_total", &[("sink", "redis")]), 0.0);
    assert_eq!(
        m.value("loopwatch_signal_queue_depth", &[("sink", "redis")]),
        0.0
    );
    assert_eq!(
        redis_get(&format!("{}{trace_id}", names.key_prefix)).await,
        None
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_can_be_switched_off_per_profile() {
    if !services_up().await {
        return;
    }
    let names = Names::new("switch");
    let mut messages = redis_subscriber(&names.channel).await;
    let mut config = sink_config(&names, None, REDIS_URL, false);
    config.profiles.insert(
        "nudge".into(),
        [("signals".to_string(), false.into())]
            .into_iter()
            .collect(),
    );
    let server = loopwatch::server::start(config).await.unwrap();
    let admin = server.admin_addr.unwrap();
    let requests = run_requests(STUCK);
    let trace_id = trace_id_of(&requests[0]);
    export_all(server.grpc_addr, &requests).await;
    let signals = recent_at_least(admin, &trace_id, 1).await;
    assert_eq!(
        signals
            .iter()
            .map(|s| (s.profile.as_str(), s.action.as_str()))
            .collect::<Vec<_>>(),
        vec![("stop", "kill")]
    );
    let runs = get_json(admin, "/v1/runs").await;
    assert_eq!(
        runs["data"][0]["detections"].as_array().unwrap().len(),
        3,
        "nudge still detects (and annotates), it only does not signal"
    );
    wait_delivered(admin, "redis", 1).await;
    let got = take_signals(&mut messages, 1, |m: redis::Msg| {
        m.get_payload::<Vec<u8>>().unwrap()
    })
    .await;
    assert_eq!(got, signals);
    server.shutdown().await.unwrap();
    redis_del(&[format!("{}{trace_id}", names.key_prefix)]).await;
}

/// A TCP proxy to Redis on a fixed address, closed (connection refused) until opened.
///
/// The port may be briefly held, e.g. by the sink's own reconnect attempts (a connect to a closed
/// loopback port whose ephemeral source port is that port connects to itself), so binding
/// is retried for up to 5 s.
async fn open_proxy(addr: SocketAddr) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => break listener,
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("re-bind proxy port {addr}: {e}; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("re-bind proxy port {addr}: {e}"),
        }
    };
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(REDIS_ADDR).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_sink_that_is_down_delays_nothing_and_catches_up() {
    if !services_up().await {
        return;
    }
    let names = Names::new("down");
    let proxy_addr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let mut messages = redis_subscriber(&names.channel).await;
    let (downstream, downstream_addr) = Downstream::start(false).await;
    let config = sink_config(
        &names,
        Some(downstream_addr),
        &format!("redis://{proxy_addr}"),
        false,
    );
    let server = loopwatch::server::start(config).await.unwrap();
    let admin = server.admin_addr.unwrap();

    let expected: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/corpus/expected.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let mut spans = 0;
    let mut kill_traces = Vec::new();
    let mut n_signals = 0;
    for (run, e) in expected.as_object().unwrap() {
        let requests = run_requests(run);
        spans += requests.iter().map(span_count).sum::<usize>();
        for profile in ["nudge", "stop"] {
            for d in e[profile].as_array().unwrap() {
                match d["severity"].as_str().unwrap() {
                    "info" => {}
                    "kill" => {
                        n_signals += 1;
                        kill_traces.push(trace_id_of(&requests[0]));
                    }
                    _ => n_signals += 1,
                }
            }
        }
        export_all(server.grpc_addr, &requests).await;
    }
    assert_eq!(
        downstream
            .wait_for_spans(spans, Duration::from_secs(30))
            .await,
        spans,
        "every span forwarded while the sink is down"
    );
    // Forwarding finished while the sink has delivered nothing and keeps failing.
    let failing = eventually(Duration::from_secs(10), || async {
        scrape(admin).await.sum(
            "loopwatch_signals_total",
            &[("sink", "redis"), ("outcome", "failed_attempt")],
        ) > 0.0
    })
    .await;
    assert!(failing, "failed attempts counted while down");
    // The downstream records a request before the forwarder counts its answer.
    let forwarded =
        metric_sum_reaches(admin, "loopwatch_spans_forwarded_total", spans as f64).await;
    assert!(
        forwarded,
        "spans forwarded = spans sent while the sink is down"
    );
    let m = scrape(admin).await;
    assert_eq!(
        m.value(
            "loopwatch_signals_total",
            &[("sink", "redis"), ("outcome", "delivered")]
        ),
        0.0
    );
    assert_eq!(
        m.value("loopwatch_signal_queue_depth", &[("sink", "redis")]),
        n_signals as f64
    );
    assert_eq!(
        m.sum("loopwatch_signals_published_total", &[]),
        n_signals as f64
    );

    open_proxy(proxy_addr).await;
    let m = wait_delivered(admin, "redis", n_signals).await;
    assert!(
        m.value(
            "loopwatch_signals_total",
            &[("sink", "redis"), ("outcome", "failed_attempt")]
        ) > 0.0
    );
    assert_eq!(
        m.value(
            "loopwatch_signals_total",
            &[("sink", "redis"), ("outcome", "dropped")]
        ),
        0.0
    );
    assert_eq!(
        m.value("loopwatch_signal_queue_depth", &[("sink", "redis")]),
        0.0
    );
    let got = take_signals(&mut messages, n_signals, |m: redis::Msg| {
        m.get_payload::<Vec<u8>>().unwrap()
    })
    .await;
    let all = get_json(admin, "/v1/signals").await;
    let all: Vec<Signal> = serde_json::from_value(all["data"].clone()).unwrap();
    let ids = |v: &[Signal]| v.iter().map(|s| s.id.clone()).collect::<HashSet<_>>();
    assert_eq!(ids(&got), ids(&all), "every signal delivered once");
    assert_eq!(got.len(), n_signals);
    let mut keys = Vec::new();
    for trace_id in &kill_traces {
        let key = format!("{}{trace_id}", names.key_prefix);
        let flag: Signal =
            serde_json::from_str(&redis_get(&key).await.expect("kill flag")).unwrap();
        assert_eq!(
            (flag.trace_id.as_str(), flag.action.as_str()),
            (trace_id.as_str(), "kill")
        );
        keys.push(key);
    }
    server.shutdown().await.unwrap();
    redis_del(&keys).await;
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn describe(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    eprintln!(
        "signal latency {name}: n={} median={:.2} ms p90={:.2} ms min={:.2} ms max={:.2} ms",
        samples.len(),
        ms(percentile(&samples, 0.5)),
        ms(percentile(&samples, 0.9)),
        ms(samples[0]),
        ms(samples[samples.len() - 1]),
    );
}

/// Time from sending the Export that holds the completing (6th) tool span of
/// `s1_stuck_repeat` to the kill signal being readable: Redis SUBSCRIBE message (the kill
/// flag is SET in the same MULTI, checked with GET) and NATS subscriber receipt.
/// 100 runs, each with a fresh trace id; prints median and p90.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signal_latency_median_of_100() {
    if !services_up().await {
        return;
    }
    let names = Names::new("latency");
    let (tx_redis, mut rx_redis) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let (tx_nats, mut rx_nats) = tokio::sync::mpsc::unbounded_channel::<(String, Instant)>();
    let mut redis_messages = redis_subscriber(&names.channel).await;
    tokio::spawn(async move {
        while let Some(m) = redis_messages.next().await {
            let at = Instant::now();
            if let Ok(s) =
                serde_json::from_slice::<Signal>(&m.get_payload::<Vec<u8>>().unwrap_or_default())
            {
                if s.action == Action::Kill {
                    let _ = tx_redis.send((s.trace_id.to_string(), at));
                }
            }
        }
    });
    let nats = async_nats::connect(NATS_URL).await.expect("nats");
    let mut nats_messages = nats
        .subscribe(format!("{}.kill.>", names.subject_prefix))
        .await
        .expect("subscribe");
    nats.flush().await.expect("flush");
    tokio::spawn(async move {
        while let Some(m) = nats_messages.next().await {
            let at = Instant::now();
            if let Ok(s) = serde_json::from_slice::<Signal>(&m.payload) {
                let _ = tx_nats.send((s.trace_id.to_string(), at));
            }
        }
    });

    let (_downstream, downstream_addr) = Downstream::start(false).await;
    let server =
        loopwatch::server::start(sink_config(&names, Some(downstream_addr), REDIS_URL, true))
            .await
            .unwrap();
    let mut client = TraceServiceClient::connect(format!("http://{}", server.grpc_addr))
        .await
        .unwrap();
    let template = run_requests(STUCK);
    assert_eq!(
        template.len(),
        1,
        "the whole run, completing span included, in one Export"
    );
    let seed: [u8; 8] = rand::random();
    let mut to_redis = Vec::new();
    let mut to_nats = Vec::new();
    let mut keys = Vec::new();
    async fn wait_for(
        rx: &mut tokio::sync::mpsc::UnboundedReceiver<(String, Instant)>,
        trace_id: &str,
    ) -> Option<Instant> {
        loop {
            match tokio::time::timeout(Duration::from_secs(20), rx.recv()).await {
                Ok(Some((t, at))) if t == trace_id => return Some(at),
                Ok(Some(_)) => continue,
                _ => return None,
            }
        }
    }
    for i in 0..100u64 {
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&seed);
        id[8..].copy_from_slice(&i.to_be_bytes());
        let request = with_trace_id(template[0].clone(), id);
        let trace_id = hex::encode(id);
        let sent = Instant::now();
        client.export(request).await.expect("export");
        let redis_at = wait_for(&mut rx_redis, &trace_id).await;
        let nats_at = wait_for(&mut rx_nats, &trace_id).await;
        let key = format!("{}{trace_id}", names.key_prefix);
        assert!(
            redis_get(&key).await.is_some(),
            "run {i}: kill flag readable by GET"
        );
        keys.push(key);
        if let Some(at) = redis_at {
            to_redis.push(at - sent);
        }
        if let Some(at) = nats_at {
            to_nats.push(at - sent);
        }
    }
    assert_eq!(
        (to_redis.len(), to_nats.len()),
        (100, 100),
        "every kill signal arrived"
    );
    describe("redis SUBSCRIBE (kill)", to_redis);
    describe("nats subscriber (kill, JetStream publish)", to_nats);
    server.shutdown().await.unwrap();
    redis_del(&keys).await;
    delete_stream(&names.stream).await;
}
