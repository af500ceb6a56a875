//! The memory limiter: the process's resident set size (read with the `memory-stats` crate,
//! `/proc/self/statm` on Linux) against a soft limit, modelled on the OpenTelemetry
//! Collector's `memory_limiter` processor: `limit_mib` → `memory_mib`, `spike_limit_mib` →
//! `memory_spike_mib` (default 20 % of the limit), `check_interval` →
//! `memory_check_interval`. Above `memory_mib - memory_spike_mib` new requests are refused
//! (retryably) until a later reading is below it again.
//!
//! Where the Collector forces a garbage collection when it finds the heap above the soft
//! limit, loopwatch asks the allocator to hand its free pages back to the kernel
//! (`malloc_trim` on glibc, at most once per [`TRIM_INTERVAL`]) and reads again. Without
//! it, the pages freed after a burst of large requests stay in the process's RSS, and the
//! limiter would refuse ordinary requests for as long as they stay, with nothing in use.
//!
//! There is no background task: a reading older than the interval is refreshed by the
//! request that notices it (one at a time), so an idle process reads nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::LimitsConfig;

/// Share of the cgroup memory limit used when `memory_mib = 0`: 80 %.
pub const CGROUP_SHARE_PERCENT: u64 = 80;

/// Share of the hard limit kept as spike headroom when `memory_spike_mib = 0`: 20 %.
pub const DEFAULT_SPIKE_PERCENT: u64 = 20;

/// Shortest time between two `malloc_trim` calls: 1 s. A trim walks every free chunk of
/// every arena (a few milliseconds for a few hundred MiB), so it is not repeated at every
/// 100 ms check while the memory is really in use.
pub const TRIM_INTERVAL: Duration = Duration::from_secs(1);

const MIB: u64 = 1024 * 1024;

/// RSS against a soft limit. Cheap to consult on every request.
#[derive(Debug)]
pub struct MemoryLimiter {
    /// Hard limit in bytes; `None` = no limit.
    hard: Option<u64>,
    /// Soft limit in bytes (refuse above it).
    soft: u64,
    interval: Duration,
    /// Last RSS reading in bytes.
    rss: AtomicU64,
    /// When the last reading was taken, in ns since `epoch`.
    read_at: AtomicU64,
    /// Whether the last reading was above the soft limit.
    over: AtomicBool,
    /// When the allocator was last asked to release free pages, in ns since `epoch`.
    trimmed_at: AtomicU64,
    epoch: OnceLock<Instant>,
}

impl MemoryLimiter {
    /// The limiter for `config`: `memory_mib`, or 80 % of the cgroup limit when it is 0.
    pub fn new(config: &LimitsConfig) -> Self {
        let hard_mib = match config.memory_mib {
            0 => cgroup_limit_bytes().map(|b| b / MIB * CGROUP_SHARE_PERCENT / 100),
            mib => Some(mib),
        };
        Self::with_limit(
            hard_mib,
            config.memory_spike_mib,
            config.memory_check_interval,
        )
    }

    /// A limiter with a hard limit of `hard_mib` (`None` = off) and `spike_mib` of headroom
    /// (`0` = 20 % of the hard limit).
    pub fn with_limit(hard_mib: Option<u64>, spike_mib: u64, interval: Duration) -> Self {
        let hard = hard_mib.filter(|m| *m > 0).map(|m| m.saturating_mul(MIB));
        let soft = hard.map_or(u64::MAX, |h| {
            let spike = match spike_mib {
                0 => h / 100 * DEFAULT_SPIKE_PERCENT,
                s => s.saturating_mul(MIB),
            };
            h.saturating_sub(spike)
        });
        Self {
            hard,
            soft,
            interval,
            rss: AtomicU64::new(0),
            read_at: AtomicU64::new(0),
            over: AtomicBool::new(false),
            trimmed_at: AtomicU64::new(0),
            epoch: OnceLock::new(),
        }
    }

