//! Limits for processes the server starts outside the scheduler — the serving
//! runtime's Python workers: each in a cgroup of its own with its memory limit, as a
//! local job's rank is ([`crate::cgroup`]), or, where no cgroup tree is writable, its
//! resident memory sampled and the process killed over the limit.
//!
//! A server's groups live under `qanat-<key>-p<pid>`: servers sharing a data
//! directory (`qanat server` beside `qanat serve`) never sweep each other's workers,
//! and what a server process that is gone left (its pid no longer running) is killed
//! and removed when the next one first starts a worker.

use crate::cgroup::{Cgroups, RankGroup};

/// Places processes in limited groups.
#[derive(Debug)]
pub struct Confiner {
    cgroups: Cgroups,
}

/// One process's limit; dropping it kills what is left in its group and removes it.
#[derive(Debug)]
pub struct Confined {
    group: Option<RankGroup>,
    /// The process group sampled when there is no cgroup.
    pgid: i32,
    memory_mb: u64,
    /// Kills its group counted before it.
    oom_before: u64,
}

impl Confiner {
    /// Finds a writable cgroup tree (unless `settings.cgroups` is off) for the groups
    /// of this server process.
    pub fn detect(settings: &crate::Settings) -> Confiner {
        let base = crate::cgroup::key_of(&settings.work_dir);
        let cgroups = Cgroups::detect(settings.cgroups, &format!("{base}-p{}", std::process::id()));
        // What server processes that are gone left (one that crashed or was killed
        // leaves its workers' groups in place).
        cgroups.sweep_gone();
        Confiner { cgroups }
    }

    /// A confiner that only samples (as where no cgroup tree is writable).
    pub fn sampled(why: &str) -> Confiner {
        Confiner {
            cgroups: Cgroups::Off(why.to_string()),
        }
    }

    /// How a limit is enforced, in words.
    pub fn enforcement(&self) -> &'static str {
        match &self.cgroups {
            Cgroups::V2 { .. } => "cgroup v2 memory.max",
            Cgroups::V1 { .. } => "cgroup v1 memory.limit_in_bytes",
            Cgroups::Off(_) => "resident memory sampled",
        }
    }

    /// Limits process `pid` (and what it starts) to `memory_mb` MiB, in a group named
    /// `name` (unique among this confiner's live groups). Call it before the process
    /// runs its program (at its launcher's barrier).
    pub fn confine(&self, name: &str, pid: u32, memory_mb: u64) -> Result<Confined, String> {
        let pgid = i32::try_from(pid).map_err(|_| format!("pid {pid} is out of range"))?;
        let group = if self.cgroups.active() {
            let g = self
                .cgroups
                .create(name, memory_mb, 0)
                .map_err(|e| format!("creating its cgroup: {e}"))?;
            if let Err(e) = g.add(pid) {
                g.kill();
                g.remove_now();
                return Err(format!("placing it in its cgroup: {e}"));
            }
            Some(g)
        } else {
            None
        };
        // A group left by an earlier process of the same name counts its kills too:
        // only kills after this one's start are its.
        let oom_before = group.as_ref().map_or(0, RankGroup::oom_kills);
        Ok(Confined {
            group,
            pgid,
            memory_mb,
            oom_before,
        })
    }
}

impl Confined {
    /// Why the process is (or must be) stopped for memory: the kernel killed one of
    /// its processes at the cgroup's limit, or (sampled) its process group's resident
    /// memory is over the limit — the caller then kills it.
    pub fn over_limit(&self) -> Option<String> {
        let limit = self.memory_mb;
        match &self.group {
            Some(g) => (g.oom_kills() > self.oom_before).then(|| {
                format!("went over its memory limit of {limit} MiB and was killed by the kernel")
            }),
            None => {
                let used = crate::procfs::group_usage(&[self.pgid])
                    .get(&self.pgid)
                    .map_or(0, |u| u.rss_mb);
                (used > limit).then(|| {
                    format!("used {used} MiB, over its memory limit of {limit} MiB, and was killed")
                })
            }
        }
    }
}

impl Drop for Confined {
    fn drop(&mut self) {
        if let Some(g) = self.group.take() {
            g.kill();
            g.remove_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// A process group that grows past 64 MiB: stopped by the kernel in a cgroup, or
    /// found over the limit by sampling.
    fn hog() -> std::process::Child {
        use std::os::unix::process::CommandExt;
        std::process::Command::new("/bin/sh")
            .arg("-c")
            // A shell variable of 256 MiB, held (the tail waits on a pipe).
            .arg("read go; x=$(head -c 268435456 /dev/zero | tr '\\0' a); sleep 60; echo ${#x}")
            .stdin(std::process::Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("sh")
    }

    fn check(c: &Confiner) {
        let mut child = hog();
        let limit = c
            .confine(&format!("test-{}", child.id()), child.id(), 64)
            .expect("confined");
        assert!(limit.over_limit().is_none(), "nothing used yet");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(b"go\n").expect("go");
        }
        let started = Instant::now();
        let why = loop {
            if let Some(why) = limit.over_limit() {
                break why;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "never over its limit"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(why.contains("64 MiB"), "{why}");
        let _ = child.kill();
        drop(limit);
        let _ = child.wait();
    }

    #[test]
    fn a_process_over_its_memory_limit_is_found_by_sampling() {
        check(&Confiner::sampled("test"));
    }

    #[test]
    fn a_process_over_its_memory_limit_is_stopped_by_its_cgroup_where_there_is_one() {
        let settings = crate::Settings::new(
            std::env::temp_dir().join(format!("qanat-confine-{}", std::process::id())),
            "http://127.0.0.1:1",
            "local",
        );
        let c = Confiner::detect(&settings);
        if let Cgroups::Off(why) = &c.cgroups {
            eprintln!("no writable cgroup tree here ({why}): the sampled path is tested alone");
            return;
        }
        check(&c);
        // What a server that is gone left beside it (its parent and a worker's group)
        // is removed by the next start; a live one's is not.
        let parent = c.cgroups.parents()[0].to_path_buf();
        let up = parent.parent().expect("a parent").to_path_buf();
        let dead = (4_000_000..4_100_000)
            .find(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
            .expect("a pid that does not run");
        let gone = up.join(format!("qanat-0123456789ab-p{dead}"));
        let _ = std::fs::create_dir(&gone);
        let _ = std::fs::create_dir(gone.join("worker-0-1"));
        assert!(gone.join("worker-0-1").is_dir(), "made");
        let again = Confiner::detect(&settings);
        assert!(!gone.exists(), "a gone server's groups are swept");
        assert!(parent.exists(), "this live server's are kept");
        drop(again);
    }
}
