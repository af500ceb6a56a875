//! The forwarder's worker: takes requests off the queue (up to `concurrency` at once) and
//! exports each, retrying retryable failures with backoff.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

use super::queue::QueuedRequest;
use super::retry::{classify_status, Backoff, RetryDecision};
use super::stats::{DeliveryLatency, DropReason, ForwarderStats};
use super::{ExportClient, ForwarderConfig};

/// Runs until the queue is closed (via `close`) and drained, or every sender is gone.
pub(super) async fn run(
    mut rx: mpsc::Receiver<QueuedRequest>,
    mut close: oneshot::Receiver<()>,
    client: Option<ExportClient>,
    config: ForwarderConfig,
    stats: Arc<ForwarderStats>,
) {
    let slots = Arc::new(Semaphore::new(config.concurrency));
    let config = Arc::new(config);
    let mut tasks = JoinSet::new();
    let mut closing = false;
    loop {
        let Ok(slot) = Arc::clone(&slots).acquire_owned().await else {
            break;
        };
        let item = tokio::select! {
            biased;
            _ = &mut close, if !closing => {
                rx.close();
                closing = true;
                continue;
            }
            item = rx.recv() => item,
        };
        let Some(item) = item else { break };
        stats.dequeued();
        while tasks.try_join_next().is_some() {}
        match &client {
            Some(client) => {
                tasks.spawn(deliver(
                    client.clone(),
                    item,
                    Arc::clone(&config),
                    Arc::clone(&stats),
                    slot,
                ));
            }
            None => stats.discarded(),
        }
    }
    while tasks.join_next().await.is_some() {}
}

/// Exports one request, retrying retryable failures with backoff.
async fn deliver(
    mut client: ExportClient,
    item: QueuedRequest,
    config: Arc<ForwarderConfig>,
    stats: Arc<ForwarderStats>,
    _slot: OwnedSemaphorePermit,
) {
    let mut backoff = Backoff::new(
        config.initial_backoff,
        config.max_backoff,
        config.max_elapsed_retry,
    );
    loop {
        let started = std::time::Instant::now();
        let status = match client.export(item.bytes.clone()).await {
            Ok(response) => {
                if let Some(partial) = response.partial_success.filter(|p| p.rejected_spans > 0) {
                    let rejected = u64::try_from(partial.rejected_spans).unwrap_or(0);
                    stats.downstream_rejected(rejected);
                    tracing::warn!(
                        rejected_spans = rejected,
                        error_message = %partial.error_message,
                        "downstream rejected part of a forwarded request"
                    );
                }
                stats.delivered(
                    item.spans,
                    DeliveryLatency {
                        export: started.elapsed(),
                        since_enqueued: item.enqueued.elapsed(),
                    },
                );
                return;
            }
            Err(status) => status,
        };
        let reason = match classify_status(&status) {
            RetryDecision::DoNotRetry => DropReason::NonRetryable,
            RetryDecision::Retry { after } => match backoff.next_delay(after) {
                Some(delay) => {
                    tracing::debug!(code = ?status.code(), message = status.message(), ?delay, "export failed, retrying");
                    tokio::time::sleep(delay).await;
                    stats.retried();
                    continue;
                }
                None => DropReason::RetriesExhausted,
            },
        };
        let first = stats.dropped(reason, item.spans);
        if first {
            tracing::warn!(code = ?status.code(), message = status.message(), spans = item.spans, reason = reason.as_str(), "dropped a forwarded request (further drops for this reason are logged at debug)");
        } else {
            tracing::debug!(code = ?status.code(), message = status.message(), spans = item.spans, reason = reason.as_str(), "dropped a forwarded request");
        }
        return;
    }
}
