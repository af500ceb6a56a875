//! The two `google.rpc` messages the OTLP edges need, as prost messages: `Status`
//! (error bodies of OTLP/HTTP, `grpc-status-details-bin`) and `RetryInfo` (the delay a
//! server asks a client to wait before retrying). Field numbers follow
//! `google/rpc/status.proto` and `google/rpc/error_details.proto`.

use std::time::Duration;

use bytes::Bytes;
use prost::Message;

/// Type URL of [`RetryInfo`] inside a `google.protobuf.Any`.
pub const RETRY_INFO_TYPE_URL: &str = "type.googleapis.com/google.rpc.RetryInfo";

/// `google.rpc.Status`: a gRPC code, a developer-facing message and typed details.
#[derive(Clone, PartialEq, Message)]
pub struct RpcStatus {
    /// The gRPC status code (`google.rpc.Code`).
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// Developer-facing error message, in English.
    #[prost(string, tag = "2")]
    pub message: String,
    /// Typed error details (e.g. [`RetryInfo`]).
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<prost_types::Any>,
}

/// `google.rpc.RetryInfo`: how long the client should wait before retrying.
#[derive(Clone, PartialEq, Message)]
pub struct RetryInfo {
    /// The delay before the next attempt.
    #[prost(message, optional, tag = "1")]
    pub retry_delay: Option<prost_types::Duration>,
}

/// Encodes a `google.rpc.Status` carrying one `RetryInfo` with `delay`: the bytes for
/// [`tonic::Status::with_details`].
pub fn status_details_with_retry(code: tonic::Code, message: &str, delay: Duration) -> Bytes {
    let retry = RetryInfo {
        retry_delay: Some(prost_types::Duration {
            seconds: i64::try_from(delay.as_secs()).unwrap_or(i64::MAX),
            nanos: i32::try_from(delay.subsec_nanos()).unwrap_or(0),
        }),
    };
    let status = RpcStatus {
        code: code as i32,
        message: message.to_owned(),
        details: vec![prost_types::Any {
            type_url: RETRY_INFO_TYPE_URL.to_owned(),
            value: retry.encode_to_vec(),
        }],
    };
    Bytes::from(status.encode_to_vec())
}

/// The `RetryInfo` delay carried in a status' details (`grpc-status-details-bin`), if any.
/// Malformed details or a negative delay count as absent.
pub fn retry_delay(details: &[u8]) -> Option<Duration> {
    if details.is_empty() {
        return None;
    }
    let status = RpcStatus::decode(details).ok()?;
    status
        .details
        .iter()
        .filter(|any| any.type_url == RETRY_INFO_TYPE_URL)
        .find_map(|any| RetryInfo::decode(any.value.as_slice()).ok()?.retry_delay)
        .and_then(|d| {
            let secs = u64::try_from(d.seconds).ok()?;
            let nanos = u32::try_from(d.nanos).ok()?;
            Some(Duration::new(secs, nanos))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_round_trips() {
        let bytes = status_details_with_retry(
            tonic::Code::ResourceExhausted,
            "slow down",
            Duration::from_millis(1500),
        );
        assert_eq!(retry_delay(&bytes), Some(Duration::from_millis(1500)));
    }

    #[test]
    fn retry_delay_absent_or_garbage() {
        assert_eq!(retry_delay(&[]), None);
        assert_eq!(retry_delay(&[0xff, 0xff, 0xff]), None);
        let no_retry = RpcStatus {
            code: 8,
            message: "x".into(),
            details: vec![],
        };
        assert_eq!(retry_delay(&no_retry.encode_to_vec()), None);
    }
}
