//! Memory of a spawned process measured the way a container runtime limits it: a child
//! memory cgroup (v1: `memory.limit_in_bytes`; v2: `memory.max`) made under the test's own
//! cgroup, the process moved into it, its peak usage, limit hits and OOM kills read at the
//! end, the cgroup removed on drop. Where no cgroup can be made (no memory controller, no
//! permission, a v2 tree without a delegated subtree) the caller falls back to sampling
//! `/proc/<pid>/status`, and says why.
//!
//! cgroup v1 charges page cache to the group too, so its usage is reported beside the
//! anonymous memory of `memory.stat` (`rss` + `rss_huge`; v2 `anon`), which is what the
//! process's own RSS limit (`limits.memory_mib`) governs.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A memory cgroup of the test's own making; removed (after its processes exit) on drop.
pub struct MemoryCgroup {
    dir: PathBuf,
    v2: bool,
    limit_bytes: u64,
    /// The largest anonymous memory seen by the sampler (every 100 ms), bytes.
    sampled_rss: Arc<AtomicU64>,
    /// Set to stop the sampler.
    stop: Arc<AtomicBool>,
}

/// What a [`MemoryCgroup`] measured, in bytes and counts.
#[derive(Clone, Copy, Debug, Default)]
pub struct CgroupFigures {
    /// The limit the group was given.
    pub limit_bytes: u64,
    /// Peak usage as the kernel charged it (v1 `memory.max_usage_in_bytes`, page cache
    /// included; v2 `memory.peak`, 0 on kernels without it).
    pub max_usage_bytes: u64,
    /// Anonymous memory now (`memory.stat` v1 `rss + rss_huge`, v2 `anon`).
    pub rss_bytes: u64,
    /// The largest anonymous memory sampled so far (every 100 ms from creation).
    pub sampled_rss_peak_bytes: u64,
    /// Times usage hit the limit (v1 `memory.failcnt`; v2 `memory.events` `max`).
    pub failcnt: u64,
    /// Processes the kernel's OOM killer killed in the group (`oom_kill` of v1
    /// `memory.oom_control`, v2 `memory.events`).
    pub oom_kills: u64,
}

impl MemoryCgroup {
    /// A child of this process's memory cgroup, named `name`, limited to `limit_bytes`;
    /// `Err` says why none could be made.
    pub fn create(name: &str, limit_bytes: u64) -> Result<MemoryCgroup, String> {
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("/proc/self/cgroup: {e}"))?;
        let v1 = own.lines().find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then(|| path.to_owned())
        });
        let (parent, v2) = match v1 {
            Some(path) => (mounted("/sys/fs/cgroup/memory", &path), false),
            None => {
                let path = own
                    .lines()
                    .find_map(|l| l.strip_prefix("0::"))
                    .ok_or("no memory controller in /proc/self/cgroup")?;
                (mounted("/sys/fs/cgroup", path), true)
            }
        };
        let dir = parent.join(name);
        std::fs::create_dir(&dir).map_err(|e| format!("mkdir {}: {e}", dir.display()))?;
        let cgroup = MemoryCgroup {
            dir,
            v2,
            limit_bytes,
            sampled_rss: Arc::default(),
            stop: Arc::default(),
        };
        let limit_file = if v2 {
            "memory.max"
        } else {
            "memory.limit_in_bytes"
        };
        cgroup.write(limit_file, &limit_bytes.to_string())?;
        if !v2 {
            // Charges made before the move go with the process, where the kernel still
            // moves charges (deprecated in Linux 6.x: EINVAL there). The process is moved
            // before it reads its config, so little is charged to the parent either way.
            let _ = cgroup.write("memory.move_charge_at_immigrate", "3");
        }
        let (stat, sampled, stop) = (
            cgroup.dir.join("memory.stat"),
            cgroup.sampled_rss.clone(),
            cgroup.stop.clone(),
        );
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let text = std::fs::read_to_string(&stat).unwrap_or_default();
                let rss = if v2 {
                    keyed_value(&text, "anon")
                } else {
                    keyed_value(&text, "rss") + keyed_value(&text, "rss_huge")
                };
                sampled.fetch_max(rss, Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        });
        Ok(cgroup)
    }

    /// Moves process `pid` into the group.
    pub fn add(&self, pid: u32) -> Result<(), String> {
        self.write("cgroup.procs", &pid.to_string())
    }

    /// Whether `pid` is in the group.
    pub fn holds(&self, pid: u32) -> bool {
        self.read("cgroup.procs")
            .lines()
            .any(|l| l.trim() == pid.to_string())
    }

    /// Where the group is and which cgroup version, for printed figures.
    pub fn describe(&self) -> String {
        format!(
            "cgroup {} {}",
            if self.v2 { "v2" } else { "v1" },
            self.dir.display()
        )
    }

    /// The figures so far.
    pub fn figures(&self) -> CgroupFigures {
        let sampled_rss_peak_bytes = self.sampled_rss.load(Ordering::Relaxed);
        let number = |file: &str| self.read(file).trim().parse().unwrap_or(0);
        let keyed = |file: &str, key: &str| keyed_value(&self.read(file), key);
        if self.v2 {
            CgroupFigures {
                limit_bytes: self.limit_bytes,
                max_usage_bytes: number("memory.peak"),
                rss_bytes: keyed("memory.stat", "anon"),
                sampled_rss_peak_bytes,
                failcnt: keyed("memory.events", "max"),
                oom_kills: keyed("memory.events", "oom_kill"),
            }
        } else {
            CgroupFigures {
                limit_bytes: self.limit_bytes,
                max_usage_bytes: number("memory.max_usage_in_bytes"),
                rss_bytes: keyed("memory.stat", "rss") + keyed("memory.stat", "rss_huge"),
                sampled_rss_peak_bytes,
                failcnt: number("memory.failcnt"),
                oom_kills: keyed("memory.oom_control", "oom_kill"),
            }
        }
    }

    fn write(&self, file: &str, value: &str) -> Result<(), String> {
        let path = self.dir.join(file);
        std::fs::write(&path, value).map_err(|e| format!("write {}: {e}", path.display()))
    }

    fn read(&self, file: &str) -> String {
        std::fs::read_to_string(self.dir.join(file)).unwrap_or_default()
    }
}

