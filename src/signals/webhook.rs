//! Webhook sink (DESIGN §6): `POST <url>` with the signal as JSON, signed with
//! `X-Loopwatch-Signature: sha256=<hex HMAC-SHA256(secret, body)>` when a secret is set.

use hmac::{Hmac, Mac};
use reqwest::StatusCode;
use sha2::Sha256;

use super::config::WebhookSinkConfig;
use super::sink::{DeliveryError, Sink};
use super::Signal;

/// Name of the signature header.
pub const SIGNATURE_HEADER: &str = "X-Loopwatch-Signature";

/// Errors building the webhook client.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// The HTTP client could not be built (e.g. TLS backend initialisation).
    #[error("webhook HTTP client: {0}")]
    Client(#[from] reqwest::Error),
}

/// `sha256=<lowercase hex HMAC-SHA256 of body under secret>`, the value of
/// [`SIGNATURE_HEADER`]. Receivers recompute it over the exact body bytes and compare in
/// constant time.
pub fn signature(secret: &[u8], body: &[u8]) -> String {
    #[allow(clippy::expect_used)] // RFC 2104: HMAC takes keys of any length.
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret).expect("HMAC-SHA256 accepts keys of any length");
    mac.update(body);
    format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
}

/// Whether a response status is worth retrying: 5xx (server trouble), 408 (request
/// timeout) and 429 (too many requests) are; other statuses outside 2xx (other 4xx,
/// 3xx left after redirects, 1xx) are refusals that a retry cannot fix.
pub fn is_retryable_status(status: StatusCode) -> bool {
    status.is_server_error()
        || status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
}

/// Delivers signals as signed HTTP `POST`s.
pub struct WebhookSink {
    url: String,
    secret: Option<String>,
    client: reqwest::Client,
}

impl WebhookSink {
    /// A sink posting to `url` with a per-request timeout of `config.timeout`.
    ///
    /// # Errors
    /// [`WebhookError::Client`] when the HTTP client cannot be built.
    pub fn new(url: String, config: WebhookSinkConfig) -> Result<Self, WebhookError> {
        let client = reqwest::Client::builder()
            .timeout(config.timeout)
            .user_agent(concat!("loopwatch/", env!("CARGO_PKG_VERSION")))
            .build()?;
        Ok(Self {
            url,
            secret: config.secret,
            client,
        })
    }
}

impl Sink for WebhookSink {
    const NAME: &'static str = "webhook";

    async fn deliver(&mut self, signal: &Signal) -> Result<(), DeliveryError> {
        let body = serde_json::to_vec(signal)
            .map_err(|e| DeliveryError::Rejected(format!("signal to JSON: {e}")))?;
        let mut request = self
            .client
            .post(&self.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json");
        if let Some(secret) = &self.secret {
            request = request.header(SIGNATURE_HEADER, signature(secret.as_bytes(), &body));
        }
        let response = request.body(body).send().await.map_err(|e| {
            // Timeouts, refused or reset connections: the endpoint may come back.
            DeliveryError::Retryable(format!("webhook request: {e}"))
        })?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else if is_retryable_status(status) {
            Err(DeliveryError::Retryable(format!(
                "webhook answered {status}"
            )))
        } else {
            Err(DeliveryError::Rejected(format!(
                "webhook answered {status}"
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signature_matches_rfc4231_case_2() {
        // RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
        assert_eq!(
            signature(b"Jefe", b"what do ya want for nothing?"),
            "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn retry_classification() {
        for code in [500, 502, 503, 504, 408, 429] {
            let status = StatusCode::from_u16(code).expect("valid status");
            assert!(is_retryable_status(status), "{code} must be retried");
        }
        for code in [400, 401, 403, 404, 410, 413, 422, 301, 304] {
            let status = StatusCode::from_u16(code).expect("valid status");
            assert!(!is_retryable_status(status), "{code} must not be retried");
        }
    }
}
