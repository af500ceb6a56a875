//! Fault suite, signal sink outages (issue 9 item 8): the NATS sink reaches the real
//! server at 127.0.0.1:4222 (the Redis sink 127.0.0.1:6379) through a TCP proxy that is
//! cut (port closed, connections dropped) and restored; the subscriber / consumer talks to
//! the server directly, so it sees exactly what the sink got through. Counted by signal id.
//! (Redis down from the start: tests/signals/down.rs.)
//!
//! - core NATS, down from the start: nothing can be sent, every attempt fails at connect;
//!   once back, every signal is delivered once, in order.
//! - core NATS, cut after the connection was made: the client buffers publishes while it
//!   reconnects and the sink retries a flush that did not complete, so a signal may arrive
//!   twice; none is lost (asserted), duplicates counted.
//! - JetStream, cut after the connection was made: the same, and the stream's duplicate
//!   window (`Nats-Msg-Id` = signal id) keeps exactly one copy of each.
//! - Redis, cut after the connection was made: the connection manager reconnects and the
//!   retried `MULTI`/`EXEC` delivers every signal; a copy may arrive twice (at most one
//!   extra per signal), none is lost.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use crate::support::cut_proxy::CutProxy;
use crate::support::signals::{
    eventually, fast_retry, service_up, signal, unique, Action, NATS_ADDR, NATS_URL, REDIS_ADDR,
    REDIS_URL,
};
use async_nats::jetstream::{self, consumer::pull};
use futures::StreamExt;
use loopwatch::signals::{Signal, SignalHub, SignalsConfig, SinkStats};

/// Signals published during an outage.
const N: u32 = 20;

/// Outage after the connection was made: longer than the sink's 5 s I/O timeout, so the
/// attempt caught by the cut times out and is retried (the path that can duplicate).
const OUTAGE: Duration = Duration::from_secs(6);

/// Time for a client to see its connection closed by the cut proxy (a local TCP close).
const NOTICE: Duration = Duration::from_millis(500);

fn config(proxy: SocketAddr, prefix: &str, stream: Option<&str>) -> SignalsConfig {
    let mut config = SignalsConfig::default();
    config.nats.url = Some(format!("nats://{proxy}"));
    config.nats.subject_prefix = prefix.to_owned();
    config.nats.jetstream = stream.is_some();
    config.nats.stream = stream.unwrap_or("UNUSED").to_owned();
    config.retry = fast_retry();
    config
}

/// The stats of the hub's one sink.
fn sink_stats(hub: &SignalHub) -> SinkStats {
    let mut stats = hub.stats();
    assert_eq!(stats.len(), 1, "{stats:?}");
    stats.remove(0)
}

async fn wait_stats(hub: &SignalHub, done: impl Fn(&SinkStats) -> bool) -> SinkStats {
    let ok = eventually(Duration::from_secs(30), || {
        let result = done(&sink_stats(hub));
        async move { result }
    })
    .await;
    let stats = sink_stats(hub);
    assert!(ok, "condition not reached, stats: {stats:?}");
    stats
}

fn signals(run: &str, from: u32, n: u32) -> Vec<Signal> {
    (from..from + n)
        .map(|i| {
            let action = if i % 3 == 0 {
                Action::Kill
            } else {
                Action::Warn
            };
            signal(run, i, action, Some("svc"))
        })
        .collect()
}

/// Signal id → times received, from `messages` until `expected` distinct ids arrived and
/// 500 ms passed without another message (to count late duplicates).
async fn collect<S>(messages: &mut S, expected: usize) -> (Vec<String>, HashMap<String, u32>)
where
    S: futures::Stream<Item = Signal> + Unpin,
{
    let mut order = Vec::new();
    let mut seen: HashMap<String, u32> = HashMap::new();
    loop {
        let wait = if seen.len() < expected {
            Duration::from_secs(30)
        } else {
            Duration::from_millis(500)
        };
        match tokio::time::timeout(wait, messages.next()).await {
            Ok(Some(signal)) => {
                let count = seen.entry(signal.id.to_string()).or_insert(0);
                if *count == 0 {
                    order.push(signal.id.to_string());
                }
                *count += 1;
            }
            Ok(None) => break,
            Err(_) if seen.len() < expected => {
                panic!("only {} of {expected} signals arrived", seen.len())
            }
            Err(_) => break,
        }
    }
    (order, seen)
}