    /// The hard limit in bytes (`None` when the limiter is off).
    pub fn hard_limit_bytes(&self) -> Option<u64> {
        self.hard
    }

    /// The soft limit in bytes: requests are refused while the RSS is above it.
    pub fn soft_limit_bytes(&self) -> Option<u64> {
        self.hard.map(|_| self.soft)
    }

    /// Whether a new request may start (always `true` when off). Refreshes the reading
    /// when it is older than the check interval.
    pub fn allows(&self) -> bool {
        if self.hard.is_none() {
            return true;
        }
        let epoch = *self.epoch.get_or_init(Instant::now);
        let now = epoch.elapsed().as_nanos() as u64 + 1;
        let last = self.read_at.load(Ordering::Acquire);
        let stale = last == 0 || now.saturating_sub(last) >= self.interval.as_nanos() as u64;
        // One caller refreshes; the others use the reading it replaces.
        if stale
            && self
                .read_at
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            let mut rss = resident_bytes();
            if rss.is_some_and(|b| b > self.soft) && self.may_trim(now) {
                let before = rss.unwrap_or(0);
                release_free_heap();
                rss = resident_bytes();
                tracing::debug!(
                    rss_mib = rss.unwrap_or(0) / MIB,
                    released_mib = before.saturating_sub(rss.unwrap_or(0)) / MIB,
                    "memory above the soft limit: returned the allocator's free pages"
                );
            }
            self.observe(rss);
        }
        !self.over.load(Ordering::Acquire)
    }

    /// Whether a trim may run at `now` (ns since `epoch`): none ran in the last
    /// [`TRIM_INTERVAL`]. Claims the slot when it says yes.
    fn may_trim(&self, now: u64) -> bool {
        let last = self.trimmed_at.load(Ordering::Acquire);
        (last == 0 || now.saturating_sub(last) >= TRIM_INTERVAL.as_nanos() as u64)
            && self
                .trimmed_at
                .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
    }

    /// Takes an RSS reading (bytes; `None` when the platform gives none, which never
    /// refuses) and returns whether it is over the soft limit.
    pub fn observe(&self, rss: Option<u64>) -> bool {
        let Some(rss) = rss else {
            return false;
        };
        self.rss.store(rss, Ordering::Relaxed);
        let over = rss > self.soft;
        let was = self.over.swap(over, Ordering::AcqRel);
        if over && !was {
            tracing::warn!(
                rss_mib = rss / MIB,
                soft_limit_mib = self.soft / MIB,
                hard_limit_mib = self.hard.unwrap_or(0) / MIB,
                "memory above the soft limit (limits.memory_mib - limits.memory_spike_mib): refusing new requests until it falls"
            );
        } else if was && !over {
            tracing::info!(
                rss_mib = rss / MIB,
                "memory back below the soft limit: accepting requests"
            );
        }
        over
    }

    /// The last RSS reading in bytes (a fresh one when the limiter is off or has not read
    /// yet), for the gauge.
    pub fn rss_bytes(&self) -> u64 {
        match self.rss.load(Ordering::Relaxed) {
            0 => resident_bytes().unwrap_or(0),
            rss if self.hard.is_some() => rss,
            _ => resident_bytes().unwrap_or(0),
        }
    }

    /// Whether the last reading was above the soft limit.
    pub fn is_over(&self) -> bool {
        self.over.load(Ordering::Relaxed)
    }
}

/// The process's resident set size in bytes, when the platform reports one.
pub fn resident_bytes() -> Option<u64> {
    memory_stats::memory_stats().map(|m| m.physical_mem as u64)
}

/// Hands the allocator's free heap pages back to the kernel, so that memory freed after a
/// burst of large requests leaves the RSS. glibc keeps freed small chunks in its arenas
/// (one per thread that allocated, up to 8 per core) and only shrinks the top of each;
/// `malloc_trim(0)` also releases the whole free pages inside them. A no-op with other
/// C libraries and on other platforms, where the RSS reading is taken as it is.
pub fn release_free_heap() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim takes no pointers and is thread-safe (it locks each arena).
    unsafe {
        libc::malloc_trim(0);
    }
}

