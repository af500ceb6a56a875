//! [`SignalHub`]: fans each signal out to the sinks, the recent ring and the gRPC stream.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::config::{RetryConfig, SignalsConfig};
use super::nats::NatsSink;
use super::redis::RedisSink;
use super::sink::{self, Sink, SinkQueue};
use super::webhook::WebhookSink;
use super::{Action, Signal};

/// Capacity of the broadcast channel behind the gRPC stream; a subscriber more than this
/// many signals behind skips the ones it missed.
pub const BROADCAST_CAPACITY: usize = 1024;

/// Counters of one sink at one instant (monotonic since start, except `queue_depth`),
/// for export as Prometheus metrics.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SinkStats {
    /// `redis`, `nats` or `webhook`.
    pub sink: &'static str,
    /// Signals delivered (acknowledged by the sink).
    pub delivered: u64,
    /// Delivery attempts that failed, retried or not.
    pub failed_attempts: u64,
    /// Signals dropped because the sink's queue was full (warn/info first, oldest first;
    /// kills only when the queue holds nothing else).
    pub dropped: u64,
    /// Of `dropped`, the kill signals.
    pub dropped_kills: u64,
    /// Signals the sink refused for good (e.g. webhook 4xx) and that were not retried.
    pub rejected: u64,
    /// Signals that replaced a queued signal of the same loop (delivered in its place).
    pub coalesced: u64,
    /// Signals waiting or being delivered now.
    pub queue_depth: u64,
}

/// Delivers signals to the configured sinks without ever blocking or failing the caller.
///
/// Cheap to clone (shared state). Each sink has its own bounded queue and Tokio task:
/// a sink that is down, slow or refusing never affects the others or the caller.
#[derive(Clone, Debug)]
pub struct SignalHub {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    sinks: Vec<Arc<SinkQueue>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    recent: Mutex<VecDeque<Recent>>,
    recent_capacity: usize,
    broadcast: broadcast::Sender<Arc<Signal>>,
}

/// A signal whose record is built only when something reads it ([`SignalHub::publish_deferred`]).
///
/// The hub calls `build` at most once per published signal: at publication when a sink or
/// a watcher takes it, else at the first read of the recent ring that lists it (the record
/// is then kept). The other methods answer for the record without building it, so a read
/// builds only the entries its filters keep.
pub trait DeferredSignal: Send + Sync + std::fmt::Debug {
    /// The signal record.
    fn build(&self) -> Signal;
    /// [`Signal::trace_id`] of the record (lowercase hex) is `trace_id`.
    fn has_trace_id(&self, trace_id: &str) -> bool;
    /// [`Signal::time_unix_nano`] of the record.
    fn time_unix_nano(&self) -> u64;
    /// [`Signal::action`] of the record.
    fn action(&self) -> Action;
}

/// A deferred signal in the ring, with its record once a read has built it (one
/// allocation: `Arc<Deferred<dyn DeferredSignal>>` from a sized `Deferred<D>`).
#[derive(Debug)]
struct Deferred<D: ?Sized> {
    built: std::sync::OnceLock<Signal>,
    source: D,
}

/// An entry of the recent ring: a record, or what builds it.
#[derive(Debug)]
enum Recent {
    Built(Arc<Signal>),
    Deferred(Arc<Deferred<dyn DeferredSignal>>),
}

impl Recent {
    fn matches(
        &self,
        trace_id: Option<&str>,
        since_unix_nano: Option<u64>,
        action: Option<Action>,
    ) -> bool {
        let (time, trace_matches, its_action) = match self {
            Recent::Built(s) => (
                s.time_unix_nano,
                trace_id.is_none_or(|t| s.trace_id == t),
                s.action,
            ),
            Recent::Deferred(d) => (
                d.source.time_unix_nano(),
                trace_id.is_none_or(|t| d.source.has_trace_id(t)),
                d.source.action(),
            ),
        };
        trace_matches
            && since_unix_nano.is_none_or(|since| time >= since)
            && action.is_none_or(|a| a == its_action)
    }

    /// A handle on the entry, to read once the ring's lock is released.
    fn share(&self) -> Recent {
        match self {
            Recent::Built(s) => Recent::Built(Arc::clone(s)),
            Recent::Deferred(d) => Recent::Deferred(Arc::clone(d)),
        }
    }

