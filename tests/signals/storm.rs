//! Attack suite, signals that keep up (issue 31 items 4 and 6): a storm of 10 000 runs
//! looping at once through the real binary delivers every kill to the real Redis
//! (127.0.0.1:6379: one `loopwatch:kill:<trace>` flag per run) and to the real NATS
//! JetStream (127.0.0.1:4222: one message per run on the kill subject), with no signal
//! dropped. The runs advance together: call k of every run is sent before call k+1 of
//! any, so the 10 000 kills (and 10 000 warnings) are detected in one burst, by the last
//! round's 10 requests of 1 000 spans.

use std::time::{Duration, Instant};

use crate::support::attack::{
    cleanup_sinks, metric, redis_keys, service_up, stream_messages, tool_call, unique, Server,
    NATS_ADDR, REDIS_ADDR,
};
use futures::StreamExt;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;

/// Runs looping at once.
const RUNS: u64 = 10_000;
/// Calls per run: the `stop` profile kills at the 10th identical call.
const CALLS: u64 = 10;
/// Runs per request (× one call each).
const RUNS_PER_REQUEST: u64 = 1_000;
/// Requests in flight at once.
const CLIENTS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_storm_of_10000_looping_runs_delivers_every_kill_to_redis_and_nats() {
    if !service_up(REDIS_ADDR).await || !service_up(NATS_ADDR).await {
        return;
    }
    let name = unique("attack");
    let redis_prefix = format!("{name}:kill:");
    let subject_prefix = format!("{name}_signals");
    let stream = name.to_uppercase();
    let config = format!(
        r#"
[signals.redis]
url = "redis://{REDIS_ADDR}"
key_prefix = "{redis_prefix}"
channel = "{name}:signals"
[signals.nats]
url = "nats://{NATS_ADDR}"
subject_prefix = "{subject_prefix}"
stream = "{stream}"
stream_max_age = "10m"
"#
    );
    let server = Server::start(None, &config, &[]);

    // The storm: round k sends call k of every run, 10 requests of 1 000 spans, 8 at once.
    let started = Instant::now();
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(
            TraceServiceClient::connect(format!("http://{}", server.grpc))
                .await
                .unwrap()
                .max_decoding_message_size(64 << 20),
        );
    }
    for call in 0..CALLS {
        let requests: Vec<_> = (0..RUNS / RUNS_PER_REQUEST)
            .map(|r| {
                crate::support::spans::request_of(
                    (r * RUNS_PER_REQUEST..(r + 1) * RUNS_PER_REQUEST)
                        .map(|run| tool_call(run, call))
                        .collect(),
                )
            })
            .collect();
        let mut sent =
            futures::stream::iter(requests.into_iter().enumerate().map(|(i, request)| {
                let mut client = clients[i % CLIENTS].clone();
                async move {
                    // Refusals are retryable: retry until accepted (nothing is dropped silently).
                    loop {
                        match client.export(request.clone()).await {
                            Ok(_) => return,
                            Err(status)
                                if matches!(
                                    status.code(),
                                    tonic::Code::Unavailable | tonic::Code::ResourceExhausted
                                ) =>
                            {
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            Err(status) => panic!("refused for good: {status}"),
                        }
                    }
                }
            }))
            .buffer_unordered(CLIENTS);
        while sent.next().await.is_some() {}
    }
    let sent_in = started.elapsed();

    // Every kill reaches Redis and NATS.
    let redis = redis::Client::open(format!("redis://{REDIS_ADDR}")).unwrap();
    let mut redis = redis.get_multiplexed_async_connection().await.unwrap();
    let nats = async_nats::connect(format!("nats://{NATS_ADDR}"))
        .await
        .unwrap();
    let jetstream = async_nats::jetstream::new(nats);
    let deadline = Instant::now() + Duration::from_secs(60);
    let (mut flags, mut kills) = (0, 0);
    while Instant::now() < deadline {
        flags = redis_keys(&mut redis, &redis_prefix).await;
        kills = stream_messages(&jetstream, &stream, &format!("{subject_prefix}.kill.>")).await;
        if flags >= RUNS && kills >= RUNS {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let delivered_in = started.elapsed();
    let admin = &server.admin;
    let dropped = |sink: &str, action: &str| {
        format!("loopwatch_signals_dropped_total{{sink=\"{sink}\",action=\"{action}\"}}")
    };
    let figures = (
        metric(admin, &dropped("redis", "kill")).await,
        metric(admin, &dropped("nats", "kill")).await,
        metric(admin, &dropped("redis", "warn")).await,
        metric(admin, &dropped("nats", "warn")).await,
        metric(
            admin,
            "loopwatch_signals_total{sink=\"redis\",outcome=\"delivered\"}",
        )
        .await,
        metric(
            admin,
            "loopwatch_signals_total{sink=\"nats\",outcome=\"delivered\"}",
        )
        .await,
    );
    println!(
        "ATTACK signal-storm runs={RUNS} redis_kill_flags={flags} nats_kills={kills} \
         dropped(redis kill, nats kill, redis warn, nats warn)=({}, {}, {}, {}) \
         delivered(redis, nats)=({}, {}) sent_in={sent_in:?} all_delivered_in={delivered_in:?} peak_rss_mib={}",
        figures.0, figures.1, figures.2, figures.3, figures.4, figures.5,
        server.peak_rss() >> 20
    );
    cleanup_sinks(&mut redis, &redis_prefix, &jetstream, &stream).await;
    assert_eq!(flags, RUNS, "a kill flag per run in Redis");
    assert_eq!(kills, RUNS, "a kill per run in JetStream");
    assert_eq!((figures.0, figures.1), (0.0, 0.0), "no kill dropped");
    assert_eq!(
        (figures.2, figures.3),
        (0.0, 0.0),
        "no warning dropped either"
    );
}
