//! What every sink shares: the [`Sink`] trait and the delivery task that takes batches of
//! signals from the sink's [`SinkQueue`] and retries them with exponential backoff.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::config::RetryConfig;
pub use super::sink_queue::SinkQueue;
use super::Signal;

/// Why one delivery attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The sink is down, slow or overloaded: the same signal is tried again after a backoff.
    #[error("retryable: {0}")]
    Retryable(String),
    /// The sink refused this signal for good (e.g. webhook 4xx): it is dropped and counted.
    #[error("rejected: {0}")]
    Rejected(String),
}

/// A destination that receives signals in order, one at a time or in batches.
pub trait Sink: Send + 'static {
    /// Short name used in logs and [`super::SinkStats::sink`]: `redis`, `nats`, `webhook`.
    const NAME: &'static str;

    /// Most signals one delivery attempt takes ([`Sink::deliver_batch`]); 1 (the default)
    /// for a sink that delivers one at a time.
    const BATCH: usize = 1;

    /// One delivery attempt; connects lazily, so a sink that starts down comes up later.
    fn deliver(
        &mut self,
        signal: &Signal,
    ) -> impl Future<Output = Result<(), DeliveryError>> + Send;

    /// One delivery attempt of up to [`Sink::BATCH`] signals, in order, all or nothing
    /// (retried whole; the sinks that batch de-duplicate or make a retry harmless). The
    /// default delivers them one by one and stops at the first failure, which a batch of
    /// one makes exact.
    fn deliver_batch(
        &mut self,
        signals: &[Arc<Signal>],
    ) -> impl Future<Output = Result<(), DeliveryError>> + Send {
        async move {
            for signal in signals {
                self.deliver(signal).await?;
            }
            Ok(())
        }
    }

    /// Checks once, at start-up, that the sink can be reached (connects and, where the
    /// sink has one, runs a harmless command), so an unreachable sink is reported before
    /// the first signal needs it. Nothing is sent. The default checks nothing (a webhook:
    /// any request to it could have effects).
    fn check(&mut self) -> impl Future<Output = Result<(), DeliveryError>> + Send {
        std::future::ready(Ok(()))
    }
}

/// Delay before retry number `attempt` (0-based): a random time in `[d/2, d]` with
/// `d = min(max_backoff, initial_backoff · 2^attempt)`.
/// The schedule is [`crate::net::retry::RetryPolicy`], shared with the forwarder; signals are
/// retried until delivered (no max elapsed time).
pub fn backoff(retry: &RetryConfig, attempt: u32) -> Duration {
    crate::net::retry::RetryPolicy {
        initial: retry.initial_backoff,
        max: retry.max_backoff,
        max_elapsed: None,
    }
    .delay(attempt)
}

/// The task of one sink: takes signals in order, up to [`Sink::BATCH`] at a time, and
/// delivers each batch, retrying retryable failures with backoff until delivered; exits
/// when closed and drained.
///
/// Logs one warning when the sink goes down and one line when it recovers, not one per
/// failed attempt.
pub async fn run<S: Sink>(mut sink: S, queue: Arc<SinkQueue>, retry: RetryConfig) {
    let mut down = false;
    if let Err(DeliveryError::Retryable(reason) | DeliveryError::Rejected(reason)) =
        sink.check().await
    {
        // Reported as down from the start: the first delivery that succeeds says so.
        down = true;
        queue.set_healthy(false);
        tracing::warn!(sink = S::NAME, %reason,
            "signal sink unreachable at start-up; signals are queued and retried with backoff");
    }
    loop {
        let batch = queue.pop_batch(S::BATCH.max(1));
        if batch.is_empty() {
            queue.done();
            if queue.closed.load(Ordering::Acquire) {
                break;
            }
            queue.notify.notified().await;
            continue;
        }
        let n = batch.len() as u64;
        let mut attempt: u32 = 0;
        loop {
            match sink.deliver_batch(&batch).await {
                Ok(()) => {
                    queue.delivered.fetch_add(n, Ordering::Relaxed);
                    queue.set_healthy(true);
                    if down {
                        down = false;
                        tracing::info!(sink = S::NAME, signal_id = %batch[0].id, attempts = attempt + 1,
                            "signal sink recovered");
                    }
                    break;
                }
                Err(DeliveryError::Rejected(reason)) => {
                    queue.failed_attempts.fetch_add(1, Ordering::Relaxed);
                    queue.rejected.fetch_add(n, Ordering::Relaxed);
                    tracing::warn!(sink = S::NAME, signal_id = %batch[0].id, trace_id = %batch[0].trace_id,
                        signals = n, %reason, "signal rejected by sink, not retried");
                    break;
                }
                Err(DeliveryError::Retryable(reason)) => {
                    queue.failed_attempts.fetch_add(1, Ordering::Relaxed);
                    queue.set_healthy(false);
                    let delay = backoff(&retry, attempt);
                    if !down {
                        down = true;
                        tracing::warn!(sink = S::NAME, signal_id = %batch[0].id, signals = n, %reason,
                            "signal sink down, retrying with backoff");
                    } else {
                        tracing::debug!(sink = S::NAME, signal_id = %batch[0].id, %reason, attempt,
                            ?delay, "signal delivery failed again");
                    }
                    attempt = attempt.saturating_add(1);
                    tokio::time::sleep(delay).await;
                }
            }
        }
        queue.done();
    }
    queue.done();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let retry = RetryConfig {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(1),
        };
        let first = backoff(&retry, 0);
        assert!(first >= Duration::from_millis(50) && first <= Duration::from_millis(100));
        let third = backoff(&retry, 2);
        assert!(third >= Duration::from_millis(200) && third <= Duration::from_millis(400));
        let late = backoff(&retry, 40);
        assert!(late >= Duration::from_millis(500) && late <= Duration::from_secs(1));
    }
}