fn print_figures(name: &str, published: &[Signal], seen: &HashMap<String, u32>) {
    let delivered = published
        .iter()
        .filter(|s| seen.contains_key(s.id.as_str()))
        .count();
    let duplicated: u32 = seen.values().map(|n| n - 1).sum();
    println!(
        "FAULT {name} published={} delivered={delivered} lost={} duplicated={duplicated}",
        published.len(),
        published.len() - delivered
    );
}

/// Publishes one signal and waits for its delivery, cuts the proxy, publishes [`N`] more
/// during an [`OUTAGE`] (none may get through), restores it and waits until the sink has
/// delivered all of them with nothing dropped. Returns every signal published, in order.
async fn publish_across_a_cut(hub: &SignalHub, proxy: &mut CutProxy, name: &str) -> Vec<Signal> {
    let run = unique("run");
    let first = signals(&run, 1, 1);
    hub.publish(first[0].clone());
    wait_stats(hub, |s| s.delivered == 1).await;

    proxy.cut().await;
    // A core NATS publish flushed into the socket in the instant before the client reads
    // the proxy's close is gone (core NATS is at-most-once, as documented): the outage
    // starts once the client can have seen the cut.
    tokio::time::sleep(NOTICE).await;
    let during = signals(&run, 2, N);
    for s in &during {
        hub.publish(s.clone());
    }
    tokio::time::sleep(OUTAGE).await;
    let down = sink_stats(hub);
    assert_eq!(down.delivered, 1, "nothing gets through the cut: {down:?}");
    println!("FAULT {name} during_outage={down:?}");
    proxy.restore().await;
    let up = wait_stats(hub, |s| s.delivered == u64::from(N) + 1).await;
    assert_eq!((up.dropped, up.rejected, up.queue_depth), (0, 0, 0));
    first.into_iter().chain(during).collect()
}

