//! HTTP `GET /v1/signals?trace_id=…&since=…&action=…` served by axum on port 0.

use crate::support::signals::{signal, unique, Action};
use loopwatch::signals::http::{router, SignalsResponse};
use loopwatch::signals::SignalHub;

/// Serves `GET /v1/signals` from `hub` on a free loopback port.
async fn serve(hub: &SignalHub) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = router(hub.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    addr
}

#[tokio::test]
async fn get_signals_filters_by_trace_and_since() {
    let hub = SignalHub::without_sinks(8);
    let addr = serve(&hub).await;

    let run = unique("run");
    let signals: Vec<_> = (1..=3)
        .map(|n| signal(&run, n, Action::Kill, Some("svc")))
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
    // Hex ids are case-insensitive.
    let upper = signals[1].trace_id.to_ascii_uppercase();
    assert_ne!(upper, signals[1].trace_id, "a trace id with hex letters");
    let (_, body) = get(format!("?trace_id={upper}")).await;
    let one: SignalsResponse = serde_json::from_str(&body).expect("json");
    assert_eq!(one.data, vec![signals[1].clone()]);

    let (_, body) = get(format!("?since={}", signals[1].time_unix_nano)).await;
    let since: SignalsResponse = serde_json::from_str(&body).expect("json");
    assert_eq!(since.data, signals[1..].to_vec(), "since is inclusive");

    let (status, body) = get("?since=yesterday".to_owned()).await;
    assert_eq!(status, 400, "a non-integer since is a client error");
    assert!(json_error(&body).contains("since"), "{body}");
    let (status, body) = get("?trace=abc".to_owned()).await;
    assert_eq!(status, 400, "an unknown parameter is a client error");
    assert!(
        json_error(&body).contains("unknown field `trace`"),
        "{body}"
    );
}

#[tokio::test]
async fn get_signals_filters_by_action_and_rejects_unknown_actions() {
    let hub = SignalHub::without_sinks(8);
    let addr = serve(&hub).await;
    let run = unique("run");
    let kill = signal(&run, 1, Action::Kill, Some("svc"));
    let warn = signal(&run, 2, Action::Warn, Some("svc"));
    hub.publish(kill.clone());
    hub.publish(warn.clone());
    let get = |query: &'static str| async move {
        let response = reqwest::get(format!("http://{addr}/v1/signals{query}"))
            .await
            .expect("GET");
        (
            response.status().as_u16(),
            response.text().await.expect("body"),
        )
    };
    for (query, want) in [("?action=kill", &kill), ("?action=warn", &warn)] {
        let (status, body) = get(query).await;
        assert_eq!(status, 200, "{query}");
        let got: SignalsResponse = serde_json::from_str(&body).expect("json");
        assert_eq!(got.data, vec![want.clone()], "{query}");
        // The wire spelling of the enums is the lowercase name.
        let raw: serde_json::Value = serde_json::from_str(&body).expect("json");
        assert_eq!(
            raw["data"][0]["action"],
            query.trim_start_matches("?action=")
        );
        assert_eq!(
            raw["data"][0]["severity"],
            query.trim_start_matches("?action=")
        );
    }
    for bad in ["?action=stop", "?action=KILL", "?action=info"] {
        let (status, body) = get(bad).await;
        assert_eq!(status, 400, "{bad}: an unknown action is a client error");
        assert!(
            json_error(&body).contains("action"),
            "{bad}: the message names the parameter: {body}"
        );
    }
}

/// The `error` of the admin API's JSON error body (panics on any other body).
fn json_error(body: &str) -> String {
    let value: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"));
    value["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error string: {body}"))
        .to_owned()
}