impl Drop for MemoryCgroup {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // The group can go once its processes have exited (the caller kills them first);
        // an exiting process leaves it a moment later.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        eprintln!("could not remove {}", self.dir.display());
    }
}

/// `path` (a cgroup path as `/proc/self/cgroup` names it) under the hierarchy mounted at
/// `mount`.
fn mounted(mount: &str, path: &str) -> PathBuf {
    Path::new(mount).join(path.trim_start_matches('/'))
}

/// The value of the `key value` line `key` of a cgroup file; 0 when absent.
fn keyed_value(text: &str, key: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or(0)
}

/// How a test's server memory was measured: its cgroup, or `/proc` alone (and why).
pub enum MemoryMeter {
    Cgroup(MemoryCgroup),
    Proc { why: String },
}

impl MemoryMeter {
    /// A cgroup of `limit_bytes` for one server, or the `/proc` fallback when none can be
    /// made (the reason printed, also under `CI`: a runner without a delegated memory
    /// cgroup cannot make one).
    pub fn new(name: &str, limit_bytes: u64) -> MemoryMeter {
        match MemoryCgroup::create(&super::attack::unique(name), limit_bytes) {
            Ok(cgroup) => MemoryMeter::Cgroup(cgroup),
            Err(why) => {
                eprintln!("memory measured from /proc, no cgroup: {why}");
                MemoryMeter::Proc { why }
            }
        }
    }

    /// The cgroup, when there is one.
    pub fn cgroup(&self) -> Option<&MemoryCgroup> {
        match self {
            MemoryMeter::Cgroup(cgroup) => Some(cgroup),
            MemoryMeter::Proc { .. } => None,
        }
    }

    /// `memory=cgroup-v1 …` or `memory=proc (why)` figures for an `ATTACK` line, with the
    /// process's own peak RSS (`VmHWM`, bytes) beside them.
    pub fn summary(&self, peak_rss: u64) -> String {
        match self {
            MemoryMeter::Cgroup(cgroup) => {
                let f = cgroup.figures();
                format!(
                    "memory=cgroup-{} cgroup_limit_mib={} cgroup_max_usage_mib={} (page cache included) \
                     cgroup_rss_sampled_peak_mib={} cgroup_rss_now_mib={} cgroup_failcnt={} oom_kills={} peak_rss_mib={}",
                    if cgroup.v2 { "v2" } else { "v1" },
                    f.limit_bytes >> 20,
                    f.max_usage_bytes >> 20,
                    f.sampled_rss_peak_bytes >> 20,
                    f.rss_bytes >> 20,
                    f.failcnt,
                    f.oom_kills,
                    peak_rss >> 20
                )
            }
            MemoryMeter::Proc { why } => {
                format!("memory=proc ({why}) peak_rss_mib={}", peak_rss >> 20)
            }
        }
    }

    /// OOM kills in the cgroup (0 without one: a killed process shows as not alive).
    pub fn oom_kills(&self) -> u64 {
        self.cgroup().map_or(0, |c| c.figures().oom_kills)
    }
}
