//! Who may use the admin listener when `admin.auth_token` is set (docs/security.md).
//!
//! - `/healthz`, `/readyz`: open (probes).
//! - `/ui/login`, `/ui/logout`, `/ui/app.css`: open (the login form, its style, logout).
//! - Every other route: `Authorization: Bearer <token>` (API clients, any method), or a
//!   live `/ui` session cookie ([`crate::admin::session`]) on `GET` and `HEAD` only: the
//!   page only reads, so a cookie can never approve, deny or check a run.
//! - `GET /ui` without either answers 401 with the login form instead of a bare 401.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::Request;
use axum::middleware::Next;
use http::Method;

use crate::admin::session::{SessionCookie, Sessions, MAX_SESSIONS};
use crate::net::auth::{unauthorized, TokenCheck};

/// Admin paths open to anyone.
pub const OPEN_PATHS: [&str; 5] = [
    "/healthz",
    "/readyz",
    "/ui/login",
    "/ui/logout",
    "/ui/app.css",
];

/// The admin token and the `/ui` sessions it opened.
pub struct AdminAuth {
    pub token: TokenCheck,
    pub sessions: Sessions,
    pub cookie: SessionCookie,
}

impl AdminAuth {
    /// Checks for `token`, with sessions lasting `session_ttl` (`[ui] session_ttl`), at
    /// most [`MAX_SESSIONS`]; `tls` when the admin listener has TLS (the cookie is then
    /// `Secure`).
    pub fn new(token: TokenCheck, tls: bool, session_ttl: std::time::Duration) -> Self {
        Self {
            token,
            sessions: Sessions::new(session_ttl, MAX_SESSIONS),
            cookie: SessionCookie { secure: tls },
        }
    }

    /// True when the request's cookie names a live session.
    pub fn has_session(&self, headers: &http::HeaderMap) -> bool {
        self.cookie
            .read(headers)
            .is_some_and(|id| self.sessions.is_valid(&id, Instant::now()))
    }

    /// Whether a request may pass (see the module doc).
    pub fn admits(&self, method: &Method, path: &str, headers: &http::HeaderMap) -> bool {
        OPEN_PATHS.contains(&path)
            || self.token.allows(headers)
            || (matches!(*method, Method::GET | Method::HEAD) && self.has_session(headers))
    }
}

/// Wraps the admin router with [`AdminAuth::admits`]; `None` (no token set) leaves it open.
pub fn protect(router: axum::Router, auth: Option<Arc<AdminAuth>>) -> axum::Router {
    let Some(auth) = auth else {
        return router;
    };
    router.layer(axum::middleware::from_fn(
        move |req: Request, next: Next| {
            let auth = auth.clone();
            async move {
                let (method, path) = (req.method().clone(), req.uri().path().to_string());
                if auth.admits(&method, &path, req.headers()) {
                    return next.run(req).await;
                }
                if matches!(method, Method::GET | Method::HEAD)
                    && matches!(path.as_str(), "/ui" | "/ui/")
                {
                    let back = req
                        .uri()
                        .path_and_query()
                        .map_or("/ui", |p| p.as_str())
                        .to_string();
                    return crate::admin::ui::login::form(&back, None);
                }
                unauthorized()
            }
        },
    ))
}
