//! The bounded forward queue. It has two bounds, and a request must fit both:
//!
//! - **requests**: an admission semaphore of `queue_capacity` slots. A receiver takes a slot
//!   ([`ForwardQueue::admit`]) before it reads and decodes a request, and the slot is given
//!   back only when the request leaves the forwarder (delivered, given up, or dropped at
//!   shutdown).
//! - **bytes** (`exporter.queue.max_bytes`): the encoded size of the requests held, taken
//!   ([`ForwardQueue::hold_bytes`]) once the request is read and before it is processed,
//!   given back with the slot. A request larger than the bound still fits when nothing is
//!   held, so it is never refused forever.
//!
//! So requests queued, in flight **and** sleeping in backoff all count against both bounds,
//! and a full forwarder refuses new requests up front (backpressure, a retryable status)
//! instead of buffering without limit or dropping later.
//!
//! With the persistent queue ([`super::store`]) [`ForwardQueue::send`] also writes the
//! request to disk (fsync) before it returns, so the receiver acknowledges only what is on
//! disk; a write that fails refuses the request (retryable).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore, TryAcquireError};

use crate::ingest::{AcceptError, Admission};

use super::client::ExportBody;
use super::stats::ForwarderStats;
use super::store::{blocking, DiskQueue, StoredRequest};

/// One encoded `ExportTraceServiceRequest` waiting to be forwarded, with its admission slot.
#[derive(Debug)]
pub(crate) struct QueuedRequest {
    /// Its bytes, possibly in pieces (an annotated request: [`ExportBody`]).
    pub(crate) bytes: ExportBody,
    pub(crate) spans: u64,
    pub(crate) enqueued: Instant,
    /// Its key in the persistent store (persistent mode only).
    pub(crate) key: Option<u64>,
    /// Released when the request is delivered or given up.
    pub(crate) _slot: Option<OwnedSemaphorePermit>,
    /// Released with the slot.
    pub(crate) _held: HeldBytes,
}

/// Bytes held against `exporter.queue.max_bytes`; given back when dropped.
#[derive(Debug)]
pub struct HeldBytes {
    stats: Arc<ForwarderStats>,
    bytes: u64,
}

impl HeldBytes {
    /// Sets the held amount to `bytes` (the request after annotation), without checking the
    /// bound: the growth is small and the request is already admitted.
    fn resize(&mut self, bytes: usize) {
        let bytes = bytes as u64;
        self.stats.release_bytes(self.bytes);
        self.stats.hold_bytes(bytes);
        self.bytes = bytes;
    }
}

impl Drop for HeldBytes {
    fn drop(&mut self) {
        self.stats.release_bytes(self.bytes);
    }
}

/// Producer handle of the forward queue (cheap to clone).
#[derive(Clone, Debug)]
pub struct ForwardQueue {
    tx: mpsc::UnboundedSender<QueuedRequest>,
    slots: Arc<Semaphore>,
    capacity: usize,
    max_bytes: u64,
    stats: Arc<ForwarderStats>,
    store: Option<Arc<DiskQueue>>,
    store_failed: Arc<AtomicBool>,
}

