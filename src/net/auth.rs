//! Token checks at the edges.
//!
//! - Admin (`admin.auth_token` / `admin.auth_token_file`): every admin HTTP route except
//!   `/healthz` and `/readyz`, and the gRPC `loopwatch.v1.Signals` service, need
//!   `Authorization: Bearer <token>` (the admin listener also takes the `/ui` login
//!   session cookie: [`crate::admin::access`]).
//! - Receivers (`[receiver.auth]`): OTLP `Export` on gRPC and `POST /v1/traces` need the
//!   token in `header` (default `authorization`, as `Bearer <token>`; any other header
//!   carries the bare token). gRPC health stays open.
//!
//! Tokens are compared in constant time (`subtle`). A missing or wrong token is HTTP 401
//! (`WWW-Authenticate: Bearer`) or gRPC `UNAUTHENTICATED`; the token is never logged.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::header::{HeaderName, AUTHORIZATION, WWW_AUTHENTICATE};
use http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq;

/// `[receiver.auth]`: optional token check on the OTLP receivers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReceiverAuthConfig {
    /// The token clients must send; unset (and no `token_file`) = no check.
    pub token: Option<String>,
    /// File holding the token (trailing newline ignored), e.g. a mounted Kubernetes Secret.
    pub token_file: Option<PathBuf>,
    /// Header carrying it (default `authorization`, value `Bearer <token>`); any other
    /// header name (e.g. `x-api-key`) carries the bare token.
    pub header: String,
}

impl Default for ReceiverAuthConfig {
    fn default() -> Self {
        Self {
            token: None,
            token_file: None,
            header: "authorization".into(),
        }
    }
}

impl ReceiverAuthConfig {
    /// The check to apply, if any.
    ///
    /// # Errors
    /// `receiver.auth.<key>: why` (unreadable file, both or an empty token, bad header).
    pub fn check(&self) -> Result<Option<TokenCheck>, String> {
        TokenCheck::from_settings(
            "receiver.auth",
            ("token", self.token.as_deref()),
            ("token_file", self.token_file.as_deref()),
            &self.header,
        )
    }
}

/// One expected token in one header.
#[derive(Clone)]
pub struct TokenCheck {
    header: HeaderName,
    bearer: bool,
    token: Arc<[u8]>,
}

impl std::fmt::Debug for TokenCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenCheck")
            .field("header", &self.header)
            .field("bearer", &self.bearer)
            .finish_non_exhaustive()
    }
}

impl TokenCheck {
    /// `Authorization: Bearer <token>`.
    pub fn bearer(token: &str) -> Self {
        Self {
            header: AUTHORIZATION,
            bearer: true,
            token: token.as_bytes().into(),
        }
    }

    /// The check for a `(token, token_file)` pair in `section` (for errors); `None` when
    /// neither is set.
    ///
    /// # Errors
    /// `section.key: why`.
    pub fn from_settings(
        section: &str,
        (token_key, token): (&str, Option<&str>),
        (file_key, file): (&str, Option<&Path>),
        header: &str,
    ) -> Result<Option<Self>, String> {
        let token = match (token, file) {
            (None, None) => return Ok(None),
            (Some(_), Some(_)) => {
                return Err(format!(
                    "{section}.{token_key}: set {token_key} or {file_key}, not both"
                ))
            }
            (Some(t), None) => t.to_owned(),
            (None, Some(path)) => std::fs::read_to_string(path)
                .map_err(|e| format!("{section}.{file_key}: {}: {e}", path.display()))?
                .trim_end_matches(['\r', '\n'])
                .to_owned(),
        };
        if token.is_empty() {
            return Err(format!("{section}.{token_key}: the token is empty"));
        }
        let header = HeaderName::try_from(header)
            .map_err(|e| format!("{section}.header: {header:?}: {e}"))?;
        Ok(Some(Self {
            bearer: header == AUTHORIZATION,
            header,
            token: token.into_bytes().into(),
        }))
    }

    /// True when `presented` is the token (constant-time comparison of the bytes; only
    /// the length can show in the timing), e.g. a token typed into the `/ui` login form.
    pub fn matches(&self, presented: &[u8]) -> bool {
        presented.ct_eq(&self.token).into()
    }

