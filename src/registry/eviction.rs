//! Keeping run state bounded: the least-recently-seen order of the runs with their
//! estimated bytes, and eviction by idle TTL, run count and bytes.

use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};
use std::time::Instant;

use super::Registry;

/// Why a run was dropped from memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EvictionCause {
    /// Unseen for `idle_ttl`.
    Idle,
    /// Over `max_runs`.
    Capacity,
    /// Over `max_bytes`.
    Bytes,
}

/// The recency order of the runs (least recently seen first) with each run's estimated
/// bytes, and their sum. Held only briefly, and always after (never before) a map shard
/// lock, so it cannot deadlock with the map.
pub(super) struct Recency {
    pub(super) order: lru::LruCache<Arc<str>, u64, foldhash::fast::RandomState>,
    pub(super) bytes: u64,
}

impl Registry {
    pub(super) fn recency(&self) -> MutexGuard<'_, Recency> {
        // A panic while holding this lock cannot leave the list and sum inconsistent
        // beyond one run's estimate.
        self.recency.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks `key` most recently seen with `bytes` of state, and picks the least recently
    /// seen runs to evict while over `max_runs` or `max_bytes` (never `key` itself). O(1)
    /// per run touched or evicted. Called with `key`'s map entry held.
    pub(super) fn touch(&self, key: &Arc<str>, bytes: u64) -> Vec<(Arc<str>, EvictionCause)> {
        let max_runs = self.config.max_runs.max(1);
        let max_bytes = self.config.max_bytes.max(1);
        let mut recency = self.recency();
        let recency = &mut *recency;
        if let Some(old) = recency.order.put(key.clone(), bytes) {
            recency.bytes -= old.min(recency.bytes);
        }
        recency.bytes += bytes;
        let mut victims = Vec::new();
        while recency.order.len() > 1 {
            let cause = if recency.order.len() > max_runs {
                EvictionCause::Capacity
            } else if recency.bytes > max_bytes {
                EvictionCause::Bytes
            } else {
                break;
            };
            let Some((victim, victim_bytes)) = recency.order.pop_lru() else {
                break;
            };
            recency.bytes -= victim_bytes.min(recency.bytes);
            victims.push((victim, cause));
        }
        victims
    }

    /// Removes runs [`Registry::touch`] picked, unless seen again since (then they are back
    /// in the recency list and stay); counts each removal by cause.
    pub(super) fn evict(&self, victims: Vec<(Arc<str>, EvictionCause)>) {
        for (key, cause) in victims {
            let removed = self
                .runs
                .remove_if(&key, |k, _| !self.recency().order.contains(k))
                .is_some();
            if removed {
                let counter = match cause {
                    EvictionCause::Idle => &self.stats.runs_evicted_idle,
                    EvictionCause::Capacity => &self.stats.runs_evicted_capacity,
                    EvictionCause::Bytes => &self.stats.runs_evicted_bytes,
                };
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Drops runs idle for longer than `idle_ttl` at `now`; returns how many.
    pub fn evict_idle(&self, now: Instant) -> usize {
        let ttl = self.config.idle_ttl;
        let mut evicted = 0;
        self.runs.retain(|key, run| {
            let keep = now.saturating_duration_since(run.last_seen.instant(self.epoch)) <= ttl;
            if !keep {
                let mut recency = self.recency();
                if let Some(bytes) = recency.order.pop(key) {
                    recency.bytes -= bytes.min(recency.bytes);
                }
                evicted += 1;
            }
            keep
        });
        self.stats
            .runs_evicted_idle
            .fetch_add(evicted as u64, Ordering::Relaxed);
        evicted
    }
}
