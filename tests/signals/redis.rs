//! Redis sink against the real server at 127.0.0.1:6379: PUBLISH order and exact JSON,
//! the kill flag key with its TTL, no key for warn.

use std::time::Duration;

use crate::support::signals::{
    fast_retry, service_up, signal, unique, Action, REDIS_ADDR, REDIS_URL,
};
use futures::StreamExt;
use loopwatch::signals::{SignalHub, SignalsConfig};

fn config(channel: &str, key_prefix: &str) -> SignalsConfig {
    let mut config = SignalsConfig::default();
    config.redis.url = Some(REDIS_URL.to_owned());
    config.redis.channel = channel.to_owned();
    config.redis.key_prefix = key_prefix.to_owned();
    config.retry = fast_retry();
    config
}

#[tokio::test]
async fn publishes_in_order_with_exact_json_and_sets_kill_flag_only_for_kill() {
    if !service_up(REDIS_ADDR).await {
        return;
    }
    let channel = unique("loopwatch:test:signals");
    let key_prefix = format!("{}:", unique("loopwatch:test:kill"));
    let client = redis::Client::open(REDIS_URL).expect("redis url");
    let mut pubsub = client.get_async_pubsub().await.expect("pubsub connection");
    pubsub.subscribe(&channel).await.expect("subscribe");

    let hub = SignalHub::start(config(&channel, &key_prefix));
    let run = unique("run");
    let signals = vec![
        signal(&run, 1, Action::Warn, Some("checkout")),
        signal(&run, 2, Action::Kill, Some("checkout")),
        signal(&run, 3, Action::Warn, None),
    ];
    for s in &signals {
        hub.publish(s.clone());
    }

    let mut messages = pubsub.on_message();
    for expected in &signals {
        let msg = tokio::time::timeout(Duration::from_secs(5), messages.next())
            .await
            .expect("message within 5s")
            .expect("pubsub stream open");
        assert_eq!(msg.get_channel_name(), channel);
        let payload: String = msg.get_payload().expect("string payload");
        assert_eq!(payload, serde_json::to_string(expected).expect("json"));
    }
    drop(messages);

    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let kill_key = format!("{key_prefix}{}", signals[1].trace_id);
    let flag: Option<String> = redis::cmd("GET")
        .arg(&kill_key)
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(
        flag,
        Some(serde_json::to_string(&signals[1]).expect("json"))
    );
    let ttl: i64 = redis::cmd("TTL")
        .arg(&kill_key)
        .query_async(&mut conn)
        .await
        .expect("TTL");
    assert!(
        ttl > 0 && ttl <= 3600,
        "kill flag TTL {ttl} must be in (0, 3600]"
    );

    for warn in [&signals[0], &signals[2]] {
        let exists: i64 = redis::cmd("EXISTS")
            .arg(format!("{key_prefix}{}", warn.trace_id))
            .query_async(&mut conn)
            .await
            .expect("EXISTS");
        assert_eq!(exists, 0, "warn must not set a kill flag");
    }

    let stats = hub.stats();
    assert_eq!(stats.len(), 1);
    assert_eq!(stats[0].sink, "redis");
    assert_eq!(stats[0].delivered, 3);
    assert_eq!(stats[0].failed_attempts, 0);
    assert_eq!(stats[0].dropped, 0);
    assert_eq!(stats[0].queue_depth, 0);
    hub.shutdown(Duration::from_secs(2)).await;
    let _: i64 = redis::cmd("DEL")
        .arg(&kill_key)
        .query_async(&mut conn)
        .await
        .expect("DEL");
}

#[tokio::test]
async fn kill_ttl_is_configurable() {
    if !service_up(REDIS_ADDR).await {
        return;
    }
    let key_prefix = format!("{}:", unique("loopwatch:test:ttl"));
    let mut config = config(&unique("loopwatch:test:ttl"), &key_prefix);
    config.redis.kill_ttl = Duration::from_secs(30);
    let hub = SignalHub::start(config);
    let kill = signal(&unique("run"), 7, Action::Kill, Some("svc"));
    hub.publish(kill.clone());
    hub.shutdown(Duration::from_secs(5)).await;
    assert_eq!(hub.stats()[0].delivered, 1, "shutdown flushes the queue");

    let client = redis::Client::open(REDIS_URL).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connection");
    let key = format!("{key_prefix}{}", kill.trace_id);
    let ttl: i64 = redis::cmd("TTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("TTL");
    assert!(ttl > 0 && ttl <= 30, "TTL {ttl} must be in (0, 30]");
    let _: i64 = redis::cmd("DEL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("DEL");
}
