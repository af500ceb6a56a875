//! The bounded queue between the span path and the detection reporter: the span path
//! hands each new detection over and returns; a task logs it and publishes its signal, so
//! detections the task keeps up with do not slow ingestion (issue 8 item 4).
//!
//! Past half full, a request that brings detections reports a batch of the oldest itself
//! before it queues more, when nobody else is reporting; past seven eighths it waits for
//! its turn to ([`ReportQueue::push_helping`]). So when the reporter task cannot keep up (a
//! loop storm while many requests hold the CPU), the storm slows ingestion, and near a full
//! queue blocks the thread of the request (a tokio worker, for a request under 256 KiB),
//! instead of losing log lines and signals.
//!
//! Full queue policy (reached only when detections arrive faster than the requests that
//! bring them can help): the oldest queued detection of the lowest severity goes first (info,
//! then warn, then kill), and only if it is not more severe than the one arriving; else the
//! arriving one is dropped. So a kill is never dropped while a warn or an info is queued.
//! Drops are counted per severity and warned about once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use tokio::sync::Notify;

use crate::registry::RunDetection;
use crate::signals::class_queue::{ClassQueue, Pushed};

/// Detections the queue holds by default: a loop storm of this many detections between
/// two turns of the reporter task is absorbed without loss.
pub const REPORT_QUEUE_CAPACITY: usize = 4096;

/// Detections [`ReportQueue::serve`] reports in one turn of its task before it yields to
/// the other tasks of its worker thread. One request of 1000 loop-heavy spans completes
/// about 300 detections in one turn of its own; a reporter that took fewer per turn than
/// requests bring would fall behind on a busy worker and drop reports, although the CPU
/// they need is small (about 2 ms of reporting per turn at most).
pub const REPORT_BATCH: usize = 512;

/// Bounded multi-producer queue of detections waiting to be logged and signalled.
#[derive(Debug)]
pub struct ReportQueue {
    capacity: usize,
    state: Mutex<State>,
    notify: Notify,
    /// Dropped detections by severity (info, warn, kill).
    dropped: [AtomicU64; 3],
    /// Held while a batch is taken and reported (by the task or a helping request), so
    /// batches are reported one after another in arrival order.
    reporting: Mutex<()>,
}

#[derive(Debug)]
struct State {
    /// Detections by severity class (info, warn, kill), leaving in arrival order.
    queue: ClassQueue<RunDetection, 3>,
    closed: bool,
}

impl ReportQueue {
    /// An empty queue holding at most `capacity` detections (at least 1).
    pub fn new(capacity: usize) -> Self {
        ReportQueue {
            capacity: capacity.max(1),
            state: Mutex::new(State {
                queue: ClassQueue::new(capacity),
                closed: false,
            }),
            notify: Notify::new(),
            dropped: Default::default(),
            reporting: Mutex::new(()),
        }
    }

    /// Takes the oldest [`REPORT_BATCH`] detections and hands each to `report`, holding
    /// the reporting turn; returns how many.
    fn report_batch(&self, report: &mut impl FnMut(RunDetection)) -> usize {
        let turn = self.reporting.lock().unwrap_or_else(|e| e.into_inner());
        self.report_batch_holding(turn, report)
    }

