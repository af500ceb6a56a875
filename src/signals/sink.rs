//! What every sink shares: the [`Sink`] trait, its bounded drop-oldest [`SinkQueue`]
//! with counters, and the delivery task that retries with exponential backoff.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use super::config::RetryConfig;
use super::Signal;
use crate::detector::Action;
use crate::signals::class_queue::{ClassQueue, Pushed};

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

/// A destination that receives signals one at a time, in order.
pub trait Sink: Send + 'static {
    /// Short name used in logs and [`super::SinkStats::sink`]: `redis`, `nats`, `webhook`.
    const NAME: &'static str;

    /// One delivery attempt; connects lazily, so a sink that starts down comes up later.
    fn deliver(
        &mut self,
        signal: &Signal,
    ) -> impl Future<Output = Result<(), DeliveryError>> + Send;

    /// Checks once, at start-up, that the sink can be reached (connects and, where the
    /// sink has one, runs a harmless command), so an unreachable sink is reported before
    /// the first signal needs it. Nothing is sent. The default checks nothing (a webhook:
    /// any request to it could have effects).
    fn check(&mut self) -> impl Future<Output = Result<(), DeliveryError>> + Send {
        std::future::ready(Ok(()))
    }
}

/// Bounded FIFO of one sink. `push` never blocks: when full it drops the oldest queued
/// signal that is not a kill (warn or info); a kill is dropped only when the queue holds
/// nothing but kills (then the oldest kill, or the new signal itself when it is not a kill).
/// The one being delivered is not in the queue and is never dropped. Drops are counted by
/// action (`dropped_kills`, and every drop in `dropped`).
#[derive(Debug)]
pub struct SinkQueue {
    pub(crate) name: &'static str,
    capacity: usize,
    /// Warnings and infos (class 0), kills (class 1), leaving in arrival order.
    items: Mutex<ClassQueue<Arc<Signal>, 2>>,
    notify: Notify,
    closed: AtomicBool,
    in_flight: AtomicBool,
    pub(crate) delivered: AtomicU64,
    pub(crate) failed_attempts: AtomicU64,
    pub(crate) dropped: AtomicU64,
    /// Of `dropped`, the kill signals.
    pub(crate) dropped_kills: AtomicU64,
    pub(crate) rejected: AtomicU64,
}

/// Whether a signal asks the agent runtime to stop the run, for good (`kill`) or until
/// someone approves it (`require_approval`): both are kept over warns when a queue is full.
fn is_kill(signal: &Signal) -> bool {
    matches!(signal.action, Action::Kill | Action::RequireApproval)
}

impl SinkQueue {
    /// An empty queue holding at most `capacity` signals (at least 1).
    pub fn new(name: &'static str, capacity: usize) -> Self {
        Self {
            name,
            capacity: capacity.max(1),
            items: Mutex::new(ClassQueue::new(capacity)),
            notify: Notify::new(),
            closed: AtomicBool::new(false),
            in_flight: AtomicBool::new(false),
            delivered: AtomicU64::new(0),
            failed_attempts: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            dropped_kills: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        }
    }

    fn items(&self) -> MutexGuard<'_, ClassQueue<Arc<Signal>, 2>> {
        // A panic while holding this lock cannot leave the deque inconsistent.
        self.items
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Enqueues `signal`; when full, drops (and counts) the oldest queued warn/info
    /// signal, or the oldest kill when only kills are queued (a new warn/info is then
    /// dropped itself rather than push out a kill).
    /// Shared with the other sinks and the recent ring (one copy per detection).
    pub fn push(&self, signal: Arc<Signal>) {
        let class = usize::from(is_kill(&signal));
        let dropped = match self.items().push(class, signal) {
            Pushed::Queued => None,
            Pushed::Evicted { item, .. } | Pushed::Refused(item) => Some(item),
        };
        if let Some(old) = dropped {
            let kill = is_kill(&old);
            if kill {
                self.dropped_kills.fetch_add(1, Ordering::Relaxed);
            }
            let total = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if total == 1 || kill {
                tracing::warn!(sink = self.name, signal_id = %old.id, trace_id = %old.trace_id,
                    action = %old.action, capacity = self.capacity,
                    "signal queue full, dropping a signal (warnings go before kills)");
            } else {
                tracing::debug!(sink = self.name, signal_id = %old.id, dropped_total = total,
                    "signal queue full, dropped a warn/info signal");
            }
        }
        self.notify.notify_one();
    }

    fn pop(&self) -> Option<Arc<Signal>> {
        let mut items = self.items();
        let next = items.pop_front();
        // Set under the lock so `depth` never misses a signal moving to in-flight.
        self.in_flight.store(next.is_some(), Ordering::Relaxed);
        next
    }