impl ForwardQueue {
    pub(crate) fn new(
        capacity: usize,
        max_bytes: usize,
        stats: Arc<ForwarderStats>,
        store: Option<Arc<DiskQueue>>,
    ) -> (Self, mpsc::UnboundedReceiver<QueuedRequest>) {
        let capacity = capacity.max(1);
        let (tx, rx) = mpsc::unbounded_channel();
        let queue = Self {
            tx,
            slots: Arc::new(Semaphore::new(capacity)),
            capacity,
            max_bytes: max_bytes.max(1) as u64,
            stats,
            store,
            store_failed: Arc::default(),
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

    /// Holds `bytes` (a request's encoded size) against `exporter.queue.max_bytes`, without
    /// waiting. Fits when the total stays within the bound, or when nothing is held.
    ///
    /// # Errors
    /// [`AcceptError::QueueFull`] when it does not fit.
    pub fn hold_bytes(&self, bytes: usize) -> Result<HeldBytes, AcceptError> {
        let bytes = bytes as u64;
        let before = self.stats.hold_bytes(bytes);
        if before > 0 && before.saturating_add(bytes) > self.max_bytes {
            self.stats.release_bytes(bytes);
            return Err(AcceptError::QueueFull);
        }
        Ok(HeldBytes {
            stats: Arc::clone(&self.stats),
            bytes,
        })
    }

    /// Queues `request` (protobuf `ExportTraceServiceRequest` bytes, forwarded untouched)
    /// holding `spans` spans, under `admission`'s slot (an admission without a slot takes
    /// one now) and its bytes. Never blocks on other requests; in persistent mode it
    /// writes the request to disk (fsync) first.
    ///
    /// # Errors
    /// [`AcceptError`] when no slot is free, the bytes do not fit, the disk write failed
    /// (`QueueFull`, logged) or the forwarder has stopped: nothing was queued.
    pub fn send(
        &self,
        admission: Admission,
        request: Bytes,
        spans: u64,
    ) -> Result<(), AcceptError> {
        let held = self.hold_bytes(request.len())?;
        self.send_held(admission, held, ExportBody::from(request), spans)
    }

    /// As [`ForwardQueue::send`], with the bytes already held by [`ForwardQueue::hold_bytes`]
    /// (before the request was processed); the hold is set to `request`'s size.
    ///
    /// # Errors
    /// As [`ForwardQueue::send`], less the byte bound.
    pub fn send_held(
        &self,
        admission: Admission,
        mut held: HeldBytes,
        request: ExportBody,
        spans: u64,
    ) -> Result<(), AcceptError> {
        let slot = match admission.into_slot() {
            Some(slot) => slot,
            None => self
                .try_admit()?
                .into_slot()
                .ok_or(AcceptError::QueueFull)?,
        };
        if self.tx.is_closed() {
            return Err(AcceptError::ShuttingDown);
        }
        held.resize(request.len());
        let key = match &self.store {
            Some(store) => Some(self.persist(store, spans, request.to_bytes())?),
            None => None,
        };
        let item = QueuedRequest {
            bytes: request,
            spans,
            enqueued: Instant::now(),
            key,
            _slot: Some(slot),
            _held: held,
        };
        self.stats.enqueued(spans);
        self.tx.send(item).map_err(|_| {
            self.stats.unqueued(spans);
            if let (Some(store), Some(key)) = (&self.store, key) {
                // refused, so the client retries: do not deliver it a second time later
                let _ = blocking(|| store.remove(&[key]));
            }
            AcceptError::ShuttingDown
        })
    }

    /// Writes one request to the store (fsync); a failure refuses it
    /// ([`AcceptError::StorageUnavailable`]), logged at ERROR the first time in a row and at
    /// DEBUG after.
    fn persist(&self, store: &DiskQueue, spans: u64, request: Bytes) -> Result<u64, AcceptError> {
        match blocking(|| store.append(spans, request)) {
            Ok(key) => {
                if self.store_failed.swap(false, Ordering::Relaxed) {
                    tracing::info!(path = %store.path().display(), "persistent queue writable again");
                }
                Ok(key)
            }
            Err(error) => {
                if self.store_failed.swap(true, Ordering::Relaxed) {
                    tracing::debug!(%error, "persistent queue write failed; request refused");
                } else {
                    tracing::error!(%error, "persistent queue write failed; requests are refused (retryable) and /readyz answers 503 until it heals (tried every second)");
                }
                Err(AcceptError::StorageUnavailable)
            }
        }
    }

    /// Puts a request found in the store at start-up back in line. It takes a slot when one
    /// is free and holds its bytes even past the bound (it was acknowledged already).
    pub(crate) fn requeue(&self, stored: StoredRequest) {
        let slot = Arc::clone(&self.slots).try_acquire_owned().ok();
        let len = stored.bytes.len() as u64;
        self.stats.hold_bytes(len);
        let item = QueuedRequest {
            spans: stored.spans,
            bytes: ExportBody::from(stored.bytes),
            enqueued: Instant::now(),
            key: Some(stored.key),
            _slot: slot,
            _held: HeldBytes {
                stats: Arc::clone(&self.stats),
                bytes: len,
            },
        };
        self.stats.enqueued(item.spans);
        if self.tx.send(item).is_err() {
            self.stats.unqueued(stored.spans);
        }
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

    /// Why the persistent queue cannot write now (`None`: it can, or it is not persistent):
    /// requests are refused retryably until it heals, and `/readyz` says so.
    pub fn storage_fault(&self) -> Option<String> {
        self.store.as_ref().and_then(|store| store.fault())
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

    /// Bytes held now (the requests queued, in flight, in backoff, or admitted and being
    /// processed).
    pub fn pending_bytes(&self) -> u64 {
        self.stats.pending_bytes()
    }

    /// The byte bound (`exporter.queue.max_bytes`).
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
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
        let (queue, mut rx) = ForwardQueue::new(2, 1 << 20, Arc::clone(&stats), None);
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
        let (queue, _rx) = ForwardQueue::new(1, 1 << 20, stats, None);
        let permit = queue.try_reserve();
        assert!(permit.is_ok());
        assert_eq!(queue.try_reserve().err(), Some(AcceptError::QueueFull));
        drop(permit);
        assert!(queue.try_reserve().is_ok());
    }

    #[tokio::test]
    async fn admit_waits_for_a_slot() {
        let stats = Arc::new(ForwarderStats::default());
        let (queue, _rx) = ForwardQueue::new(1, 1 << 20, stats, None);
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

    #[test]
    fn byte_bound_refuses_what_does_not_fit_and_frees_on_delivery() {
        let stats = Arc::new(ForwarderStats::default());
        let (queue, mut rx) = ForwardQueue::new(10, 100, Arc::clone(&stats), None);
        let send = |n: usize| {
            let admission = queue.try_admit()?;
            queue.send(admission, Bytes::from(vec![0u8; n]), 1)
        };
        assert_eq!(send(60), Ok(()));
        assert_eq!(send(40), Ok(()));
        assert_eq!(stats.pending_bytes(), 100);
        assert_eq!(send(1), Err(AcceptError::QueueFull));
        // a refusal gives back both the slot and the bytes
        assert_eq!(queue.len(), 2);
        assert_eq!(stats.pending_bytes(), 100);
        let first = rx.try_recv();
        assert!(first.is_ok());
        // dequeued is not delivered: still held
        assert_eq!(send(1), Err(AcceptError::QueueFull));
        drop(first);
        assert_eq!(stats.pending_bytes(), 40);
        assert_eq!(send(60), Ok(()));
        drop(rx);
        // a request larger than the bound fits when nothing is held
        let stats = Arc::new(ForwarderStats::default());
        let (queue, _rx) = ForwardQueue::new(10, 100, Arc::clone(&stats), None);
        let held = queue.hold_bytes(500);
        assert!(held.is_ok());
        assert_eq!(queue.hold_bytes(1).err(), Some(AcceptError::QueueFull));
        drop(held);
        assert_eq!(stats.pending_bytes(), 0);
    }

    #[test]
    fn persistent_send_writes_before_it_returns_and_requeue_restores() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let (store, _) = DiskQueue::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let store = Arc::new(store);
        let stats = Arc::new(ForwarderStats::default());
        let (queue, mut rx) =
            ForwardQueue::new(1, 1 << 20, Arc::clone(&stats), Some(Arc::clone(&store)));
        let admission = queue.try_admit().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(queue.send(admission, Bytes::from_static(b"req"), 2), Ok(()));
        assert_eq!(store.len().ok(), Some(1));
        let item = rx.try_recv().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(item.key, Some(0));
        drop((item, queue, rx, store));

        let (store, found) = DiskQueue::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(found.len(), 1);
        let stats = Arc::new(ForwarderStats::default());
        let (queue, mut rx) =
            ForwardQueue::new(1, 1 << 20, Arc::clone(&stats), Some(Arc::new(store)));
        for stored in found {
            queue.requeue(stored);
        }
        assert_eq!(
            (
                stats.queue_depth(),
                stats.pending_spans(),
                stats.pending_bytes()
            ),
            (1, 2, 3)
        );
        assert_eq!(queue.len(), 1);
        let item = rx.try_recv().unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (item.key, &item.bytes.to_bytes()[..]),
            (Some(0), &b"req"[..])
        );
    }
}
