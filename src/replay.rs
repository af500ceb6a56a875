//! `loopwatch replay`: sends recorded OTLP export requests to an OTLP/gRPC receiver.

use std::path::PathBuf;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;

use crate::scan::read_request;

/// Sends each file's request, in order, to `endpoint` (e.g. `http://127.0.0.1:4317`),
/// waiting `delay` between requests. Returns how many requests were accepted.
///
/// Errors: unreadable/undecodable files, a connection failure, or a refused request
/// (the gRPC status is in the message).
pub async fn replay(endpoint: &str, files: &[PathBuf], delay: Duration) -> anyhow::Result<usize> {
    let mut client = TraceServiceClient::connect(endpoint.to_string())
        .await
        .map_err(|e| anyhow::anyhow!("cannot connect to {endpoint}: {e}"))?;
    let mut sent = 0;
    for (i, file) in files.iter().enumerate() {
        if i > 0 && !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        let request = read_request(file)?;
        client
            .export(request)
            .await
            .map_err(|status| anyhow::anyhow!("{}: refused: {status}", file.display()))?;
        sent += 1;
    }
    Ok(sent)
}
