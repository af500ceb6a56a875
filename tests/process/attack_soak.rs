//! Attack suite, soak (issue 31 item 6): the real binary, in a 512 MiB memory cgroup with
//! `limits.memory_mib = 409` (or `/proc` where no cgroup can be made), signalling to the
//! real Redis and NATS JetStream, forwarding to a downstream that flaps, under ordinary
//! and hostile clients at once for `LOOPWATCH_SOAK_SECS` seconds (45 by default; the long
//! form is `LOOPWATCH_SOAK_SECS=600`, docs/delivery.md).
//!
//! Ordinary clients (2 over gRPC, 2 over OTLP/HTTP) send one run of 10 tool calls per
//! request, every other run a loop (the same call 10 times), retrying retryable refusals as
//! an OTLP exporter does. Hostile clients meanwhile: requests of one span with 1 000 000
//! empty attributes (the decoded-cost bomb), waves of 100 HTTP/2 streams and 50 HTTP/1.1
//! bodies that send one byte and stall, requests holding a span nested past the decoder's
//! limit beside good spans, 80 idle admin connections. The downstream refuses every export
//! for 2 s and stalls every export for 2 s out of each 15 s.
//!
//! Held: the process alive throughout and never OOM-killed, peak RSS under 409 MiB,
//! `/healthz` answered within 2 s on every probe, every acknowledged good span at the
//! downstream (counted by trace and span id), one kill per looping run in Redis and
//! JetStream and in `loopwatch_kills_total`, two warnings per looping run and nothing for
//! the others, each stalled stream and body answered retryably (cut by the minimum body
//! rate, or refused while the bombs hold the decoded-bytes budget), each bad span rejected
//! alone, and every ordinary request accepted within 5 s, retries included (issue 31's
//! target; the figure is printed, with the receivers' refusals by reason).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::attack::{
    cleanup_sinks, empty_attributes_request, export_retrying, post_until_accepted, redis_keys,
    service_up, stream_messages, unique, Server, ACCEPTED_BOMB_ATTRIBUTES, NATS_ADDR, REDIS_ADDR,
};
use crate::support::cgroup::MemoryMeter;
use crate::support::hostile::{healthz_in, http_status, stalled_http, stalled_streams};
use crate::support::serve_process::scrape;
use crate::support::span_sink::{SinkMode, SpanKey, SpanSink};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;

use super::attack_soak_clients::{partial_request, Figures, GoodClient};

/// The memory limit, MiB, and the cgroup's (80 %: loopwatch's default share of it).
const MEMORY_MIB: u64 = 409;
const CGROUP_MIB: u64 = 512;

/// The soak's length: `LOOPWATCH_SOAK_SECS`, 45 s by default.
fn soak_length() -> Duration {
    let secs = std::env::var("LOOPWATCH_SOAK_SECS")
        .ok()
        .map(|v| v.parse().expect("LOOPWATCH_SOAK_SECS: whole seconds"))
        .unwrap_or(45);
    Duration::from_secs(secs)
}