    fn signal(&self) -> Signal {
        match self {
            Recent::Built(s) => Signal::clone(s),
            Recent::Deferred(d) => d.built.get_or_init(|| d.source.build()).clone(),
        }
    }
}

/// Sink queues and their tasks, gathered before the hub is built.
#[derive(Default)]
struct Spawned {
    sinks: Vec<Arc<SinkQueue>>,
    tasks: Vec<JoinHandle<()>>,
}

impl Spawned {
    fn spawn<S: Sink>(&mut self, sink: S, (capacity, max_bytes): (usize, u64), retry: RetryConfig) {
        let queue = Arc::new(SinkQueue::new(S::NAME, capacity, max_bytes));
        self.tasks
            .push(tokio::spawn(sink::run(sink, Arc::clone(&queue), retry)));
        self.sinks.push(queue);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl SignalHub {
    /// Starts a task per sink whose `url` is set. Sinks connect lazily, so a sink that is
    /// down at start is retried like any other failure. Call [`SignalsConfig::validate`]
    /// first to report bad URLs at start-up.
    ///
    /// # Panics
    /// When called outside a Tokio runtime (it spawns the sink tasks).
    pub fn start(config: SignalsConfig) -> SignalHub {
        let retry = config.retry;
        let mut spawned = Spawned::default();
        if let Some(url) = config.redis.url.clone() {
            let capacity = (config.redis.queue_capacity, config.redis.queue_max_bytes);
            spawned.spawn(RedisSink::new(url, config.redis), capacity, retry);
        }
        if let Some(url) = config.nats.url.clone() {
            let capacity = (config.nats.queue_capacity, config.nats.queue_max_bytes);
            spawned.spawn(NatsSink::new(url, config.nats), capacity, retry);
        }
        if let Some(url) = config.webhook.url.clone() {
            let capacity = (
                config.webhook.queue_capacity,
                config.webhook.queue_max_bytes,
            );
            match WebhookSink::new(url, config.webhook) {
                Ok(webhook) => spawned.spawn(webhook, capacity, retry),
                Err(error) => tracing::error!(sink = "webhook", %error, "webhook sink disabled"),
            }
        }
        Self::with(spawned, config.recent_capacity)
    }

    /// A hub with no sinks: signals only go to the recent ring and the gRPC stream.
    pub fn without_sinks(recent_capacity: usize) -> SignalHub {
        Self::with(Spawned::default(), recent_capacity)
    }

    fn with(spawned: Spawned, recent_capacity: usize) -> SignalHub {
        let (broadcast, _) = broadcast::channel(BROADCAST_CAPACITY);
        SignalHub {
            inner: Arc::new(Inner {
                sinks: spawned.sinks,
                tasks: Mutex::new(spawned.tasks),
                recent: Mutex::new(VecDeque::new()),
                recent_capacity: recent_capacity.max(1),
                broadcast,
            }),
        }
    }

    /// Hands `signal` to every sink's queue, the recent ring and the gRPC stream.
    /// Synchronous; never blocks on I/O and never fails (overflow drops a sink's oldest
    /// queued signal and counts it in [`SinkStats::dropped`]).
    pub fn publish(&self, signal: Signal) {
        // One copy, shared by the sinks, the ring and the stream.
        let signal = Arc::new(signal);
        for queue in &self.inner.sinks {
            queue.push(Arc::clone(&signal));
        }
        self.keep(Recent::Built(Arc::clone(&signal)));
        // An error only means nobody is watching right now.
        let _ = self.inner.broadcast.send(signal);
    }

    /// Publishes the signal `deferred` builds, building it only when it is read: at once
    /// when a sink is configured or a `Watch` stream is open (then as [`SignalHub::publish`]),
    /// else the first time `GET /v1/signals` lists it (then kept). So a loop storm with no
    /// sink and no watcher costs no signal records, only the ring's entries. What readers
    /// see is the same.
    pub fn publish_deferred(&self, deferred: impl DeferredSignal + 'static) {
        if !self.inner.sinks.is_empty() || self.inner.broadcast.receiver_count() > 0 {
            self.publish(deferred.build());
        } else {
            let entry: Arc<Deferred<dyn DeferredSignal>> = Arc::new(Deferred {
                built: std::sync::OnceLock::new(),
                source: deferred,
            });
            self.keep(Recent::Deferred(entry));
        }
    }

    /// Appends to the recent ring, dropping its oldest entry when full (after the lock is
    /// released: dropping a signal record frees a dozen allocations).
    fn keep(&self, entry: Recent) {
        let evicted = {
            let mut recent = lock(&self.inner.recent);
            let evicted = (recent.len() >= self.inner.recent_capacity)
                .then(|| recent.pop_front())
                .flatten();
            recent.push_back(entry);
            evicted
        };
        drop(evicted);
    }

    /// Recent signals (at most `recent_capacity`, oldest first) with this `trace_id`
    /// (exact match), `time_unix_nano >= since_unix_nano` and this `action`; `None`
    /// matches any.
    ///
    /// `since` is inclusive because several signals can share a span's end time; callers
    /// that poll de-duplicate on [`Signal::id`].
    pub fn recent(
        &self,
        trace_id: Option<&str>,
        since_unix_nano: Option<u64>,
        action: Option<Action>,
    ) -> Vec<Signal> {
        // Records are built after the lock is released: the reporter publishes meanwhile.
        let matching: Vec<Recent> = lock(&self.inner.recent)
            .iter()
            .filter(|entry| entry.matches(trace_id, since_unix_nano, action))
            .map(Recent::share)
            .collect();
        matching.iter().map(Recent::signal).collect()
    }

    /// A receiver of every signal published from now on (used by the gRPC stream).
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Signal>> {
        self.inner.broadcast.subscribe()
    }

    /// Counters of each configured sink, in the order redis, nats, webhook.
    pub fn stats(&self) -> Vec<SinkStats> {
        self.inner
            .sinks
            .iter()
            .map(|q| SinkStats {
                sink: q.name,
                delivered: q.delivered.load(Ordering::Relaxed),
                failed_attempts: q.failed_attempts.load(Ordering::Relaxed),
                dropped: q.dropped.load(Ordering::Relaxed),
                dropped_kills: q.dropped_kills.load(Ordering::Relaxed),
                rejected: q.rejected.load(Ordering::Relaxed),
                coalesced: q.coalesced.load(Ordering::Relaxed),
                queue_depth: q.depth(),
            })
            .collect()
    }

    /// Flushes the sink queues best-effort: each task delivers what is queued and exits;
    /// tasks still busy after `deadline` (e.g. a sink that stays down) are aborted and
    /// their undelivered signals logged as lost. Signals published afterwards are only
    /// kept in the recent ring and the stream. Idempotent.
    pub async fn shutdown(&self, deadline: Duration) {
        for queue in &self.inner.sinks {
            queue.close();
        }
        let tasks: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.inner.tasks));
        let aborts: Vec<_> = tasks.iter().map(JoinHandle::abort_handle).collect();
        let all = futures::future::join_all(tasks);
        if tokio::time::timeout(deadline, all).await.is_err() {
            for abort in aborts {
                abort.abort();
            }
        }
        for stats in self.stats() {
            if stats.queue_depth > 0 {
                tracing::warn!(
                    sink = stats.sink,
                    lost = stats.queue_depth,
                    delivered = stats.delivered,
                    dropped = stats.dropped,
                    rejected = stats.rejected,
                    "signal sink not flushed before the shutdown deadline"
                );
            } else {
                tracing::info!(
                    sink = stats.sink,
                    delivered = stats.delivered,
                    failed_attempts = stats.failed_attempts,
                    dropped = stats.dropped,
                    rejected = stats.rejected,
                    "signal sink stopped"
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signal(trace: char, time_unix_nano: u64) -> Signal {
        Signal {
            schema: super::super::SIGNAL_SCHEMA.into(),
            id: format!("{time_unix_nano:032x}").into(),
            occurrence: 1,
            severity: super::super::Severity::Kill,
            time_unix_nano,
            trace_id: trace.to_string().repeat(32).into(),
            run_key: trace.to_string().repeat(32).into(),
            service_name: Some("svc".into()),
            agent_name: None,
            profile: "stop".into(),
            action: super::super::Action::Kill,
            pattern: "cycle".into(),
            tool_names: smallvec::smallvec!["a".into()],
            count: 6,
            window: 20,
            fingerprints: super::super::SignalStrings::new(),
            span_ids: vec![],
            first_span_id: "0".repeat(16).into(),
            message: "stop".to_owned(),
        }
    }

    #[tokio::test]
    async fn recent_filters_and_is_bounded() {
        let hub = SignalHub::without_sinks(3);
        let mut rx = hub.subscribe();
        for (trace, time) in [('a', 10), ('b', 20), ('a', 30), ('a', 40)] {
            hub.publish(signal(trace, time));
        }
        let times = |v: Vec<Signal>| v.iter().map(|s| s.time_unix_nano).collect::<Vec<_>>();
        assert_eq!(
            times(hub.recent(None, None, None)),
            vec![20, 30, 40],
            "oldest evicted"
        );
        let a = "a".repeat(32);
        assert_eq!(times(hub.recent(Some(&a), None, None)), vec![30, 40]);
        assert_eq!(
            times(hub.recent(Some(&a), Some(40), None)),
            vec![40],
            "since is inclusive"
        );
        assert_eq!(times(hub.recent(None, Some(41), None)), Vec::<u64>::new());
        assert_eq!(rx.recv().await.map(|s| s.time_unix_nano).ok(), Some(10));
        assert!(hub.stats().is_empty());
        hub.shutdown(Duration::from_millis(10)).await;
    }

    /// A deferred signal that counts how often it is built.
    #[derive(Debug)]
    struct Counted {
        signal: Signal,
        builds: Arc<std::sync::atomic::AtomicUsize>,
    }

    impl DeferredSignal for Counted {
        fn build(&self) -> Signal {
            self.builds.fetch_add(1, Ordering::Relaxed);
            self.signal.clone()
        }
        fn has_trace_id(&self, trace_id: &str) -> bool {
            self.signal.trace_id == trace_id
        }
        fn time_unix_nano(&self) -> u64 {
            self.signal.time_unix_nano
        }
        fn action(&self) -> Action {
            self.signal.action
        }
    }

    #[tokio::test]
    async fn deferred_signals_are_built_when_read_and_read_as_published_ones() {
        let builds = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let deferred = |trace, time| Counted {
            signal: signal(trace, time),
            builds: builds.clone(),
        };
        let hub = SignalHub::without_sinks(3);
        hub.publish(signal('a', 10));
        for (trace, time) in [('b', 20), ('a', 30), ('a', 40)] {
            hub.publish_deferred(deferred(trace, time));
        }
        assert_eq!(builds.load(Ordering::Relaxed), 0, "nobody read them yet");
        let times = |v: Vec<Signal>| v.iter().map(|s| s.time_unix_nano).collect::<Vec<_>>();
        let a = "a".repeat(32);
        assert_eq!(times(hub.recent(Some(&a), Some(40), None)), vec![40]);
        assert_eq!(builds.load(Ordering::Relaxed), 1, "only the match is built");
        assert_eq!(
            times(hub.recent(None, None, Some(Action::Warn))),
            Vec::<u64>::new()
        );
        assert_eq!(
            builds.load(Ordering::Relaxed),
            1,
            "filtered by action unbuilt"
        );
        let all = hub.recent(None, None, Some(Action::Kill));
        assert_eq!(times(all.clone()), vec![20, 30, 40], "oldest evicted");
        assert_eq!(all[0], signal('b', 20), "the record it builds");
        assert_eq!(builds.load(Ordering::Relaxed), 3, "each built once");
        assert_eq!(hub.recent(None, None, None), all, "and kept");
        assert_eq!(builds.load(Ordering::Relaxed), 3);

        // With a watcher, the signal is built once, at once, and streamed.
        let mut rx = hub.subscribe();
        builds.store(0, Ordering::Relaxed);
        hub.publish_deferred(deferred('c', 50));
        assert_eq!(builds.load(Ordering::Relaxed), 1);
        assert_eq!(rx.recv().await.map(|s| s.time_unix_nano).ok(), Some(50));
        assert_eq!(times(hub.recent(None, Some(50), None)), vec![50]);
        assert_eq!(builds.load(Ordering::Relaxed), 1, "kept as built");
        hub.shutdown(Duration::from_millis(10)).await;
    }
}
