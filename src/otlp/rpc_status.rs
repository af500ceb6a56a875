//! `google.rpc` status details at the OTLP edges, with the `tonic-types` messages:
//! [`RpcStatus`] (`google.rpc.Status`, the error body of OTLP/HTTP and the content of
//! `grpc-status-details-bin`) and `RetryInfo` (the delay a server asks a client to wait
//! before retrying).

use std::time::Duration;

use bytes::Bytes;
use tonic_types::{ErrorDetails, StatusExt};

/// `google.rpc.Status`: a gRPC code, a developer-facing message and typed details.
pub use tonic_types::Status as RpcStatus;

/// Encodes a `google.rpc.Status` carrying one `RetryInfo` with `delay`: the bytes for
/// [`tonic::Status::with_details`].
pub fn status_details_with_retry(code: tonic::Code, message: &str, delay: Duration) -> Bytes {
    tonic::Status::with_error_details(code, message, ErrorDetails::with_retry_info(Some(delay)))
        .details()
        .to_vec()
        .into()
}

/// The `RetryInfo` delay carried in a status' details (`grpc-status-details-bin`), if any.
/// Malformed details or a negative delay count as absent.
pub fn retry_delay(details: &[u8]) -> Option<Duration> {
    if details.is_empty() {
        return None;
    }
    tonic::Status::with_details(tonic::Code::Unknown, "", Bytes::copy_from_slice(details))
        .get_details_retry_info()
        .and_then(|info| info.retry_delay)
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn retry_delay_round_trips() {
        let bytes = status_details_with_retry(
            tonic::Code::ResourceExhausted,
            "slow down",
            Duration::from_millis(1500),
        );
        assert_eq!(retry_delay(&bytes), Some(Duration::from_millis(1500)));
        let status = RpcStatus::decode(bytes.as_ref()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(status.code, tonic::Code::ResourceExhausted as i32);
        assert_eq!(status.message, "slow down");
        assert_eq!(
            status.details[0].type_url,
            "type.googleapis.com/google.rpc.RetryInfo"
        );
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