/// The memory limit of the cgroup this process runs in, when one is set: the smallest of
/// the limits (v2 `memory.max`, v1 `memory.limit_in_bytes`) of the process's own cgroup and
/// its ancestors, as the kernel enforces them.
///
/// The process's cgroup is read from `/proc/self/cgroup` and looked up under the
/// hierarchy's mount (`/sys/fs/cgroup` for v2, `/sys/fs/cgroup/memory` for v1). In a
/// container with a cgroup namespace the path is `/` and the mount root is the container's
/// own cgroup; without one (a cgroup v1 host, or a process started in a child cgroup) the
/// root file holds the host's limit, which is why the path is followed down. Path levels
/// not visible in the mount (a container without a cgroup namespace sees its own cgroup at
/// the root) are skipped.
pub fn cgroup_limit_bytes() -> Option<u64> {
    let (v2, v1) = own_cgroup_paths();
    [
        ("/sys/fs/cgroup", "memory.max", v2),
        ("/sys/fs/cgroup/memory", "memory.limit_in_bytes", v1),
    ]
    .into_iter()
    .find_map(|(mount, file, path)| {
        limit_along(
            std::path::Path::new(mount),
            file,
            path.as_deref().unwrap_or("/"),
        )
    })
}

/// The smallest limit in `file` of the cgroup at `path` under `mount` and of every
/// ancestor up to the mount's root; `None` when no level has the file or none sets a limit.
fn limit_along(mount: &std::path::Path, file: &str, path: &str) -> Option<u64> {
    let mut limit: Option<u64> = None;
    let mut seen = false;
    let mut dir = std::path::PathBuf::from(path.trim_start_matches('/'));
    loop {
        if let Ok(text) = std::fs::read_to_string(mount.join(&dir).join(file)) {
            seen = true;
            if let Some(bytes) = parse_cgroup_limit(&text) {
                limit = Some(limit.map_or(bytes, |l| l.min(bytes)));
            }
        }
        if !dir.pop() {
            break;
        }
    }
    seen.then_some(limit).flatten()
}

/// The process's cgroup paths: the v2 hierarchy's and the v1 memory controller's.
#[cfg(target_os = "linux")]
fn own_cgroup_paths() -> (Option<String>, Option<String>) {
    let Ok(groups) = procfs::process::Process::myself().and_then(|me| me.cgroups()) else {
        return (None, None);
    };
    let mut v2 = None;
    let mut v1 = None;
    for group in groups {
        if group.hierarchy == 0 && group.controllers.is_empty() {
            v2 = Some(group.pathname);
        } else if group.controllers.iter().any(|c| c == "memory") {
            v1 = Some(group.pathname);
        }
    }
    (v2, v1)
}

#[cfg(not(target_os = "linux"))]
fn own_cgroup_paths() -> (Option<String>, Option<String>) {
    (None, None)
}

