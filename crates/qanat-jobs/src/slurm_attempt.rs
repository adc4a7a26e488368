//! One attempt on Slurm, from claim to recorded end: the same run, token, inputs and
//! environment as a local attempt, written into a batch script and an environment
//! file (0600) in the job's directory, submitted with `sbatch`, watched through the
//! executor's poller, cancelled with `scancel`.

use std::os::unix::fs::PermissionsExt;

use crate::local::{Allocation, Control, Ending};
use crate::remote::Remote;
use crate::rows::JobRow;
use crate::scheduler::show_reason;
use crate::slurm::{self, BatchScript, SlurmState};
use crate::{Error, Jobs, Result};

/// Variables each rank sets for itself under `srun` (from SLURM_PROCID, …).
const PER_RANK: &[&str] = &[
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "CUDA_VISIBLE_DEVICES",
];

impl Jobs {
    /// Writes the attempt's batch script and environment file and submits them; the
    /// Slurm job id.
    pub(crate) async fn submit_to_slurm(&self, job: &mut JobRow) -> Result<String> {
        let cluster = self
            .inner
            .slurm
            .as_ref()
            .ok_or_else(|| Error::invalid("the Slurm executor is not configured"))?;
        let ranks = self.prepare(job, &Allocation::elsewhere(job)).await?;
        let first = ranks
            .first()
            .ok_or_else(|| Error::invalid("a job has at least one rank"))?;
        let dir = self
            .job_dir(&job.job_id)
            .join(format!("attempt-{}", job.attempt));
        let env_file = dir.join("env");
        let mut env = String::new();
        for (k, v) in first
            .env
            .iter()
            .filter(|(k, _)| !PER_RANK.contains(&k.as_str()))
        {
            env.push_str(&format!("{k}={}\n", slurm::sh_quote(v)));
        }
        // The token is in here: readable by the job's user only.
        tokio::fs::write(&env_file, env)
            .await
            .map_err(|e| Error::io(env_file.display(), e))?;
        tokio::fs::set_permissions(&env_file, std::fs::Permissions::from_mode(0o600))
            .await
            .map_err(|e| Error::io(env_file.display(), e))?;
        let timeout = job.timeout(self.inner.settings.default_timeout);
        let script = BatchScript {
            job_id: &job.job_id,
            attempt: job.attempt,
            ranks: job.ranks,
            per_rank: job.per_rank,
            gpu_model: job.spec.resources.gpu_model.as_deref(),
            timeout,
            partition: cluster.settings.partition.as_deref(),
            account: cluster.settings.account.as_deref(),
            env_file: &env_file,
            log_dir: &dir,
            cwd: &first.cwd,
            program: &first.program,
            args: &first.args,
        }
        .render();
        let path = dir.join("batch.sh");
        tokio::fs::write(&path, script)
            .await
            .map_err(|e| Error::io(path.display(), e))?;
        let slurm_id = cluster.submit(&path).await?;
        let msg = format!(
            "attempt {} submitted to Slurm as job {slurm_id} ({} rank(s))",
            job.attempt, job.ranks
        );
        self.record_started(
            job,
            &slurm_id,
            format!("slurm job {slurm_id}"),
            format!("submitted to Slurm as job {slurm_id}"),
            &msg,
        )
        .await?;
        Ok(slurm_id)
    }

    /// Follows Slurm job `slurm_id` to its end; a cancel order becomes `scancel`.
    pub(crate) async fn watch_slurm(
        &self,
        job: &JobRow,
        slurm_id: &str,
        mut control: tokio::sync::mpsc::UnboundedReceiver<Control>,
    ) -> Result<Ending> {
        let inner = &self.inner;
        let cluster = inner
            .slurm
            .as_ref()
            .ok_or_else(|| Error::invalid("the Slurm executor is not configured"))?;
        let mut states = cluster.watch(slurm_id);
        let mut cancelled_by: Option<String> = None;
        let mut last_reason = String::new();
        loop {
            let state = states.borrow_and_update().clone();
            let reason = match &state {
                SlurmState::Waiting(why) => format!("Slurm job {slurm_id}: {why}"),
                SlurmState::Running => format!("running as Slurm job {slurm_id}"),
                SlurmState::Ended { .. } => String::new(),
            };
            if let SlurmState::Ended {
                state,
                exit_code,
                signal,
            } = state
            {
                return Ok(match (state.as_str(), exit_code, &cancelled_by) {
                    ("COMPLETED", 0, _) => Ending::Succeeded,
                    ("CANCELLED", _, Some(by)) => Ending::Cancelled { by: by.clone() },
                    ("PREEMPTED", _, _) => Ending::Preempted {
                        by: "Slurm".into(),
                    },
                    ("TIMEOUT", _, _) => Ending::Failed {
                        exit_code: None,
                        reason: format!("Slurm job {slurm_id} reached its time limit (the job's timeout)"),
                    },
                    ("OUT_OF_MEMORY", _, _) => Ending::Failed {
                        exit_code: None,
                        reason: format!(
                            "Slurm job {slurm_id} went over its memory (resources.memory) and was killed"
                        ),
                    },
                    (s, code, _) => Ending::Failed {
                        exit_code: Some(if signal > 0 { 128 + signal } else { code }),
                        reason: format!(
                            "Slurm job {slurm_id} ended {s} with exit code {code}{}",
                            if signal > 0 { format!(" (signal {signal})") } else { String::new() }
                        ),
                    },
                });
            }
            show_reason(self, job, reason, &mut last_reason).await?;
            tokio::select! {
                changed = states.changed() => {
                    if changed.is_err() {
                        return Err(Error::Io("the Slurm poller stopped".into()));
                    }
                }
                Some(c) = control.recv() => {
                    let by = match c {
                        Control::Cancel { by } | Control::Preempt { by } => by,
                    };
                    if let Err(e) = cluster.cancel(slurm_id).await {
                        tracing::warn!(job = %job.job_id, error = %e, "scancel failed");
                    }
                    cancelled_by = Some(by);
                }
            }
        }
    }

    /// After a restart: Slurm jobs that were running go on being watched (Slurm ran
    /// them meanwhile); one whose Slurm id was never recorded is looked up by name,
    /// and if Slurm has no such job it was never submitted: it is queued again.
    pub(crate) async fn recover_slurm(&self) -> Result<()> {
        let Some(cluster) = self.inner.slurm.as_ref() else {
            return Ok(());
        };
        for (job, known) in self.running_on(Remote::Slurm).await? {
            let id = match known {
                Some(id) => Some(id),
                None => cluster
                    .find_by_name(&BatchScript::name(&job.job_id, job.attempt))
                    .await
                    .unwrap_or(None),
            };
            self.resume_on(Remote::Slurm, job, id).await?;
        }
        Ok(())
    }
}
