//! The forwarder's worker: takes requests off the queue, batches what is already waiting
//! (raw bytes concatenated, up to `batch_max_bytes`, waiting at most `batch_timeout` for
//! more), and exports each batch with up to `concurrency` RPCs in flight.
//!
//! Batching needs no decoding: an `ExportTraceServiceRequest` has one field, the repeated
//! `resource_spans` (field 1), and protobuf merges repeated fields of concatenated messages,
//! so the concatenation of encoded requests is the encoding of the request holding all their
//! `resource_spans` in order.
//!
//! A failed export that will be retried gives its delivery slot back while it sleeps in
//! backoff, so a slow or failing batch never blocks the others. On shutdown the `flush` token
//! wakes every sleeping retry once, so each is tried at once; a retry that fails again keeps
//! following its backoff schedule (`initial·2ⁿ` up to `max_backoff`) until the drain
//! deadline aborts it. (Capping drain retries at a fixed 100 ms instead made a drain against
//! a refusing downstream export each pending batch ten times a second.)
//!
//! In persistent mode a batch's requests are deleted from the store once it is delivered or
//! given up; a batch still pending when the worker is aborted stays on disk for the next start.

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::net::log_limit::{self, LogLimit};
use crate::net::retry::{classify_status, is_transport_failure, RetryDecision, RetryPolicy};

use super::client::ExportBody;
use super::health::DownstreamHealth;
use super::queue::{ForwardQueue, QueuedRequest};
use super::stats::{DeliveryLatency, DropReason, ForwarderStats};
use super::store::{blocking, DiskQueue};
use super::{ExportClient, ForwarderConfig};

/// What the worker and its delivery tasks share.
pub(super) struct Shared {
    pub(super) client: Option<ExportClient>,
    pub(super) config: ForwarderConfig,
    pub(super) stats: Arc<ForwarderStats>,
    pub(super) health: Option<Arc<DownstreamHealth>>,
    pub(super) flush: CancellationToken,
    pub(super) slots: Arc<Semaphore>,
    /// The persistent queue, if on.
    pub(super) store: Option<Arc<DiskQueue>>,
}

impl Shared {
    /// Deletes a batch that left the forwarder (delivered or given up) from the store.
    fn forget(&self, batch: &Batch) {
        let Some(store) = &self.store else { return };
        let keys: Vec<u64> = batch.items.iter().filter_map(|i| i.key).collect();
        if let Err(error) = blocking(|| store.remove(&keys)) {
            if let Some(failures) = REMOVE_LOG.hit() {
                tracing::warn!(%error, requests = keys.len(), failures, "could not delete delivered requests from the persistent queue; deleted once it heals, else sent again after a restart (at most one such line per 10 s, `failures` since the last)");
            }
        }
    }
}

/// Several queued requests sent as one export.
struct Batch {
    items: Vec<QueuedRequest>,
    bytes: usize,
}

impl Batch {
    fn requests(&self) -> u64 {
        self.items.len() as u64
    }
    fn spans(&self) -> u64 {
        self.items.iter().map(|i| i.spans).sum()
    }
    /// The items' bytes, sent back to back as one request (not joined here: the encoder
    /// copies each part into the gRPC frame).
    fn body(&self) -> ExportBody {
        ExportBody::new(
            self.items
                .iter()
                .flat_map(|i| i.bytes.parts().iter().cloned())
                .collect(),
        )
    }
}

