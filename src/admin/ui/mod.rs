//! The built-in fleet page, `GET /ui` on the admin listener: live runs, the latest loops
//! with their repeated calls (short fingerprints and step numbers, never argument
//! content) and the loop rate per agent over the last hour as a chart. Static HTML, CSS
//! and a small script, embedded in the binary (`include_str!`): no build step, no CDN.
//! The script reads `/v1/summary`, `/v1/runs` and `/v1/traces/{trace_id}/loops`.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;

const INDEX_HTML: &str = include_str!("index.html");
const APP_JS: &str = include_str!("app.js");
const APP_CSS: &str = include_str!("app.css");

/// Routes `/ui` (and `/ui/`), `/ui/app.js`, `/ui/app.css`.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/app.js", get(app_js))
        .route("/ui/app.css", get(app_css))
}

fn asset(content_type: &'static str, body: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
}

async fn index() -> impl IntoResponse {
    asset("text/html; charset=utf-8", INDEX_HTML)
}

async fn app_js() -> impl IntoResponse {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn app_css() -> impl IntoResponse {
    asset("text/css; charset=utf-8", APP_CSS)
}
