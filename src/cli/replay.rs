//! `loopwatch replay`: sends recorded OTLP export requests to an OTLP/gRPC receiver.

use std::path::PathBuf;
use std::time::Duration;

use crate::cli::scan::files::read_encoded_requests;
use crate::forward::{ExportBody, RawBytesCodec};

/// Sends each file's requests (one, or several in a JSON-lines or length-prefixed export
/// file: [`crate::cli::scan::files`]), in order, to `endpoint` (e.g. `http://127.0.0.1:4317`),
/// waiting `delay` between requests. Returns how many requests were accepted. Protobuf
/// requests are sent as the bytes in the file ([`read_encoded_requests`]), so fields
/// prost does not know (the pre-1.0 `instrumentation_library_spans`) reach the receiver.
///
/// Errors: unreadable/undecodable files, a connection failure, or a refused request
/// (the gRPC status is in the message).
pub async fn replay(endpoint: &str, files: &[PathBuf], delay: Duration) -> anyhow::Result<usize> {
    // `127.0.0.1:4317` means http://127.0.0.1:4317, as OTEL_EXPORTER_OTLP_ENDPOINT users expect.
    let endpoint = if endpoint.contains("://") {
        endpoint.to_string()
    } else {
        format!("http://{endpoint}")
    };
    let channel = tonic::transport::Endpoint::from_shared(endpoint.clone())
        .map_err(|e| anyhow::anyhow!("{endpoint}: {}", with_causes(&e)))?
        .connect()
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to {endpoint}: {}", with_causes(&e)))?;
    let mut client = tonic::client::Grpc::new(channel);
    let mut sent = 0;
    for file in files {
        for request in read_encoded_requests(file)? {
            if sent > 0 && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let refused = |status: tonic::Status| {
                anyhow::anyhow!(
                    "{}: refused by {endpoint}: {}",
                    file.display(),
                    with_causes(&status)
                )
            };
            client
                .ready()
                .await
                .map_err(|e| refused(tonic::Status::unavailable(with_causes(&e))))?;
            client
                .unary(
                    tonic::Request::new(ExportBody::from(request)),
                    http::uri::PathAndQuery::from_static(crate::otlp::EXPORT_PATH),
                    RawBytesCodec,
                )
                .await
                .map_err(refused)?;
            sent += 1;
        }
    }
    Ok(sent)
}

/// An error with its chain of causes, `a: b: c` (tonic's top-level text is often just
/// "transport error").
fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(c) = cause {
        let next = c.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        cause = c.source();
    }
    text
}
