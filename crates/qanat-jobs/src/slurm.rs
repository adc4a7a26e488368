//! The Slurm executor, for HPC sites: an attempt becomes one `sbatch` submission, its
//! ranks one `srun` step (a gang: Slurm starts every task or none, and
//! `--kill-on-bad-exit` ends them all when one fails). Status comes from `squeue` while
//! Slurm knows the job as active and from `scontrol show job` after (no accounting
//! database is needed), cancellation is `scancel`, and each rank writes its own log
//! (`srun --output=rank-%t.log`) into the job's directory, which must be on a file
//! system the compute nodes share with the server.
//!
//! One poller asks `squeue` about every job this server watches, so the cost of
//! watching does not grow with one process per job. Jobs Slurm runs are not lost when
//! the server restarts: it finds them again by their Slurm job id (or, if it stopped
//! between `sbatch` and recording the id, by the job name `qanat-<job>-<attempt>`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use tokio::process::Command;
use tokio::sync::watch;

use crate::spec::Resources;
use crate::{Error, Result};

/// How limits are enforced on Slurm (shown in `jobs show`).
pub(crate) const ENFORCEMENT: &str =
    "Slurm: --cpus-per-task, --mem-per-cpu and --gres, enforced as the cluster's TaskPlugin and cgroup.conf say";

/// Where the Slurm commands are and how jobs are submitted.
#[derive(Debug, Clone)]
pub struct SlurmSettings {
    /// The partition jobs go to (the cluster's default when None).
    pub partition: Option<String>,
    /// An account to charge (`--account`).
    pub account: Option<String>,
    /// The region the cluster is in (residency).
    pub region: String,
    /// The directory holding `sbatch`, `squeue`, `scontrol`, `scancel` (PATH when None).
    pub bin_dir: Option<PathBuf>,
    /// How often the poller asks Slurm.
    pub poll: Duration,
}

/// What Slurm says about a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SlurmState {
    /// PENDING, CONFIGURING, … with Slurm's reason.
    Waiting(String),
    Running,
    /// A terminal state: COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, OUT_OF_MEMORY,
    /// PREEMPTED, BOOT_FAIL, DEADLINE; with the exit code and signal.
    Ended {
        state: String,
        exit_code: i32,
        signal: i32,
    },
}

#[derive(Debug)]
pub(crate) struct SlurmExecutor {
    pub(crate) settings: SlurmSettings,
    capacity: Resources,
    watched: Mutex<HashMap<String, watch::Sender<SlurmState>>>,
}

impl SlurmExecutor {
    pub(crate) async fn new(settings: SlurmSettings) -> Result<Self> {
        let exec = SlurmExecutor {
            settings,
            capacity: Resources::default(),
            watched: Mutex::new(HashMap::new()),
        };
        let capacity = exec.cluster_capacity().await?;
        Ok(SlurmExecutor { capacity, ..exec })
    }

    fn bin(&self, name: &str) -> PathBuf {
        match &self.settings.bin_dir {
            Some(d) => d.join(name),
            None => PathBuf::from(name),
        }
    }

