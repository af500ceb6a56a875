//! `loopwatch replay`: sends recorded OTLP export requests to an OTLP/gRPC receiver.

use std::path::PathBuf;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;

use crate::scan::files::read_requests;

/// Sends each file's requests (one, or several in a JSON-lines or length-prefixed export
/// file: [`crate::scan::files`]), in order, to `endpoint` (e.g. `http://127.0.0.1:4317`),
/// waiting `delay` between requests. Returns how many requests were accepted.
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
    let mut client = TraceServiceClient::connect(endpoint.clone())
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to {endpoint}: {}", with_causes(&e)))?;
    let mut sent = 0;
    for file in files {
        for request in read_requests(file)? {
            if sent > 0 && !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            client.export(request).await.map_err(|status| {
                anyhow::anyhow!(
                    "{}: refused by {endpoint}: {}",
                    file.display(),
                    with_causes(&status)
                )
            })?;
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
