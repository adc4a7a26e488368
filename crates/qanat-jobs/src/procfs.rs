//! What the local executor reads from `/proc` and asks of the kernel: process start
//! times (a recycled pid is not the process we started), the memory of a process
//! group, signals to whole groups, the cores this server may use.

use std::collections::HashMap;

/// The fields of `/proc/<pid>/stat` after the command name (which may hold spaces and
/// parentheses, so it is skipped by its last ')').
fn stat_fields(pid: i32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// When process `pid` started, in clock ticks since boot (field 22 of stat).
pub(crate) fn start_ticks(pid: i32) -> Option<u64> {
    // Fields after ')' start at field 3 (state): starttime, field 22, is index 19.
    stat_fields(pid)?.get(19)?.parse().ok()
}

/// Whether `pid` is still the process that started at `ticks` (and not a zombie).
pub(crate) fn same_process(pid: i32, ticks: u64) -> bool {
    match stat_fields(pid) {
        Some(f) => {
            f.first().map(String::as_str) != Some("Z")
                && f.get(19).and_then(|t| t.parse().ok()) == Some(ticks)
        }
        None => false,
    }
}

fn page_size() -> u64 {
    rustix::param::page_size() as u64
}

/// What the processes of one process group use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct GroupUsage {
    /// Resident memory, MiB.
    pub rss_mb: u64,
    /// CPU time in clock ticks (user and system, with the children each waited for).
    pub cpu_ticks: u64,
}

/// The use of every process in each of `groups` (process group ids), read in one pass
/// over `/proc`. A sandboxed rank's processes count with its group wherever they are:
/// a process that left the group (`setsid`) is still in the rank's pid namespace.
pub(crate) fn group_usage(groups: &[i32]) -> HashMap<i32, GroupUsage> {
    struct Seen {
        pgrp: i32,
        ns: Option<String>,
        rss_pages: u64,
        ticks: u64,
    }
    let ns_of = |pid: i32| {
        std::fs::read_link(format!("/proc/{pid}/ns/pid"))
            .ok()
            .map(|l| l.to_string_lossy().into_owned())
    };
    let own_ns = ns_of(std::process::id() as i32);
    let mut seen = Vec::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.parse::<i32>().ok())
            else {
                continue;
            };
            let Some(f) = stat_fields(pid) else { continue };
            // pgrp is field 5 (index 2); utime, stime, cutime, cstime fields 14-17
            // (indexes 11-14); rss, in pages, field 24 (index 21).
            let Some(pgrp) = f.get(2).and_then(|v| v.parse::<i32>().ok()) else {
                continue;
            };
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            seen.push(Seen {
                pgrp,
                ns: ns_of(pid).filter(|n| Some(n) != own_ns.as_ref()),
                rss_pages: num(21),
                ticks: (11..=14).map(num).sum::<u64>(),
            });
        }
    }
    // The pid namespaces the groups' processes are in (none for unsandboxed ranks).
    let mut ns_group: HashMap<&str, i32> = HashMap::new();
    for p in &seen {
        if let (Some(ns), true) = (&p.ns, groups.contains(&p.pgrp)) {
            ns_group.insert(ns.as_str(), p.pgrp);
        }
    }
    let mut rss_pages: HashMap<i32, u64> = groups.iter().map(|g| (*g, 0)).collect();
    let mut ticks: HashMap<i32, u64> = groups.iter().map(|g| (*g, 0)).collect();
    for p in &seen {
        let group = if groups.contains(&p.pgrp) {
            Some(p.pgrp)
        } else {
            p.ns.as_deref().and_then(|n| ns_group.get(n).copied())
        };
        if let Some(g) = group {
            *rss_pages.entry(g).or_default() += p.rss_pages;
            *ticks.entry(g).or_default() += p.ticks;
        }
    }
    let page = page_size();
    groups
        .iter()
        .map(|g| {
            let usage = GroupUsage {
                rss_mb: rss_pages.get(g).copied().unwrap_or(0) * page / (1024 * 1024),
                cpu_ticks: ticks.get(g).copied().unwrap_or(0),
            };
            (*g, usage)
        })
        .collect()
}

pub(crate) use rustix::process::Signal;

/// Sends `signal` to every process in group `pgid`. A group that is gone is fine.
pub(crate) fn signal_group(pgid: i32, signal: Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pgid).filter(|_| pgid > 1) {
        let _ = rustix::process::kill_process_group(pid, signal);
    }
}

/// The cores this process may run on.
pub(crate) fn usable_cores() -> Vec<usize> {
    if let Ok(set) = rustix::thread::sched_getaffinity(None) {
        let cores: Vec<usize> = (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|c| set.is_set(*c))
            .collect();
        if !cores.is_empty() {
            return cores;
        }
    }
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}

/// Runs `f` on this thread with its CPU affinity narrowed to `cores` (what a child
/// forked meanwhile inherits), then restores it.
pub(crate) fn with_affinity<T>(cores: &[usize], f: impl FnOnce() -> T) -> T {
    if cores.is_empty() {
        return f();
    }
    let before = rustix::thread::sched_getaffinity(None).ok();
    let mut set = rustix::thread::CpuSet::new();
    for c in cores {
        set.set(*c);
    }
    let narrowed = rustix::thread::sched_setaffinity(None, &set).is_ok();
    let out = f();
    if let (true, Some(b)) = (narrowed, before) {
        let _ = rustix::thread::sched_setaffinity(None, &b);
    }
    out
}

/// Physical memory, MiB (4 GiB when /proc/meminfo cannot be read).
pub fn total_memory_mb() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(4096, |kb| kb / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_recognised_by_its_start_time() {
        let pid = std::process::id() as i32;
        let ticks = start_ticks(pid).expect("own stat");
        assert!(same_process(pid, ticks));
        assert!(!same_process(pid, ticks + 1));
        let pgid = rustix::process::getpgrp().as_raw_nonzero().get();
        assert!(group_usage(&[pgid])[&pgid].rss_mb > 0);
        assert!(!usable_cores().is_empty());
    }
}
