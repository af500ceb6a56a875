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
//!
//! A quarter of the budget is kept for *small* requests, those that decode to at most a
//! sixteenth of it: the requests past that size hold at most three quarters of the budget
//! between them (a second semaphore counts what they hold; a request growing past the
//! small size moves what it holds there first, or is refused). So requests that decode to
//! a lot (a decoded-cost bomb, a 16 MiB batch) never fill the budget, and an ordinary
//! request of a few KiB finds room at once however many of them are being read, instead of
//! being refused and retried behind them (issue 31's target: an ordinary client served
//! within 5 s while the attack goes on).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Budget unit: 1 KiB (semaphore permits are counted in `u32` per acquisition).
const UNIT: u64 = 1024;

/// The budget, as a semaphore of KiB.
#[derive(Debug)]
pub struct InFlight {
    semaphore: Arc<Semaphore>,
    /// What requests past the small size may hold together: all but a quarter of the budget.
    not_small: Arc<Semaphore>,
    capacity_units: u64,
    /// One permit: the right to grow past a quarter of the budget.
    large: Arc<Semaphore>,
}

/// The part of the budget kept for small requests: a quarter of `capacity_units`.
fn small_reserve_units(capacity_units: u64) -> u64 {
    capacity_units / 4
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
    /// The share of requests past the small size, and this reservation's hold of it: as
    /// many units as `permit` once it is past the small size, none before.
    not_small: Option<Arc<Semaphore>>,
    not_small_held: Option<OwnedSemaphorePermit>,
    past_small: bool,
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

    /// Whether a request of `used` bytes is *small*: at most a sixteenth of the budget
    /// (see the module docs); small requests may take the room kept for them.
    fn is_small(&self, used: u64) -> bool {
        used <= self.capacity_units * UNIT / 16
    }

    /// The units a request of `used` bytes may hold at most: the whole budget when small,
    /// else all but the small-request reserve. Holding that much, it grows without limit
    /// (one request larger than the budget is served, never refused for ever).
    fn cap_units(&self, used: u64) -> u64 {
        if self.is_small(used) {
            self.capacity_units
        } else {
            self.capacity_units - small_reserve_units(self.capacity_units)
        }
    }

    /// Takes `units` more, without waiting, for a reservation about to count `used` bytes:
    /// from the budget and, past the small size, from the share of requests past it as
    /// well (moving what it already holds there the first time). `false`, holding what it
    /// held before, when either has no room.
    fn take(&mut self, used: u64, units: u32) -> bool {
        let Some(semaphore) = self.semaphore.clone() else {
            return true;
        };
        let Ok(permit) = semaphore.try_acquire_many_owned(units) else {
            return false;
        };
        if !self.is_small(used) {
            let moved = if self.past_small {
                0
            } else {
                (self.granted / UNIT).min(u32::MAX as u64) as u32
            };
            let share = self
                .not_small
                .clone()
                .map(|s| s.try_acquire_many_owned(units.saturating_add(moved)));
            match share {
                Some(Ok(share)) => {
                    merge(&mut self.not_small_held, share);
                    self.past_small = true;
                }
                Some(Err(_)) => return false,
                None => {}
            }
        }
        self.add(permit, units);
        true
    }

    /// Adds `permit`, of `units` of the budget, to the grant.
    fn add(&mut self, permit: OwnedSemaphorePermit, units: u32) {
        merge(&mut self.permit, permit);
        self.granted += u64::from(units) * UNIT;
    }

    /// Counts `bytes` more, taking permits without waiting when the grant is used up.
    /// `false` (nothing counted) when the budget has no room: the caller refuses the
    /// request retryably. A reservation already holding the whole budget may always grow
    /// (one request larger than the budget is served alone, never refused for ever).
    pub fn try_grow(&mut self, bytes: usize) -> bool {
        let used = self.used.saturating_add(bytes as u64);
        if used <= self.granted || self.semaphore.is_none() {
            self.used = used;
            return true;
        }
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
        let cap = self.cap_units(used);
        if held >= cap {
            self.used = used;
            return true;
        }
        let room = cap - held;
        let need = (used - self.granted).div_ceil(UNIT).min(room);
        let step = (used - self.granted).max(STEP).div_ceil(UNIT).min(room);
        // A step when there is room for one, else just what is needed.
        for units in [step, need] {
            if self.take(used, units.min(u32::MAX as u64) as u32) {
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
        let deadline = std::time::Instant::now() + LARGE_WAIT;
        let mut wait = || loop {
            let held = self.granted / UNIT;
            let cap = self.cap_units(used);
            if used <= self.granted || held >= cap {
                self.used = used;
                return true;
            }
            let want = (used - self.granted)
                .max(STEP)
                .div_ceil(UNIT)
                .min(cap - held)
                .min(u32::MAX as u64) as u32;
            if self.take(used, want) {
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
            .min(self.cap_units(used).saturating_sub(held))
            .min(u32::MAX as u64) as u32;
        if self.is_small(used) {
            return match tokio::time::timeout(wait, semaphore.acquire_many_owned(units)).await {
                Ok(Ok(permit)) => {
                    self.add(permit, units);
                    self.used = used;
                    true
                }
                _ => false,
            };
        }
        // Past the small size it needs room in two semaphores at once, which neither can
        // wait for alone: it looks again every 2 ms.
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if self.take(used, units) {
                self.used = used;
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// Whether `used` bytes fit the grant (or the grant is as much as it may hold).
    fn used_fits(&self, used: u64) -> bool {
        used <= self.granted || self.granted / UNIT >= self.cap_units(used)
    }
}

/// Adds `permit` to `held`.
fn merge(held: &mut Option<OwnedSemaphorePermit>, permit: OwnedSemaphorePermit) {
    match held {
        Some(held) => held.merge(permit),
        None => *held = Some(permit),
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
            not_small: Arc::new(Semaphore::new(
                (units - small_reserve_units(units)) as usize,
            )),
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
            not_small: Some(Arc::clone(&self.not_small)),
            not_small_held: None,
            past_small: false,
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

    /// A current-thread runtime with timers (the waiting `grow`s time out).
    fn timed_runtime() -> tokio::runtime::Runtime {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build();
        let Ok(rt) = rt else { panic!("runtime") };
        rt
    }

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
    fn large_requests_leave_a_quarter_of_the_budget_to_small_ones() {
        let budget = InFlight::new(1024 * 1024);
        timed_runtime().block_on(async {
            let mut a = budget.reserve(0).await;
            assert!(a.try_grow(600 * 1024), "the large token's holder grows");
            let mut b = budget.reserve(0).await;
            assert!(
                !b.try_grow(200 * 1024),
                "424 KiB are free, but past the small size only 168 KiB of the 768 KiB share are"
            );
            assert!(b.try_grow(150 * 1024));
            assert_eq!(budget.in_use_bytes(), 750 * 1024);
            let mut c = budget.reserve(0).await;
            assert!(
                !c.try_grow(100 * 1024),
                "not small: kept out of the reserve"
            );
            assert!(
                !c.grow(100 * 1024, std::time::Duration::from_millis(10))
                    .await
            );
            // Small requests (≤ 64 KiB here) take the reserve, 64 KiB steps each.
            let mut small: Vec<DecodedBytes> = Vec::new();
            for _ in 0..4 {
                let mut d = budget.reserve(0).await;
                assert!(d.try_grow(10 * 1024), "a small request finds room");
                small.push(d);
            }
            assert_eq!(budget.in_use_bytes(), 1006 * 1024);
            // Past a sixteenth of the budget it is no longer small.
            assert!(!small[0].try_grow(60 * 1024));
            drop(small);
            drop(a);
            assert!(
                c.grow(100 * 1024, std::time::Duration::from_millis(10))
                    .await
            );
            // With nothing else held, a large request may hold all but the reserve, and
            // grows without limit from there (never refused for ever).
            drop((b, c));
            let mut e = budget.reserve(0).await;
            assert!(e.try_grow(2 * 1024 * 1024));
            assert_eq!(budget.in_use_bytes(), 768 * 1024);
        });
    }

    #[test]
    fn a_reservation_grows_until_the_budget_is_spent_and_gives_it_all_back() {
        let budget = InFlight::new(256 * 1024);
        timed_runtime().block_on(async {
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