    /// [`ReportQueue::report_batch`] with the reporting turn already taken.
    fn report_batch_holding(
        &self,
        _turn: MutexGuard<'_, ()>,
        report: &mut impl FnMut(RunDetection),
    ) -> usize {
        let batch = self.pop_many(REPORT_BATCH);
        let taken = batch.len();
        for detection in batch {
            report(detection);
        }
        taken
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // No code path panics while holding the lock with the queues half-updated.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Queues `detection`; never blocks. When full, drops one detection by the policy in
    /// the module docs and counts it. Returns `false` when the arriving one was dropped.
    pub fn push(&self, detection: RunDetection) -> bool {
        let arriving = detection.detection.severity.index();
        let pushed = self.state().queue.push(arriving, detection);
        match pushed {
            Pushed::Queued => {}
            Pushed::Evicted { class, .. } => self.count_drop(class),
            Pushed::Refused(_) => {
                self.count_drop(arriving);
                return false;
            }
        }
        self.notify.notify_one();
        true
    }

    fn count_drop(&self, class: usize) {
        let total: u64 = self.dropped.iter().map(|d| d.load(Ordering::Relaxed)).sum();
        self.dropped[class].fetch_add(1, Ordering::Relaxed);
        if total == 0 {
            tracing::warn!(
                capacity = self.capacity,
                "detection report queue full: dropping the least severe detection reports (warned once); detection and annotation are unaffected"
            );
        }
    }

    /// The oldest queued detection, if any.
    pub fn pop(&self) -> Option<RunDetection> {
        self.pop_many(1).pop()
    }

    /// Up to `max` of the oldest queued detections, in arrival order (one lock).
    pub fn pop_many(&self, max: usize) -> Vec<RunDetection> {
        let mut state = self.state();
        let mut out = Vec::with_capacity(max.min(state.queue.len()));
        while out.len() < max {
            let Some(detection) = state.queue.pop_front() else {
                break;
            };
            out.push(detection);
        }
        out
    }

    /// Queues `detections` like [`ReportQueue::push`], helping a reporter task that cannot
    /// keep up (a loop storm while many requests hold the CPU): with more than half the
    /// queue waiting, it first reports the oldest [`REPORT_BATCH`] itself with `report`
    /// if nobody else is reporting at that moment; with more than seven eighths waiting,
    /// it waits for its turn to (blocking the calling thread for up to one batch of
    /// someone else's), so ingestion slows down with the storm and reports are not
    /// dropped. Batches are reported one at a time, oldest first, whoever reports them,
    /// so reports keep arrival order. Below half the queue, nothing but a push happens
    /// here.
    pub fn push_helping(
        &self,
        detections: impl IntoIterator<Item = RunDetection>,
        mut report: impl FnMut(RunDetection),
    ) {
        for detection in detections {
            let waiting = self.len();
            if waiting * 8 > self.capacity * 7 {
                self.report_batch(&mut report);
            } else if waiting * 2 > self.capacity {
                if let Ok(turn) = self.reporting.try_lock() {
                    self.report_batch_holding(turn, &mut report);
                }
            }
            self.push(detection);
        }
    }

    /// The reporter task's loop: waits for detections and hands each to `report`, in
    /// arrival order, up to [`REPORT_BATCH`] per turn before yielding (so a loop storm's
    /// reports neither hold the worker thread nor fall behind the requests that bring
    /// them); returns once the queue is closed and drained.
    pub async fn serve(&self, mut report: impl FnMut(RunDetection)) {
        loop {
            if self.report_batch(&mut report) > 0 {
                tokio::task::yield_now().await;
                continue;
            }
            if self.state().closed && self.is_empty() {
                return;
            }
            // A push after the empty batch above left a permit: this returns at once.
            self.notify.notified().await;
        }
    }

    /// Lets [`ReportQueue::serve`] end once the queue is empty.
    pub fn close(&self) {
        self.state().closed = true;
        self.notify.notify_one();
    }

    /// Detections waiting.
    pub fn len(&self) -> usize {
        self.state().queue.len()
    }

    /// True when no detection is waiting.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Dropped detection reports so far, by severity: (info, warn, kill).
    pub fn dropped(&self) -> (u64, u64, u64) {
        let d = |c: usize| self.dropped[c].load(Ordering::Relaxed);
        (d(0), d(1), d(2))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::detector::Pattern;
    use crate::detector::Severity;

    fn detection(severity: Severity, occurrence: u32) -> RunDetection {
        let mut d = RunDetection::sample(Pattern::RepeatedCall, &["t"], severity);
        d.occurrence = occurrence;
        d
    }

    fn drain(queue: &ReportQueue) -> Vec<(Severity, u32)> {
        std::iter::from_fn(|| queue.pop())
            .map(|d| (d.detection.severity, d.occurrence))
            .collect()
    }

    /// A queue of 8 holding detections of `severities`, occurrence = arrival index.
    fn queue_of(severities: &[Severity]) -> ReportQueue {
        let queue = ReportQueue::new(8);
        for (i, s) in severities.iter().enumerate() {
            assert!(queue.push(detection(*s, i as u32)));
        }
        queue
    }

    #[test]
    fn keeps_arrival_order_across_severities() {
        use Severity::{Info, Kill, Warn};
        let queue = queue_of(&[Warn, Kill, Info, Warn]);
        assert_eq!(
            drain(&queue),
            vec![
                (Severity::Warn, 0),
                (Severity::Kill, 1),
                (Severity::Info, 2),
                (Severity::Warn, 3)
            ]
        );
    }

    #[test]
    fn full_queue_drops_the_least_severe_and_never_a_kill_before_a_warn() {
        let queue = ReportQueue::new(3);
        queue.push(detection(Severity::Warn, 0));
        queue.push(detection(Severity::Info, 1));
        queue.push(detection(Severity::Warn, 2));
        // full: a kill evicts the info, then the oldest warn
        assert!(queue.push(detection(Severity::Kill, 3)));
        assert!(queue.push(detection(Severity::Kill, 4)));
        // an info cannot evict anything more severe: it is dropped itself
        assert!(!queue.push(detection(Severity::Info, 5)));
        // a warn evicts the remaining warn, not a kill
        assert!(queue.push(detection(Severity::Warn, 6)));
        assert_eq!(queue.dropped(), (2, 2, 0));
        assert_eq!(
            drain(&queue),
            vec![
                (Severity::Kill, 3),
                (Severity::Kill, 4),
                (Severity::Warn, 6)
            ]
        );
        // only kills queued: a kill evicts the oldest kill
        let queue = ReportQueue::new(1);
        queue.push(detection(Severity::Kill, 0));
        assert!(queue.push(detection(Severity::Kill, 1)));
        assert!(!queue.push(detection(Severity::Warn, 2)));
        assert_eq!(queue.dropped(), (0, 1, 1));
        assert_eq!(drain(&queue), vec![(Severity::Kill, 1)]);
    }

    #[test]
    fn pop_many_takes_the_oldest_in_arrival_order() {
        use Severity::{Info, Kill, Warn};
        let queue = queue_of(&[Kill, Info, Warn, Info]);
        let first: Vec<u32> = queue.pop_many(3).iter().map(|d| d.occurrence).collect();
        assert_eq!(first, vec![0, 1, 2]);
        assert_eq!(queue.pop_many(3).len(), 1);
        assert!(queue.pop_many(3).is_empty());
    }

    /// On one worker thread shared with a producer that queues 300 detections per turn
    /// (a 1000-span loop-heavy request), the reporter keeps up: nothing is dropped. A
    /// reporter that took one detection per turn filled the queue within 14 turns.
    #[tokio::test(flavor = "current_thread")]
    async fn serve_keeps_up_with_a_busy_worker() {
        let queue = Arc::new(ReportQueue::new(REPORT_QUEUE_CAPACITY));
        let reported = Arc::new(AtomicU64::new(0));
        let reporter = {
            let (queue, reported) = (queue.clone(), reported.clone());
            tokio::spawn(async move {
                queue
                    .serve(|_| {
                        reported.fetch_add(1, Ordering::Relaxed);
                    })
                    .await
            })
        };
        for turn in 0..30u32 {
            for i in 0..300 {
                queue.push(detection(Severity::Warn, turn * 300 + i));
            }
            tokio::task::yield_now().await;
        }
        queue.close();
        reporter.await.unwrap();
        assert_eq!(queue.dropped(), (0, 0, 0));
        assert_eq!(reported.load(Ordering::Relaxed), 9_000);
    }

    /// With no reporter task at all, requests that bring 9 000 detections report what
    /// the queue cannot hold themselves: nothing is dropped and at most half the queue
    /// waits.
    #[test]
    fn push_helping_reports_instead_of_dropping() {
        let queue = ReportQueue::new(REPORT_QUEUE_CAPACITY);
        let mut reported = Vec::new();
        for request in 0..30u32 {
            let detections = (0..300).map(|i| detection(Severity::Warn, request * 300 + i));
            queue.push_helping(detections, |d| reported.push(d.occurrence));
        }
        assert_eq!(queue.dropped(), (0, 0, 0));
        assert!(
            queue.len() <= REPORT_QUEUE_CAPACITY / 2 + 1,
            "{}",
            queue.len()
        );
        assert_eq!(reported.len() + queue.len(), 9_000);
        // The oldest are reported first, in arrival order.
        assert!(reported.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(reported.first(), Some(&0));
    }

    /// A request thread helping while the reporter task runs on another: every detection
    /// is reported once, in arrival order. (Reports take 50 µs each here, so without the
    /// reporting turn the two interleave their batches within a few hundred detections.)
    #[test]
    fn helping_and_the_task_report_in_arrival_order() {
        let queue = Arc::new(ReportQueue::new(32));
        let reported = Arc::new(Mutex::new(Vec::new()));
        let record = |reported: &Mutex<Vec<u32>>, d: RunDetection| {
            std::thread::sleep(std::time::Duration::from_micros(50));
            reported.lock().unwrap().push(d.occurrence);
        };
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_time()
            .build()
            .unwrap();
        let task = {
            let (queue, reported) = (queue.clone(), reported.clone());
            runtime.spawn(async move { queue.serve(|d| record(&reported, d)).await })
        };
        let template = detection(Severity::Warn, 0);
        for i in 0..5_000u32 {
            let mut d = template.clone();
            d.occurrence = i;
            queue.push_helping([d], |d| record(&reported, d));
        }
        queue.close();
        runtime.block_on(task).unwrap();
        let reported = reported.lock().unwrap();
        assert_eq!(queue.dropped(), (0, 0, 0));
        assert_eq!(reported.len(), 5_000);
        assert!(reported.windows(2).all(|w| w[0] < w[1]), "out of order");
    }

    #[tokio::test]
    async fn serve_waits_then_ends_when_closed_and_drained() {
        let queue = Arc::new(ReportQueue::new(4));
        let reader = {
            let queue = queue.clone();
            tokio::spawn(async move {
                let mut seen = Vec::new();
                queue.serve(|d| seen.push(d.occurrence)).await;
                seen
            })
        };
        tokio::task::yield_now().await;
        queue.push(detection(Severity::Warn, 1));
        queue.push(detection(Severity::Kill, 2));
        queue.close();
        assert_eq!(reader.await.unwrap(), vec![1, 2]);
        assert!(queue.is_empty());
    }
}
