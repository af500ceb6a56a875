//! What `/proc` says about a process: CPU time used, resident memory and the CPUs it may
//! run on (Linux).

use std::io;

/// Clock ticks per second of `/proc/<pid>/stat` times (`getconf CLK_TCK`; 100 when that
/// cannot be run, the value on every mainstream Linux).
pub fn clock_ticks_per_second() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|t| *t > 0.0)
        .unwrap_or(100.0)
}

/// User + system CPU seconds `pid` has used (fields 14 and 15 of `/proc/<pid>/stat`, all
/// its threads, not its children).
pub fn cpu_seconds(pid: u32, ticks_per_second: f64) -> io::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces: count fields after its closing ')'.
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| io::Error::other(format!("/proc/{pid}/stat: no ')'")))?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // fields[0] is field 3 (state): utime is field 14, stime field 15.
    let ticks = |i: usize| -> io::Result<f64> {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .ok_or_else(|| io::Error::other(format!("/proc/{pid}/stat: field {}", i + 3)))
    };
    Ok((ticks(11)? + ticks(12)?) / ticks_per_second)
}

/// Resident set size of `pid` in bytes (`VmRSS` of `/proc/<pid>/status`).
pub fn rss_bytes(pid: u32) -> io::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .ok_or_else(|| io::Error::other(format!("/proc/{pid}/status: no VmRSS")))
}

/// The CPUs this process may run on (`Cpus_allowed_list` of `/proc/self/status`, e.g.
/// `1` or `0-1`); `None` when unreadable.
pub fn cpus_allowed_list() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .map(|v| v.trim().to_string())
}

/// The CPUs of a `taskset -c` / `Cpus_allowed_list` list (`0,1`, `0-3`, `0-3,8`), in list
/// order; `None` when a part is not a number or an ascending range.
pub fn cpu_list(list: &str) -> Option<Vec<u32>> {
    let mut cpus = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (a.trim().parse::<u32>().ok()?, b.trim().parse::<u32>().ok()?);
                if a > b {
                    return None;
                }
                cpus.extend(a..=b);
            }
            None => cpus.push(part.parse().ok()?),
        }
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_expand_ranges_in_order() {
        assert_eq!(cpu_list("0"), Some(vec![0]));
        assert_eq!(cpu_list("0-1"), Some(vec![0, 1]));
        assert_eq!(cpu_list("2, 0-1,8"), Some(vec![2, 0, 1, 8]));
        assert_eq!(cpu_list(""), Some(vec![]));
        assert_eq!(cpu_list("3-1"), None);
        assert_eq!(cpu_list("a"), None);
    }

    #[test]
    fn this_process_may_run_somewhere() {
        let list = cpus_allowed_list().unwrap();
        assert!(!cpu_list(&list).unwrap().is_empty(), "{list}");
    }

    #[test]
    fn reads_this_process() {
        let pid = std::process::id();
        assert!(cpu_seconds(pid, clock_ticks_per_second()).unwrap() >= 0.0);
        assert!(rss_bytes(pid).unwrap() > 1 << 20);
    }
}
