//! A sink that is down: publish never blocks, other sinks are unaffected, queued signals
//! are delivered in order once it is back, and overflow drops the oldest (counted).
//!
//! "Down" is a local TCP port with nothing listening; "up" is a proxy started on that
//! port that forwards to the real Redis at 127.0.0.1:6379.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::support::signals::{
    eventually, fast_retry, service_up, signal, unique, Action, REDIS_ADDR, REDIS_URL,
};
use axum::routing::post;
use axum::Router;
use futures::StreamExt;
use loopwatch::signals::{Signal, SignalHub, SignalsConfig, SinkStats};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A port with nothing listening on it (bound then released).
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    listener.local_addr().expect("addr").port()
}

/// Forwards every connection on `port` to the real Redis until aborted.
async fn start_proxy(port: u16) -> JoinHandle<()> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("re-bind the proxy port");
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                if let Ok(mut outbound) = tokio::net::TcpStream::connect(REDIS_ADDR).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    })
}

fn redis_config(port: u16, channel: &str, capacity: usize) -> SignalsConfig {
    let mut config = SignalsConfig::default();
    config.redis.url = Some(format!("redis://127.0.0.1:{port}"));
    config.redis.channel = channel.to_owned();
    config.redis.key_prefix = format!("{channel}:kill:");
    config.redis.queue_capacity = capacity;
    config.retry = fast_retry();
    config
}

fn stats_of(hub: &SignalHub, sink: &str) -> SinkStats {
    hub.stats()
        .into_iter()
        .find(|s| s.sink == sink)
        .expect("sink configured")
}

async fn wait_stats(hub: &SignalHub, sink: &str, done: impl Fn(&SinkStats) -> bool) -> SinkStats {
    let ok = eventually(Duration::from_secs(15), || {
        let result = done(&stats_of(hub, sink));
        async move { result }
    })
    .await;
    let stats = stats_of(hub, sink);
    assert!(ok, "{sink}: condition not reached, stats: {stats:?}");
    stats
}

/// Reads `n` messages from `channel`, then checks that no extra message follows.
async fn expect_on_channel(pubsub: &mut redis::aio::PubSub, expected: &[Signal]) {
    let mut messages = pubsub.on_message();
    for (i, s) in expected.iter().enumerate() {
        let msg = tokio::time::timeout(Duration::from_secs(10), messages.next())
            .await
            .unwrap_or_else(|_| panic!("message {i} within 10s"))
            .expect("pubsub open");
        let payload: String = msg.get_payload().expect("payload");
        assert_eq!(
            payload,
            serde_json::to_string(s).expect("json"),
            "message {i}"
        );
    }
    let extra = tokio::time::timeout(Duration::from_millis(300), messages.next()).await;
    assert!(extra.is_err(), "no duplicate or extra message: {extra:?}");
}

#[tokio::test]
async fn down_sink_delivers_everything_in_order_when_back_and_never_blocks_others() {
    if !service_up(REDIS_ADDR).await {
        return;
    }
    let channel = unique("loopwatch:test:down");
    let client = redis::Client::open(REDIS_URL).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub.subscribe(&channel).await.expect("subscribe");

    // A healthy webhook next to the down Redis.
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&hits);
    let app = Router::new().route(
        "/hook",
        post(move || {
            counter.fetch_add(1, Ordering::SeqCst);
            async { "ok" }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let hook_addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let port = closed_port().await;
    let mut config = redis_config(port, &channel, 1024);
    config.webhook.url = Some(format!("http://{hook_addr}/hook"));
    let hub = SignalHub::start(config);

    const N: u32 = 20;
    let run = unique("run");
    let signals: Vec<Signal> = (1..=N)
        .map(|n| {
            signal(
                &run,
                n,
                if n % 2 == 0 {
                    Action::Kill
                } else {
                    Action::Warn
                },
                Some("svc"),
            )
        })
        .collect();
    let started = Instant::now();
    for s in &signals {
        hub.publish(s.clone());
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_millis(100),
        "publish took {elapsed:?}"
    );

    let webhook = wait_stats(&hub, "webhook", |s| s.delivered == u64::from(N)).await;
    assert_eq!(
        webhook.failed_attempts, 0,
        "webhook unaffected by the down Redis"
    );
    assert_eq!(hits.load(Ordering::SeqCst), N as usize);

    let down = wait_stats(&hub, "redis", |s| s.failed_attempts >= 3).await;
    assert_eq!(down.delivered, 0);
    assert_eq!(
        down.queue_depth,
        u64::from(N),
        "all signals wait (queued or in flight)"
    );

    let proxy = start_proxy(port).await;
    let up = wait_stats(&hub, "redis", |s| s.delivered == u64::from(N)).await;
    assert!(up.failed_attempts >= 3);
    assert_eq!((up.dropped, up.rejected, up.queue_depth), (0, 0, 0));
    expect_on_channel(&mut pubsub, &signals).await;

    hub.shutdown(Duration::from_secs(2)).await;
    proxy.abort();
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    for s in signals.iter().filter(|s| s.action == Action::Kill) {
        let _: i64 = redis::cmd("DEL")
            .arg(format!("{channel}:kill:{}", s.trace_id))
            .query_async(&mut conn)
            .await
            .expect("DEL");
    }
}

#[tokio::test]
async fn overflow_drops_the_oldest_queued_signals_and_counts_them() {
    if !service_up(REDIS_ADDR).await {
        return;
    }
    let channel = unique("loopwatch:test:overflow");
    let client = redis::Client::open(REDIS_URL).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub.subscribe(&channel).await.expect("subscribe");

    let port = closed_port().await;
    let hub = SignalHub::start(redis_config(port, &channel, 4));
    let run = unique("run");
    let signals: Vec<Signal> = (1..=10)
        .map(|n| signal(&run, n, Action::Warn, None))
        .collect();

    // The first signal is being retried (in flight, never dropped) ...
    hub.publish(signals[0].clone());
    wait_stats(&hub, "redis", |s| s.failed_attempts >= 1).await;
    // ... then 9 more arrive for a queue of 4: signals 2..=6 are dropped.
    for s in &signals[1..] {
        hub.publish(s.clone());
    }
    let stats = stats_of(&hub, "redis");
    assert_eq!(stats.dropped, 5);
    assert_eq!(stats.queue_depth, 5, "4 queued + 1 in flight");

    let proxy = start_proxy(port).await;
    let up = wait_stats(&hub, "redis", |s| s.delivered == 5).await;
    assert_eq!((up.dropped, up.queue_depth), (5, 0));
    let kept: Vec<Signal> = [0, 6, 7, 8, 9]
        .iter()
        .map(|&i| signals[i].clone())
        .collect();
    expect_on_channel(&mut pubsub, &kept).await;

    hub.shutdown(Duration::from_secs(2)).await;
    proxy.abort();
}

#[tokio::test]
async fn shutdown_gives_up_on_a_down_sink_at_the_deadline() {
    let port = closed_port().await;
    let hub = SignalHub::start(redis_config(port, &unique("loopwatch:test:deadline"), 16));
    for n in 1..=3 {
        hub.publish(signal("run", n, Action::Warn, None));
    }
    let started = Instant::now();
    hub.shutdown(Duration::from_millis(300)).await;
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_millis(300) && elapsed < Duration::from_secs(2),
        "shutdown took {elapsed:?}"
    );
    let stats = stats_of(&hub, "redis");
    assert_eq!(stats.delivered, 0);
    assert!(stats.failed_attempts >= 1);
    // Publishing after shutdown still never blocks or panics.
    hub.publish(signal("run", 4, Action::Warn, None));
}
