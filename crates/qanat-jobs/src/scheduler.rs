//! The scheduler: recovers what a previous run of this server left running, then
//! repeatedly asks the [`policy`](crate::policy) what to start, starts it, and records
//! how each attempt ends (succeeded, failed and retried with backoff, cancelled,
//! preempted and requeued, lost).
//!
//! Every state change is one transaction with its history entry and its audit record
//! (actor `service:scheduler`). A job is claimed by `UPDATE … WHERE state = 'queued'`,
//! so two schedulers sharing a metadata store never start it twice; its processes are
//! recorded before they are watched, so after a kill -9 the restarted server kills what
//! is left of them before the job runs again.

use std::collections::BTreeMap;
use std::time::Duration;

use qanat_governance::{append_audit_in, AuditRecord, Project, Role};
use qanat_store::ObjectKey;
use sqlx::Row;

use crate::faults::fault;
use crate::local::{self, Allocation, Control, Ending, RankLaunch};
use crate::policy::{self, Decision};
use crate::remote::Remote;
use crate::rows::{record_event, JobRow, JOB_COLUMNS, JOB_FROM};
use crate::{now, procfs, queue, Error, Jobs, Result};

/// The longest wait between retries.
const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// How many times an attempt's end is tried before it is left to the next restart's
/// recovery (about three minutes of waiting in all).
const FINISH_TRIES: u32 = 14;

/// Runs jobs; one per server.
#[derive(Debug)]
pub struct Scheduler;