    /// True when `headers` carry the token (constant-time comparison of the token bytes).
    pub fn allows(&self, headers: &HeaderMap) -> bool {
        let Some(value) = headers.get(&self.header) else {
            return false;
        };
        let value = value.as_bytes();
        let presented = if self.bearer {
            match value.split_at_checked(7) {
                Some((scheme, rest)) if scheme.eq_ignore_ascii_case(b"bearer ") => rest,
                _ => return false,
            }
        } else {
            value
        };
        self.matches(presented)
    }
}

/// The admin token from `admin.auth_token` / `admin.auth_token_file`.
///
/// # Errors
/// `admin.<key>: why`.
pub fn admin_check(token: Option<&str>, file: Option<&Path>) -> Result<Option<TokenCheck>, String> {
    TokenCheck::from_settings(
        "admin",
        ("auth_token", token),
        ("auth_token_file", file),
        "authorization",
    )
}

/// 401 with `WWW-Authenticate: Bearer`.
pub fn unauthorized() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [(WWW_AUTHENTICATE, "Bearer")],
        "missing or wrong token\n",
    )
        .into_response()
}

/// Wraps an OTLP/HTTP router: every request needs the token.
pub fn protect_receiver(router: axum::Router, check: Option<TokenCheck>) -> axum::Router {
    protect(router, check, &[])
}

/// Wraps `router` so that a request to a path outside `open_paths` without the token is
/// answered 401; no check (`None`) leaves the router as it is.
fn protect(
    router: axum::Router,
    check: Option<TokenCheck>,
    open_paths: &'static [&'static str],
) -> axum::Router {
    let Some(check) = check else {
        return router;
    };
    router.layer(axum::middleware::from_fn(
        move |req: Request, next: Next| {
            let check = check.clone();
            async move {
                if open_paths.contains(&req.uri().path()) || check.allows(req.headers()) {
                    next.run(req).await
                } else {
                    unauthorized()
                }
            }
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(name: &str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            HeaderName::try_from(name).unwrap_or_else(|e| panic!("{e}")),
            value.parse().unwrap_or_else(|e| panic!("{e}")),
        );
        h
    }

    #[test]
    fn bearer_token() {
        let check = TokenCheck::bearer("s3cret");
        assert!(check.allows(&headers("authorization", "Bearer s3cret")));
        assert!(check.allows(&headers("authorization", "bearer s3cret")));
        assert!(!check.allows(&headers("authorization", "Bearer s3cre")));
        assert!(!check.allows(&headers("authorization", "Bearer s3cret ")));
        assert!(!check.allows(&headers("authorization", "s3cret")));
        assert!(!check.allows(&headers("authorization", "Basic s3cret")));
        assert!(!check.allows(&headers("x-api-key", "s3cret")));
        assert!(!check.allows(&HeaderMap::new()));
    }

    #[test]
    fn custom_header_and_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("token");
        std::fs::write(&file, "abc\n").unwrap_or_else(|e| panic!("{e}"));
        let cfg = ReceiverAuthConfig {
            token_file: Some(file),
            header: "x-api-key".into(),
            ..ReceiverAuthConfig::default()
        };
        let check = cfg
            .check()
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no check"));
        assert!(check.allows(&headers("x-api-key", "abc")));
        assert!(!check.allows(&headers("x-api-key", "Bearer abc")));
        assert!(!check.allows(&headers("authorization", "Bearer abc")));
        assert!(ReceiverAuthConfig::default()
            .check()
            .is_ok_and(|c| c.is_none()));
    }

    #[test]
    fn setting_errors_name_the_key() {
        let both = ReceiverAuthConfig {
            token: Some("a".into()),
            token_file: Some("/nonexistent".into()),
            ..ReceiverAuthConfig::default()
        };
        assert_eq!(
            both.check().err().as_deref(),
            Some("receiver.auth.token: set token or token_file, not both")
        );
        let missing = admin_check(None, Some(Path::new("/nonexistent/token")));
        assert!(missing
            .err()
            .is_some_and(|e| e.starts_with("admin.auth_token_file: /nonexistent/token: ")));
        assert_eq!(
            admin_check(Some(""), None).err().as_deref(),
            Some("admin.auth_token: the token is empty")
        );
        assert!(admin_check(None, None).is_ok_and(|c| c.is_none()));
    }
}
