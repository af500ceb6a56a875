//! The decoded-bytes budget: the sum of the decompressed bodies being decoded and processed
//! (`limits.max_decoded_bytes_in_flight`). A request takes its size once decompressed and
//! gives it back when the span path has taken it (or refused it); over the cap it waits up
//! to `receiver.admission_wait`, then is refused retryably.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Budget unit: 1 KiB (semaphore permits are counted in `u32` per acquisition).
const UNIT: u64 = 1024;

/// The budget, as a semaphore of KiB.
#[derive(Debug)]
pub struct InFlight {
    semaphore: Arc<Semaphore>,
    capacity_units: u64,
}

/// Bytes held by one request; given back on drop.
#[derive(Debug, Default)]
pub struct DecodedBytes {
    _permit: Option<OwnedSemaphorePermit>,
}

impl DecodedBytes {
    /// A reservation that holds nothing (no budget configured).
    pub fn none() -> Self {
        Self { _permit: None }
    }
}

impl InFlight {
    /// A budget of `max_bytes` (rounded up to whole KiB).
    pub fn new(max_bytes: u64) -> Self {
        let units = max_bytes
            .div_ceil(UNIT)
            .clamp(1, Semaphore::MAX_PERMITS as u64);
        Self {
            semaphore: Arc::new(Semaphore::new(units as usize)),
            capacity_units: units,
        }
    }

    fn units(&self, bytes: usize) -> u32 {
        (bytes as u64)
            .div_ceil(UNIT)
            .clamp(1, self.capacity_units)
            .min(u32::MAX as u64) as u32
    }

    /// Waits for room for `bytes` (a request larger than the whole budget takes it all).
    pub async fn reserve(&self, bytes: usize) -> DecodedBytes {
        let permit = Arc::clone(&self.semaphore)
            .acquire_many_owned(self.units(bytes))
            .await
            .ok();
        DecodedBytes { _permit: permit }
    }

    /// Bytes held now (KiB granularity).
    pub fn in_use_bytes(&self) -> u64 {
        (self.capacity_units - self.semaphore.available_permits() as u64) * UNIT
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_hold_and_give_back() {
        let budget = InFlight::new(10 * 1024);
        let rt = tokio::runtime::Builder::new_current_thread().build();
        let Ok(rt) = rt else { panic!("runtime") };
        rt.block_on(async {
            let a = budget.reserve(6 * 1024).await;
            assert_eq!(budget.in_use_bytes(), 6 * 1024);
            let b = budget.reserve(4000).await;
            assert_eq!(budget.in_use_bytes(), 10 * 1024);
            let waiting = budget.reserve(1);
            tokio::pin!(waiting);
            assert!(futures::poll!(&mut waiting).is_pending());
            drop(a);
            let _c = waiting.await;
            assert_eq!(budget.in_use_bytes(), 5 * 1024);
            drop(b);
            // Larger than the budget: takes all of it rather than waiting for ever.
            drop(_c);
            let all = budget.reserve(1 << 30).await;
            assert_eq!(budget.in_use_bytes(), 10 * 1024);
            drop(all);
        });
    }
}
