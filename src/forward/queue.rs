//! The bounded forward queue: producers reserve a slot before doing detection work, so a
//! full queue refuses the request up front (backpressure) instead of dropping it later.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::mpsc;

use crate::ingest::AcceptError;

use super::stats::ForwarderStats;

/// One encoded `ExportTraceServiceRequest` waiting to be forwarded.
#[derive(Debug)]
pub(crate) struct QueuedRequest {
    pub(crate) bytes: Bytes,
    pub(crate) spans: u64,
    pub(crate) enqueued: Instant,
}

/// Producer handle of the forward queue (cheap to clone).
#[derive(Clone, Debug)]
pub struct ForwardQueue {
    tx: mpsc::Sender<QueuedRequest>,
    stats: Arc<ForwarderStats>,
}

impl ForwardQueue {
    pub(crate) fn new(
        capacity: usize,
        stats: Arc<ForwarderStats>,
    ) -> (Self, mpsc::Receiver<QueuedRequest>) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (Self { tx, stats }, rx)
    }

    /// Reserves one slot without waiting.
    ///
    /// # Errors
    /// [`AcceptError::QueueFull`] when every slot is taken (the receiver answers a
    /// retryable status); [`AcceptError::ShuttingDown`] once the forwarder closed the queue.
    pub fn try_reserve(&self) -> Result<ForwardPermit<'_>, AcceptError> {
        match self.tx.try_reserve() {
            Ok(permit) => Ok(ForwardPermit {
                permit,
                stats: &self.stats,
            }),
            Err(mpsc::error::TrySendError::Full(())) => Err(AcceptError::QueueFull),
            Err(mpsc::error::TrySendError::Closed(())) => Err(AcceptError::ShuttingDown),
        }
    }

    /// Slots taken (queued plus reserved), in requests.
    pub fn len(&self) -> usize {
        self.tx.max_capacity() - self.tx.capacity()
    }

    /// True when no slot is taken.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The queue capacity, in requests.
    pub fn capacity(&self) -> usize {
        self.tx.max_capacity()
    }
}

/// A reserved slot; dropping it unused releases the slot.
#[derive(Debug)]
pub struct ForwardPermit<'a> {
    permit: mpsc::Permit<'a, QueuedRequest>,
    stats: &'a ForwarderStats,
}

impl ForwardPermit<'_> {
    /// Queues `request` (protobuf `ExportTraceServiceRequest` bytes, forwarded untouched)
    /// holding `spans` spans (for the forwarded-spans counter). Never blocks or fails.
    pub fn send(self, request: Bytes, spans: u64) {
        self.stats.enqueued();
        self.permit.send(QueuedRequest {
            bytes: request,
            spans,
            enqueued: Instant::now(),
        });
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
        assert_eq!(queue.try_reserve().err(), Some(AcceptError::QueueFull));
        rx.close();
        assert_eq!(queue.try_reserve().err(), Some(AcceptError::ShuttingDown));
        // queued items survive the close and drain
        assert!(rx.try_recv().is_ok());
        assert!(rx.try_recv().is_ok());
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn dropped_permit_frees_slot() {
        let stats = Arc::new(ForwarderStats::default());
        let (queue, _rx) = ForwardQueue::new(1, stats);
        let permit = queue.try_reserve();
        assert!(permit.is_ok());
        assert_eq!(queue.try_reserve().err(), Some(AcceptError::QueueFull));
        drop(permit);
        assert!(queue.try_reserve().is_ok());
    }
}
