//! HTTP `GET /v1/signals?trace_id=…&since=…` served by axum on port 0.

mod signals_support;

use loopwatch::signals::http::{router, SignalsResponse};
use loopwatch::signals::SignalHub;
use signals_support::{signal, unique};

#[tokio::test]
async fn get_signals_filters_by_trace_and_since() {
    let hub = SignalHub::without_sinks(8);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = router(hub.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });

    let run = unique("run");
    let signals: Vec<_> = (1..=3)
        .map(|n| signal(&run, n, "kill", Some("svc")))
        .collect();
    for s in &signals {
        hub.publish(s.clone());
    }
    let get = |query: String| async move {
        let response = reqwest::get(format!("http://{addr}/v1/signals{query}"))
            .await
            .expect("GET");
        (
            response.status().as_u16(),
            response.text().await.expect("body"),
        )
    };

    let (status, body) = get(String::new()).await;
    assert_eq!(status, 200);
    let all: SignalsResponse = serde_json::from_str(&body).expect("json");
    assert_eq!(all.data, signals);

    let (_, body) = get(format!("?trace_id={}", signals[1].trace_id)).await;
    let one: SignalsResponse = serde_json::from_str(&body).expect("json");
    assert_eq!(one.data, vec![signals[1].clone()]);

    let (_, body) = get(format!("?since={}", signals[1].time_unix_nano)).await;
    let since: SignalsResponse = serde_json::from_str(&body).expect("json");
    assert_eq!(since.data, signals[1..].to_vec(), "since is inclusive");

    let (status, _) = get("?since=yesterday".to_owned()).await;
    assert_eq!(status, 400, "a non-integer since is a client error");
    let (status, _) = get("?trace=abc".to_owned()).await;
    assert_eq!(status, 400, "an unknown parameter is a client error");
}
