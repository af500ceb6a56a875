//! The admin API's one error shape, `{"error": "<message>"}` with the status, and the query
//! string and path extractors that answer in it.
//!
//! axum's own `Query` rejection is `text/plain` ("Failed to deserialize query string…");
//! [`ApiQuery`] wraps it (the "custom extractor" pattern of axum's `extract` docs,
//! "Customizing extractor responses": `tokio-rs/axum`, `axum/src/docs/extract.md`, and the
//! `customize-extractor-error` example), keeping axum's status (400 for a query string
//! that does not deserialize) and its message, so every admin endpoint that reads a query
//! string answers a bad one in the same JSON as its other errors.

use axum::extract::{FromRequestParts, Path, Query};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::de::DeserializeOwned;

/// `status` with the body `{"error": message}` (`application/json`).
pub fn json_error(status: StatusCode, message: &str) -> Response {
    (status, Json(serde_json::json!({ "error": message }))).into_response()
}

/// `Query<T>` whose rejection is [`json_error`] with axum's status and message.
#[derive(Debug, Clone, Copy, Default)]
pub struct ApiQuery<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiQuery<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Query::<T>::from_request_parts(parts, state).await {
            Ok(Query(value)) => Ok(ApiQuery(value)),
            Err(rejection) => Err(json_error(rejection.status(), &rejection.body_text())),
        }
    }
}

/// `Path<T>` whose rejection is [`json_error`] with axum's status and message: a path
/// segment that does not decode (`/v1/runs/%C0%AF`, not UTF-8) answers 400 in the API's
/// JSON, not axum's `text/plain`.
#[derive(Debug, Clone, Default)]
pub struct ApiPath<T>(pub T);

impl<T, S> FromRequestParts<S> for ApiPath<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(ApiPath(value)),
            Err(rejection) => Err(json_error(rejection.status(), &rejection.body_text())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::to_bytes;
    use axum::http::Request;

    #[derive(serde::Deserialize, Debug)]
    #[serde(deny_unknown_fields)]
    struct Q {
        #[allow(dead_code)]
        limit: Option<usize>,
    }

    async fn extract(uri: &str) -> Result<ApiQuery<Q>, Response> {
        let (mut parts, ()) = Request::get(uri).body(()).unwrap().into_parts();
        ApiQuery::<Q>::from_request_parts(&mut parts, &()).await
    }

    #[tokio::test]
    async fn a_bad_query_string_is_a_json_400_naming_the_problem() {
        for uri in ["/x?foo=1", "/x?limit=many"] {
            let response = extract(uri).await.unwrap_err();
            assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{uri}");
            assert_eq!(
                response.headers()["content-type"],
                "application/json",
                "{uri}"
            );
            let body = to_bytes(response.into_body(), 1 << 16).await.unwrap();
            let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let message = body["error"].as_str().unwrap_or_default();
            assert!(
                message.starts_with("Failed to deserialize query string"),
                "{uri}: {message}"
            );
        }
        assert!(extract("/x?limit=3").await.is_ok());
        assert!(extract("/x").await.is_ok());
    }
}
