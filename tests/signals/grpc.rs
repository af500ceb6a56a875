//! gRPC `loopwatch.v1.Signals/Watch` served by tonic on port 0, driven by the generated
//! tonic client.

use std::time::{Duration, Instant};

use crate::support::signals::{signal, unique, Action};
use loopwatch::signals::grpc::proto::WatchRequest;
use loopwatch::signals::grpc::SignalsClient;
use loopwatch::signals::{signals_service, Signal, SignalHub};
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Channel, Server};
use tonic::Streaming;

async fn serve(hub: SignalHub) -> SignalsClient<Channel> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = Server::builder()
            .add_service(signals_service(hub))
            .serve_with_incoming(TcpIncoming::from(listener))
            .await;
    });
    SignalsClient::connect(format!("http://{addr}"))
        .await
        .expect("connect")
}

async fn watch(
    client: &mut SignalsClient<Channel>,
    request: WatchRequest,
) -> Streaming<loopwatch::signals::grpc::proto::Signal> {
    let response = client.watch(request).await.expect("watch");
    // The header a client takes as "subscribed" (a refusal is trailers-only, without it).
    assert_eq!(
        response
            .metadata()
            .get(loopwatch::signals::grpc::SUBSCRIBED_HEADER)
            .and_then(|v| v.to_str().ok()),
        Some("1")
    );
    response.into_inner()
}

/// Reads exactly `expected` from `stream`, then checks nothing else arrives.
async fn expect_exactly(
    stream: &mut Streaming<loopwatch::signals::grpc::proto::Signal>,
    expected: &[&Signal],
) {
    for (i, want) in expected.iter().enumerate() {
        let got = tokio::time::timeout(Duration::from_secs(5), stream.message())
            .await
            .unwrap_or_else(|_| panic!("signal {i} within 5s"))
            .expect("stream ok")
            .expect("stream open");
        assert_eq!(
            &Signal::try_from(got).expect("known severity and action"),
            *want,
            "signal {i}"
        );
    }
    let extra = tokio::time::timeout(Duration::from_millis(300), stream.message()).await;
    assert!(extra.is_err(), "unexpected extra signal: {extra:?}");
}

#[tokio::test]
async fn watch_streams_only_signals_matching_the_filters() {
    let hub = SignalHub::without_sinks(64);
    let mut client = serve(hub.clone()).await;
    let run = unique("run");
    let checkout_kill = signal(&run, 1, Action::Kill, Some("checkout"));
    let checkout_warn = signal(&run, 2, Action::Warn, Some("checkout"));
    let billing_kill = signal(&run, 3, Action::Kill, Some("billing"));
    let anonymous_kill = signal(&run, 4, Action::Kill, None);

    let mut by_service_and_action = watch(
        &mut client,
        WatchRequest {
            service_name: "checkout".to_owned(),
            action: "kill".to_owned(),
            ..Default::default()
        },
    )
    .await;
    let mut by_trace = watch(
        &mut client,
        WatchRequest {
            trace_id: billing_kill.trace_id.to_string(),
            ..Default::default()
        },
    )
    .await;
    let mut everything = watch(&mut client, WatchRequest::default()).await;

    for s in [
        &checkout_kill,
        &checkout_warn,
        &billing_kill,
        &anonymous_kill,
    ] {
        hub.publish(s.clone());
    }

    expect_exactly(&mut by_service_and_action, &[&checkout_kill]).await;
    expect_exactly(&mut by_trace, &[&billing_kill]).await;
    expect_exactly(
        &mut everything,
        &[
            &checkout_kill,
            &checkout_warn,
            &billing_kill,
            &anonymous_kill,
        ],
    )
    .await;
}

#[tokio::test]
async fn an_unknown_action_filter_is_invalid_argument() {
    let hub = SignalHub::without_sinks(8);
    let mut client = serve(hub.clone()).await;
    for action in ["stop", "KILL", "info"] {
        let status = client
            .watch(WatchRequest {
                action: action.to_owned(),
                ..Default::default()
            })
            .await
            .expect_err("an unknown action is refused");
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "{action}");
        assert!(
            status.message().contains(&format!("{action:?}"))
                && status
                    .message()
                    .contains("\"warn\", \"kill\" or \"require_approval\""),
            "{action}: {}",
            status.message()
        );
    }
}

#[tokio::test]
async fn a_lagging_watcher_skips_signals_and_never_blocks_the_hub() {
    let hub = SignalHub::without_sinks(16);
    let mut client = serve(hub.clone()).await;
    let mut stream = watch(&mut client, WatchRequest::default()).await;

    const N: u32 = 3000;
    let run = unique("run");
    let started = Instant::now();
    // Current-thread runtime: the server cannot drain while this loop runs.
    for n in 1..=N {
        hub.publish(signal(&run, n, Action::Warn, Some("svc")));
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < Duration::from_secs(2),
        "publish blocked: {elapsed:?}"
    );

    let mut occurrences = Vec::new();
    while occurrences.last() != Some(&N) {
        let got = tokio::time::timeout(Duration::from_secs(5), stream.message())
            .await
            .expect("stream keeps flowing")
            .expect("stream ok")
            .expect("stream open");
        occurrences.push(got.occurrence);
    }
    assert!(
        occurrences.len() < N as usize,
        "the lagging watcher skipped signals ({} received)",
        occurrences.len()
    );
    assert!(
        occurrences.windows(2).all(|w| w[0] < w[1]),
        "what arrives is in publish order"
    );
}
