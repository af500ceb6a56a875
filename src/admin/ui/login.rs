//! Logging in to `/ui` with the admin token (docs/security.md, "The fleet page").
//!
//! - `GET /ui/login` → the login form (or, when logged in or no token is set, `303` to `/ui`).
//! - `POST /ui/login` (form `token`, `next`) → with the right token: a new session, its
//!   cookie ([`crate::admin::session::SessionCookie`]) and `303` to `next` (a path under
//!   `/ui`, else `/ui`); with a wrong one: `401` and the form again. The token travels in the
//!   request body only, never in a URL, and is compared in constant time.
//! - `POST /ui/logout` → ends the session, deletes the cookie, `303` to `/ui`.

use std::time::Instant;

use axum::extract::rejection::FormRejection;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Form, Router};
use serde::Deserialize;

use crate::admin::AdminState;

const LOGIN_HTML: &str = include_str!("login.html");

/// Routes `/ui/login` (GET, POST) and `/ui/logout` (POST).
pub fn router() -> Router<AdminState> {
    Router::new()
        .route("/ui/login", get(login_page).post(login))
        .route("/ui/logout", axum::routing::post(logout))
}

/// `text` with `&`, `<`, `>`, `"` and `'` escaped for HTML text and quoted attributes.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `next` when it is a path under `/ui` (`/ui`, `/ui/…`, `/ui?…`) made of printable ASCII
/// without a backslash, else `/ui`: the login never redirects off the page.
pub fn safe_next(next: &str) -> &str {
    let under_ui = next == "/ui" || next.starts_with("/ui/") || next.starts_with("/ui?");
    let printable = next.bytes().all(|b| b.is_ascii_graphic() && b != b'\\');
    if under_ui && printable && !next.starts_with("/ui//") {
        next
    } else {
        "/ui"
    }
}

/// The login form answering a request for `next` (shown again after login), with an
/// `error` line: `401` with `WWW-Authenticate: Bearer` (what an API client without the
/// token gets too), so only a browser shows a page.
pub fn form(next: &str, error: Option<&str>) -> Response {
    form_with_status(StatusCode::UNAUTHORIZED, next, error)
}

fn form_with_status(status: StatusCode, next: &str, error: Option<&str>) -> Response {
    let body = LOGIN_HTML
        .replace("{{next}}", &escape_html(safe_next(next)))
        .replace("{{error}}", &escape_html(error.unwrap_or("")));
    let mut response = super::page(body).into_response();
    *response.status_mut() = status;
    if status == StatusCode::UNAUTHORIZED {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

fn see_other(location: &str) -> Response {
    let location = HeaderValue::from_str(safe_next(location))
        .unwrap_or_else(|_| HeaderValue::from_static("/ui"));
    (
        StatusCode::SEE_OTHER,
        [
            (header::LOCATION, location),
            (header::CACHE_CONTROL, HeaderValue::from_static("no-store")),
        ],
    )
        .into_response()
}

async fn login_page(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    match &state.auth {
        Some(auth) if !auth.has_session(&headers) => form_with_status(StatusCode::OK, "/ui", None),
        _ => see_other("/ui"),
    }
}

/// The login form's fields.
#[derive(Deserialize)]
struct LoginForm {
    token: String,
    #[serde(default)]
    next: String,
}

async fn login(
    State(state): State<AdminState>,
    form_data: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    let Some(auth) = &state.auth else {
        return see_other("/ui");
    };
    let Form(data) = match form_data {
        Ok(data) => data,
        Err(rejection) => {
            return form_with_status(
                StatusCode::BAD_REQUEST,
                "/ui",
                Some(&format!("Not a login form: {}", rejection.body_text())),
            )
        }
    };
    if !auth.token.matches(data.token.as_bytes()) {
        tracing::info!("/ui login refused: wrong admin token");
        return form(&data.next, Some("Wrong token."));
    }
    let id = auth.sessions.create(Instant::now());
    let mut response = see_other(&data.next);
    response.headers_mut().insert(
        header::SET_COOKIE,
        auth.cookie.set(&id, auth.sessions.ttl()),
    );
    response
}

async fn logout(State(state): State<AdminState>, headers: HeaderMap) -> Response {
    let mut response = see_other("/ui");
    if let Some(auth) = &state.auth {
        if let Some(id) = auth.cookie.read(&headers) {
            auth.sessions.remove(&id);
        }
        response
            .headers_mut()
            .insert(header::SET_COOKIE, auth.cookie.clear());
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_under_ui() {
        for ok in [
            "/ui",
            "/ui/",
            "/ui?service=a&agent=b&run=x%2Fy",
            "/ui/login",
        ] {
            assert_eq!(safe_next(ok), ok);
        }
        for bad in [
            "",
            "/",
            "//evil.example",
            "https://evil.example/ui",
            "/uix",
            "/ui//evil",
            "/ui/\\evil",
            "/ui?a=\r\nSet-Cookie:x",
            "/ui?a b",
            "/v1/runs",
        ] {
            assert_eq!(safe_next(bad), "/ui", "{bad:?}");
        }
    }

    #[test]
    fn the_form_escapes_what_it_echoes() {
        assert_eq!(
            escape_html(r#"<a href="x">'&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        let html = LOGIN_HTML
            .replace(
                "{{next}}",
                &escape_html(safe_next("/ui?service=\"><script>")),
            )
            .replace("{{error}}", "");
        assert!(!html.contains("<script>"));
    }
}
