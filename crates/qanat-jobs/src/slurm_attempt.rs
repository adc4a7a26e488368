//! One attempt on Slurm, from claim to recorded end: the same run, token, inputs and
//! environment as a local attempt, written into a batch script and an environment
//! file (0600) in the job's directory, submitted with `sbatch`, watched through the
//! executor's poller, cancelled with `scancel`.

use std::os::unix::fs::PermissionsExt;

use crate::local::{Allocation, Control, Ending};
use crate::rows::{JobRow, JOB_COLUMNS, JOB_FROM};
use crate::scheduler::{commit_started, show_reason};
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
    pub(crate) async fn run_slurm_attempt(self, job: JobRow) {
        let id = job.job_id.clone();
        let recorded = self.slurm_attempt(job).await;
        self.attempt_over(&id, "slurm", recorded);
    }

    async fn slurm_attempt(&self, mut job: JobRow) -> Result<()> {
        let inner = &self.inner;
        let Some(cluster) = inner.slurm.get() else {
            return Err(Error::invalid("the Slurm executor is not configured"));
        };
        let Some(control) = self
            .claim(
                &mut job,
                Some("being submitted to Slurm"),
                None,
                slurm::ENFORCEMENT,
            )
            .await?
        else {
            return Ok(());
        };
        let submitted = self.submit_to_slurm(&mut job, cluster).await;
        let ending = match submitted {
            Ok(slurm_id) => self.watch_slurm(&job, &slurm_id, control).await?,
            Err(e) => Ending::Failed {
                exit_code: None,
                reason: format!("could not be submitted to Slurm: {e}"),
            },
        };
        self.finish(&job, ending).await
    }

    async fn submit_to_slurm(
        &self,
        job: &mut JobRow,
        cluster: &slurm::SlurmExecutor,
    ) -> Result<String> {
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
        self.record_submitted(job, &slurm_id).await?;
        Ok(slurm_id)
    }

    async fn record_submitted(&self, job: &JobRow, slurm_id: &str) -> Result<()> {
        let inner = &self.inner;
        let mut tx = inner.meta.writer().begin().await?;
        sqlx::query(
            "UPDATE jobs SET external_id = $1, placement = $2, reason = $3 WHERE job_id = $4",
        )
        .bind(slurm_id)
        .bind(format!("slurm job {slurm_id}"))
        .bind(format!("submitted to Slurm as job {slurm_id}"))
        .bind(&job.job_id)
        .execute(&mut *tx)
        .await?;
        let msg = format!(
            "attempt {} submitted to Slurm as job {slurm_id} ({} rank(s))",
            job.attempt, job.ranks
        );
        commit_started(tx, job, &msg).await
    }

    /// Follows Slurm job `slurm_id` to its end; a cancel order becomes `scancel`.
    async fn watch_slurm(
        &self,
        job: &JobRow,
        slurm_id: &str,
        mut control: tokio::sync::mpsc::UnboundedReceiver<Control>,
    ) -> Result<Ending> {
        let inner = &self.inner;
        let cluster = inner
            .slurm
            .get()
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
        let inner = &self.inner;
        let Some(cluster) = inner.slurm.get() else {
            return Ok(());
        };
        let rows = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM {JOB_FROM} WHERE j.state = 'running' AND j.executor = 'slurm' AND j.node = $1"
        ))
        .bind(&inner.settings.node)
        .fetch_all(inner.meta.reader())
        .await?;
        for r in rows {
            let job = JobRow::from_row(&r)?;
            let known: Option<String> = sqlx::Row::try_get(&r, "external_id")?;
            let id = match known {
                Some(id) => Some(id),
                None => cluster
                    .find_by_name(&BatchScript::name(&job.job_id, job.attempt))
                    .await
                    .unwrap_or(None),
            };
            match id {
                Some(id) => {
                    tracing::info!(job = %job.job_id, slurm = %id, "watching a Slurm job again after a restart");
                    let jobs = self.clone();
                    tokio::spawn(async move {
                        let control = jobs.inner.local.register(&job.job_id);
                        let ending = jobs.watch_slurm(&job, &id, control).await;
                        jobs.watched(&job, "slurm", ending).await;
                    });
                }
                None => {
                    let message = format!(
                        "lost: the server stopped before attempt {} reached Slurm; queued again",
                        job.attempt
                    );
                    self.requeue_lost(&job, &message).await?;
                }
            }
        }
        Ok(())
    }
}
