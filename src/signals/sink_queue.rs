//! The queue of one signal sink (issue 31 item 4: signals that keep up): bounded in bytes
//! (`queue_max_bytes`) and in signals (`queue_capacity`), kills kept over warnings,
//! repeated signals of one loop coalesced, and backpressure instead of loss while the sink
//! is healthy.
//!
//! - **Order**: signals leave in arrival order, in batches ([`SinkQueue::pop_batch`]) that
//!   the sink delivers in one round trip (a Redis pipeline, JetStream publishes whose acks
//!   are awaited together).
//! - **Coalescing**: once the queue is past half its bound (a storm, or a sink that fell
//!   behind), a kill of a loop (same run key, profile, pattern, fingerprints) whose earlier
//!   kill is still queued replaces that one in its place: the agent runtime hears the
//!   loop's latest kill once, and re-detections of a loop storm do not fill the queue.
//!   Counted (`coalesced`). Below half, and for warnings (whose occurrences an agent may
//!   count), every signal is delivered.
//! - **Full**: the oldest warning goes first; a kill only makes a kill go when nothing but
//!   kills is queued. Before that, while the sink is delivering (healthy), a kill arriving
//!   at a queue full of kills waits up to [`BACKPRESSURE_WAIT`] for the sink to make room,
//!   so the reporter (and through its own queue, ingestion) slows down with the storm
//!   instead of losing kills. Drops are counted by action and logged at WARN at most once
//!   per 10 s.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use compact_str::CompactString;
use tokio::sync::Notify;

use super::Signal;
use crate::detector::Action;
use crate::net::log_limit::LogLimit;
use crate::signals::class_queue::ClassQueue;

/// How long a kill arriving at a queue full of kills waits for a healthy sink to make room
/// before the oldest kill is dropped after all.
pub const BACKPRESSURE_WAIT: Duration = Duration::from_secs(10);

/// Whether a signal asks the agent runtime to stop the run, for good (`kill`) or until
/// someone approves it (`require_approval`): both are kept over warns when a queue is full.
pub fn is_kill(signal: &Signal) -> bool {
    matches!(signal.action, Action::Kill | Action::RequireApproval)
}

/// What one queued signal is counted at, in bytes: the record and its heap parts.
pub fn signal_bytes(signal: &Signal) -> u64 {
    let heap = |s: &CompactString| if s.is_heap_allocated() { s.len() } else { 0 };
    let strings = [
        &signal.id,
        &signal.trace_id,
        &signal.run_key,
        &signal.profile,
        &signal.pattern,
        &signal.first_span_id,
    ]
    .into_iter()
    .chain(signal.service_name.iter())
    .chain(signal.agent_name.iter())
    .chain(signal.tool_names.iter())
    .chain(signal.fingerprints.iter())
    .chain(signal.span_ids.iter())
    .map(heap)
    .sum::<usize>();
    let lists = signal.span_ids.len() * std::mem::size_of::<CompactString>()
        + if signal.tool_names.spilled() || signal.fingerprints.spilled() {
            4 * std::mem::size_of::<CompactString>()
        } else {
            0
        };
    // The Arc's counts and the queue entry.
    (std::mem::size_of::<Signal>() + 64 + signal.message.len() + strings + lists) as u64
}

/// One queued signal.
#[derive(Debug)]
struct Entry {
    signal: Arc<Signal>,
    /// [`SinkQueue::loop_key`] of the signal.
    key: u64,
    /// Its arrival number in the class queue.
    seq: u64,
    bytes: u64,
}

#[derive(Debug)]
struct State {
    /// Warnings (class 0) and kills (class 1), leaving in arrival order.
    items: ClassQueue<Entry, 2>,
    bytes: u64,
    /// Loop key → (class, arrival number) of its queued signal.
    queued: HashMap<u64, (usize, u64)>,
}

