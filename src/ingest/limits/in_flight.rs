//! The decoded-bytes budget (`limits.max_decoded_bytes_in_flight`): the memory of the
//! requests being received, decoded and processed, counted in what they cost once decoded
//! (issue 31 item 1), not in wire bytes. A request's reservation ([`DecodedBytes`]) grows
//! as the request does: its body's bytes as they arrive, its decompressed size, then, while
//! the wire reader builds span and value views, their size ([`DecodedBytes::try_grow`]),
//! and is given back when the span path has taken it (or refused it). So a 2 MB request of
//! a million empty attributes holds the ~100 MB its views take, not 2 MB; over the cap the
//! request waits up to `receiver.admission_wait` where it can (body, decompression) and is
//! refused retryably where it cannot (mid-read), before the memory is allocated.
//!
//! Past a quarter of the budget a reservation grows only while it holds the budget's one
//! *large* token, and the holder may wait ([`LARGE_WAIT`]) for room the others give back:
//! without it, many requests that each decode to more than their share would all stop
//! half-way, be refused, retry and stop half-way again, and none would ever get through.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Budget unit: 1 KiB (semaphore permits are counted in `u32` per acquisition).
const UNIT: u64 = 1024;

/// The budget, as a semaphore of KiB.
#[derive(Debug)]
pub struct InFlight {
    semaphore: Arc<Semaphore>,
    capacity_units: u64,
    /// One permit: the right to grow past a quarter of the budget.
    large: Arc<Semaphore>,
}

/// How long the holder of the large token waits for room mid-read before it is refused.
pub const LARGE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Growth of a reservation is asked of the semaphore in steps of at least this many bytes,
/// so a request read frame by frame or value by value takes few permits.
const STEP: u64 = 64 * 1024;

/// Bytes held by one request; given back on drop. Grows with [`DecodedBytes::try_grow`] /
/// [`DecodedBytes::grow`].
#[derive(Debug, Default)]
pub struct DecodedBytes {
    permit: Option<OwnedSemaphorePermit>,
    /// The budget it grows from (`None`: no budget, growth always allowed).
    semaphore: Option<Arc<Semaphore>>,
    /// The whole budget, in units.
    capacity_units: u64,
    /// Bytes granted (whole units) and bytes used of them.
    granted: u64,
    used: u64,
    /// The budget's large token (see the module docs), and this reservation's hold of it.
    large: Option<Arc<Semaphore>>,
    large_held: Option<OwnedSemaphorePermit>,
}

impl DecodedBytes {
    /// A reservation that holds nothing (no budget configured).
    pub fn none() -> Self {
        Self::default()
    }

    /// Bytes counted against the budget so far.
    pub fn used_bytes(&self) -> u64 {
        self.used
    }

    /// Counts `bytes` more, taking permits without waiting when the grant is used up.
    /// `false` (nothing counted) when the budget has no room: the caller refuses the
    /// request retryably. A reservation already holding the whole budget may always grow
    /// (one request larger than the budget is served alone, never refused for ever).
    pub fn try_grow(&mut self, bytes: usize) -> bool {
        let used = self.used.saturating_add(bytes as u64);
        if used <= self.granted {
            self.used = used;
            return true;
        }
        let Some(semaphore) = &self.semaphore else {
            self.used = used;
            return true;
        };
        if self.large_held.is_none() && used > self.capacity_units * UNIT / 4 {
            match self.large.clone().map(Semaphore::try_acquire_owned) {
                Some(Ok(token)) => self.large_held = Some(token),
                Some(Err(_)) => return false,
                None => {}
            }
        }
        if self.large_held.is_some() {
            return self.grow_waiting(used);
        }
        let held = self.granted / UNIT;
        if held >= self.capacity_units {
            self.used = used;
            return true;
        }
        let room = self.capacity_units - held;
        let need = (used - self.granted).div_ceil(UNIT).min(room);
        let step = (used - self.granted).max(STEP).div_ceil(UNIT).min(room);
        // A step when there is room for one, else just what is needed.
        let semaphore = Arc::clone(semaphore);
        for units in [step, need] {
            let units = units.min(u32::MAX as u64) as u32;
            if let Ok(permit) = Arc::clone(&semaphore).try_acquire_many_owned(units) {
                self.add(permit, units);
                if self.used_fits(used) {
                    self.used = used;
                    return true;
                }
                return false;
            }
        }
        false
    }