/// The sum of the `/metrics` samples of `name` (its `_created` and other families aside)
/// whose labels contain `label` (e.g. `severity="kill"`, or "" for all).
async fn metric_sum(admin: &str, name: &str, label: &str) -> f64 {
    scrape(admin)
        .await
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| l.contains(label))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .fold(0.0, |sum, v| sum + v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mixed_good_and_hostile_clients_for_the_soak_length_lose_nothing() {
    if !service_up(REDIS_ADDR).await || !service_up(NATS_ADDR).await {
        return;
    }
    let length = soak_length();
    let _alone = crate::support::attack::CPU_HEAVY.lock().await;
    let name = unique("soak");
    let redis_prefix = format!("{name}:kill:");
    let subject_prefix = format!("{name}_signals");
    let stream = name.to_uppercase();
    let config = format!(
        r#"
[limits]
memory_mib = {MEMORY_MIB}
[signals.redis]
url = "redis://{REDIS_ADDR}"
key_prefix = "{redis_prefix}"
channel = "{name}:signals"
[signals.nats]
url = "nats://{NATS_ADDR}"
subject_prefix = "{subject_prefix}"
stream = "{stream}"
stream_max_age = "2h"
"#
    );
    // (The stream keeps kills 2 h: the long form's first kills must not age out before they
    // are counted.)
    // The downstream decodes on threads of its own: its bombs must not delay the probes.
    let (sink, addr, _sink_runtime) = SpanSink::start_apart().await;
    let meter = MemoryMeter::new("attack_soak", CGROUP_MIB << 20);
    let mut server = Server::start_in(meter.cgroup(), Some(addr), &config, &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let figures = Arc::new(Figures::default());
    let started = Instant::now();

    // Ordinary clients: 2 over gRPC, 2 over OTLP/HTTP.
    let mut good = Vec::new();
    for client in 0..4u64 {
        let grpc = client % 2 == 0;
        let target = if grpc {
            server.grpc.clone()
        } else {
            server.http.clone()
        };
        let (stop, figures, sink) = (stop.clone(), figures.clone(), sink.clone());
        good.push(tokio::spawn(async move {
            GoodClient::new(client, grpc, &target)
                .await
                .run(&stop, &figures, &sink)
                .await
        }));
    }

    // Hostile clients.
    let mut hostile = Vec::new();
    for _ in 0..4 {
        let (http, stop, figures) = (server.http.clone(), stop.clone(), figures.clone());
        hostile.push(tokio::spawn(async move {
            let bomb = empty_attributes_request(ACCEPTED_BOMB_ATTRIBUTES);
            while !stop.load(Ordering::Relaxed) {
                let refused =
                    post_until_accepted(&http, bomb.clone(), Duration::from_secs(120)).await;
                figures.add(&figures.bombs_acknowledged, 1);
                figures.add(&figures.bomb_refusals, u64::from(refused));
            }
        }));
    }
    {
        let (grpc, stop, figures) = (server.grpc.clone(), stop.clone(), figures.clone());
        hostile.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let waits = stalled_streams(&grpc, 100).await;
                for wait in waits {
                    let code = tokio::time::timeout(Duration::from_secs(20), wait)
                        .await
                        .ok()
                        .and_then(Result::ok)
                        .flatten();
                    figures.count_stalled_grpc(code);
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }));
    }
    {
        let (http, stop, figures) = (server.http.clone(), stop.clone(), figures.clone());
        hostile.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                for tcp in stalled_http(&http, 50).await {
                    let code = http_status(tcp, Duration::from_secs(20)).await;
                    figures.count_stalled_http(code);
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }));
    }
    {
        let (grpc, stop, figures) = (server.grpc.clone(), stop.clone(), figures.clone());
        hostile.push(tokio::spawn(async move {
            let mut client = TraceServiceClient::connect(format!("http://{grpc}"))
                .await
                .unwrap();
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let (request, good) = partial_request(n);
                let (response, _) =
                    export_retrying(&mut client, &request, Duration::from_secs(120)).await;
                let rejected = response.partial_success.map(|p| p.rejected_spans);
                assert_eq!(rejected, Some(1), "the bad span alone is rejected");
                figures.acknowledge(good);
                figures.add(&figures.partial_requests, 1);
                n += 1;
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }));
    }
    let mut idle_admin = Vec::new();
    for _ in 0..80 {
        idle_admin.push(tokio::net::TcpStream::connect(&server.admin).await.unwrap());
    }

    // Meanwhile: liveness probed every 500 ms, the process watched, the downstream flapping.
    let (mut probes, mut healthz_max) = (0u32, Duration::ZERO);
    while started.elapsed() < length {
        assert!(server.alive(), "died {:?} into the soak", started.elapsed());
        let healthz = healthz_in(&server.admin).await;
        assert!(
            healthz < Duration::from_secs(2),
            "/healthz answered in {healthz:?} {:?} into the soak",
            started.elapsed()
        );
        probes += 1;
        healthz_max = healthz_max.max(healthz);
        sink.set_mode(match started.elapsed().as_secs() % 15 {
            11..=12 => SinkMode::Refusing,
            13..=14 => SinkMode::Stalled,
            _ => SinkMode::Up,
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    sink.set_mode(SinkMode::Up);
    stop.store(true, Ordering::Relaxed);
    for task in good.into_iter().chain(hostile) {
        task.await.expect("a client failed");
    }
    let clients_done_in = started.elapsed();
    drop(idle_admin);
    assert!(server.alive(), "died at the end of the soak");

    // Every acknowledged good span arrives.
    let acknowledged = figures.acknowledged();
    let missing = sink
        .wait_for(acknowledged.iter(), Duration::from_secs(120))
        .await;
    let bomb_key: SpanKey = (vec![0x61; 16], vec![0x62; 8]);
    let bombs = figures.get(&figures.bombs_acknowledged);
    let wait_bombs = Instant::now() + Duration::from_secs(120);
    while u64::from(sink.count(&bomb_key)) < bombs && Instant::now() < wait_bombs {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let bomb_arrivals = u64::from(sink.count(&bomb_key));
    // One kill per looping run in Redis and JetStream.
    let loops = figures.get(&figures.loop_runs);
    let redis = redis::Client::open(format!("redis://{REDIS_ADDR}")).unwrap();
    let mut redis = redis.get_multiplexed_async_connection().await.unwrap();
    let jetstream = async_nats::jetstream::new(
        async_nats::connect(format!("nats://{NATS_ADDR}"))
            .await
            .unwrap(),
    );
    let kill_subjects = format!("{subject_prefix}.kill.>");
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut flags, mut nats_kills) = (0, 0);
    while Instant::now() < deadline {
        flags = redis_keys(&mut redis, &redis_prefix).await;
        nats_kills = stream_messages(&jetstream, &stream, &kill_subjects).await;
        if flags >= loops && nats_kills >= loops {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let admin = &server.admin;
    let kills = metric_sum(admin, "loopwatch_kills_total", "").await;
    let warns = metric_sum(admin, "loopwatch_detections_total", "severity=\"warn\"").await;
    let infos = metric_sum(admin, "loopwatch_detections_total", "severity=\"info\"").await;
    let signals_dropped = metric_sum(admin, "loopwatch_signals_dropped_total", "").await;
    let (distinct, arrivals) = sink.totals();
    let refusals: Vec<String> = scrape(admin)
        .await
        .lines()
        .filter(|l| l.starts_with("loopwatch_requests_rejected_total{") && !l.ends_with(" 0"))
        .map(|l| {
            l.trim_start_matches("loopwatch_requests_rejected_total")
                .to_owned()
        })
        .collect();
    println!("ATTACK soak refusals by reason: {}", refusals.join(" "));
    println!(
        "ATTACK soak secs={} clients_done_in={clients_done_in:?} good_requests(grpc, http)=({}, {}) \
         good_spans_acknowledged={} lost={} good_refusals={} good_max_latency={:?} (downstream up throughout: {:?}) \
         healthz_probes={probes} healthz_max={healthz_max:?} bombs_acknowledged={bombs} bomb_refusals={} \
         bomb_arrivals={bomb_arrivals} stalled_grpc_codes={:?} stalled_http_codes={:?} partial_requests={} \
         admin_idle=80 downstream_refused_exports={} sink_spans(distinct, arrivals)=({distinct}, {arrivals}) \
         loop_runs={loops} other_runs={} kills={kills} redis_kill_flags={flags} nats_kills={nats_kills} \
         warns={warns} infos={infos} signals_dropped={signals_dropped} {} alive={}",
        length.as_secs(),
        figures.get(&figures.grpc_requests),
        figures.get(&figures.http_requests),
        acknowledged.len(),
        missing.len(),
        figures.get(&figures.good_refusals),
        figures.max_latency(),
        figures.max_latency_sink_up(),
        figures.get(&figures.bomb_refusals),
        figures.stalled_grpc(),
        figures.stalled_http(),
        figures.get(&figures.partial_requests),
        sink.refused(),
        figures.get(&figures.other_runs),
        meter.summary(server.peak_rss()),
        server.alive(),
    );
    cleanup_sinks(&mut redis, &redis_prefix, &jetstream, &stream).await;
    assert!(server.alive());
    assert_eq!(meter.oom_kills(), 0, "OOM-killed in its cgroup");
    assert!(
        server.peak_rss() < MEMORY_MIB << 20,
        "peak RSS {} MiB over the limit",
        server.peak_rss() >> 20
    );
    assert!(
        missing.is_empty(),
        "acknowledged spans lost: {}",
        missing.len()
    );
    assert!(
        bomb_arrivals >= bombs,
        "acknowledged bombs lost: {bomb_arrivals} of {bombs} arrived"
    );
    assert!(loops > 0 && bombs > 0, "the soak ran both kinds of client");
    assert_eq!(flags, loops, "a Redis kill flag per looping run");
    assert_eq!(nats_kills, loops, "a JetStream kill per looping run");
    assert_eq!(kills, loops as f64, "loopwatch_kills_total");
    assert_eq!(warns, 2.0 * loops as f64, "two warnings per looping run");
    assert_eq!(infos, 0.0);
    assert_eq!(signals_dropped, 0.0);
    // Issue 31's target, retries included. Measured (docs/delivery.md): at most 1 s over
    // 600 s at machine load average 10.
    assert!(
        figures.max_latency() < Duration::from_secs(5),
        "an ordinary request waited {:?}",
        figures.max_latency()
    );
    let (grpc_codes, http_codes) = (figures.stalled_grpc(), figures.stalled_http());
    // Cut by the minimum body rate (UNAVAILABLE), or refused at once while the bombs hold
    // the decoded-bytes budget (RESOURCE_EXHAUSTED): retryable either way, and answered.
    assert!(
        grpc_codes.keys().all(|c| matches!(c, Some(14 | 8))),
        "every stalled stream answered retryably: {grpc_codes:?}"
    );
    assert!(
        http_codes
            .keys()
            .all(|c| matches!(c.as_deref(), Some("503" | "429"))),
        "every stalled body answered retryably: {http_codes:?}"
    );
}