    async fn run(&self, name: &str, args: &[&str]) -> Result<String> {
        let out = Command::new(self.bin(name))
            .args(args)
            .kill_on_drop(true)
            .output()
            .await
            .map_err(|e| {
                Error::Io(format!(
                    "running {name}: {e} (is Slurm installed and on PATH?)"
                ))
            })?;
        if !out.status.success() {
            return Err(Error::Io(format!(
                "{name} {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The cluster's cores, memory and GPUs (from `sinfo`), for fair shares and for
    /// refusing what could never run.
    async fn cluster_capacity(&self) -> Result<Resources> {
        let mut args = vec!["-h", "-N", "-o", "%N|%c|%m|%G"];
        if let Some(p) = &self.settings.partition {
            args.extend(["-p", p.as_str()]);
        }
        let out = self.run("sinfo", &args).await?;
        let mut seen = std::collections::HashSet::new();
        let mut r = Resources::default();
        for line in out.lines() {
            let f: Vec<&str> = line.split('|').collect();
            if f.len() < 4 || !seen.insert(f[0].to_string()) {
                continue;
            }
            r.cpu_millis += f[1].trim().parse::<u64>().unwrap_or(0) * 1000;
            r.memory_mb += f[2]
                .trim()
                .trim_end_matches('+')
                .parse::<u64>()
                .unwrap_or(0);
            r.gpus += gres_gpus(f[3]);
        }
        Ok(r)
    }

    pub(crate) fn capacity(&self) -> Resources {
        self.capacity
    }

    /// Submits `script`; returns Slurm's job id.
    pub(crate) async fn submit(&self, script: &Path) -> Result<String> {
        let path = script.display().to_string();
        let out = self.run("sbatch", &["--parsable", &path]).await?;
        let id = out.trim().split(';').next().unwrap_or("").to_string();
        if id.is_empty() || !id.bytes().all(|b| b.is_ascii_digit()) {
            return Err(Error::Io(format!(
                "sbatch answered '{}', not a job id",
                out.trim()
            )));
        }
        Ok(id)
    }

    /// The id of a job submitted under `name`, if Slurm still knows one.
    pub(crate) async fn find_by_name(&self, name: &str) -> Result<Option<String>> {
        let out = self.run("squeue", &["-h", "-n", name, "-o", "%i"]).await?;
        Ok(out
            .lines()
            .next()
            .map(|l| l.trim().to_string())
            .filter(|s| !s.is_empty()))
    }

    pub(crate) async fn cancel(&self, id: &str) -> Result<()> {
        self.run("scancel", &[id]).await.map(|_| ())
    }

    /// Starts watching Slurm job `id`; the receiver sees each change of state.
    pub(crate) fn watch(&self, id: &str) -> watch::Receiver<SlurmState> {
        let mut w = self.watched.lock().unwrap_or_else(|p| p.into_inner());
        w.entry(id.to_string())
            .or_insert_with(|| watch::channel(SlurmState::Waiting("submitted".into())).0)
            .subscribe()
    }

    /// One round of the poller: `squeue` for every watched job, `scontrol` for those
    /// Slurm no longer lists as active.
    pub(crate) async fn poll_once(&self) -> Result<()> {
        let ids: Vec<String> = {
            let mut w = self.watched.lock().unwrap_or_else(|p| p.into_inner());
            w.retain(|_, tx| tx.receiver_count() > 0);
            w.keys().cloned().collect()
        };
        if ids.is_empty() {
            return Ok(());
        }
        let list = ids.join(",");
        // squeue fails when none of the ids is known any more; that is not an error here.
        let active = self
            .run("squeue", &["-h", "-j", &list, "-o", "%i|%T|%r"])
            .await
            .unwrap_or_default();
        let mut seen = HashMap::new();
        for line in active.lines() {
            let f: Vec<&str> = line.split('|').collect();
            if f.len() >= 3 {
                seen.insert(
                    f[0].trim().to_string(),
                    (f[1].trim().to_string(), f[2].trim().to_string()),
                );
            }
        }
        for id in ids {
            let state = match seen.get(&id) {
                Some((s, _)) if s == "RUNNING" || s == "COMPLETING" => SlurmState::Running,
                Some((s, reason)) if !is_terminal(s) => {
                    SlurmState::Waiting(format!("{s} ({reason})"))
                }
                _ => match self.run("scontrol", &["show", "job", "-o", &id]).await {
                    Ok(text) => parse_scontrol(&text),
                    Err(e) => SlurmState::Ended {
                        state: format!("UNKNOWN: Slurm no longer knows job {id} ({e})"),
                        exit_code: -1,
                        signal: 0,
                    },
                },
            };
            let w = self.watched.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(tx) = w.get(&id) {
                tx.send_if_modified(|cur| {
                    let changed = *cur != state;
                    *cur = state.clone();
                    changed
                });
            }
        }
        Ok(())
    }
}

fn is_terminal(state: &str) -> bool {
    matches!(
        state,
        "COMPLETED"
            | "FAILED"
            | "CANCELLED"
            | "TIMEOUT"
            | "NODE_FAIL"
            | "OUT_OF_MEMORY"
            | "PREEMPTED"
            | "BOOT_FAIL"
            | "DEADLINE"
    )
}

/// GPUs in an `sinfo` GRES column like `gpu:a100:4(S:0-1),shard:8`.
fn gres_gpus(gres: &str) -> u32 {
    gres.split(',')
        .filter(|g| g.starts_with("gpu"))
        .filter_map(|g| g.split('(').next()?.rsplit(':').next()?.parse::<u32>().ok())
        .sum()
}

/// `JobState=… ExitCode=code:signal` out of `scontrol show job -o`.
pub(crate) fn parse_scontrol(text: &str) -> SlurmState {
    let field = |k: &str| {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(k))
            .map(str::to_string)
    };
    let state = field("JobState=").unwrap_or_else(|| "UNKNOWN".into());
    if state == "RUNNING" || state == "COMPLETING" {
        return SlurmState::Running;
    }
    if !is_terminal(&state) {
        return SlurmState::Waiting(format!(
            "{state} ({})",
            field("Reason=").unwrap_or_default()
        ));
    }
    let (code, signal) = field("ExitCode=")
        .and_then(|e| {
            let (c, s) = e.split_once(':')?;
            Some((c.parse().unwrap_or(-1), s.parse().unwrap_or(0)))
        })
        .unwrap_or((-1, 0));
    SlurmState::Ended {
        state,
        exit_code: code,
        signal,
    }
}

/// What an attempt's batch script needs.
pub(crate) struct BatchScript<'a> {
    pub job_id: &'a str,
    pub attempt: u32,
    pub ranks: u32,
    pub per_rank: Resources,
    pub gpu_model: Option<&'a str>,
    pub timeout: Option<Duration>,
    pub partition: Option<&'a str>,
    pub account: Option<&'a str>,
    pub env_file: &'a Path,
    pub log_dir: &'a Path,
    pub cwd: &'a Path,
    pub program: &'a str,
    pub args: &'a [String],
}

/// Quotes `s` for a POSIX shell.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

impl BatchScript<'_> {
    /// The job name Slurm shows, and what finds the job after a crash.
    pub(crate) fn name(job_id: &str, attempt: u32) -> String {
        format!("qanat-{job_id}-{attempt}")
    }

    pub(crate) fn render(&self) -> String {
        let cpus = self.per_rank.cpu_millis.div_ceil(1000).max(1);
        let mem_per_cpu = self.per_rank.memory_mb.div_ceil(cpus).max(1);
        let mut s = String::from("#!/bin/sh\n");
        let mut opt = |o: String| s.push_str(&format!("#SBATCH {o}\n"));
        opt(format!(
            "--job-name={}",
            Self::name(self.job_id, self.attempt)
        ));
        opt("--nodes=1".into());
        opt(format!("--ntasks={}", self.ranks));
        opt(format!("--cpus-per-task={cpus}"));
        opt(format!("--mem-per-cpu={mem_per_cpu}M"));
        if self.per_rank.gpus > 0 {
            let total = self.per_rank.gpus * self.ranks;
            match self.gpu_model {
                Some(m) => opt(format!("--gres=gpu:{}:{total}", m.to_ascii_lowercase())),
                None => opt(format!("--gres=gpu:{total}")),
            }
        }
        if let Some(t) = self.timeout {
            opt(format!("--time={}", t.as_secs().div_ceil(60).max(1)));
        }
        if let Some(p) = self.partition {
            opt(format!("--partition={p}"));
        }
        if let Some(a) = self.account {
            opt(format!("--account={a}"));
        }
        opt(format!("--output={}/batch.log", self.log_dir.display()));
        opt(format!("--chdir={}", self.cwd.display()));
        // The job's environment is Qanat's, not the submitting server's.
        opt("--export=NONE".into());
        let cmd: Vec<String> = std::iter::once(self.program.to_string())
            .chain(self.args.iter().cloned())
            .map(|a| sh_quote(&a))
            .collect();
        s.push_str(&format!(
            "set -a\n. {env}\nset +a\n\
             MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n1)\n\
             MASTER_PORT=$((20000 + SLURM_JOB_ID % 20000))\n\
             export MASTER_ADDR MASTER_PORT\n\
             exec srun --export=ALL --kill-on-bad-exit=1 --output={logs}/rank-%t.log --error={logs}/rank-%t.log \\\n  \
             sh -c 'RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS \
             LOCAL_WORLD_SIZE=$SLURM_NTASKS_PER_NODE GROUP_RANK=$SLURM_NODEID; \
             export RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE GROUP_RANK; exec \"$@\"' qanat-rank {cmd}\n",
            env = sh_quote(&self.env_file.display().to_string()),
            logs = self.log_dir.display(),
            cmd = cmd.join(" "),
        ));
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scontrol_output_gives_the_state_and_exit_code() {
        let t = "JobId=7 JobName=qanat-job-1 UserId=root(0) JobState=COMPLETED Reason=None ExitCode=0:0 RunTime=00:00:01";
        assert_eq!(
            parse_scontrol(t),
            SlurmState::Ended {
                state: "COMPLETED".into(),
                exit_code: 0,
                signal: 0
            }
        );
        let t = "JobId=8 JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0";
        assert_eq!(
            parse_scontrol(t),
            SlurmState::Ended {
                state: "FAILED".into(),
                exit_code: 3,
                signal: 0
            }
        );
        let t = "JobId=9 JobState=PENDING Reason=Resources ExitCode=0:0";
        assert_eq!(
            parse_scontrol(t),
            SlurmState::Waiting("PENDING (Resources)".into())
        );
    }

    #[test]
    fn gres_columns_count_gpus() {
        assert_eq!(gres_gpus("gpu:a100:4(S:0-1),shard:8"), 4);
        assert_eq!(gres_gpus("(null)"), 0);
        assert_eq!(gres_gpus("gpu:2"), 2);
    }

    #[test]
    fn a_batch_script_asks_for_the_gang_and_runs_each_rank_with_its_rank() {
        let args = vec!["train.py".to_string(), "it's".to_string()];
        let s = BatchScript {
            job_id: "job-1",
            attempt: 2,
            ranks: 2,
            per_rank: Resources {
                cpu_millis: 1500,
                memory_mb: 1000,
                gpus: 1,
            },
            gpu_model: Some("A100"),
            timeout: Some(Duration::from_secs(90)),
            partition: Some("gpu"),
            account: None,
            env_file: Path::new("/j/env"),
            log_dir: Path::new("/j/attempt-2"),
            cwd: Path::new("/j/work"),
            program: "python",
            args: &args,
        }
        .render();
        for line in [
            "#SBATCH --job-name=qanat-job-1-2",
            "#SBATCH --ntasks=2",
            "#SBATCH --cpus-per-task=2",
            "#SBATCH --mem-per-cpu=500M",
            "#SBATCH --gres=gpu:a100:2",
            "#SBATCH --time=2",
            "#SBATCH --partition=gpu",
            "#SBATCH --export=NONE",
            "--output=/j/attempt-2/rank-%t.log",
            "'python' 'train.py' 'it'\\''s'",
        ] {
            assert!(s.contains(line), "{line} missing from:\n{s}");
        }
    }
}
