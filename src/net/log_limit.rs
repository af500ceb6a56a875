//! Rate-limited warnings: a fault that can repeat thousands of times a second (a client
//! sending unreadable spans, a downstream refusing every export, a signal queue
//! overflowing) is logged at WARN at most once per interval, with how many occurrences the
//! line stands for, instead of once (then silence) or once per occurrence (a log flood).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Default interval between two lines of one [`LogLimit`]: 10 s.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(10);

/// One rate-limited log line (lock-free; cheap to call on every occurrence).
#[derive(Debug)]
pub struct LogLimit {
    interval_ms: u64,
    /// Milliseconds since `epoch` + 1 of the last line written (0 = never).
    last_ms: AtomicU64,
    /// Occurrences since the last line written.
    since: AtomicU64,
    epoch: OnceLock<Instant>,
}

impl Default for LogLimit {
    fn default() -> Self {
        Self::new(DEFAULT_INTERVAL)
    }
}

impl LogLimit {
    /// At most one line per `interval`.
    pub const fn new(interval: Duration) -> Self {
        Self {
            interval_ms: interval.as_millis() as u64,
            last_ms: AtomicU64::new(0),
            since: AtomicU64::new(0),
            epoch: OnceLock::new(),
        }
    }

    /// Counts one occurrence; `Some(n)` when a line should be written now, `n` being the
    /// occurrences it stands for (this one included), `None` when it is left out.
    pub fn hit(&self) -> Option<u64> {
        self.hit_n(1)
    }

    /// As [`LogLimit::hit`], for `n` occurrences at once.
    pub fn hit_n(&self, n: u64) -> Option<u64> {
        self.since.fetch_add(n, Ordering::Relaxed);
        let epoch = *self.epoch.get_or_init(Instant::now);
        let now = epoch.elapsed().as_millis() as u64 + 1;
        let last = self.last_ms.load(Ordering::Relaxed);
        let due = last == 0 || now.saturating_sub(last) >= self.interval_ms;
        if due
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.since.swap(0, Ordering::Relaxed).max(1));
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_standing_for_the_occurrences_between() {
        let limit = LogLimit::new(Duration::from_millis(50));
        assert_eq!(limit.hit(), Some(1));
        assert_eq!(limit.hit(), None);
        assert_eq!(limit.hit_n(3), None);
        std::thread::sleep(Duration::from_millis(60));
        assert_eq!(limit.hit(), Some(5));
        assert_eq!(limit.hit(), None);
    }
}