    /// Grows to `used` bytes for the holder of the large token, waiting up to
    /// [`LARGE_WAIT`] for room (off the async worker: it runs in the request's
    /// `block_in_place`, or hands its thread off itself).
    fn grow_waiting(&mut self, used: u64) -> bool {
        let Some(semaphore) = self.semaphore.clone() else {
            self.used = used;
            return true;
        };
        let deadline = std::time::Instant::now() + LARGE_WAIT;
        let mut wait = || loop {
            let held = self.granted / UNIT;
            if used <= self.granted || held >= self.capacity_units {
                self.used = used;
                return true;
            }
            let want = (used - self.granted)
                .max(STEP)
                .div_ceil(UNIT)
                .min(self.capacity_units - held)
                .min(u32::MAX as u64) as u32;
            if let Ok(permit) = Arc::clone(&semaphore).try_acquire_many_owned(want) {
                self.add(permit, want);
                continue;
            }
            if std::time::Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        };
        match tokio::runtime::Handle::try_current() {
            Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(wait)
            }
            _ => wait(),
        }
    }

    /// As [`DecodedBytes::try_grow`], waiting up to `wait` for room.
    pub async fn grow(&mut self, bytes: usize, wait: std::time::Duration) -> bool {
        if self.try_grow(bytes) {
            return true;
        }
        let Some(semaphore) = self.semaphore.clone() else {
            return true;
        };
        let used = self.used.saturating_add(bytes as u64);
        let held = self.granted / UNIT;
        let units = (used - self.granted)
            .div_ceil(UNIT)
            .min(self.capacity_units.saturating_sub(held))
            .min(u32::MAX as u64) as u32;
        match tokio::time::timeout(wait, semaphore.acquire_many_owned(units)).await {
            Ok(Ok(permit)) => {
                self.add(permit, units);
                self.used = used;
                true
            }
            _ => false,
        }
    }

    fn add(&mut self, permit: OwnedSemaphorePermit, units: u32) {
        match &mut self.permit {
            Some(held) => held.merge(permit),
            None => self.permit = Some(permit),
        }
        self.granted += u64::from(units) * UNIT;
    }

    /// Whether `used` bytes fit the grant (or the grant is the whole budget).
    fn used_fits(&self, used: u64) -> bool {
        used <= self.granted || self.granted / UNIT >= self.capacity_units
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
            large: Arc::new(Semaphore::new(1)),
        }
    }

    fn units(&self, bytes: usize) -> u32 {
        (bytes as u64)
            .div_ceil(UNIT)
            .clamp(1, self.capacity_units)
            .min(u32::MAX as u64) as u32
    }

    /// Waits for room for `bytes` (a request larger than the whole budget takes it all);
    /// `0` reserves nothing yet (the reservation grows later) and never waits.
    pub async fn reserve(&self, bytes: usize) -> DecodedBytes {
        let mut reserved = DecodedBytes {
            permit: None,
            semaphore: Some(Arc::clone(&self.semaphore)),
            capacity_units: self.capacity_units,
            granted: 0,
            used: 0,
            large: Some(Arc::clone(&self.large)),
            large_held: None,
        };
        if bytes > 0 {
            let units = self.units(bytes);
            if let Ok(permit) = Arc::clone(&self.semaphore).acquire_many_owned(units).await {
                reserved.add(permit, units);
                reserved.used = bytes as u64;
            }
        }
        reserved
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

    #[test]
    fn a_reservation_grows_until_the_budget_is_spent_and_gives_it_all_back() {
        let budget = InFlight::new(256 * 1024);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build();
        let Ok(rt) = rt else { panic!("runtime") };
        rt.block_on(async {
            let mut a = budget.reserve(0).await;
            assert_eq!(budget.in_use_bytes(), 0);
            assert!(a.try_grow(1000));
            // Granted in steps of 64 KiB: the next 60 KB need no permit.
            assert_eq!(budget.in_use_bytes(), 64 * 1024);
            assert!(a.try_grow(60_000));
            assert_eq!(budget.in_use_bytes(), 64 * 1024);
            assert!(a.try_grow(150 * 1024));
            assert_eq!(a.used_bytes(), 61_000 + 150 * 1024);
            let mut b = budget.reserve(0).await;
            assert!(!b.try_grow(100 * 1024), "the budget is spent");
            assert!(
                !b.grow(100 * 1024, std::time::Duration::from_millis(10))
                    .await
            );
            assert!(b.try_grow(10 * 1024), "what is left fits");
            drop(a);
            assert!(
                b.grow(100 * 1024, std::time::Duration::from_millis(10))
                    .await
            );
            drop(b);
            assert_eq!(budget.in_use_bytes(), 0);
            // Holding the whole budget, a reservation grows past it.
            let mut all = budget.reserve(1 << 30).await;
            assert!(all.try_grow(1 << 20));
            drop(all);
            assert_eq!(budget.in_use_bytes(), 0);
        });
    }
}
