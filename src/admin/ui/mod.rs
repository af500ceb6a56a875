//! The built-in fleet page, `GET /ui` on the admin listener (docs/api.md, "The fleet page"):
//! runs and loop runs per minute on a time axis, filters by service and agent (kept in the
//! URL query), the runs, and a drill-down into one run: its calls in order with times, tool
//! names and short fingerprints (never argument or result content), its detections with
//! why they fired, and a link to the trace in the user's tracing UI (`[ui] trace_url`).
//! Static HTML, CSS and a few small ES modules, embedded in the binary (`include_str!`): no
//! build step, no CDN. The script reads `/v1/fleet`, `/v1/runs` and `/v1/runs/{run_key}`
//! and updates the page in place every 2 s. With `admin.auth_token` set, [`login`] serves
//! the login form and its session cookie.

pub mod login;

use axum::extract::{Path, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::admin::AdminState;

const INDEX_HTML: &str = include_str!("index.html");

/// The page's static files: name under `/ui/`, content type, body.
const ASSETS: [(&str, &str, &str); 6] = [
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("app.css"),
    ),
    ("app.js", JS, include_str!("app.js")),
    ("dom.js", JS, include_str!("dom.js")),
    ("chart.js", JS, include_str!("chart.js")),
    ("runs.js", JS, include_str!("runs.js")),
    ("run.js", JS, include_str!("run.js")),
];
const JS: &str = "text/javascript; charset=utf-8";

/// What every page and file of `/ui` is served with: no caching of stale scripts, nothing
/// loaded from elsewhere (the Content-Security-Policy allows this origin only, no inline
/// script), no framing, no referrer to the tracing UI a trace link opens.
const SECURITY_HEADERS: [(header::HeaderName, &str); 5] = [
    (header::CACHE_CONTROL, "no-cache"),
    (
        header::CONTENT_SECURITY_POLICY,
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
         connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    ),
    (header::X_FRAME_OPTIONS, "DENY"),
    (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
    (header::REFERRER_POLICY, "no-referrer"),
];

/// Routes `/ui` (and `/ui/`), `/ui/{file}` for the static files, and [`login`]'s routes.
pub fn router() -> Router<AdminState> {
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/{file}", get(asset))
        .merge(login::router())
}

fn with_headers(content_type: &'static str, body: String) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    for (name, value) in SECURITY_HEADERS {
        headers.insert(name, HeaderValue::from_static(value));
    }
    response
}

/// An HTML page of `/ui` with its headers.
pub fn page(body: String) -> Response {
    with_headers("text/html; charset=utf-8", body)
}

/// The page; `data-auth="on"` on `<body>` when a token is set (the page then shows "Log
/// out" and reloads into the login form when its session ends).
async fn index(State(state): State<AdminState>) -> Response {
    let auth = if state.auth.is_some() { "on" } else { "off" };
    page(INDEX_HTML.replace("{{auth}}", auth))
}

async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, content_type, body)) => with_headers(content_type, body.to_string()),
        None => (StatusCode::NOT_FOUND, "no such file\n").into_response(),
    }
}
