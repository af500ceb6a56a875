//! NATS sink against the real server (JetStream enabled) at 127.0.0.1:4222.

use std::time::Duration;

use crate::support::signals::{
    eventually, fast_retry, service_up, signal, unique, Action, NATS_ADDR, NATS_URL,
};
use async_nats::jetstream::{self, consumer::pull};
use futures::StreamExt;
use loopwatch::signals::{Signal, SignalHub, SignalsConfig};

fn config(prefix: &str, jetstream: bool, stream: &str) -> SignalsConfig {
    let mut config = SignalsConfig::default();
    config.nats.url = Some(NATS_URL.to_owned());
    config.nats.subject_prefix = prefix.to_owned();
    config.nats.jetstream = jetstream;
    config.nats.stream = stream.to_owned();
    config.retry = fast_retry();
    config
}

#[tokio::test]
async fn core_subscriber_gets_action_and_sanitized_service_subjects() {
    if !service_up(NATS_ADDR).await {
        return;
    }
    let prefix = format!("loopwatch.test.{}", unique("core"));
    let client = async_nats::connect(NATS_URL).await.expect("nats connect");
    let mut subscriber = client
        .subscribe(format!("{prefix}.>"))
        .await
        .expect("subscribe");
    client.flush().await.expect("flush subscription");

    let hub = SignalHub::start(config(&prefix, false, "UNUSED"));
    let run = unique("run");
    let kill = signal(&run, 1, Action::Kill, Some("billing.agent v2"));
    let warn = signal(&run, 2, Action::Warn, None);
    hub.publish(kill.clone());
    hub.publish(warn.clone());

    let expected = [
        (format!("{prefix}.kill.billing_agent_v2"), kill),
        (format!("{prefix}.warn.unknown"), warn),
    ];
    for (subject, signal) in expected {
        let msg = tokio::time::timeout(Duration::from_secs(5), subscriber.next())
            .await
            .expect("message within 5s")
            .expect("subscription open");
        assert_eq!(msg.subject.as_str(), subject);
        let got: Signal = serde_json::from_slice(&msg.payload).expect("signal JSON");
        assert_eq!(got, signal);
        assert_eq!(
            msg.payload.as_ref(),
            serde_json::to_vec(&signal).expect("json").as_slice()
        );
    }
    hub.shutdown(Duration::from_secs(2)).await;
    let stats = hub.stats();
    assert_eq!((stats[0].sink, stats[0].delivered), ("nats", 2));
}

#[tokio::test]
async fn jetstream_keeps_signals_for_a_consumer_that_comes_later() {
    if !service_up(NATS_ADDR).await {
        return;
    }
    let prefix = format!("loopwatch.test.{}", unique("js"));
    let stream_name = unique("LOOPWATCH_TEST");
    let hub = SignalHub::start(config(&prefix, true, &stream_name));
    let run = unique("run");
    let signals: Vec<Signal> = (1..=3)
        .map(|n| {
            signal(
                &run,
                n,
                if n == 2 { Action::Kill } else { Action::Warn },
                Some("checkout"),
            )
        })
        .collect();
    for s in &signals {
        hub.publish(s.clone());
    }
    // Re-delivery of the same signal (same id) is dropped by the duplicate window.
    hub.publish(signals[0].clone());
    let delivered = eventually(Duration::from_secs(10), || {
        let hub = hub.clone();
        async move { hub.stats()[0].delivered == 4 }
    })
    .await;
    assert!(delivered, "stats: {:?}", hub.stats());

    // Only now does a consumer appear.
    let client = async_nats::connect(NATS_URL).await.expect("nats connect");
    let context = jetstream::new(client);
    let mut stream = context
        .get_stream(&stream_name)
        .await
        .expect("stream created by the sink");
    // Created with the default retention limits, not JetStream's unlimited ones.
    let created = &stream.info().await.expect("stream info").config;
    assert_eq!(
        (created.max_age, created.max_bytes),
        (Duration::from_secs(7 * 24 * 3600), 256 << 20)
    );
    let consumer = stream
        .create_consumer(pull::Config {
            deliver_policy: jetstream::consumer::DeliverPolicy::All,
            ..Default::default()
        })
        .await
        .expect("consumer");
    let mut batch = consumer
        .batch()
        .max_messages(4)
        .expires(Duration::from_secs(2))
        .messages()
        .await
        .expect("batch");
    let mut received = Vec::new();
    while let Some(message) = batch.next().await {
        let message = message.expect("message");
        received.push((
            message.subject.to_string(),
            serde_json::from_slice::<Signal>(&message.payload).expect("signal JSON"),
        ));
        message.ack().await.expect("ack");
    }
    let expected: Vec<(String, Signal)> = signals
        .iter()
        .map(|s| (format!("{prefix}.{}.checkout", s.action), s.clone()))
        .collect();
    assert_eq!(
        received, expected,
        "missed signals, in order, without the duplicate"
    );

    hub.shutdown(Duration::from_secs(2)).await;
    context
        .delete_stream(&stream_name)
        .await
        .expect("delete test stream");
}