/// A core subscriber on the real server (not through the proxy) to `<prefix>.>`.
async fn core_subscriber(prefix: &str) -> impl futures::Stream<Item = Signal> + Unpin {
    let client = async_nats::connect(NATS_URL).await.expect("nats connect");
    let subscriber = client
        .subscribe(format!("{prefix}.>"))
        .await
        .expect("subscribe");
    client.flush().await.expect("flush subscription");
    Box::pin(subscriber.map(move |m| {
        let _keep = &client;
        serde_json::from_slice::<Signal>(&m.payload).expect("signal JSON")
    }))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_nats_down_from_the_start_delivers_every_signal_once_in_order_when_back() {
    if !service_up(NATS_ADDR).await {
        return;
    }
    let target: SocketAddr = NATS_ADDR.parse().unwrap();
    let mut proxy = CutProxy::start_cut(target).await;
    let prefix = format!("loopwatch.test.{}", unique("down"));
    let mut messages = core_subscriber(&prefix).await;
    let hub = SignalHub::start(config(proxy.addr, &prefix, None));
    let published = signals(&unique("run"), 1, N);
    for s in &published {
        hub.publish(s.clone());
    }
    let down = wait_stats(&hub, |s| s.failed_attempts >= 3).await;
    assert_eq!((down.delivered, down.queue_depth), (0, u64::from(N)));

    proxy.restore().await;
    let up = wait_stats(&hub, |s| s.delivered == u64::from(N)).await;
    assert_eq!((up.dropped, up.rejected, up.queue_depth), (0, 0, 0));
    let (order, seen) = collect(&mut messages, N as usize).await;
    print_figures("nats-core-down-from-start", &published, &seen);
    let ids: Vec<String> = published.iter().map(|s| s.id.to_string()).collect();
    assert_eq!(order, ids, "every signal, in order");
    assert!(seen.values().all(|&n| n == 1), "no duplicate: {seen:?}");
    hub.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn core_nats_cut_after_connecting_loses_no_signal() {
    if !service_up(NATS_ADDR).await {
        return;
    }
    let target: SocketAddr = NATS_ADDR.parse().unwrap();
    let mut proxy = CutProxy::start(target).await;
    let prefix = format!("loopwatch.test.{}", unique("cut"));
    let mut messages = core_subscriber(&prefix).await;
    let hub = SignalHub::start(config(proxy.addr, &prefix, None));
    let published = publish_across_a_cut(&hub, &mut proxy, "nats-core-cut-after-connect").await;
    let (_, seen) = collect(&mut messages, N as usize + 1).await;
    print_figures("nats-core-cut-after-connect", &published, &seen);
    for s in &published {
        assert!(seen.contains_key(s.id.as_str()), "lost {}", s.id);
    }
    // at-least-once: at most one extra copy per signal (a buffered publish plus its retry)
    assert!(seen.values().all(|&n| n <= 2), "{seen:?}");
    hub.shutdown(Duration::from_secs(2)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_cut_after_connecting_keeps_each_signal_exactly_once() {
    if !service_up(NATS_ADDR).await {
        return;
    }
    let target: SocketAddr = NATS_ADDR.parse().unwrap();
    let mut proxy = CutProxy::start(target).await;
    let prefix = format!("loopwatch.test.{}", unique("jscut"));
    let stream_name = unique("LOOPWATCH_FAULT");
    let hub = SignalHub::start(config(proxy.addr, &prefix, Some(&stream_name)));
    let published =
        publish_across_a_cut(&hub, &mut proxy, "nats-jetstream-cut-after-connect").await;

    let client = async_nats::connect(NATS_URL).await.expect("nats connect");
    let context = jetstream::new(client);
    let stream = context.get_stream(&stream_name).await.expect("stream");
    let consumer = stream
        .create_consumer(pull::Config {
            deliver_policy: jetstream::consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("consumer");
    let batch = consumer
        .batch()
        .max_messages(2 * (N as usize + 1))
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .expect("batch");
    let mut messages = Box::pin(batch.map(|m| {
        let m = m.expect("message");
        serde_json::from_slice::<Signal>(&m.payload).expect("signal JSON")
    }));
    let (order, seen) = collect(&mut messages, N as usize + 1).await;
    print_figures("nats-jetstream-cut-after-connect", &published, &seen);
    let ids: Vec<String> = published.iter().map(|s| s.id.to_string()).collect();
    assert_eq!(order, ids, "every signal, in order");
    assert!(seen.values().all(|&n| n == 1), "stored once: {seen:?}");
    hub.shutdown(Duration::from_secs(2)).await;
    context
        .delete_stream(&stream_name)
        .await
        .expect("delete test stream");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cut_after_connecting_loses_no_signal() {
    if !service_up(REDIS_ADDR).await {
        return;
    }
    let target: SocketAddr = REDIS_ADDR.parse().unwrap();
    let mut proxy = CutProxy::start(target).await;
    let channel = unique("loopwatch:test:cut");
    let client = redis::Client::open(REDIS_URL).expect("url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub");
    pubsub.subscribe(&channel).await.expect("subscribe");
    let mut messages = Box::pin(pubsub.into_on_message().map(|m| {
        let payload: String = m.get_payload().expect("payload");
        serde_json::from_str::<Signal>(&payload).expect("signal JSON")
    }));
    let mut config = SignalsConfig::default();
    config.redis.url = Some(format!("redis://{}", proxy.addr));
    config.redis.channel = channel.clone();
    config.redis.key_prefix = format!("{channel}:kill:");
    config.retry = fast_retry();
    let hub = SignalHub::start(config);
    let published = publish_across_a_cut(&hub, &mut proxy, "redis-cut-after-connect").await;
    let (_, seen) = collect(&mut messages, N as usize + 1).await;
    print_figures("redis-cut-after-connect", &published, &seen);
    for s in &published {
        assert!(seen.contains_key(s.id.as_str()), "lost {}", s.id);
    }
    assert!(seen.values().all(|&n| n <= 2), "{seen:?}");
    hub.shutdown(Duration::from_secs(2)).await;

    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    for s in published.iter().filter(|s| s.action == Action::Kill) {
        let _: i64 = redis::cmd("DEL")
            .arg(format!("{channel}:kill:{}", s.trace_id))
            .query_async(&mut conn)
            .await
            .expect("DEL");
    }
}