/// Runs until the queue is closed (via `close`) and drained, or every sender is gone.
pub(super) async fn run(
    mut rx: mpsc::UnboundedReceiver<QueuedRequest>,
    mut close: oneshot::Receiver<()>,
    queue: ForwardQueue,
    shared: Arc<Shared>,
) {
    let mut tasks = JoinSet::new();
    let mut closing = false;
    let mut carry: Option<QueuedRequest> = None;
    loop {
        // The first request, then a delivery slot: while every slot is busy, requests
        // accumulate in the queue and go out together in the next batch.
        let first = match carry.take() {
            Some(item) => Some(item),
            None => tokio::select! {
                biased;
                _ = &mut close, if !closing => {
                    closing = true;
                    queue.close();
                    rx.close();
                    continue;
                }
                item = rx.recv() => item,
            },
        };
        let Some(first) = first else { break };
        let slot = tokio::select! {
            biased;
            _ = &mut close, if !closing => {
                closing = true;
                queue.close();
                rx.close();
                carry = Some(first);
                continue;
            }
            slot = Arc::clone(&shared.slots).acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        shared.stats.dequeued();
        let (batch, rest) = gather(&mut rx, first, &shared).await;
        carry = rest;
        while tasks.try_join_next().is_some() {}
        if shared.client.is_some() {
            tasks.spawn(deliver(batch, Arc::clone(&shared), slot));
        } else {
            shared.forget(&batch);
            shared.stats.discarded(batch.requests(), batch.spans());
        }
    }
    while tasks.join_next().await.is_some() {}
}

/// Adds queued requests to `first` up to `batch_max_bytes`, waiting up to `batch_timeout`
/// for more; returns the batch and a request that did not fit (sent next).
async fn gather(
    rx: &mut mpsc::UnboundedReceiver<QueuedRequest>,
    first: QueuedRequest,
    shared: &Shared,
) -> (Batch, Option<QueuedRequest>) {
    let max = shared.config.batch_max_bytes;
    let deadline = Instant::now() + shared.config.batch_timeout;
    let mut batch = Batch {
        bytes: first.bytes.len(),
        items: vec![first],
    };
    while batch.bytes < max {
        let next = match rx.try_recv() {
            Ok(item) => item,
            Err(mpsc::error::TryRecvError::Disconnected) => break,
            Err(mpsc::error::TryRecvError::Empty) => {
                if Instant::now() >= deadline {
                    break;
                }
                match tokio::time::timeout_at(deadline.into(), rx.recv()).await {
                    Ok(Some(item)) => item,
                    Ok(None) | Err(_) => break,
                }
            }
        };
        if batch.bytes + next.bytes.len() > max {
            return (batch, Some(next));
        }
        shared.stats.dequeued();
        batch.bytes += next.bytes.len();
        batch.items.push(next);
    }
    (batch, None)
}

/// Rate limit of the WARN about deletions from the persistent queue that failed.
static REMOVE_LOG: LogLimit = LogLimit::new(log_limit::DEFAULT_INTERVAL);
/// Rate limit of the WARN about downstream partial rejections.
static PARTIAL_LOG: LogLimit = LogLimit::new(log_limit::DEFAULT_INTERVAL);
/// Rate limits of the WARN about dropped exports, per [`DropReason`] (index by discriminant).
static DROP_LOG: [LogLimit; DropReason::ALL.len()] = [
    LogLimit::new(log_limit::DEFAULT_INTERVAL),
    LogLimit::new(log_limit::DEFAULT_INTERVAL),
    LogLimit::new(log_limit::DEFAULT_INTERVAL),
];

/// Exports one batch, retrying retryable failures with backoff; the delivery slot is given
/// back while sleeping. The batch's admission slots are released when this returns.
async fn deliver(batch: Batch, shared: Arc<Shared>, slot: OwnedSemaphorePermit) {
    let Some(mut client) = shared.client.clone() else {
        return;
    };
    let stats = &shared.stats;
    let (requests, spans) = (batch.requests(), batch.spans());
    let body = batch.body();
    let oldest = batch.items.iter().map(|i| i.enqueued).min();
    let policy = RetryPolicy {
        initial: shared.config.initial_backoff,
        max: shared.config.max_backoff,
        max_elapsed: Some(shared.config.max_elapsed_retry),
    };
    let mut backoff = policy.start();
    let mut slot = Some(slot);
    loop {
        let started = Instant::now();
        stats.export_started(requests);
        let result = client.export(body.clone()).await;
        stats.export_ended(requests);
        let status = match result {
            Ok(response) => {
                if let Some(health) = &shared.health {
                    health.reached();
                }
                if let Some(partial) = response.partial_success.filter(|p| p.rejected_spans > 0) {
                    let rejected = u64::try_from(partial.rejected_spans).unwrap_or(0);
                    stats.downstream_rejected(rejected);
                    if let Some(exports) = PARTIAL_LOG.hit() {
                        tracing::warn!(
                            rejected_spans = rejected,
                            error_message = %partial.error_message,
                            exports,
                            "downstream rejected part of a forwarded request (counted in loopwatch_forward_downstream_rejected_spans_total; at most one such line per 10 s, `exports` since the last)"
                        );
                    }
                }
                shared.forget(&batch);
                stats.delivered(
                    requests,
                    spans,
                    DeliveryLatency {
                        export: started.elapsed(),
                        since_enqueued: oldest.map(|t| t.elapsed()).unwrap_or_default(),
                    },
                );
                return;
            }
            Err(status) => status,
        };
        let decision = classify_status(&status);
        if let Some(health) = &shared.health {
            let unreachable = is_transport_failure(&status)
                || matches!(
                    status.code(),
                    tonic::Code::Unavailable | tonic::Code::DeadlineExceeded
                );
            if unreachable {
                health.unreachable(&format_args!("{:?}: {}", status.code(), status.message()));
            } else {
                health.reached();
            }
        }
        let reason = match decision {
            RetryDecision::DoNotRetry => DropReason::NonRetryable,
            RetryDecision::Retry { after } => match backoff.next_delay(after) {
                Some(delay) => {
                    // Once shutdown began the flush token no longer wakes anyone: the wait
                    // is the backoff's, bounded by the drain deadline (which aborts it).
                    let flushing = shared.flush.is_cancelled();
                    tracing::debug!(code = ?status.code(), message = status.message(), ?delay, requests, "export failed, retrying");
                    drop(slot.take());
                    stats.backoff_started(requests);
                    tokio::select! {
                        _ = tokio::time::sleep(delay) => {}
                        _ = shared.flush.cancelled(), if !flushing => {}
                    }
                    // Back in line for a delivery slot (still counted as in backoff).
                    match Arc::clone(&shared.slots).acquire_owned().await {
                        Ok(s) => slot = Some(s),
                        Err(_) => return,
                    }
                    stats.backoff_ended(requests);
                    stats.retried();
                    continue;
                }
                None => DropReason::RetriesExhausted,
            },
        };
        shared.forget(&batch);
        stats.dropped(reason, requests, spans);
        if let Some(drops) = DROP_LOG[reason as usize].hit() {
            tracing::warn!(code = ?status.code(), message = status.message(), requests, spans, reason = reason.as_str(), drops,
                "dropped forwarded spans: the downstream refused them (counted in loopwatch_spans_dropped_total; at most one such line per reason per 10 s, `drops` exports since the last)");
        } else {
            tracing::debug!(code = ?status.code(), message = status.message(), requests, spans, reason = reason.as_str(), "dropped forwarded spans");
        }
        return;
    }
}