    /// Signals waiting or being delivered.
    pub fn depth(&self) -> u64 {
        let items = self.items();
        items.len() as u64 + u64::from(self.in_flight.load(Ordering::Relaxed))
    }

    /// Asks the task to exit once the queue is empty.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notify.notify_one();
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

/// The task of one sink: takes signals in order and delivers each, retrying retryable
/// failures with backoff until delivered; exits when closed and drained.
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
        tracing::warn!(sink = S::NAME, %reason,
            "signal sink unreachable at start-up; signals are queued and retried with backoff");
    }
    loop {
        let Some(signal) = queue.pop() else {
            if queue.closed.load(Ordering::Acquire) {
                break;
            }
            queue.notify.notified().await;
            continue;
        };
        let mut attempt: u32 = 0;
        loop {
            match sink.deliver(&signal).await {
                Ok(()) => {
                    queue.delivered.fetch_add(1, Ordering::Relaxed);
                    if down {
                        down = false;
                        tracing::info!(sink = S::NAME, signal_id = %signal.id, attempts = attempt + 1,
                            "signal sink recovered");
                    }
                    break;
                }
                Err(DeliveryError::Rejected(reason)) => {
                    queue.failed_attempts.fetch_add(1, Ordering::Relaxed);
                    queue.rejected.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(sink = S::NAME, signal_id = %signal.id, trace_id = %signal.trace_id,
                        %reason, "signal rejected by sink, not retried");
                    break;
                }
                Err(DeliveryError::Retryable(reason)) => {
                    queue.failed_attempts.fetch_add(1, Ordering::Relaxed);
                    let delay = backoff(&retry, attempt);
                    if !down {
                        down = true;
                        tracing::warn!(sink = S::NAME, signal_id = %signal.id, %reason,
                            "signal sink down, retrying with backoff");
                    } else {
                        tracing::debug!(sink = S::NAME, signal_id = %signal.id, %reason, attempt,
                            ?delay, "signal delivery failed again");
                    }
                    attempt = attempt.saturating_add(1);
                    tokio::time::sleep(delay).await;
                }
            }
        }
    }
    queue.in_flight.store(false, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signal(id: &str) -> Signal {
        Signal {
            schema: super::super::SIGNAL_SCHEMA.into(),
            id: id.into(),
            occurrence: 1,
            severity: super::super::Severity::Warn,
            time_unix_nano: 1,
            trace_id: "00".repeat(16).into(),
            run_key: "run".into(),
            service_name: None,
            agent_name: None,
            profile: "nudge".into(),
            action: super::super::Action::Warn,
            pattern: "repeated_call".into(),
            tool_names: super::super::SignalStrings::new(),
            count: 5,
            window: 10,
            fingerprints: super::super::SignalStrings::new(),
            span_ids: vec![],
            first_span_id: "00".repeat(8).into(),
            message: String::new(),
        }
    }

    #[test]
    fn full_queue_drops_oldest_and_counts() {
        let queue = SinkQueue::new("test", 2);
        for id in ["a", "b", "c", "d"] {
            queue.push(Arc::new(signal(id)));
        }
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 2);
        assert_eq!(queue.dropped_kills.load(Ordering::Relaxed), 0);
        assert_eq!(queue.depth(), 2);
        assert_eq!(queue.pop().map(|s| s.id.clone()), Some("c".into()));
        assert_eq!(queue.depth(), 2, "in-flight signal counts toward depth");
        assert_eq!(queue.pop().map(|s| s.id.clone()), Some("d".into()));
        assert_eq!(queue.pop(), None);
        assert_eq!(queue.depth(), 0);
    }

    fn kill(id: &str) -> Signal {
        Signal {
            action: Action::Kill,
            severity: crate::detector::Severity::Kill,
            ..signal(id)
        }
    }

    #[test]
    fn full_queue_drops_warnings_before_kills() {
        let queue = SinkQueue::new("test", 3);
        queue.push(Arc::new(kill("k1")));
        queue.push(Arc::new(signal("w1")));
        queue.push(Arc::new(kill("k2")));
        // Full: the warning goes, though k1 is older.
        queue.push(Arc::new(kill("k3")));
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 1);
        assert_eq!(queue.dropped_kills.load(Ordering::Relaxed), 0);
        // Only kills queued: a new warning is the one dropped.
        queue.push(Arc::new(signal("w2")));
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 2);
        assert_eq!(queue.dropped_kills.load(Ordering::Relaxed), 0);
        // Only kills queued and a kill comes: the oldest kill goes.
        queue.push(Arc::new(kill("k4")));
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 3);
        assert_eq!(queue.dropped_kills.load(Ordering::Relaxed), 1);
        let order: Vec<super::super::CompactString> =
            std::iter::from_fn(|| queue.pop().map(|s| s.id.clone())).collect();
        assert_eq!(order, ["k2", "k3", "k4"]);
    }

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