/// A cgroup memory limit file's value: bytes, or `None` for `max` and the v1 "unlimited"
/// sentinel (a value near `i64::MAX`).
pub fn parse_cgroup_limit(text: &str) -> Option<u64> {
    let bytes: u64 = text.trim().parse().ok()?;
    (bytes < (1 << 60)).then_some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_is_the_smallest_along_the_cgroup_path() {
        let mount = std::env::temp_dir().join(format!("lw-cgroup-{}", std::process::id()));
        let file = "memory.limit_in_bytes";
        let set = |dir: &str, value: &str| {
            let dir = mount.join(dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(file), value).unwrap();
        };
        set("", "9223372036854771712\n"); // the v1 root: unlimited
        set("pods", "2147483648\n");
        set("pods/app", "536870912\n");
        assert_eq!(limit_along(&mount, file, "/pods/app"), Some(512 * MIB));
        assert_eq!(limit_along(&mount, file, "/pods"), Some(2048 * MIB));
        assert_eq!(
            limit_along(&mount, file, "/"),
            None,
            "the root sets no limit"
        );
        // A path the mount does not show (a container without a cgroup namespace sees its
        // own cgroup at the root): the levels that exist count.
        set("", "268435456\n");
        assert_eq!(limit_along(&mount, file, "/docker/abc"), Some(256 * MIB));
        assert_eq!(
            limit_along(&mount, "memory.max", "/pods"),
            None,
            "no such file"
        );
        std::fs::remove_dir_all(&mount).unwrap();
    }

    #[test]
    fn soft_limit_is_hard_minus_spike() {
        let l = MemoryLimiter::with_limit(Some(1000), 0, Duration::from_secs(1));
        assert_eq!(l.hard_limit_bytes(), Some(1000 * MIB));
        assert_eq!(l.soft_limit_bytes(), Some(1000 * MIB / 100 * 80));
        let l = MemoryLimiter::with_limit(Some(1000), 100, Duration::from_secs(1));
        assert_eq!(l.soft_limit_bytes(), Some(900 * MIB));
        let off = MemoryLimiter::with_limit(None, 0, Duration::from_secs(1));
        assert_eq!(off.soft_limit_bytes(), None);
        assert!(off.allows());
    }

    #[test]
    fn refuses_while_over_and_recovers() {
        let l = MemoryLimiter::with_limit(Some(100), 10, Duration::from_secs(3600));
        assert!(!l.observe(Some(90 * MIB)));
        assert!(l.observe(Some(90 * MIB + 1)));
        assert!(l.is_over());
        assert!(!l.observe(Some(50 * MIB)));
        assert!(!l.observe(None), "no reading never refuses");
    }

    #[test]
    fn a_limit_below_the_process_size_refuses_at_once() {
        // 1 MiB hard limit: any real process is above it.
        let l = MemoryLimiter::with_limit(Some(1), 0, Duration::from_secs(3600));
        assert!(!l.allows());
        assert!(l.rss_bytes() > MIB);
    }

    #[test]
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    fn trimming_returns_free_pages_held_between_live_chunks() {
        // 256 MiB in 2 KiB chunks, then every chunk freed but one in 64: no free space
        // at the top of the heap for free() to give back, 252 MiB free inside it.
        let mut chunks: Vec<Box<[u8; 2048]>> =
            (0..128 * 1024).map(|i| Box::new([i as u8; 2048])).collect();
        let mut kept = Vec::new();
        for (i, chunk) in chunks.drain(..).enumerate() {
            if i % 64 == 63 {
                kept.push(chunk);
            }
        }
        drop(chunks);
        let before = resident_bytes().unwrap();
        release_free_heap();
        let after = resident_bytes().unwrap();
        assert!(
            before.saturating_sub(after) > 128 * MIB,
            "RSS {} MiB before the trim, {} MiB after",
            before / MIB,
            after / MIB
        );
        assert_eq!(kept.len(), 2048);
        assert_eq!(kept[5][0], (64 * 6 - 1) as u8);
    }

    #[test]
    fn trims_at_most_once_per_interval() {
        let l = MemoryLimiter::with_limit(Some(100), 10, Duration::from_secs(3600));
        let second = TRIM_INTERVAL.as_nanos() as u64;
        assert!(l.may_trim(1));
        assert!(!l.may_trim(second / 2));
        assert!(l.may_trim(second + 1));
        assert!(!l.may_trim(second + 2));
    }

    #[test]
    fn cgroup_values() {
        assert_eq!(parse_cgroup_limit("max\n"), None);
        assert_eq!(parse_cgroup_limit("536870912\n"), Some(536_870_912));
        assert_eq!(parse_cgroup_limit("9223372036854771712"), None);
    }
}
