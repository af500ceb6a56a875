//! Webhook sink against a real axum server on port 0: HMAC signature, retries on 5xx
//! and timeouts, no retry on 4xx.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::signals::{eventually, fast_retry, signal, unique, Action};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use axum::Router;
use hmac::{Hmac, Mac};
use loopwatch::signals::{SignalHub, SignalsConfig, SinkStats};
use sha2::Sha256;

/// One request as the server saw it.
#[derive(Clone, Debug)]
struct Seen {
    body: Bytes,
    signature: Option<String>,
    content_type: Option<String>,
}

/// Answers each request with the next scripted (delay, status), then 200.
#[derive(Clone, Default)]
struct Endpoint {
    script: Arc<Mutex<VecDeque<(Duration, StatusCode)>>>,
    seen: Arc<Mutex<Vec<Seen>>>,
}

impl Endpoint {
    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }
}

async fn hook(State(endpoint): State<Endpoint>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let header = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    endpoint.seen.lock().expect("lock").push(Seen {
        body,
        signature: header("x-loopwatch-signature"),
        content_type: header("content-type"),
    });
    let next = endpoint.script.lock().expect("lock").pop_front();
    let (delay, status) = next.unwrap_or((Duration::ZERO, StatusCode::OK));
    tokio::time::sleep(delay).await;
    status
}

async fn serve(script: Vec<(Duration, StatusCode)>) -> (Endpoint, String) {
    let endpoint = Endpoint {
        script: Arc::new(Mutex::new(script.into())),
        ..Default::default()
    };
    let app = Router::new()
        .route("/hook", post(hook))
        .with_state(endpoint.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (endpoint, format!("http://{addr}/hook"))
}

fn hub(url: &str, secret: Option<&str>, timeout: Duration) -> SignalHub {
    let mut config = SignalsConfig::default();
    config.webhook.url = Some(url.to_owned());
    config.webhook.secret = secret.map(str::to_owned);
    config.webhook.timeout = timeout;
    config.retry = fast_retry();
    SignalHub::start(config)
}

async fn wait_for(hub: &SignalHub, done: impl Fn(&SinkStats) -> bool) -> SinkStats {
    let ok = eventually(Duration::from_secs(10), || {
        let stats = hub.stats()[0].clone();
        let result = done(&stats);
        async move { result }
    })
    .await;
    let stats = hub.stats()[0].clone();
    assert!(ok, "condition not reached, stats: {stats:?}");
    stats
}

#[tokio::test]
async fn signs_the_exact_body_with_hmac_sha256() {
    let (endpoint, url) = serve(vec![]).await;
    let secret = "s3cr3t-key";
    let hub = hub(&url, Some(secret), Duration::from_secs(5));
    let s = signal(&unique("run"), 1, Action::Kill, Some("checkout"));
    hub.publish(s.clone());
    let stats = wait_for(&hub, |s| s.delivered == 1).await;
    assert_eq!(stats.failed_attempts, 0);

    let seen = endpoint.seen();
    assert_eq!(seen.len(), 1);
    let request = &seen[0];
    assert_eq!(
        request.body.as_ref(),
        serde_json::to_vec(&s).expect("json").as_slice()
    );
    assert_eq!(request.content_type.as_deref(), Some("application/json"));
    let mut mac = Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("key");
    mac.update(&request.body);
    let signature = request
        .signature
        .as_deref()
        .and_then(|v| v.strip_prefix("sha256="))
        .expect("signature header with sha256= prefix");
    let bytes = hex::decode(signature).expect("hex signature");
    mac.verify_slice(&bytes)
        .expect("signature verifies over the exact body");
    hub.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn no_signature_header_without_secret() {
    let (endpoint, url) = serve(vec![]).await;
    let hub = hub(&url, None, Duration::from_secs(5));
    hub.publish(signal(&unique("run"), 1, Action::Warn, None));
    wait_for(&hub, |s| s.delivered == 1).await;
    let seen = endpoint.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].signature, None);
    hub.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn retries_5xx_until_delivered_once() {
    let error = (Duration::ZERO, StatusCode::INTERNAL_SERVER_ERROR);
    let (endpoint, url) = serve(vec![error, error]).await;
    let hub = hub(&url, Some("k"), Duration::from_secs(5));
    let s = signal(&unique("run"), 1, Action::Kill, Some("checkout"));
    hub.publish(s.clone());
    let stats = wait_for(&hub, |s| s.delivered == 1).await;
    assert_eq!(stats.failed_attempts, 2);
    assert_eq!(stats.rejected, 0);
    // Give a wrong extra retry the chance to show up.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let seen = endpoint.seen();
    assert_eq!(seen.len(), 3, "two 500s then one 200");
    let body = serde_json::to_vec(&s).expect("json");
    assert!(seen.iter().all(|r| r.body.as_ref() == body.as_slice()));
    assert_eq!(hub.stats()[0].delivered, 1);
    hub.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn retries_a_timed_out_request() {
    let (endpoint, url) = serve(vec![(Duration::from_secs(2), StatusCode::OK)]).await;
    let hub = hub(&url, None, Duration::from_millis(200));
    hub.publish(signal(&unique("run"), 1, Action::Kill, None));
    let stats = wait_for(&hub, |s| s.delivered == 1).await;
    assert_eq!(
        stats.failed_attempts, 1,
        "the slow answer counts as one failure"
    );
    assert_eq!(endpoint.seen().len(), 2);
    hub.shutdown(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn does_not_retry_4xx_and_moves_on() {
    let (endpoint, url) = serve(vec![(Duration::ZERO, StatusCode::BAD_REQUEST)]).await;
    let hub = hub(&url, Some("k"), Duration::from_secs(5));
    let run = unique("run");
    let refused = signal(&run, 1, Action::Kill, None);
    let next = signal(&run, 2, Action::Kill, None);
    hub.publish(refused.clone());
    let stats = wait_for(&hub, |s| s.rejected == 1).await;
    assert_eq!((stats.failed_attempts, stats.delivered), (1, 0));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(endpoint.seen().len(), 1, "a 400 is never retried");

    hub.publish(next.clone());
    let stats = wait_for(&hub, |s| s.delivered == 1).await;
    assert_eq!(
        (stats.failed_attempts, stats.rejected, stats.dropped),
        (1, 1, 0)
    );
    let seen = endpoint.seen();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[1].body.as_ref(),
        serde_json::to_vec(&next).expect("json").as_slice()
    );
    hub.shutdown(Duration::from_secs(1)).await;
}