impl Scheduler {
    /// Recovers this node's jobs left by a previous run, then schedules until the
    /// process ends.
    pub fn spawn(jobs: Jobs) -> tokio::task::JoinHandle<()> {
        jobs.inner.local.start(&jobs.inner.settings);
        if jobs.inner.kube.as_ref().is_some() {
            let watcher = jobs.clone();
            tokio::spawn(async move {
                loop {
                    if let Some(k) = watcher.inner.kube.as_ref() {
                        if let Err(e) = k.watch_once().await {
                            tracing::warn!(error = %e, "watching Kubernetes jobs failed; retrying");
                            tokio::time::sleep(Duration::from_secs(2)).await;
                        }
                    }
                }
            });
        }
        if let Some(every) = jobs.inner.slurm.as_ref().map(|s| s.settings.poll) {
            let poller = jobs.clone();
            tokio::spawn(async move {
                loop {
                    if let Some(s) = poller.inner.slurm.as_ref() {
                        if let Err(e) = s.poll_once().await {
                            tracing::warn!(error = %e, "polling Slurm failed");
                        }
                    }
                    tokio::time::sleep(every).await;
                }
            });
        }
        tokio::spawn(async move {
            jobs.inner.local.probe_sandbox(&jobs.inner.settings).await;
            if let Err(e) = jobs.recover_kube().await {
                tracing::error!(error = %e, "finding the Kubernetes jobs of the previous run failed");
            }
            if let Err(e) = jobs.recover_slurm().await {
                tracing::error!(error = %e, "finding the Slurm jobs of the previous run failed");
            }
            if let Err(e) = jobs.recover().await {
                tracing::error!(error = %e, "recovering jobs from the previous run failed");
            }
            loop {
                if jobs.inner.settings.enabled {
                    if let Err(e) = jobs.fire_schedules().await {
                        tracing::error!(error = %e, "firing job schedules failed");
                    }
                    if let Err(e) = jobs.pass().await {
                        tracing::error!(error = %e, "a scheduling pass failed");
                    }
                }
                tokio::select! {
                    () = jobs.inner.wake.notified() => {}
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        })
    }
}

pub(crate) fn audit(action: &str, job: &JobRow, detail: impl Into<String>) -> AuditRecord {
    AuditRecord::by_service(
        "scheduler",
        action,
        format!("project:{}/job:{}", job.project_name, job.job_id),
        Some(&job.project_name),
    )
    .with_detail(detail)
}

/// Records that `job`'s attempt started (`msg` says where) in its history and in the
/// audit chain, and commits `tx`, which holds what the executor wrote for it.
pub(crate) async fn commit_started(
    mut tx: sqlx::Transaction<'_, sqlx::Any>,
    job: &JobRow,
    msg: &str,
) -> Result<()> {
    record_event(&mut tx, &job.job_id, job.attempt, "started", msg).await?;
    append_audit_in(&mut tx, &audit("job.start", job, msg)).await?;
    tx.commit().await?;
    Ok(())
}

/// Shows `reason` as a running job's reason (where it waits, what runs it), unless it
/// is what `last` says it showed already.
/// Ends job `job`, just queued again within `tx` (its attempt lost, failed with
/// retries left, or preempted), as cancelled when a cancel was asked for during the
/// attempt: the claim skips jobs whose cancel was asked for, so it would otherwise
/// wait in the queue for ever. The message, when it was cancelled.
async fn cancel_if_requested(
    conn: &mut sqlx::AnyConnection,
    job: &JobRow,
    t: i64,
    ended: &str,
) -> Result<Option<String>> {
    let msg = format!(
        "cancelled: a cancel was asked for while attempt {} ran, and the attempt ended ({ended})",
        job.attempt
    );
    let done = sqlx::query(
        "UPDATE jobs SET state = 'cancelled', finished_at = $1, reason = $2, token_id = NULL \
         WHERE job_id = $3 AND state = 'queued' AND cancel_requested = 1",
    )
    .bind(t)
    .bind(&msg)
    .bind(&job.job_id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok((done == 1).then_some(msg))
}

pub(crate) async fn show_reason(
    jobs: &Jobs,
    job: &JobRow,
    reason: String,
    last: &mut String,
) -> Result<()> {
    if reason != *last {
        sqlx::query("UPDATE jobs SET reason = $1 WHERE job_id = $2 AND state = 'running'")
            .bind(&reason)
            .bind(&job.job_id)
            .execute(jobs.inner.meta.writer())
            .await?;
        *last = reason;
    }
    Ok(())
}

impl Jobs {
    /// Jobs this node was running when it stopped are lost: what is left of their
    /// processes is killed, and they are queued again (a lost attempt spends no retry).
    pub(crate) async fn recover(&self) -> Result<()> {
        let inner = &self.inner;
        let rows = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM {JOB_FROM} WHERE j.state = 'running' AND j.executor = 'local' AND j.node = $1"
        ))
        .bind(&inner.settings.node)
        .fetch_all(inner.meta.reader())
        .await?;
        for r in rows {
            let job = JobRow::from_row(&r)?;
            let procs = sqlx::query(
                "SELECT pid, start_ticks FROM job_processes WHERE job_id = $1 AND attempt = $2 AND node = $3",
            )
            .bind(&job.job_id)
            .bind(i64::from(job.attempt))
            .bind(&inner.settings.node)
            .fetch_all(inner.meta.reader())
            .await?;
            let mut killed = 0;
            for p in procs {
                let pid = p.try_get::<i64, _>("pid")? as i32;
                let ticks = p.try_get::<i64, _>("start_ticks")? as u64;
                if procfs::same_process(pid, ticks) {
                    procfs::signal_group(pid, procfs::Signal::KILL);
                    killed += 1;
                }
            }
            // A job whose attempts coincide with the server's death twice running is
            // not run a third time: it may be what kills the server.
            let lost_before = job.attempt > 1
                && sqlx::query(
                    "SELECT 1 FROM job_events WHERE job_id = $1 AND attempt = $2 AND event = 'lost'",
                )
                .bind(&job.job_id)
                .bind(i64::from(job.attempt - 1))
                .fetch_optional(inner.meta.reader())
                .await?
                .is_some();
            if lost_before {
                let reason = format!(
                    "the server stopped while attempts {} and {} ran (a crash loop?); not queued again, submit it again once the cause is found",
                    job.attempt - 1,
                    job.attempt
                );
                tracing::warn!(job = %job.job_id, "{reason}");
                let mut last = job.clone();
                last.max_retries = last.failures;
                self.finish(
                    &last,
                    Ending::Failed {
                        exit_code: None,
                        reason,
                    },
                )
                .await?;
                continue;
            }
            let message = format!(
                "lost: the server stopped while attempt {} ran{}; queued again",
                job.attempt,
                if killed > 0 {
                    format!(" ({killed} leftover rank(s) killed)")
                } else {
                    String::new()
                }
            );
            self.requeue_lost(&job, &message).await?;
        }
        self.close_finished_runs().await
    }

    /// Closes the runs of finished jobs that are still `RUNNING`: a server that
    /// stopped between recording an attempt's end and closing its run leaves them so.
    async fn close_finished_runs(&self) -> Result<()> {
        let rows = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM {JOB_FROM} JOIN runs r ON r.run_id = j.run_id \
             WHERE j.state IN ('succeeded', 'failed', 'cancelled') AND r.status = 'RUNNING'"
        ))
        .fetch_all(self.inner.meta.reader())
        .await?;
        for r in rows {
            let job = JobRow::from_row(&r)?;
            let status = match job.state.as_str() {
                "succeeded" => "FINISHED",
                "failed" => "FAILED",
                _ => "KILLED",
            };
            if let Some(run_id) = &job.run_id {
                if let Err(e) = self.close_run(&job, run_id, status).await {
                    tracing::warn!(job = %job.job_id, error = %e, "closing a finished job's run failed");
                }
            }
        }
        Ok(())
    }

    /// Queues again a job whose attempt was lost with the server that ran it (its
    /// token revoked, no retry spent), recording why — or ends it cancelled when a
    /// cancel was asked for before it was lost.
    pub(crate) async fn requeue_lost(&self, job: &JobRow, message: &str) -> Result<()> {
        tracing::warn!(job = %job.job_id, "{message}");
        let mut tx = self.inner.meta.writer().begin().await?;
        let t = now();
        sqlx::query(
            "UPDATE jobs SET state = 'queued', not_before = $1, reason = $2, token_id = NULL WHERE job_id = $3 AND state = 'running'",
        )
        .bind(t)
        .bind(message)
        .bind(&job.job_id)
        .execute(&mut *tx)
        .await?;
        record_event(&mut tx, &job.job_id, job.attempt, "lost", message).await?;
        let cancelled = cancel_if_requested(&mut tx, job, t, "lost").await?;
        if let Some(msg) = &cancelled {
            record_event(&mut tx, &job.job_id, job.attempt, "cancelled", msg).await?;
        }
        if let Some(t) = &job.token_id {
            qanat_governance::Governance::revoke_token_in(&mut tx, t).await?;
        }
        append_audit_in(&mut tx, &audit("job.lost", job, message)).await?;
        tx.commit().await?;
        qanat_governance::auth_changed();
        if let (Some(_), Some(run_id)) = (&cancelled, &job.run_id) {
            if let Err(e) = self.close_run(job, run_id, "KILLED").await {
                tracing::warn!(job = %job.job_id, error = %e, "closing a job's run failed");
            }
        }
        Ok(())
    }

    /// One round: what starts, what is preempted, why the rest wait.
    pub(crate) async fn pass(&self) -> Result<()> {
        let inner = &self.inner;
        let queued_rows = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM {JOB_FROM} WHERE j.state = 'queued' AND j.not_before <= $1 \
             ORDER BY j.priority DESC, j.submitted_at LIMIT 2000"
        ))
        .bind(now())
        .fetch_all(inner.meta.reader())
        .await?;
        let running_rows = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM {JOB_FROM} WHERE j.state = 'running'"
        ))
        .fetch_all(inner.meta.reader())
        .await?;
        let mut queued = BTreeMap::new();
        for r in &queued_rows {
            let j = JobRow::from_row(r)?;
            queued.insert(j.job_id.clone(), j);
        }
        let mut running = Vec::new();
        for r in &running_rows {
            let j = JobRow::from_row(r)?;
            // A cancel asked for on another server reaches the attempt here.
            if j.cancel_requested
                && j.node.as_deref() == Some(&inner.settings.node)
                && !inner.local.stopping(&j.job_id)
            {
                inner.local.order(
                    &j.job_id,
                    Control::Cancel {
                        by: "a cancel request".into(),
                    },
                );
            }
            running.push(policy::Running {
                stopping: j.cancel_requested || inner.local.stopping(&j.job_id),
                job_id: j.job_id.clone(),
                project: j.project_id.to_string(),
                priority: j.priority,
                started_at: j.started_at.unwrap_or(0),
                total: j.total(),
                executor: j.executor.clone(),
                preemptible: j.preemptible(),
            });
        }
        if queued.is_empty() {
            return Ok(());
        }
        let candidates: Vec<policy::Queued> = queued
            .values()
            .map(|j| policy::Queued {
                job_id: j.job_id.clone(),
                project: j.project_id.to_string(),
                priority: j.priority,
                submitted_at: j.submitted_at,
                total: j.total(),
                executor: j.executor.clone(),
            })
            .collect();
        let mut pools = vec![policy::Pool {
            executor: "local".into(),
            capacity: inner.local.capacity(),
            free: inner.local.free(),
        }];
        if let Some(k) = inner.kube.as_ref() {
            pools.push(policy::Pool {
                executor: "kubernetes".into(),
                capacity: k.capacity(),
                free: k.capacity(),
            });
        }
        if let Some(s) = inner.slurm.as_ref() {
            // Slurm places, orders its own users' work and preempts; Qanat hands it
            // jobs in its order, within the projects' quotas.
            pools.push(policy::Pool {
                executor: "slurm".into(),
                capacity: s.capacity(),
                free: s.capacity(),
            });
        }
        let limits = self.limits().await?;
        for d in policy::decide(&candidates, &running, &pools, &limits) {
            match d {
                Decision::Start { job_id } => {
                    let Some(job) = queued.remove(&job_id) else {
                        continue;
                    };
                    let remote = match job.executor.as_str() {
                        "slurm" => Some(Remote::Slurm),
                        "kubernetes" => Some(Remote::Kubernetes),
                        _ => None,
                    };
                    if let Some(remote) = remote {
                        let jobs = self.clone();
                        tokio::spawn(async move { jobs.run_remote_attempt(job, remote).await });
                        continue;
                    }
                    let Some(alloc) = inner.local.allocate(
                        &job.job_id,
                        job.per_rank,
                        job.ranks,
                        job.spec.resources.gpu_model.as_deref(),
                    ) else {
                        continue;
                    };
                    let jobs = self.clone();
                    tokio::spawn(async move { jobs.run_attempt(job, alloc).await });
                }
                Decision::Preempt { job_id, victims } => {
                    for v in &victims {
                        if inner
                            .local
                            .order(v, Control::Preempt { by: job_id.clone() })
                        {
                            tracing::info!(job = %v, by = %job_id, "preempting");
                        }
                    }
                    self.set_reason(
                        &queued,
                        &job_id,
                        &format!("preempting {} to make room", victims.join(", ")),
                    )
                    .await?;
                }
                Decision::Wait { job_id, reason } => {
                    self.set_reason(&queued, &job_id, &reason).await?;
                }
            }
        }
        Ok(())
    }

    async fn set_reason(
        &self,
        queued: &BTreeMap<String, JobRow>,
        job_id: &str,
        reason: &str,
    ) -> Result<()> {
        if queued.get(job_id).and_then(|j| j.reason.as_deref()) == Some(reason) {
            return Ok(());
        }
        sqlx::query("UPDATE jobs SET reason = $1 WHERE job_id = $2 AND state = 'queued'")
            .bind(reason)
            .bind(job_id)
            .execute(self.inner.meta.writer())
            .await?;
        Ok(())
    }

    /// One attempt from claim to its recorded end; the allocation is released after.
    async fn run_attempt(self, job: JobRow, alloc: Allocation) {
        let id = job.job_id.clone();
        let recorded = self.attempt(job, &alloc).await;
        self.inner.local.release(&alloc);
        self.attempt_over(&id, "local", recorded);
    }

    /// The end of an attempt's task on any executor: an error recording it is logged
    /// (the store keeps the job as it was, and recovery looks at it again), the job
    /// stops taking controls, and the scheduler looks at the queue again.
    pub(crate) fn attempt_over(&self, id: &str, executor: &str, recorded: Result<()>) {
        if let Err(e) = recorded {
            tracing::error!(job = %id, executor, error = %e, "a job attempt could not be recorded");
        }
        self.inner.local.unregister(id);
        self.inner.wake.notify_one();
    }

    /// Records the end an executor's watch came to (after a restart too), then ends
    /// the attempt's task.
    pub(crate) async fn watched(&self, job: &JobRow, executor: &str, ending: Result<Ending>) {
        let recorded = match ending {
            Ok(e) => self.finish(job, e).await,
            Err(e) => Err(e),
        };
        self.attempt_over(&job.job_id, executor, recorded);
    }

    async fn attempt(&self, mut job: JobRow, alloc: &Allocation) -> Result<()> {
        let inner = &self.inner;
        let Some(control) = self
            .claim(
                &mut job,
                None,
                Some(&alloc.describe()),
                &inner.local.enforcement(),
            )
            .await?
        else {
            return Ok(());
        };
        fault!(inner, "claim.after");
        let prepared = self.prepare(&mut job, alloc).await;
        let ending = match prepared {
            Ok(ranks) => match local::spawn_gang(
                ranks,
                local::Limits {
                    cgroups: inner.local.cgroups(),
                    name: &format!("{}-a{}", job.job_id, job.attempt),
                    memory_mb: job.per_rank.memory_mb,
                    cpu_millis: job.per_rank.cpu_millis,
                },
            ) {
                Ok((mut gang, started)) => {
                    if let Err(e) = self.record_start(&job, &started).await {
                        // Never released: the ranks exit at the barrier.
                        local::remove_groups(gang.take_groups()).await;
                        return Err(e);
                    }
                    gang.release().await;
                    fault!(inner, "barrier.opened");
                    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
                    if let Some(run_id) = job.run_id.clone() {
                        let w = crate::telemetry::Watched {
                            job_id: job.job_id.clone(),
                            project_id: job.project_id.clone(),
                            run_id,
                            groups: started.iter().map(|s| s.pid).collect(),
                            gpus: alloc
                                .rank_gpus
                                .iter()
                                .flatten()
                                .map(|g| inner.local.gpu_uuid(*g))
                                .collect(),
                            cores: alloc.rank_cores.iter().map(Vec::len).sum(),
                            memory_limit_mb: alloc.total.memory_mb,
                        };
                        let jobs = self.clone();
                        tokio::spawn(async move { jobs.sample_attempt(w, stop_rx).await });
                    }
                    let timeout = job.timeout(inner.settings.default_timeout);
                    let ending = gang
                        .supervise(
                            control,
                            job.per_rank.memory_mb,
                            timeout,
                            inner.settings.kill_grace,
                            inner.settings.watch_interval,
                        )
                        .await;
                    let _ = stop_tx.send(true);
                    ending
                }
                Err(reason) => Ending::Failed {
                    exit_code: None,
                    reason,
                },
            },
            Err(e) => Ending::Failed {
                exit_code: None,
                reason: format!("could not be prepared: {e}"),
            },
        };
        self.finish(&job, ending).await
    }

    /// Where a job's outputs are read from: a base directory the server trusts (the
    /// job's `work`, or the admin's root an absolute `working_dir` lies in) and the
    /// working directory relative to it.
    fn output_root(&self, job: &JobRow) -> (std::path::PathBuf, std::path::PathBuf) {
        let work = self.job_dir(&job.job_id).join("work");
        let dir = self
            .inner
            .kinds
            .get(&job.kind)
            .ok()
            .and_then(|k| k.plan(&job.spec.params, 0, job.ranks).ok())
            .and_then(|p| p.working_dir);
        match dir {
            None => (work, std::path::PathBuf::new()),
            Some(d) if d.is_relative() => (work, d),
            Some(d) => {
                let root = self
                    .inner
                    .settings
                    .sandbox
                    .allowed_roots()
                    .find(|r| d.starts_with(r))
                    .cloned();
                match root {
                    Some(r) => {
                        let rel = d
                            .strip_prefix(&r)
                            .map(|p| p.to_path_buf())
                            .unwrap_or_default();
                        (r, rel)
                    }
                    None => (d, std::path::PathBuf::new()),
                }
            }
        }
    }

    /// A succeeded attempt's declared outputs, logged to its run; a missing one fails
    /// it. Kubernetes pods share no filesystem with the server: outputs are refused
    /// there at submit.
    async fn with_outputs(&self, job: &JobRow, ending: Ending) -> Ending {
        if !matches!(ending, Ending::Succeeded)
            || job.spec.outputs.is_empty()
            || job.executor == "kubernetes"
        {
            return ending;
        }
        match self.log_outputs(job).await {
            Ok(()) => Ending::Succeeded,
            Err(e) => Ending::Failed {
                exit_code: Some(0),
                reason: e.to_string(),
            },
        }
    }

    /// Logs the declared outputs (files, or directories walked) to the job's run as
    /// artifacts, under the same relative paths. A declared output that is missing
    /// fails the attempt: downstream steps rely on it.
    async fn log_outputs(&self, job: &JobRow) -> Result<()> {
        let inner = &self.inner;
        let project = inner.gov.project_by_id(&job.project_id).await?;
        let Some(run_id) = &job.run_id else {
            return Ok(());
        };
        let run = inner.tracking.run(&project, run_id).await?;
        let root = run.info.artifact_root().to_string();
        let storage = &inner.storage;
        let location = storage.default_location().to_string();
        qanat_governance::check_residency(&project, &storage.location(&location)?)?;
        // The working directory is opened beneath the job's `work` (or the admin's
        // root it lies in), no link followed on the way; on a root server only the
        // files the attempt's uid owns (those it wrote) are collected.
        let (base, rel) = self.output_root(job);
        let owner = std::fs::metadata(self.job_dir(&job.job_id).join("work"))
            .ok()
            .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
            .filter(|uid| *uid != rustix::process::geteuid().as_raw());
        let (outputs, limit) = (job.spec.outputs.clone(), inner.settings.max_output_bytes);
        let found = tokio::task::spawn_blocking(move || {
            crate::safe_read::collect_outputs(&base, &rel, &outputs, limit, owner)
        })
        .await
        .map_err(|e| Error::Io(format!("collecting outputs: {e}")))?
        .map_err(|e| Error::invalid(e.to_string()))?;
        for (rel, _) in &found.files {
            use tokio::io::AsyncReadExt;
            let key: ObjectKey =
                format!("projects/{}/mlflow-artifacts/{root}/{rel}", job.project_id).parse()?;
            let (file, len) = found
                .open(rel)
                .map_err(|e| Error::invalid(format!("declared output '{rel}': {e}")))?;
            let file = tokio::fs::File::from_std(file).take(len);
            storage.put_reader(&location, &key, file).await?;
        }
        Ok(())
    }

    /// Claims a queued job for its next attempt (a conditional UPDATE: nothing else can
    /// have it) and registers the attempt so a cancel reaches it; None when it was not
    /// queued any more.
    pub(crate) async fn claim(
        &self,
        job: &mut JobRow,
        reason: Option<&str>,
        placement: Option<&str>,
        enforcement: &str,
    ) -> Result<Option<tokio::sync::mpsc::UnboundedReceiver<Control>>> {
        let inner = &self.inner;
        let t = now();
        let claimed = sqlx::query(
            "UPDATE jobs SET state = 'running', attempt = attempt + 1, started_at = $1, node = $2, reason = $3, \
             exit_code = NULL, placement = $4, enforcement = $5, idle_gpus = NULL, external_id = NULL \
             WHERE job_id = $6 AND state = 'queued' AND cancel_requested = 0",
        )
        .bind(t)
        .bind(&inner.settings.node)
        .bind(reason)
        .bind(placement)
        .bind(enforcement)
        .bind(&job.job_id)
        .execute(inner.meta.writer())
        .await?
        .rows_affected();
        if claimed == 0 {
            return Ok(None);
        }
        job.attempt += 1;
        job.state = "running".into();
        job.started_at = Some(t);
        // Registered before anything slow, so a cancel or preemption reaches it.
        Ok(Some(inner.local.register(&job.job_id)))
    }

    /// The run, the token, the directories, the inputs and each rank's command line.
    pub(crate) async fn prepare(
        &self,
        job: &mut JobRow,
        alloc: &Allocation,
    ) -> Result<Vec<RankLaunch>> {
        let inner = &self.inner;
        let project = inner.gov.project_by_id(&job.project_id).await?;
        let run_id = match &job.run_id {
            Some(r) => r.clone(),
            None => {
                let r = self.create_run(&project, job).await?;
                job.run_id = Some(r.clone());
                r
            }
        };
        let account = inner
            .gov
            .service_member(&project, &format!("jobs@{}", project.name), Role::Editor)
            .await?;
        let timeout = job
            .timeout(inner.settings.default_timeout)
            .unwrap_or(Duration::from_secs(7 * 86_400));
        let ttl = timeout + inner.settings.kill_grace + Duration::from_secs(3600);
        let token = inner
            .gov
            .create_token(
                &account.name,
                &format!("{}-{}", job.job_id, job.attempt),
                Some(now() + ttl.as_micros() as i64),
            )
            .await?;
        sqlx::query("UPDATE jobs SET token_id = $1 WHERE job_id = $2")
            .bind(&token.info.id)
            .bind(&job.job_id)
            .execute(inner.meta.writer())
            .await?;
        job.token_id = Some(token.info.id.clone());

        let dir = self.job_dir(&job.job_id);
        let work = dir.join("work");
        let checkpoints = dir.join("checkpoints");
        let inputs = dir.join("inputs");
        let home = dir.join("home");
        let logs = dir.join(format!("attempt-{}", job.attempt));
        for d in [&work, &checkpoints, &inputs, &home, &logs] {
            tokio::fs::create_dir_all(d)
                .await
                .map_err(|e| Error::io(d.display(), e))?;
        }
        self.materialize(&project, job, &inputs).await?;
        // Slurm and Kubernetes isolate their own jobs; this sandbox is the local one.
        let sandboxed =
            job.executor == "local"
                && match inner.local.isolation() {
                    Some(local::Isolation::Sandboxed { .. }) => true,
                    Some(local::Isolation::Unsandboxed) => false,
                    Some(local::Isolation::Unavailable(why)) => {
                        return Err(Error::Forbidden(format!(
                            "local jobs need a sandbox: {why}"
                        )))
                    }
                    None => return Err(Error::Forbidden(
                        "local jobs need a sandbox, and this server has not checked for one yet"
                            .into(),
                    )),
                };
        let dirs = crate::sandbox::JobDirs {
            work: work.clone(),
            checkpoints: checkpoints.clone(),
            inputs: inputs.clone(),
            home: home.clone(),
        };
        // The CA certificate may lie where a rank cannot reach (the server's home): it
        // gets its own copy.
        let ca_cert = match (&inner.settings.ca_cert, sandboxed) {
            (Some(ca), true) => {
                // `home` is the job's: whatever it left at this name (a link to a
                // file of the host's) is removed, and the copy made anew, no link
                // followed.
                let copy = home.join(".qanat-ca.pem");
                let pem = tokio::fs::read(ca)
                    .await
                    .map_err(|e| Error::io(ca.display(), e))?;
                match tokio::fs::remove_file(&copy).await {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        return Err(Error::io(copy.display(), e))
                    }
                    _ => {}
                }
                let mut f = tokio::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&copy)
                    .await
                    .map_err(|e| Error::io(copy.display(), e))?;
                tokio::io::AsyncWriteExt::write_all(&mut f, &pem)
                    .await
                    .map_err(|e| Error::io(copy.display(), e))?;
                Some(copy)
            }
            (ca, _) => ca.clone(),
        };
        if let (true, Some(uid)) = (sandboxed, alloc.uid) {
            // The attempt's uid owns what it may write (earlier attempts' files too).
            let owned = [
                work.clone(),
                checkpoints.clone(),
                home.clone(),
                inputs.clone(),
            ];
            tokio::task::spawn_blocking(move || {
                let refs: Vec<&std::path::Path> = owned.iter().map(|p| p.as_path()).collect();
                crate::sandbox::hand_over(&refs, uid)
            })
            .await
            .map_err(|e| Error::Io(format!("handing the job's directories over: {e}")))?
            .map_err(|e| Error::io("handing the job's directories over", e))?;
        }

        let kind = inner.kinds.get(&job.kind)?;
        let url = inner.settings.server_url.trim_end_matches('/').to_string();
        let master_port = free_port().unwrap_or(29500);
        let path = job
            .spec
            .env
            .get("PATH")
            .cloned()
            .unwrap_or_else(queue::default_path);
        let mut ranks = Vec::new();
        for rank in 0..job.ranks {
            let plan = kind.plan(&job.spec.params, rank, job.ranks)?;
            let mut env: BTreeMap<String, String> = BTreeMap::new();
            for k in ["HOME", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "TMPDIR"] {
                if let Ok(v) = std::env::var(k) {
                    env.insert(k.into(), v);
                }
            }
            env.insert("PATH".into(), path.clone());
            env.extend(plan.env.iter().cloned());
            env.extend(job.spec.env.iter().map(|(k, v)| (k.clone(), v.clone())));
            if let Some(ca) = &ca_cert {
                let ca = ca.display().to_string();
                env.insert("QANAT_CA_CERT".into(), ca.clone());
                env.insert("MLFLOW_TRACKING_SERVER_CERT_PATH".into(), ca);
            }
            let gpus = &alloc.rank_gpus[rank as usize];
            let set = [
                ("QANAT_URL", url.clone()),
                ("QANAT_TOKEN", token.token.clone()),
                ("QANAT_PROJECT", project.name.clone()),
                ("QANAT_JOB_ID", job.job_id.clone()),
                ("QANAT_JOB_ATTEMPT", job.attempt.to_string()),
                ("QANAT_CHECKPOINT_DIR", checkpoints.display().to_string()),
                ("QANAT_INPUTS", inputs.display().to_string()),
                ("QANAT_RESUMED", (job.attempt > 1).to_string()),
                (
                    "MLFLOW_TRACKING_URI",
                    format!("{url}/mlflow/{}", project.name),
                ),
                ("MLFLOW_TRACKING_TOKEN", token.token.clone()),
                ("MLFLOW_RUN_ID", run_id.clone()),
                ("MLFLOW_EXPERIMENT_ID", String::new()),
                ("MASTER_ADDR", "127.0.0.1".into()),
                ("MASTER_PORT", master_port.to_string()),
                ("WORLD_SIZE", job.ranks.to_string()),
                ("RANK", rank.to_string()),
                ("LOCAL_RANK", rank.to_string()),
                ("LOCAL_WORLD_SIZE", job.ranks.to_string()),
                ("GROUP_RANK", "0".into()),
                (
                    "CUDA_VISIBLE_DEVICES",
                    // By UUID: NVML's and CUDA's orders of GPUs differ, and a MIG
                    // instance has no index CUDA would accept.
                    gpus.iter()
                        .map(|g| inner.local.gpu_uuid(*g))
                        .collect::<Vec<_>>()
                        .join(","),
                ),
                (
                    "OMP_NUM_THREADS",
                    alloc.rank_cores[rank as usize].len().max(1).to_string(),
                ),
            ];
            for (k, v) in set {
                env.insert(k.to_string(), v);
            }
            env.remove("MLFLOW_EXPERIMENT_ID");
            // A relative working directory is inside the job's own `work`.
            let cwd = plan
                .working_dir
                .map_or_else(|| work.clone(), |d| work.join(d));
            let sandbox = sandboxed.then(|| {
                // Inside, the server's home and temporary directory do not exist.
                env.insert("HOME".into(), home.display().to_string());
                env.insert("TMPDIR".into(), "/tmp".into());
                let mut p = crate::sandbox::plan_for(
                    &inner.settings,
                    crate::sandbox::identity(alloc.uid),
                    &dirs,
                    job.per_rank.memory_mb,
                    plan.program.clone(),
                    plan.args.clone(),
                    cwd.clone(),
                );
                p.loader_env = env
                    .iter()
                    .filter(|(k, _)| crate::sandbox::loader_variable(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                p
            });
            // Sandboxed, the init makes it as the rank (never the server through the
            // job's own links).
            if sandbox.is_none() && cwd.starts_with(&work) {
                tokio::fs::create_dir_all(&cwd)
                    .await
                    .map_err(|e| Error::io(cwd.display(), e))?;
            }
            ranks.push(RankLaunch {
                program: plan.program,
                args: plan.args,
                env: env.into_iter().collect(),
                cwd,
                log: logs.join(format!("rank-{rank}.log")),
                cores: alloc.rank_cores[rank as usize].clone(),
                sandbox,
            });
        }
        Ok(ranks)
    }

    /// The job's MLflow run, in its experiment (created when missing), linked to its
    /// inputs; reused by every attempt.
    async fn create_run(&self, project: &Project, job: &JobRow) -> Result<String> {
        let tracking = &self.inner.tracking;
        let name = job
            .spec
            .experiment
            .clone()
            .unwrap_or_else(|| "Default".into());
        let experiment_id = match tracking.experiment_by_name(project, &name).await {
            Ok(e) => e.experiment_id,
            Err(qanat_tracking::Error::Refused(qanat_core::Refusal::NotFound { .. })) => {
                tracking
                    .create_experiment(project, &name, None, &[])
                    .await?
            }
            Err(e) => return Err(e.into()),
        };
        let tag = |k: &str, v: &str| qanat_tracking::Tag {
            key: k.into(),
            value: v.into(),
        };
        let source = serde_json::to_string(
            job.spec
                .params
                .get("command")
                .unwrap_or(&serde_json::Value::Null),
        )
        .unwrap_or_default();
        let run = tracking
            .create_run(
                project,
                qanat_tracking::NewRun {
                    experiment_id,
                    user_id: job.submitted_by.clone(),
                    run_name: Some(job.name.clone()),
                    start_time: None,
                    tags: [
                        tag("mlflow.source.type", "JOB"),
                        tag("mlflow.source.name", &source),
                        tag("mlflow.user", &job.submitted_by),
                        tag("qanat.job_id", &job.job_id),
                    ]
                    .into_iter()
                    .chain(
                        job.spec
                            .parent_run
                            .as_deref()
                            .map(|p| tag("mlflow.parentRunId", p)),
                    )
                    .collect(),
                },
            )
            .await?;
        let run_id = run.info.run_id;
        let mut conn = self.inner.meta.writer().acquire().await?;
        sqlx::query("UPDATE jobs SET run_id = $1 WHERE job_id = $2")
            .bind(&run_id)
            .bind(&job.job_id)
            .execute(&mut *conn)
            .await?;
        let parents: Vec<(qanat_core::ObjectRef, &str)> = job
            .spec
            .inputs
            .iter()
            .map(|i| (i.clone(), "input"))
            .collect();
        qanat_governance::lineage::record_edges(
            &mut conn,
            &job.project_id,
            &qanat_core::ObjectRef::run(run_id.as_str()),
            &parents,
        )
        .await?;
        Ok(run_id)
    }

    /// Writes each input dataset version's files under `inputs/<name>/` once. Tables
    /// with personal data are written pseudonymized unless the job's submitter holds
    /// the project's PII permission (as a pull by them would be); the job's events
    /// say which.
    async fn materialize(
        &self,
        project: &Project,
        job: &JobRow,
        dir: &std::path::Path,
    ) -> Result<()> {
        use futures::StreamExt;
        use tokio::io::AsyncWriteExt;
        let datasets = &self.inner.datasets;
        let mut clear = None;
        for r in &job.spec.inputs {
            let target = dir.join(r.name.as_str());
            let done = dir.join(format!(".{}.done", r.name));
            if tokio::fs::try_exists(&done).await.unwrap_or(false) {
                continue;
            }
            let ds = datasets.get(project, &r.name).await?;
            let sel = r.selector.clone().unwrap_or(qanat_core::Selector::Latest);
            let v = datasets.resolve(&ds, &sel).await?;
            let manifest = datasets.manifest(&ds, &v).await?;
            let mut protected = datasets.pii_columns(&ds, &v).await?;
            if !protected.is_empty() {
                let clear = match clear {
                    Some(c) => c,
                    None => {
                        let c = self
                            .inner
                            .gov
                            .user_reads_pii(project, &job.submitted_by)
                            .await?;
                        *clear.insert(c)
                    }
                };
                let files: Vec<String> = protected
                    .iter()
                    .map(|(p, t)| format!("{p} [{}]", t.columns.join(", ")))
                    .collect();
                let message = if clear {
                    protected.clear();
                    format!(
                        "input {}@{}: personal data in clear ({} holds the PII permission): {}",
                        r.name,
                        v.version,
                        job.submitted_by,
                        files.join("; ")
                    )
                } else {
                    format!(
                        "input {}@{}: personal data pseudonymized ({} does not hold the PII permission): {}",
                        r.name,
                        v.version,
                        job.submitted_by,
                        files.join("; ")
                    )
                };
                let mut tx = self.inner.meta.writer().begin().await?;
                record_event(&mut tx, &job.job_id, job.attempt, "input-pii", &message).await?;
                let action = if clear {
                    "job.input.pii_clear"
                } else {
                    "job.input.pii_pseudonymized"
                };
                append_audit_in(&mut tx, &audit(action, job, &message)).await?;
                tx.commit().await?;
            }
            for entry in manifest.files {
                let path = target.join(&entry.path);
                if let Some(parent) = path.parent() {
                    tokio::fs::create_dir_all(parent)
                        .await
                        .map_err(|e| Error::io(parent.display(), e))?;
                }
                if let Some(t) = protected.remove(&entry.path) {
                    let hidden = datasets.pseudonymized_file(&ds, &entry, t.columns).await?;
                    tokio::fs::copy(hidden.file.path(), &path)
                        .await
                        .map_err(|e| Error::io(path.display(), e))?;
                    continue;
                }
                let mut f = tokio::fs::File::create(&path)
                    .await
                    .map_err(|e| Error::io(path.display(), e))?;
                let mut chunks = std::pin::pin!(datasets.file_stream(&ds, entry.clone()));
                while let Some(c) = chunks.next().await {
                    f.write_all(&c?)
                        .await
                        .map_err(|e| Error::io(path.display(), e))?;
                }
                f.flush().await.map_err(|e| Error::io(path.display(), e))?;
            }
            tokio::fs::write(&done, v.version.to_string())
                .await
                .map_err(|e| Error::io(done.display(), e))?;
        }
        Ok(())
    }

    async fn record_start(&self, job: &JobRow, started: &[local::Started]) -> Result<()> {
        let inner = &self.inner;
        let mut tx = inner.meta.writer().begin().await?;
        for s in started {
            sqlx::query(
                "INSERT INTO job_processes (job_id, attempt, rank, node, pid, start_ticks) VALUES ($1, $2, $3, $4, $5, $6)",
            )
            .bind(&job.job_id)
            .bind(i64::from(job.attempt))
            .bind(i64::from(s.rank))
            .bind(&inner.settings.node)
            .bind(i64::from(s.pid))
            .bind(s.start_ticks as i64)
            .execute(&mut *tx)
            .await?;
        }
        let msg = format!(
            "attempt {} started on {} ({} rank(s))",
            job.attempt, inner.settings.node, job.ranks
        );
        commit_started(tx, job, &msg).await?;
        fault!(inner, "start.recorded");
        Ok(())
    }

    /// Records how an attempt ended, trying again while the store refuses (a busy or
    /// briefly unreachable database): an end that is never recorded would leave the job
    /// `running`, its token alive and its slot counted, until the next restart's
    /// recovery. Each try is one transaction, so a failed one leaves nothing behind.
    pub(crate) async fn finish(&self, job: &JobRow, ending: Ending) -> Result<()> {
        let mut wait = Duration::from_millis(200);
        for _ in 1..FINISH_TRIES {
            match self.finish_once(job, ending.clone()).await {
                Ok(()) => return Ok(()),
                Err(e) => {
                    tracing::warn!(job = %job.job_id, error = %e, retry_in = ?wait, "recording how a job attempt ended failed; trying again");
                    tokio::time::sleep(wait).await;
                    wait = (wait * 2).min(Duration::from_secs(30));
                }
            }
        }
        self.finish_once(job, ending).await
    }

    /// One try at recording how an attempt ended, then revoking its token, closing its
    /// run (when the job is done) and storing its logs.
    async fn finish_once(&self, job: &JobRow, ending: Ending) -> Result<()> {
        let inner = &self.inner;
        let ending = self.with_outputs(job, ending).await;
        // Logs are stored first, so a job seen as ended has its logs in storage.
        let stored = match self.store_logs(job).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(job = %job.job_id, error = %e, "storing a job's logs failed; they stay on local disk");
                Vec::new()
            }
        };
        let t = now();
        let mut tx = inner.meta.writer().begin().await?;
        let (changed, event, action, message, run_status) = match &ending {
            Ending::Succeeded => {
                let msg = format!(
                    "attempt {}: all {} rank(s) exited 0",
                    job.attempt, job.ranks
                );
                let changed = sqlx::query(
                    "UPDATE jobs SET state = 'succeeded', finished_at = $1, exit_code = 0, reason = $2 WHERE job_id = $3 AND state = 'running' AND attempt = $4",
                )
                .bind(t)
                .bind(&msg)
                .bind(&job.job_id)
                .bind(i64::from(job.attempt))
                .execute(&mut *tx)
                .await?
                .rows_affected();
                (changed, "succeeded", "job.succeed", msg, Some("FINISHED"))
            }
            Ending::Failed { exit_code, reason } => {
                let failures = job.failures + 1;
                if failures <= job.max_retries {
                    let backoff = inner
                        .settings
                        .retry_backoff
                        .saturating_mul(1 << (failures - 1).min(16))
                        .min(MAX_BACKOFF);
                    let msg = format!(
                        "attempt {} failed: {reason}; retry {failures} of {} in {}",
                        job.attempt,
                        job.max_retries,
                        humantime::format_duration(backoff)
                    );
                    let changed = sqlx::query(
                        "UPDATE jobs SET state = 'queued', failures = $1, exit_code = $2, not_before = $3, reason = $4, token_id = NULL WHERE job_id = $5 AND state = 'running' AND attempt = $6",
                    )
                    .bind(i64::from(failures))
                    .bind(exit_code.map(i64::from))
                    .bind(t + backoff.as_micros() as i64)
                    .bind(&msg)
                    .bind(&job.job_id)
                    .bind(i64::from(job.attempt))
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    (changed, "retrying", "job.retry", msg, None)
                } else {
                    let msg = format!("attempt {} failed: {reason}", job.attempt);
                    let changed = sqlx::query(
                        "UPDATE jobs SET state = 'failed', failures = $1, finished_at = $2, exit_code = $3, reason = $4 WHERE job_id = $5 AND state = 'running' AND attempt = $6",
                    )
                    .bind(i64::from(failures))
                    .bind(t)
                    .bind(exit_code.map(i64::from))
                    .bind(&msg)
                    .bind(&job.job_id)
                    .bind(i64::from(job.attempt))
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                    (changed, "failed", "job.fail", msg, Some("FAILED"))
                }
            }
            Ending::Cancelled { by } => {
                let msg = format!("cancelled by {by} during attempt {}", job.attempt);
                let changed = sqlx::query(
                    "UPDATE jobs SET state = 'cancelled', finished_at = $1, reason = $2 WHERE job_id = $3 AND state = 'running' AND attempt = $4",
                )
                .bind(t)
                .bind(&msg)
                .bind(&job.job_id)
                .bind(i64::from(job.attempt))
                .execute(&mut *tx)
                .await?
                .rows_affected();
                (changed, "cancelled", "job.cancel", msg, Some("KILLED"))
            }
            Ending::Preempted { by } => {
                let msg = format!(
                    "preempted by {by} during attempt {}; queued again to resume from its checkpoint",
                    job.attempt
                );
                let changed = sqlx::query(
                    "UPDATE jobs SET state = 'queued', preemptions = preemptions + 1, not_before = $1, reason = $2, token_id = NULL WHERE job_id = $3 AND state = 'running' AND attempt = $4",
                )
                .bind(t)
                .bind(&msg)
                .bind(&job.job_id)
                .bind(i64::from(job.attempt))
                .execute(&mut *tx)
                .await?
                .rows_affected();
                (changed, "preempted", "job.preempt", msg, None)
            }
        };
        if changed == 0 {
            // This attempt's end is already recorded (a try whose commit was not
            // confirmed, or a restart that found it lost): nothing is counted twice;
            // its run is closed, as the try that recorded it may not have got there.
            tx.rollback().await?;
            tracing::info!(job = %job.job_id, attempt = job.attempt, "the attempt's end was already recorded");
            if let (Some(status), Some(run_id)) = (run_status, &job.run_id) {
                if let Err(e) = self.close_run(job, run_id, status).await {
                    tracing::warn!(job = %job.job_id, error = %e, "closing a job's run failed");
                }
            }
            return Ok(());
        }
        // A cancel asked for during the attempt wins over queueing it again.
        let (event, action, message, run_status) =
            match cancel_if_requested(&mut tx, job, t, event).await? {
                Some(msg) => ("cancelled", "job.cancel", msg, Some("KILLED")),
                None => (event, action, message, run_status),
            };
        record_event(&mut tx, &job.job_id, job.attempt, event, &message).await?;
        for s in &stored {
            sqlx::query(
                "INSERT INTO job_logs (job_id, attempt, rank, location, object_key, bytes) VALUES ($1, $2, $3, $4, $5, $6) \
                 ON CONFLICT (job_id, attempt, rank) DO UPDATE SET location = excluded.location, object_key = excluded.object_key, bytes = excluded.bytes",
            )
            .bind(&job.job_id)
            .bind(i64::from(job.attempt))
            .bind(i64::from(s.rank))
            .bind(&s.location)
            .bind(s.key.as_str())
            .bind(s.bytes)
            .execute(&mut *tx)
            .await?;
        }
        // The attempt's token ends with it, in the same commit.
        if let Some(token) = &job.token_id {
            qanat_governance::Governance::revoke_token_in(&mut tx, token).await?;
        }
        append_audit_in(&mut tx, &audit(action, job, &message)).await?;
        fault!(inner, "end.before_commit");
        tx.commit().await?;
        qanat_governance::auth_changed();
        inner.wake.notify_one();
        fault!(inner, "end.committed");
        for s in &stored {
            let _ = tokio::fs::remove_file(self.log_path(&job.job_id, job.attempt, s.rank)).await;
        }
        if !stored.is_empty() {
            let _ = tokio::fs::remove_dir(
                self.job_dir(&job.job_id)
                    .join(format!("attempt-{}", job.attempt)),
            )
            .await;
        }
        if let (Some(status), Some(run_id)) = (run_status, &job.run_id) {
            if let Err(e) = self.close_run(job, run_id, status).await {
                tracing::warn!(job = %job.job_id, error = %e, "closing a job's run failed");
            }
        }
        Ok(())
    }

    pub(crate) async fn close_run(&self, job: &JobRow, run_id: &str, status: &str) -> Result<()> {
        let tracking = &self.inner.tracking;
        let project = self.inner.gov.project_by_id(&job.project_id).await?;
        let run = tracking.run(&project, run_id).await?;
        // The code may have ended its run itself (mlflow.end_run): that stands.
        if run.info.status == "RUNNING" || (status != "FINISHED" && run.info.status == "FINISHED") {
            tracking
                .update_run(
                    &project,
                    run_id,
                    qanat_tracking::RunUpdate {
                        status: Some(status.into()),
                        end_time: Some(now() / 1000),
                        run_name: None,
                    },
                )
                .await?;
        }
        Ok(())
    }

    /// Copies an ended attempt's logs into the project's storage (encrypted at rest);
    /// the caller records them and removes the local copies.
    async fn store_logs(&self, job: &JobRow) -> Result<Vec<StoredLog>> {
        let inner = &self.inner;
        let project = inner.gov.project_by_id(&job.project_id).await?;
        let storage = &inner.storage;
        let location = std::iter::once(storage.default_location().to_string())
            .chain(storage.locations().into_iter().map(|l| l.name))
            .find(|name| {
                storage
                    .location(name)
                    .is_ok_and(|l| qanat_governance::check_residency(&project, &l).is_ok())
            })
            .ok_or_else(|| {
                Error::Residency(format!(
                    "no storage location is in a region project '{}' allows; its job logs stay on the node",
                    project.name
                ))
            })?;
        let mut out = Vec::new();
        for rank in 0..job.ranks {
            let path = self.log_path(&job.job_id, job.attempt, rank);
            let data = match tail(&path, inner.settings.max_log_bytes).await {
                Ok(d) => d,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(Error::io(path.display(), e)),
            };
            let key: ObjectKey = format!(
                "jobs/{}/{}/attempt-{}/rank-{rank}.log",
                job.project_id, job.job_id, job.attempt
            )
            .parse()?;
            let bytes = data.len() as i64;
            storage.put_bytes(&location, &key, data.into()).await?;
            out.push(StoredLog {
                rank,
                location: location.clone(),
                key,
                bytes,
            });
        }
        Ok(out)
    }
}

/// The last `max` bytes of a rank's log (all of it when shorter), prefixed with a line
/// saying how much was left out.
async fn tail(path: &std::path::Path, max: u64) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let (mut f, len) = crate::safe_read::open_log(path).await?;
    let mut out = Vec::new();
    if len > max {
        out.extend_from_slice(
            format!(
                "[qanat: the first {} bytes of this log were dropped; jobs.max_log_bytes keeps the last {max}]\n",
                len - max
            )
            .as_bytes(),
        );
        f.seek(std::io::SeekFrom::Start(len - max)).await?;
    }
    f.take(max).read_to_end(&mut out).await?;
    Ok(out)
}

/// A rank's log, stored.
struct StoredLog {
    rank: u32,
    location: String,
    key: ObjectKey,
    bytes: i64,
}

/// A TCP port free now on loopback (for rank 0's rendezvous).
fn free_port() -> Option<u16> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()
        .map(|a| a.port())
}
