//! `loopwatch webhook`: the injection of [`super`] as a Kubernetes mutating admission
//! webhook. `POST /mutate` takes an `AdmissionReview` (`admission.k8s.io/v1`) of a Pod and
//! answers it allowed, with an RFC 6902 JSON patch (base64, `patchType: JSONPatch`) that
//! adds the sidecar when the pod does not have it. Which pods are sent is the
//! `MutatingWebhookConfiguration`'s choice (`deploy/kubernetes/webhook/`: namespaces or
//! pods labelled `loopwatch.dev/inject: enabled`); a pod annotated
//! `loopwatch.dev/inject: disabled` is allowed unchanged. Served over TLS (the API server
//! only calls HTTPS), with the listener hygiene of the admin API.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::{Json, Router};
use base64::Engine as _;
use serde_json::{json, Value};

use super::{inject_object, InjectOptions, InjectSummary};
use crate::net::listen::{spawn_accept, ConnectionConfig};
use crate::net::tls::{ReloadingServerTls, ServerTlsConfig};

/// The answer to one `AdmissionReview` request: allowed, with a patch when the object
/// changed. A review without `request.uid` gets an answer without one (the API server
/// rejects it, which is right for a malformed review); an object loopwatch does not
/// understand is allowed unchanged, so a webhook fault never blocks a pod.
pub fn review(admission_review: &Value, options: &InjectOptions) -> Value {
    let request = &admission_review["request"];
    let uid = request["uid"].clone();
    let mut response = json!({ "uid": uid, "allowed": true });
    if let Some(patch) = patch_for(&request["object"], options) {
        let patch = serde_json::to_vec(&patch).unwrap_or_default();
        response["patchType"] = "JSONPatch".into();
        response["patch"] = base64::engine::general_purpose::STANDARD
            .encode(patch)
            .into();
    }
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    })
}

/// The JSON patch that injects `object`, or `None` when nothing changes.
pub fn patch_for(object: &Value, options: &InjectOptions) -> Option<json_patch::Patch> {
    let mut yaml: serde_yaml_ng::Value = serde_yaml_ng::to_value(object).ok()?;
    let mut summary = InjectSummary::default();
    inject_object(&mut yaml, options, &mut summary);
    if summary.injected == 0 {
        return None;
    }
    let after = serde_json::to_value(&yaml).ok()?;
    let patch = json_patch::diff(object, &after);
    (!patch.0.is_empty()).then_some(patch)
}

/// The webhook's routes: `POST /mutate` and `GET /healthz`.
pub fn router(options: Arc<InjectOptions>) -> Router {
    Router::new()
        .route(
            "/mutate",
            post(move |Json(body): Json<Value>| {
                let options = options.clone();
                async move { Json(review(&body, &options)) }
            }),
        )
        .route("/healthz", get(|| async { "ok\n" }))
}

/// Serves the webhook on `listen` with the certificate of `tls` until `stop`.
///
/// # Errors
/// The certificate cannot be loaded, or the address cannot be bound.
pub async fn serve(
    listen: SocketAddr,
    tls: &ServerTlsConfig,
    options: InjectOptions,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    crate::net::tls::install_default_provider();
    let tls = ReloadingServerTls::new("webhook", tls, &[b"h2", b"http/1.1"])?;
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let bound = listener.local_addr()?;
    let limits = ConnectionConfig::admin_default();
    let (tx, rx) = tokio::sync::watch::channel(false);
    let stopped = move || {
        let mut rx = rx.clone();
        async move {
            let _ = rx.wait_for(|s| *s).await;
        }
    };
    let incoming = spawn_accept(
        "webhook",
        listener,
        Some(tls),
        &limits,
        Arc::new(crate::net::listen::ListenerStats::new("webhook")),
        stopped(),
    );
    tracing::info!(listen = %bound, "loopwatch webhook listening");
    eprintln!("loopwatch webhook listening on https://{bound}/mutate");
    let server = crate::net::listen::http::serve_router(
        incoming,
        router(Arc::new(options)),
        &limits,
        stopped(),
    );
    tokio::pin!(server);
    tokio::select! {
        result = &mut server => result?,
        () = stop => {
            let _ = tx.send(true);
            server.await?;
        }
    }
    eprintln!("loopwatch webhook stopped");
    Ok(())
}
