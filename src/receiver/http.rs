//! OTLP/HTTP receiver: `POST /v1/traces` (or `receiver.traces_url_path`) with `application/x-protobuf` or
//! `application/json` bodies, `Content-Encoding` identity/gzip/zstd/deflate.
//!
//! Responses follow the OTLP/HTTP spec: 200 with an `ExportTraceServiceResponse` in the
//! request's content type; errors carry a `google.rpc.Status` (JSON `{"code","message"}`
//! for JSON requests, protobuf for protobuf requests); 503 with `Retry-After` on refusal.

use std::future::Future;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{DefaultBodyLimit, State};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use bytes::Bytes;
use http::header::{CONTENT_ENCODING, CONTENT_TYPE, RETRY_AFTER};
use http::{HeaderMap, HeaderValue, StatusCode};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::Message;

use crate::ingest::limits::DecodedBytes;
use crate::ingest::{AcceptError, IncomingRequest, SpanSink};

use super::decode::{decompress, read_protobuf_budgeted, Compression};
use super::error::ReceiveError;
use super::partial::{decode_json_partial, Partial};
use super::stats::ReceiverStats;
use super::ReceiverOptions;
use crate::otlp::rpc_status::RpcStatus;

pub use crate::otlp::TRACES_PATH;

/// The payload format of an OTLP/HTTP request (and of its response).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// `application/x-protobuf`.
    Protobuf,
    /// `application/json` (OTLP/JSON).
    Json,
}

impl Format {
    /// Parses a `Content-Type` (parameters such as `charset` are ignored).
    ///
    /// # Errors
    /// [`ReceiveError::UnsupportedContentType`] for anything else.
    pub fn from_content_type(value: &str) -> Result<Self, ReceiveError> {
        let media = value.split(';').next().unwrap_or("").trim();
        if media.eq_ignore_ascii_case("application/x-protobuf")
            || media.eq_ignore_ascii_case("application/protobuf")
        {
            Ok(Self::Protobuf)
        } else if media.eq_ignore_ascii_case("application/json") {
            Ok(Self::Json)
        } else {
            Err(ReceiveError::UnsupportedContentType(media.to_owned()))
        }
    }

    fn content_type(self) -> HeaderValue {
        match self {
            Self::Protobuf => HeaderValue::from_static("application/x-protobuf"),
            Self::Json => HeaderValue::from_static("application/json"),
        }
    }
}

struct HttpState {
    sink: Arc<dyn SpanSink>,
    options: ReceiverOptions,
    stats: Arc<ReceiverStats>,
}

/// The axum router serving `POST` on `options.traces_url_path` (`/v1/traces` by default;
/// checked by [`super::ReceiverConfig::validate`]: a path axum would refuse is replaced by
/// the default here rather than panic), mergeable into a larger router.
pub fn router(
    sink: Arc<dyn SpanSink>,
    options: ReceiverOptions,
    stats: Arc<ReceiverStats>,
) -> Router {
    let path = match options.traces_url_path.as_ref() {
        path if super::route_path_problem(path).is_none() => path.to_owned(),
        _ => TRACES_PATH.to_owned(),
    };
    let state = Arc::new(HttpState {
        sink,
        options,
        stats,
    });
    Router::new()
        .route(&path, post(export))
        // The body is read under our own limit so the 413 carries an OTLP Status.
        .layer(DefaultBodyLimit::disable())
        .with_state(state)
}

/// Serves OTLP/HTTP on `listener` until `shutdown` resolves, then stops accepting and
/// finishes in-flight requests.
///
/// # Errors
/// An I/O error from the listener.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    sink: Arc<dyn SpanSink>,
    options: ReceiverOptions,
    stats: Arc<ReceiverStats>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use axum::serve::ListenerExt;
    // No Nagle: an OTLP response must not wait ~40 ms for a delayed ACK.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(sink, options, stats))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn export(State(state): State<Arc<HttpState>>, headers: HeaderMap, body: Body) -> Response {
    let content_type = header_str(&headers, CONTENT_TYPE);
    let format = match Format::from_content_type(&content_type) {
        Ok(format) => format,
        Err(err) => return reject(&state, Format::Json, &err, 0),
    };
    // One of `receiver.max_concurrent_requests`, without waiting.
    let _request_slot = match state.options.requests.try_take() {
        Ok(slot) => slot,
        Err(err) => return reject(&state, format, &err, 0),
    };
    // The body first, whole, under the slow-client rules (deadline, minimum rate, counted
    // in the decoded-bytes budget), and only then a forward-queue slot: a stalled client
    // holds none, and a refusal costs no decoding.
    let mut decoded = match super::reserve_decoded(state.sink.as_ref(), &state.options, 0).await {
        Ok(decoded) => decoded,
        Err(refused) => return reject(&state, format, &ReceiveError::Refused(refused), 0),
    };
    let limit = state.options.max_recv_msg_size;
    let rules = state.options.body_rules(limit);
    let body = match super::body::read_body(body, &rules, &mut decoded).await {
        Ok(body) => body,
        Err(err) => return reject(&state, format, &err, 0),
    };
    let admission = match super::admit(state.sink.as_ref(), &state.options).await {
        Ok(admission) => admission,
        Err(refused) => return reject(&state, format, &ReceiveError::Refused(refused), 0),
    };
    let (incoming, partial, decoded) =
        match read_request(&state, format, &headers, body, decoded).await {
            Ok(read) => read,
            Err(err) => return reject(&state, format, &err, 0),
        };
    let spans = incoming.span_count();
    let accepted = super::heavy::run_request(incoming.encoded_len(), || {
        state.sink.accept(admission, incoming)
    });
    // The request's views are gone once the span path has it: its budget goes back.
    drop(decoded);
    if let Err(refused) = accepted {
        return reject(&state, format, &ReceiveError::Refused(refused), spans);
    }
    state.stats.record_accepted(spans);
    let partial_success = partial.to_otlp();
    if let Some(p) = &partial_success {
        state.stats.record_partial(
            partial.rejected.len() as u64,
            partial.replaced_strings as u64,
            &p.error_message,
        );
    }
    let response = ExportTraceServiceResponse { partial_success };
    let body = match format {
        Format::Protobuf => response.encode_to_vec(),
        Format::Json => serde_json::to_vec(&response).unwrap_or_else(|_| b"{}".to_vec()),
    };
    (
        StatusCode::OK,
        [(CONTENT_TYPE, format.content_type())],
        body,
    )
        .into_response()
}