/// The bounded queue of one sink; see the module docs.
#[derive(Debug)]
pub struct SinkQueue {
    pub(crate) name: &'static str,
    capacity: usize,
    max_bytes: u64,
    state: Mutex<State>,
    /// Signalled when signals leave the queue (room for a waiting kill).
    room: Condvar,
    pub(crate) notify: Notify,
    pub(crate) closed: AtomicBool,
    /// Signals taken by the task and not yet delivered or given up.
    in_flight: AtomicU64,
    /// The sink's last delivery attempt succeeded (or none failed yet).
    healthy: AtomicBool,
    /// Seeds the loop-key hash (random per queue: loop keys come from spans).
    hasher: std::collections::hash_map::RandomState,
    pub(crate) delivered: AtomicU64,
    pub(crate) failed_attempts: AtomicU64,
    pub(crate) dropped: AtomicU64,
    /// Of `dropped`, the kill signals.
    pub(crate) dropped_kills: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) coalesced: AtomicU64,
    drop_log: LogLimit,
}

impl SinkQueue {
    /// An empty queue holding at most `capacity` signals (at least 1) and `max_bytes`
    /// bytes of them ([`signal_bytes`]; one signal always fits an empty queue).
    pub fn new(name: &'static str, capacity: usize, max_bytes: u64) -> Self {
        Self {
            name,
            capacity: capacity.max(1),
            max_bytes: max_bytes.max(1),
            state: Mutex::new(State {
                items: ClassQueue::new(usize::MAX),
                bytes: 0,
                queued: HashMap::new(),
            }),
            room: Condvar::new(),
            notify: Notify::new(),
            closed: AtomicBool::new(false),
            in_flight: AtomicU64::new(0),
            healthy: AtomicBool::new(true),
            hasher: Default::default(),
            delivered: AtomicU64::new(0),
            failed_attempts: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            dropped_kills: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            coalesced: AtomicU64::new(0),
            drop_log: LogLimit::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding the lock with the state half-updated.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The key of the loop `signal` reports: run key, profile, pattern, fingerprints and
    /// action (not the occurrence: a later detection of the same loop has the same key).
    fn loop_key(&self, signal: &Signal) -> u64 {
        let mut h = self.hasher.build_hasher();
        signal.run_key.hash(&mut h);
        signal.profile.hash(&mut h);
        signal.pattern.hash(&mut h);
        signal.fingerprints.hash(&mut h);
        signal.tool_names.hash(&mut h);
        signal.action.as_str().hash(&mut h);
        h.finish()
    }

    /// Queues `signal` (see the module docs): coalesced with its loop's queued signal, or
    /// appended after making room; may wait (up to [`BACKPRESSURE_WAIT`], blocking the
    /// calling thread, handed off by `block_in_place` on a tokio worker) for a healthy
    /// sink to make room for a kill. Shared with the other sinks and the recent ring (one
    /// copy per detection).
    pub fn push(&self, signal: Arc<Signal>) {
        let class = usize::from(is_kill(&signal));
        let key = self.loop_key(&signal);
        let bytes = signal_bytes(&signal);
        let mut state = self.state();
        let pressed = state.items.len() * 2 > self.capacity || state.bytes * 2 > self.max_bytes;
        let coalescing = pressed && signal.action == Action::Kill;
        if let Some(&(c, seq)) = state.queued.get(&key).filter(|_| coalescing) {
            if let Some(entry) = state.items.get_mut(c, seq) {
                let old = std::mem::replace(&mut entry.signal, signal);
                let before = std::mem::replace(&mut entry.bytes, bytes);
                state.bytes = state.bytes - before + bytes;
                drop(state);
                drop(old);
                self.coalesced.fetch_add(1, Ordering::Relaxed);
                self.notify.notify_one();
                return;
            }
        }
        let mut waited_until: Option<Instant> = None;
        loop {
            let fits = state.items.is_empty()
                || (state.items.len() < self.capacity
                    && state.bytes.saturating_add(bytes) <= self.max_bytes);
            if fits {
                break;
            }
            let only_kills = state.items.len_of(0) == 0;
            if class == 1 && only_kills && self.may_wait() {
                let deadline =
                    *waited_until.get_or_insert_with(|| Instant::now() + BACKPRESSURE_WAIT);
                let left = deadline.saturating_duration_since(Instant::now());
                if !left.is_zero() {
                    state = wait_for_room(&self.room, state, left.min(Duration::from_millis(100)));
                    continue;
                }
            }
            match state.items.evict_for(class) {
                Some((_, old)) => {
                    state.bytes -= old.bytes;
                    forget(&mut state.queued, &old);
                    self.count_drop(&old.signal);
                }
                None => {
                    // A warning arriving at a queue full of kills: it is the one dropped.
                    drop(state);
                    self.count_drop(&signal);
                    return;
                }
            }
        }
        let seq = state.items.next_seq();
        state.items.push_unbounded(
            class,
            Entry {
                signal,
                key,
                seq,
                bytes,
            },
        );
        state.bytes += bytes;
        state.queued.insert(key, (class, seq));
        drop(state);
        self.notify.notify_one();
    }

    /// Whether a push may block for room: the sink is delivering, the queue is open, and
    /// the calling thread may block (not a current-thread runtime, whose one thread also
    /// runs the sink's task).
    fn may_wait(&self) -> bool {
        self.healthy.load(Ordering::Relaxed)
            && !self.closed.load(Ordering::Acquire)
            && tokio::runtime::Handle::try_current().map_or(true, |h| {
                h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
            })
    }

    fn count_drop(&self, signal: &Signal) {
        let kill = is_kill(signal);
        if kill {
            self.dropped_kills.fetch_add(1, Ordering::Relaxed);
        }
        let total = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(dropped) = self.drop_log.hit() {
            tracing::warn!(sink = self.name, signal_id = %signal.id, trace_id = %signal.trace_id,
                action = %signal.action, capacity = self.capacity, max_bytes = self.max_bytes,
                dropped, dropped_total = total, healthy = self.healthy.load(Ordering::Relaxed),
                "signal queue full, dropping signals (warnings before kills; counted in loopwatch_signals_dropped_total; at most one such line per 10 s, `dropped` since the last)");
        }
    }

    /// Up to `max` of the oldest signals, in arrival order; they count as in flight until
    /// [`SinkQueue::done`].
    pub fn pop_batch(&self, max: usize) -> Vec<Arc<Signal>> {
        let mut state = self.state();
        let mut batch = Vec::with_capacity(max.min(state.items.len()));
        while batch.len() < max {
            let Some(entry) = state.items.pop_front() else {
                break;
            };
            state.bytes -= entry.bytes;
            forget(&mut state.queued, &entry);
            batch.push(entry.signal);
        }
        // Set under the lock so `depth` never misses a signal moving to in-flight.
        self.in_flight.store(batch.len() as u64, Ordering::Relaxed);
        drop(state);
        if !batch.is_empty() {
            self.room.notify_all();
        }
        batch
    }

    /// The batch taken last is delivered or given up.
    pub fn done(&self) {
        self.in_flight.store(0, Ordering::Relaxed);
    }

    /// Records whether the sink's last delivery attempt succeeded.
    pub fn set_healthy(&self, healthy: bool) {
        self.healthy.store(healthy, Ordering::Relaxed);
        if !healthy {
            // A kill waiting for room stops waiting: the sink will not make any soon.
            self.room.notify_all();
        }
    }

    /// Signals waiting or being delivered.
    pub fn depth(&self) -> u64 {
        let state = self.state();
        state.items.len() as u64 + self.in_flight.load(Ordering::Relaxed)
    }

    /// Bytes of the signals waiting ([`signal_bytes`]).
    pub fn bytes(&self) -> u64 {
        self.state().bytes
    }

    /// Asks the task to exit once the queue is empty.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notify.notify_one();
        self.room.notify_all();
    }
}

/// Removes `entry` from the loop-key index, if the index still points at it (a later signal
/// of the loop, queued while it was, points at itself).
fn forget(queued: &mut HashMap<u64, (usize, u64)>, entry: &Entry) {
    if queued
        .get(&entry.key)
        .is_some_and(|&(_, seq)| seq == entry.seq)
    {
        queued.remove(&entry.key);
    }
}

/// Waits on `room` up to `timeout`, off the tokio worker when on one.
fn wait_for_room<'a>(
    room: &Condvar,
    state: MutexGuard<'a, State>,
    timeout: Duration,
) -> MutexGuard<'a, State> {
    let wait = move || {
        room.wait_timeout(state, timeout)
            .map(|(guard, _)| guard)
            .unwrap_or_else(|poisoned| poisoned.into_inner().0)
    };
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(wait)
        }
        _ => wait(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::detector::Severity;

    pub(crate) fn signal(id: &str, run: &str, action: Action) -> Signal {
        Signal {
            schema: super::super::SIGNAL_SCHEMA.into(),
            id: id.into(),
            occurrence: 1,
            severity: match action {
                Action::Warn => Severity::Warn,
                _ => Severity::Kill,
            },
            time_unix_nano: 1,
            trace_id: "00".repeat(16).into(),
            run_key: run.into(),
            service_name: None,
            agent_name: None,
            profile: "p".into(),
            action,
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

    fn ids(queue: &SinkQueue) -> Vec<String> {
        queue
            .pop_batch(usize::MAX)
            .iter()
            .map(|s| s.id.to_string())
            .collect()
    }

    #[test]
    fn past_half_full_a_later_kill_of_a_queued_loop_takes_its_place() {
        let queue = SinkQueue::new("test", 4, 1 << 20);
        queue.push(Arc::new(signal("a1", "a", Action::Kill)));
        queue.push(Arc::new(signal("a2", "a", Action::Kill)));
        assert_eq!(
            queue.coalesced.load(Ordering::Relaxed),
            0,
            "below half: both kept"
        );
        queue.push(Arc::new(signal("b1", "b", Action::Kill)));
        queue.push(Arc::new(signal("a3", "a", Action::Kill)));
        queue.push(Arc::new(signal("aw1", "a", Action::Warn)));
        queue.push(Arc::new(signal("aw2", "a", Action::Warn)));
        assert_eq!(
            queue.coalesced.load(Ordering::Relaxed),
            1,
            "a3 took a2's place"
        );
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 1, "aw2 made aw1 go");
        assert_eq!(ids(&queue), ["a1", "a3", "b1", "aw2"]);
        // Once delivered, the loop's next kill is queued anew.
        queue.push(Arc::new(signal("a4", "a", Action::Kill)));
        assert_eq!(ids(&queue), ["a4"]);
    }

    #[test]
    fn bytes_bound_the_queue_and_warnings_go_first() {
        let one = signal_bytes(&signal("k0", "r0", Action::Kill));
        let queue = SinkQueue::new("test", 1000, 3 * one);
        queue.set_healthy(false);
        queue.push(Arc::new(signal("k1", "r1", Action::Kill)));
        queue.push(Arc::new(signal("w1", "r2", Action::Warn)));
        queue.push(Arc::new(signal("k2", "r3", Action::Kill)));
        assert_eq!(queue.bytes(), 3 * one);
        queue.push(Arc::new(signal("k3", "r4", Action::Kill)));
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 1);
        assert_eq!(queue.dropped_kills.load(Ordering::Relaxed), 0);
        queue.push(Arc::new(signal("w2", "r5", Action::Warn)));
        assert_eq!(
            queue.dropped.load(Ordering::Relaxed),
            2,
            "a warning for a queue of kills"
        );
        // The sink is down: a kill makes the oldest kill go.
        queue.push(Arc::new(signal("k4", "r6", Action::Kill)));
        assert_eq!(queue.dropped_kills.load(Ordering::Relaxed), 1);
        assert_eq!(ids(&queue), ["k2", "k3", "k4"]);
    }

    #[test]
    fn a_kill_waits_for_a_healthy_sink_to_make_room() {
        let queue = Arc::new(SinkQueue::new("test", 2, 1 << 20));
        queue.push(Arc::new(signal("k1", "r1", Action::Kill)));
        queue.push(Arc::new(signal("k2", "r2", Action::Kill)));
        let consumer = {
            let queue = Arc::clone(&queue);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                let first = queue.pop_batch(1);
                queue.done();
                first
            })
        };
        let started = Instant::now();
        queue.push(Arc::new(signal("k3", "r3", Action::Kill)));
        assert!(started.elapsed() >= Duration::from_millis(150), "it waited");
        assert_eq!(queue.dropped.load(Ordering::Relaxed), 0, "nothing dropped");
        let first = consumer.join().unwrap_or_default();
        assert_eq!(
            first.first().map(|s| s.id.to_string()).as_deref(),
            Some("k1")
        );
        assert_eq!(ids(&queue), ["k2", "k3"]);
    }
}
