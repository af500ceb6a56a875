//! The bounded forward queue. Its bound is an admission semaphore of `queue_capacity` slots:
//! a receiver takes a slot ([`ForwardQueue::admit`]) before it reads and decodes a request,
//! and the slot is given back only when the request leaves the forwarder (delivered, given
//! up, or dropped at shutdown). So requests queued, in flight **and** sleeping in backoff
//! all count against the bound, and a full forwarder refuses new requests up front
//! (backpressure) instead of buffering without limit or dropping later.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::ingest::{AcceptError, Admission};

use super::stats::ForwarderStats;

/// One encoded `ExportTraceServiceRequest` waiting to be forwarded, with its admission slot.
#[derive(Debug)]
pub(crate) struct QueuedRequest {
    pub(crate) bytes: Bytes,
    pub(crate) spans: u64,
    pub(crate) enqueued: Instant,
    /// Released when the request is delivered or given up.
    pub(crate) _slot: Option<OwnedSemaphorePermit>,
}

/// Producer handle of the forward queue (cheap to clone).
#[derive(Clone, Debug)]
pub struct ForwardQueue {
    tx: mpsc::UnboundedSender<QueuedRequest>,
    slots: Arc<Semaphore>,
    capacity: usize,
    stats: Arc<ForwarderStats>,
}

impl ForwardQueue {
    pub(crate) fn new(
        capacity: usize,
        stats: Arc<ForwarderStats>,
    ) -> (Self, mpsc::UnboundedReceiver<QueuedRequest>) {
        let capacity = capacity.max(1);
        let (tx, rx) = mpsc::unbounded_channel();
        let queue = Self {
            tx,
            slots: Arc::new(Semaphore::new(capacity)),
            capacity,
            stats,
        };
        (queue, rx)
    }

    /// Waits for a free slot (FIFO among waiters). Callers bound the wait
    /// (`receiver.admission_wait`); a wait that times out is a `QueueFull` refusal.
    ///
    /// # Errors
    /// [`AcceptError::ShuttingDown`] once the forwarder stopped taking requests.
    pub async fn admit(&self) -> Result<Admission, AcceptError> {
        Arc::clone(&self.slots)
            .acquire_owned()
            .await
            .map(Admission::with_slot)
            .map_err(|_| AcceptError::ShuttingDown)
    }

    /// Takes a free slot without waiting.
    ///
    /// # Errors
    /// [`AcceptError::QueueFull`] when every slot is taken; [`AcceptError::ShuttingDown`]
    /// once the forwarder stopped taking requests.
    pub fn try_admit(&self) -> Result<Admission, AcceptError> {
        match Arc::clone(&self.slots).try_acquire_owned() {
            Ok(slot) => Ok(Admission::with_slot(slot)),
            Err(TryAcquireError::NoPermits) => Err(AcceptError::QueueFull),
            Err(TryAcquireError::Closed) => Err(AcceptError::ShuttingDown),
        }
    }

    /// Queues `request` (protobuf `ExportTraceServiceRequest` bytes, forwarded untouched)
    /// holding `spans` spans, under `admission`'s slot (an admission without a slot takes
    /// one now). Never blocks.
    ///
    /// # Errors
    /// [`AcceptError`] when no slot is free or the forwarder has stopped: nothing was queued.
    pub fn send(
        &self,
        admission: Admission,
        request: Bytes,
        spans: u64,
    ) -> Result<(), AcceptError> {
        let slot = match admission.into_slot() {
            Some(slot) => slot,
            None => self
                .try_admit()?
                .into_slot()
                .ok_or(AcceptError::QueueFull)?,
        };
        let item = QueuedRequest {
            bytes: request,
            spans,
            enqueued: Instant::now(),
            _slot: Some(slot),
        };
        self.stats.enqueued(spans);
        self.tx.send(item).map_err(|_| {
            self.stats.unqueued(spans);
            AcceptError::ShuttingDown
        })
    }

    /// Reserves one slot without waiting (kept for callers that reserve and send in one place).
    ///
    /// # Errors
    /// As [`ForwardQueue::try_admit`].
    pub fn try_reserve(&self) -> Result<ForwardPermit<'_>, AcceptError> {
        Ok(ForwardPermit {
            queue: self,
            admission: self.try_admit()?,
        })
    }

    /// Stops admitting: waiters and later admissions fail with `ShuttingDown`.
    pub(crate) fn close(&self) {
        self.slots.close();
    }

    /// Slots taken (queued, in flight, in backoff, or admitted and being processed).
    pub fn len(&self) -> usize {
        self.capacity - self.slots.available_permits().min(self.capacity)
    }

    /// True when no slot is taken.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The queue capacity, in requests.
    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

/// A reserved slot; dropping it unused releases the slot.
#[derive(Debug)]
pub struct ForwardPermit<'a> {
    queue: &'a ForwardQueue,
    admission: Admission,
}

impl ForwardPermit<'_> {
    /// Queues `request` holding `spans` spans. Never blocks; if the forwarder stopped in
    /// between, the request is counted as dropped at shutdown.
    pub fn send(self, request: Bytes, spans: u64) {
        if self.queue.send(self.admission, request, spans).is_err() {
            self.queue.stats.abandoned(1, spans);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_then_closed() {
        let stats = Arc::new(ForwarderStats::default());
        let (queue, mut rx) = ForwardQueue::new(2, Arc::clone(&stats));
        assert!(queue.is_empty());
        for _ in 0..2 {
            match queue.try_reserve() {
                Ok(p) => p.send(Bytes::from_static(b"x"), 1),
                Err(e) => panic!("reserve failed: {e}"),
            }
        }
        assert_eq!(queue.len(), 2);
        assert_eq!(stats.queue_depth(), 2);
        assert_eq!(stats.pending_spans(), 2);
        assert_eq!(queue.try_reserve().err(), Some(AcceptError::QueueFull));
        // a slot is held until the request leaves the forwarder, not when it is dequeued
        let first = rx.try_recv();
        assert!(first.is_ok());
        assert_eq!(queue.try_admit().err(), Some(AcceptError::QueueFull));
        drop(first);
        assert!(queue.try_admit().is_ok());
        queue.close();
        assert_eq!(queue.try_reserve().err(), Some(AcceptError::ShuttingDown));
        // queued items survive the close and drain
        assert!(rx.try_recv().is_ok());
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn dropped_admission_frees_slot() {
        let stats = Arc::new(ForwarderStats::default());
        let (queue, _rx) = ForwardQueue::new(1, stats);
        let permit = queue.try_reserve();
        assert!(permit.is_ok());
        assert_eq!(queue.try_reserve().err(), Some(AcceptError::QueueFull));
        drop(permit);
        assert!(queue.try_reserve().is_ok());
    }

    #[tokio::test]
    async fn admit_waits_for_a_slot() {
        let stats = Arc::new(ForwarderStats::default());
        let (queue, _rx) = ForwardQueue::new(1, stats);
        let held = queue.try_admit();
        assert!(held.is_ok());
        let short = tokio::time::timeout(std::time::Duration::from_millis(20), queue.admit()).await;
        assert!(short.is_err(), "admitted while full");
        let waiter = {
            let queue = queue.clone();
            tokio::spawn(async move { queue.admit().await.is_ok() })
        };
        drop(held);
        assert_eq!(waiter.await.ok(), Some(true));
        queue.close();
        assert_eq!(queue.admit().await.err(), Some(AcceptError::ShuttingDown));
    }
}
