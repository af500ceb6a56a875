//! The open connections of one listener, so that a full listener can make room (issue 31
//! item 2): when a new client arrives at `max_connections`, the connection that has read
//! nothing for longest (at least [`EVICT_IDLE_AFTER`]) is closed for it. Idle keep-alive
//! connections, or connections opened and never used, can then no longer hold a listener
//! (the admin listener's `/healthz` above all) against clients that have something to send.
//! Evictions are counted per listener ([`ListenerStats`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::task::AtomicWaker;

/// A connection is closed to make room only once it has read nothing for this long: a
/// client that just connected, or is sending, keeps its connection.
pub const EVICT_IDLE_AFTER: Duration = Duration::from_secs(1);

/// Counters of one listener, for `/metrics`.
#[derive(Debug)]
pub struct ListenerStats {
    /// The listener's name (`receiver.grpc`, `receiver.http`, `admin`).
    pub name: &'static str,
    /// Connections open now.
    pub open: AtomicU64,
    /// Connections closed to make room for a new client (the listener was full).
    pub evicted: AtomicU64,
}

impl ListenerStats {
    /// Zeroed counters of listener `name`.
    pub fn new(name: &'static str) -> Self {
        Self {
            name,
            open: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        }
    }
}

/// What the table and a connection share.
#[derive(Debug, Default)]
pub struct ConnState {
    /// Milliseconds since the table's epoch of the last byte read.
    last_read_ms: AtomicU64,
    /// Set to make the connection fail its next read or write.
    close: AtomicBool,
    /// Woken when `close` is set.
    waker: AtomicWaker,
}

impl ConnState {
    /// Whether the connection was asked to close.
    pub fn closing(&self) -> bool {
        self.close.load(Ordering::Acquire)
    }

    /// Registers the task to wake when the connection is asked to close.
    pub fn register(&self, waker: &std::task::Waker) {
        self.waker.register(waker);
    }
}

/// The open connections of one listener.
#[derive(Debug)]
pub struct ConnTable {
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
    next: AtomicU64,
    epoch: OnceLock<Instant>,
    /// The listener's counters.
    pub stats: Arc<ListenerStats>,
}

impl ConnTable {
    /// An empty table counting into `stats`.
    pub fn new(stats: Arc<ListenerStats>) -> Self {
        Self {
            conns: Mutex::new(HashMap::new()),
            next: AtomicU64::new(0),
            epoch: OnceLock::new(),
            stats,
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.get_or_init(Instant::now).elapsed().as_millis() as u64
    }

    /// Adds a connection (read "now"); returns its id and state.
    pub fn add(&self) -> (u64, Arc<ConnState>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState::default());
        state.last_read_ms.store(self.now_ms(), Ordering::Relaxed);
        self.lock().insert(id, Arc::clone(&state));
        self.stats.open.fetch_add(1, Ordering::Relaxed);
        (id, state)
    }

    /// Removes connection `id` (closed).
    pub fn remove(&self, id: u64) {
        if self.lock().remove(&id).is_some() {
            self.stats.open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Records that `state`'s connection read bytes now.
    pub fn read(&self, state: &ConnState) {
        state.last_read_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Asks the connection that has read nothing for longest, if that is at least
    /// `idle_after`, to close; returns whether one was.
    pub fn evict_idlest(&self, idle_after: Duration) -> bool {
        let now = self.now_ms();
        let idle_ms = idle_after.as_millis() as u64;
        let victim = {
            let conns = self.lock();
            conns
                .values()
                .filter(|c| !c.closing())
                .map(|c| (c.last_read_ms.load(Ordering::Relaxed), c))
                .filter(|(last, _)| now.saturating_sub(*last) >= idle_ms)
                .min_by_key(|(last, _)| *last)
                .map(|(_, c)| Arc::clone(c))
        };
        match victim {
            Some(conn) => {
                conn.close.store(true, Ordering::Release);
                conn.waker.wake();
                self.stats.evicted.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnState>>> {
        self.conns.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_idle_longest_is_evicted_and_only_past_the_threshold() {
        let table = ConnTable::new(Arc::new(ListenerStats::new("test")));
        let (a, state_a) = table.add();
        std::thread::sleep(Duration::from_millis(30));
        let (_b, state_b) = table.add();
        assert_eq!(table.stats.open.load(Ordering::Relaxed), 2);
        assert!(
            !table.evict_idlest(Duration::from_secs(60)),
            "nobody idle that long"
        );
        assert!(table.evict_idlest(Duration::from_millis(20)));
        assert!(state_a.closing() && !state_b.closing(), "the older one");
        assert!(
            !table.evict_idlest(Duration::from_millis(20)),
            "b is not idle enough"
        );
        table.read(&state_b);
        table.remove(a);
        assert_eq!(table.stats.open.load(Ordering::Relaxed), 1);
        assert_eq!(table.stats.evicted.load(Ordering::Relaxed), 1);
    }
}