fn header_str(headers: &HeaderMap, name: http::header::HeaderName) -> String {
    headers
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default()
}

/// Decompresses and decodes the body, counting it in `decoded` (its decompressed size,
/// then the views the wire reader builds; for OTLP/JSON, what
/// [`crate::otlp::json::shape::scan`] bounds its decoding at, before it is parsed).
/// Returns the request, what was left out of it
/// (spans that could not be read, strings replaced) and the reservation, which the caller
/// holds until the span path has taken the request.
async fn read_request(
    state: &HttpState,
    format: Format,
    headers: &HeaderMap,
    body: Bytes,
    mut decoded: DecodedBytes,
) -> Result<(IncomingRequest, Partial, DecodedBytes), ReceiveError> {
    let compression = Compression::parse(&header_str(headers, CONTENT_ENCODING))?;
    let limit = state.options.max_recv_msg_size;
    let compressed = compression != Compression::Identity;
    let bytes = decompress(compression, body, limit)?;
    let limits = state.sink.read_limits();
    let counted = match format {
        // Decompressed bytes are new memory.
        Format::Protobuf if compressed => bytes.len(),
        Format::Protobuf => 0,
        // An OTLP/JSON body is measured before it is parsed: its span and value caps
        // applied, and what its `serde_json::Value` tree and prost request take counted.
        Format::Json => {
            let shape = super::decode::check_json_shape(&bytes, limits)?;
            shape
                .decoded_bytes
                .saturating_add(if compressed { bytes.len() } else { 0 })
        }
    };
    if counted > 0 && !decoded.grow(counted, state.options.admission_wait).await {
        return Err(ReceiveError::Refused(AcceptError::InFlightLimit));
    }
    let read = match format {
        Format::Protobuf => {
            let request = read_protobuf_budgeted(bytes, limits, &mut decoded)?;
            super::partial::some_span_read(&request)?;
            let partial = Partial {
                rejected: request.rejected().to_vec(),
                replaced_strings: 0,
            };
            (IncomingRequest::Protobuf(request), partial)
        }
        Format::Json => {
            let decoded_json = decode_json_partial(&bytes)?;
            super::decode::check_span_count(&decoded_json.request, limits.max_spans)?;
            let sender = header_str(headers, http::header::USER_AGENT);
            state
                .stats
                .otlp_json_unknown_fields
                .record(&sender, &decoded_json.unknown);
            (
                IncomingRequest::Json(decoded_json.request),
                decoded_json.partial,
            )
        }
    };
    Ok((read.0, read.1, decoded))
}

fn reject(state: &HttpState, format: Format, err: &ReceiveError, spans: u64) -> Response {
    state.stats.record_rejected(err.reason(), spans);
    let code = err.grpc_code() as i32;
    let message = err.to_string();
    let body = match format {
        Format::Json => serde_json::json!({ "code": code, "message": message })
            .to_string()
            .into_bytes(),
        Format::Protobuf => RpcStatus {
            code,
            message,
            details: Vec::new(),
        }
        .encode_to_vec(),
    };
    let mut response = (
        err.http_status(),
        [(CONTENT_TYPE, format.content_type())],
        body,
    )
        .into_response();
    if err.is_retryable() {
        let secs = state.options.retry_after.as_secs_f64().ceil().max(1.0) as u64;
        response
            .headers_mut()
            .insert(RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        assert_eq!(
            Format::from_content_type("application/json; charset=utf-8").ok(),
            Some(Format::Json)
        );
        assert_eq!(
            Format::from_content_type("Application/X-Protobuf").ok(),
            Some(Format::Protobuf)
        );
        let err = Format::from_content_type("text/plain")
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("unsupported content type `text/plain`; accepted: application/x-protobuf, application/json")
        );
    }
}
