//! What an attempt on another system (Slurm, Kubernetes) has around it, the same for
//! each: the claim, the start recorded with the system's own id, the watch to the end;
//! after a restart, watching a running attempt again or queueing a lost one again.
//! What differs (how it starts, how its states read) is in `slurm_attempt` and
//! `kube_attempt`.

use crate::local::{Control, Ending};
use crate::rows::{JobRow, JOB_COLUMNS, JOB_FROM};
use crate::scheduler::commit_started;
use crate::{kubernetes, slurm, Jobs, Result};

/// A system that runs attempts for this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Remote {
    Slurm,
    Kubernetes,
}

impl Remote {
    /// The executor's word in a job's `executor`.
    pub(crate) fn executor(self) -> &'static str {
        match self {
            Remote::Slurm => "slurm",
            Remote::Kubernetes => "kubernetes",
        }
    }

    /// The system's name, in reasons and messages.
    fn system(self) -> &'static str {
        match self {
            Remote::Slurm => "Slurm",
            Remote::Kubernetes => "Kubernetes",
        }
    }
}

impl Jobs {
    /// One attempt of `job` on `remote`, from claim to recorded end.
    pub(crate) async fn run_remote_attempt(self, job: JobRow, remote: Remote) {
        let id = job.job_id.clone();
        let recorded = self.remote_attempt(job, remote).await;
        self.attempt_over(&id, remote.executor(), recorded);
    }

    async fn remote_attempt(&self, mut job: JobRow, remote: Remote) -> Result<()> {
        let (starting, enforcement) = match remote {
            Remote::Slurm => ("being submitted to Slurm", slurm::ENFORCEMENT),
            Remote::Kubernetes => ("being created on Kubernetes", kubernetes::ENFORCEMENT),
        };
        let Some(control) = self
            .claim(&mut job, Some(starting), None, enforcement)
            .await?
        else {
            return Ok(());
        };
        let started = match remote {
            Remote::Slurm => self.submit_to_slurm(&mut job).await,
            Remote::Kubernetes => self.create_on_kube(&mut job).await,
        };
        let ending = match started {
            Ok(id) => self.watch_remote(remote, &job, &id, control).await?,
            Err(e) => Ending::Failed {
                exit_code: None,
                reason: match remote {
                    Remote::Slurm => format!("could not be submitted to Slurm: {e}"),
                    Remote::Kubernetes => format!("could not be created on Kubernetes: {e}"),
                },
            },
        };
        self.finish(&job, ending).await
    }

    /// Follows attempt `id` on `remote` to its end; a cancel order stops it there.
    async fn watch_remote(
        &self,
        remote: Remote,
        job: &JobRow,
        id: &str,
        control: tokio::sync::mpsc::UnboundedReceiver<Control>,
    ) -> Result<Ending> {
        match remote {
            Remote::Slurm => self.watch_slurm(job, id, control).await,
            Remote::Kubernetes => self.watch_kube(job, id, control).await,
        }
    }

    /// Records that `job`'s attempt started on the other system as `id`, placed at
    /// `placement`, with `reason` shown and `message` in its events.
    pub(crate) async fn record_started(
        &self,
        job: &JobRow,
        id: &str,
        placement: String,
        reason: String,
        message: &str,
    ) -> Result<()> {
        let mut tx = self.inner.meta.writer().begin().await?;
        sqlx::query(
            "UPDATE jobs SET external_id = $1, placement = $2, reason = $3 WHERE job_id = $4",
        )
        .bind(id)
        .bind(placement)
        .bind(reason)
        .bind(&job.job_id)
        .execute(&mut *tx)
        .await?;
        commit_started(tx, job, message).await
    }

    /// The attempts this node had running on `remote` when it stopped, with the id
    /// recorded for each (none when the server stopped before recording it).
    pub(crate) async fn running_on(&self, remote: Remote) -> Result<Vec<(JobRow, Option<String>)>> {
        let rows = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM {JOB_FROM} WHERE j.state = 'running' AND j.executor = $1 AND j.node = $2"
        ))
        .bind(remote.executor())
        .bind(&self.inner.settings.node)
        .fetch_all(self.inner.meta.reader())
        .await?;
        rows.iter()
            .map(|r| Ok((JobRow::from_row(r)?, sqlx::Row::try_get(r, "external_id")?)))
            .collect()
    }

    /// After a restart: goes on watching `job`'s attempt `id` on `remote` (the system
    /// ran it meanwhile), or, when there is none, queues the job again: the attempt
    /// never got there.
    pub(crate) async fn resume_on(
        &self,
        remote: Remote,
        job: JobRow,
        id: Option<String>,
    ) -> Result<()> {
        let Some(id) = id else {
            let message = format!(
                "lost: the server stopped before attempt {} reached {}; queued again",
                job.attempt,
                remote.system()
            );
            return self.requeue_lost(&job, &message).await;
        };
        tracing::info!(job = %job.job_id, executor = remote.executor(), id = %id, "watching an attempt again after a restart");
        let jobs = self.clone();
        tokio::spawn(async move {
            let control = jobs.inner.local.register(&job.job_id);
            let ending = jobs.watch_remote(remote, &job, &id, control).await;
            jobs.watched(&job, remote.executor(), ending).await;
        });
        Ok(())
    }
}
