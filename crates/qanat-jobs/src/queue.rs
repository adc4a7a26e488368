//! The durable queue: submit (checked, then persisted before it is acknowledged), list,
//! show, cancel, retry, logs and quotas.

use std::collections::HashMap;

use qanat_core::ProjectId;
use qanat_governance::{append_audit_in, commit_audited, AuditRecord, Project};
use qanat_store::ObjectKey;
use sqlx::Row;

use crate::policy::Limits;
use crate::rows::{record_event, JobRow, JOB_COLUMNS, JOB_FROM};
use crate::spec::{parse_memory, Checked, JobSpec, Resources};
use crate::{now, wire, Error, Jobs, Result};

/// Most bytes one log read answers.
const LOG_CHUNK: u64 = 1 << 20;

/// The PATH a job gets unless its spec sets one.
pub(crate) fn default_path() -> String {
    std::env::var("PATH")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into())
}

impl Jobs {
    /// Checks `spec` and queues it in `project`, audited with `audit` in the same
    /// transaction; the job exists once this returns.
    #[qanat_macros::boxed]
    pub async fn submit(
        &self,
        project: &Project,
        spec: JobSpec,
        by: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<wire::Job> {
        self.submit_as(project, spec, by, audit, None).await
    }

    /// Everything a submit checks, without queueing: the spec, its kind, where it may
    /// run, the quota, the inputs (pinned to the versions they name now).
    pub(crate) async fn check_spec(&self, project: &Project, spec: JobSpec) -> Result<Checked> {
        let inner = &self.inner;
        let mut c = crate::spec::check(spec, inner.settings.default_timeout)?;
        let kind = inner.kinds.get(&c.spec.kind)?;
        let path = c.spec.env.get("PATH").cloned().unwrap_or_else(default_path);
        kind.check(&c.spec.params, &path)?;
        self.check_executor(project, &c)?;
        self.check_quota(&project.id, &c).await?;
        let profiles = self.pin_inputs(project, &mut c).await?;
        kind.check_inputs(&c.spec.params, &profiles)?;
        Ok(c)
    }

    pub(crate) async fn submit_as(
        &self,
        project: &Project,
        spec: JobSpec,
        by: &str,
        audit: Option<&AuditRecord>,
        schedule_id: Option<&str>,
    ) -> Result<wire::Job> {
        let inner = &self.inner;
        let c = self.check_spec(project, spec).await?;
        let job_id = format!("job-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let spec_json = serde_json::to_string(&c.spec)
            .map_err(|e| Error::invalid(format!("the spec does not serialize: {e}")))?;
        let t = now();
        let mut tx = inner.meta.writer().begin().await?;
        sqlx::query(
            "INSERT INTO jobs (job_id, project_id, name, kind, spec, executor, state, priority, ranks, cpu_millis, memory_mb, gpus, \
             max_retries, not_before, submitted_at, submitted_by, reason, schedule_id) \
             VALUES ($1, $2, $3, $4, $5, $6, 'queued', $7, $8, $9, $10, $11, $12, $13, $14, $15, 'waiting to be scheduled', $16)",
        )
        .bind(&job_id)
        .bind(&project.id)
        .bind(&c.spec.name)
        .bind(&c.spec.kind)
        .bind(&spec_json)
        .bind(&c.executor)
        .bind(c.priority)
        .bind(i64::from(c.ranks))
        .bind(c.resources.cpu_millis as i64)
        .bind(c.resources.memory_mb as i64)
        .bind(i64::from(c.resources.gpus))
        .bind(i64::from(c.max_retries))
        .bind(t)
        .bind(t)
        .bind(by)
        .bind(schedule_id)
        .execute(&mut *tx)
        .await?;
        record_event(
            &mut tx,
            &job_id,
            0,
            "queued",
            &format!(
                "submitted by {by}: {} x {}",
                c.ranks,
                c.resources.describe()
            ),
        )
        .await?;
        if let Some(rec) = audit {
            let mut rec = rec.clone();
            if schedule_id.is_none() {
                rec.resource = format!("project:{}/job:{job_id}", project.name);
            }
            append_audit_in(&mut tx, &rec).await?;
        }
        tx.commit().await?;
        self.woken(project, &job_id).await
    }

    /// A job's working directory is its own (a relative path, inside its `work`
    /// directory) or lies in a root an admin allowed (`jobs.sandbox.paths`,
    /// `jobs.sandbox.writable_paths`): never the server's home, never another job's.
    fn check_working_dir(&self, c: &Checked) -> Result<()> {
        let Some(dir) = c.spec.params.get("working_dir").and_then(|v| v.as_str()) else {
            return Ok(());
        };
        let path = std::path::Path::new(dir);
        if path
            .components()
            .any(|p| matches!(p, std::path::Component::ParentDir))
        {
            return Err(Error::invalid(format!(
                "working_dir '{dir}' may not contain '..': give a path inside the job's own directory (relative), or under a root an admin allowed"
            )));
        }
        if path.is_relative() {
            return Ok(());
        }
        let sandbox = &self.inner.settings.sandbox;
        if sandbox.allowed_roots().any(|root| path.starts_with(root)) {
            return Ok(());
        }
        let roots: Vec<String> = sandbox
            .allowed_roots()
            .map(|p| p.display().to_string())
            .collect();
        Err(Error::invalid(format!(
            "working_dir '{dir}' is outside the job's own directory: give a relative path (it is created inside the job's directory), or ask an admin to allow the root in jobs.sandbox.paths ({})",
            if roots.is_empty() {
                "none allowed now".to_string()
            } else {
                format!("allowed now: {}", roots.join(", "))
            }
        )))
    }

    /// Refuses what no executor here can ever run, and what residency forbids.
    fn check_executor(&self, project: &Project, c: &Checked) -> Result<()> {
        let s = &self.inner.settings;
        let slurm = self.inner.slurm.as_ref();
        let kube = self.inner.kube.as_ref();
        let (region, cap) = match (c.executor.as_str(), slurm, kube) {
            ("local", _, _) => (s.region.as_str(), self.inner.local.capacity()),
            ("slurm", Some(sl), _) => (sl.settings.region.as_str(), sl.capacity()),
            ("kubernetes", _, Some(k)) => {
                if !c.inputs.is_empty() {
                    return Err(Error::invalid(
                        "inputs are not mounted into Kubernetes pods yet: read the dataset through the API (QANAT_URL, QANAT_TOKEN) or run the job on another executor",
                    ));
                }
                if c.spec.kind == "train" || c.spec.kind == "sweep" {
                    return Err(Error::invalid(format!(
                        "a {} job cannot run on Kubernetes yet (its pod would need the qanat binary): use the local or Slurm executor",
                        c.spec.kind
                    )));
                }
                if !c.spec.outputs.is_empty() {
                    return Err(Error::invalid(
                        "outputs are not collected from Kubernetes pods (they share no filesystem with the server): log them from the job with the MLflow client (MLFLOW_TRACKING_URI and MLFLOW_RUN_ID are set) or run the job on another executor",
                    ));
                }
                (k.settings.region.as_str(), k.capacity())
            }
            (other, _, _) => {
                return Err(Error::invalid(format!(
                    "executor '{other}' is not configured on this server; configured: local{}{}",
                    if slurm.is_some() { ", slurm" } else { "" },
                    if kube.is_some() { ", kubernetes" } else { "" }
                )))
            }
        };
        if c.executor == "local" {
            if let Some(crate::local::Isolation::Unavailable(why)) = self.inner.local.isolation() {
                return Err(Error::Unsatisfiable(format!(
                    "local jobs need a sandbox, and this server cannot build one: {why}"
                )));
            }
        }
        if c.executor != "kubernetes" {
            self.check_working_dir(c)?;
        }
        if c.executor != "kubernetes" && c.spec.params.contains_key("image") {
            return Err(Error::invalid(
                "image is for the kubernetes executor; a local or Slurm job runs on the host",
            ));
        }
        if !project.allowed_regions.iter().any(|r| r == region) {
            return Err(Error::Residency(format!(
                "data residency: project '{}' keeps its data in {:?}; executor '{}' runs in region '{region}', so the job may not run there",
                project.name, project.allowed_regions, c.executor
            )));
        }
        let local = &self.inner.local;
        let total = c.resources.times(c.ranks);
        let per = |what: &str, asked: String, has: String| {
            Error::Unsatisfiable(format!(
                "the job asks for {asked} {what} in all ({} rank(s) of {}); executor '{}' has {has}: it could never start",
                c.ranks,
                c.resources.describe(),
                c.executor
            ))
        };
        if total.gpus > cap.gpus {
            return Err(per(
                "GPUs",
                total.gpus.to_string(),
                format!("{} GPUs", cap.gpus),
            ));
        }
        if let (Some(model), "local") = (&c.gpu_model, c.executor.as_str()) {
            let matching = local
                .gpus()
                .iter()
                .filter(|g| g.name.contains(model.as_str()))
                .count();
            if (matching as u32) < total.gpus {
                return Err(Error::Unsatisfiable(format!(
                    "the job asks for {} GPUs of model '{model}'; executor 'local' has {matching}",
                    total.gpus
                )));
            }
        }
        if total.cpu_millis > cap.cpu_millis {
            return Err(per(
                "cores",
                (total.cpu_millis as f64 / 1000.0).to_string(),
                format!("{} cores", cap.cpu_millis as f64 / 1000.0),
            ));
        }
        if total.memory_mb > cap.memory_mb {
            return Err(per(
                "MiB of memory",
                total.memory_mb.to_string(),
                format!("{} MiB", cap.memory_mb),
            ));
        }
        Ok(())
    }

    async fn check_quota(&self, project: &ProjectId, c: &Checked) -> Result<()> {
        if let Some(limits) = self.limits().await?.get(project.as_str()) {
            if let Some(why) = limits.admits(c.resources.times(c.ranks)) {
                return Err(Error::Forbidden(format!(
                    "{why}: the job can never run within the project's quota; ask less or have an admin raise the quota"
                )));
            }
        }
        Ok(())
    }

    /// Resolves each input to the version it names now (a tag or `latest` could move
    /// before a retry), refusing unknown datasets and versions.
    /// Answers each pinned input with its stored tabular profiles.
    async fn pin_inputs(
        &self,
        project: &Project,
        c: &mut Checked,
    ) -> Result<Vec<(String, Vec<qanat_data::tabular::FileProfile>)>> {
        let mut pinned = Vec::new();
        let mut profiles = Vec::new();
        for r in &c.inputs {
            let ds = self
                .inner
                .datasets
                .get(project, &r.name)
                .await
                .map_err(|e| {
                    Error::invalid(format!("inputs: {e} in project '{}'", project.name))
                })?;
            let sel = r.selector.clone().unwrap_or(qanat_core::Selector::Latest);
            let v = self
                .inner
                .datasets
                .resolve(&ds, &sel)
                .await
                .map_err(|e| Error::invalid(format!("inputs: {r}: {e}")))?;
            let pin = qanat_core::ObjectRef::dataset(r.name.as_str(), v.version);
            let files = self
                .inner
                .datasets
                .profiles(&ds, &v)
                .await
                .map_err(|e| Error::invalid(format!("inputs: {pin}: {e}")))?;
            profiles.push((pin.to_string(), files));
            pinned.push(pin);
        }
        c.spec.inputs = pinned;
        Ok(profiles)
    }

    pub(crate) async fn row(&self, project: &ProjectId, job_id: &str) -> Result<JobRow> {
        let row = sqlx::query(&format!(
            "SELECT {JOB_COLUMNS} FROM {JOB_FROM} WHERE j.job_id = $1 AND j.project_id = $2"
        ))
        .bind(job_id)
        .bind(project)
        .fetch_optional(self.inner.meta.reader())
        .await?
        .ok_or_else(|| Error::not_found("job", job_id))?;
        JobRow::from_row(&row)
    }

    /// A project's jobs, newest first.
    #[qanat_macros::boxed]
    pub async fn list(&self, project: &Project, p: &wire::JobListParams) -> Result<Vec<wire::Job>> {
        let limit = i64::from(p.limit.unwrap_or(100).clamp(1, 1000));
        let rows = match &p.state {
            Some(s) => {
                if !["queued", "running", "succeeded", "failed", "cancelled"].contains(&s.as_str())
                {
                    return Err(Error::invalid(format!(
                        "state '{s}' is not one of queued, running, succeeded, failed, cancelled"
                    )));
                }
                sqlx::query(&format!(
                    "SELECT {JOB_COLUMNS} FROM {JOB_FROM} WHERE j.project_id = $1 AND j.state = $2 \
                     ORDER BY j.submitted_at DESC, j.job_id DESC LIMIT $3"
                ))
                .bind(&project.id)
                .bind(s)
                .bind(limit)
                .fetch_all(self.inner.meta.reader())
                .await?
            }
            None => {
                sqlx::query(&format!(
                    "SELECT {JOB_COLUMNS} FROM {JOB_FROM} WHERE j.project_id = $1 \
                     ORDER BY j.submitted_at DESC, j.job_id DESC LIMIT $2"
                ))
                .bind(&project.id)
                .bind(limit)
                .fetch_all(self.inner.meta.reader())
                .await?
            }
        };
        rows.iter()
            .map(|r| Ok(JobRow::from_row(r)?.view()))
            .collect()
    }

    /// A job with its spec and history.
    #[qanat_macros::boxed]
    pub async fn get(&self, project: &Project, job_id: &str) -> Result<wire::JobDetail> {
        let row = self.row(&project.id, job_id).await?;
        let events = crate::rows::events(&self.inner.meta, job_id).await?;
        Ok(wire::JobDetail {
            spec: row.spec.clone(),
            job: row.view(),
            events,
        })
    }

    /// The spec of the job that logged to run `run_id` (as it was queued: inputs
    /// pinned to the versions they named then), or `None` when no job of the project
    /// did: what a retraining runs again.
    #[qanat_macros::boxed]
    pub async fn spec_of_run(&self, project: &Project, run_id: &str) -> Result<Option<JobSpec>> {
        let row = sqlx::query(
            "SELECT spec FROM jobs WHERE project_id = $1 AND run_id = $2 ORDER BY submitted_at DESC LIMIT 1",
        )
        .bind(&project.id)
        .bind(run_id)
        .fetch_optional(self.inner.meta.reader())
        .await?;
        row.map(|r| {
            let spec: String = r.try_get("spec")?;
            serde_json::from_str(&spec)
                .map_err(|e| Error::Io(format!("a stored job spec does not parse: {e}")))
        })
        .transpose()
    }

    /// Cancels a job: a queued one at once; a running one is stopped (SIGTERM, the
    /// grace period, SIGKILL) and ends `cancelled`.
    #[qanat_macros::boxed]
    pub async fn cancel(
        &self,
        project: &Project,
        job_id: &str,
        by: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<wire::Job> {
        let row = self.row(&project.id, job_id).await?;
        let mut tx = self.inner.meta.writer().begin().await?;
        let t = now();
        let queued = sqlx::query(
            "UPDATE jobs SET state = 'cancelled', finished_at = $1, reason = $2, cancel_requested = 1 \
             WHERE job_id = $3 AND state = 'queued'",
        )
        .bind(t)
        .bind(format!("cancelled by {by} before it started"))
        .bind(job_id)
        .execute(&mut *tx)
        .await?
        .rows_affected()
            == 1;
        if !queued {
            let running = sqlx::query(
                "UPDATE jobs SET cancel_requested = 1 WHERE job_id = $1 AND state = 'running'",
            )
            .bind(job_id)
            .execute(&mut *tx)
            .await?
            .rows_affected()
                == 1;
            if !running {
                return Err(Error::Conflict(format!(
                    "job {job_id} is already {}; nothing to cancel",
                    row.state
                )));
            }
        }
        record_event(
            &mut tx,
            job_id,
            row.attempt,
            if queued {
                "cancelled"
            } else {
                "cancel-requested"
            },
            &format!("by {by}"),
        )
        .await?;
        commit_audited(tx, audit).await?;
        if !queued {
            self.inner
                .local
                .order(job_id, crate::local::Control::Cancel { by: by.to_string() });
        } else if let Some(run_id) = &row.run_id {
            // Queued again after an earlier attempt (lost, preempted, retried): the
            // run that attempt opened ends with the job.
            if let Err(e) = self.close_run(&row, run_id, "KILLED").await {
                tracing::warn!(job = %job_id, error = %e, "closing a cancelled job's run failed");
            }
        }
        self.woken(project, job_id).await
    }

    /// Wakes the scheduler for a change to job `job_id`, and returns the job as it is
    /// now.
    async fn woken(&self, project: &Project, job_id: &str) -> Result<wire::Job> {
        self.inner.wake.notify_one();
        Ok(self.row(&project.id, job_id).await?.view())
    }

    /// Queues a failed or cancelled job again, with its retries reset; it keeps its
    /// run and checkpoint directory.
    #[qanat_macros::boxed]
    pub async fn retry(
        &self,
        project: &Project,
        job_id: &str,
        by: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<wire::Job> {
        let row = self.row(&project.id, job_id).await?;
        let mut tx = self.inner.meta.writer().begin().await?;
        let done = sqlx::query(
            "UPDATE jobs SET state = 'queued', failures = 0, not_before = $1, finished_at = NULL, cancel_requested = 0, \
             exit_code = NULL, reason = $2 WHERE job_id = $3 AND state IN ('failed', 'cancelled')",
        )
        .bind(now())
        .bind(format!("retried by {by}"))
        .bind(job_id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if done == 0 {
            return Err(Error::Conflict(format!(
                "job {job_id} is {}; only failed or cancelled jobs can be retried (submit it again to rerun a finished one)",
                row.state
            )));
        }
        record_event(
            &mut tx,
            job_id,
            row.attempt,
            "queued",
            &format!("retried by {by}"),
        )
        .await?;
        commit_audited(tx, audit).await?;
        self.woken(project, job_id).await
    }

    /// Reads a rank's log from `offset`: from the live file while its attempt runs,
    /// from storage (decrypted) once it was stored.
    #[qanat_macros::boxed]
    pub async fn logs(
        &self,
        project: &Project,
        job_id: &str,
        p: &wire::LogParams,
    ) -> Result<wire::LogChunk> {
        let wait = std::time::Duration::from_secs(p.wait_secs.unwrap_or(0).min(30));
        let started = tokio::time::Instant::now();
        loop {
            let chunk = self.read_log(project, job_id, p).await?;
            if !chunk.data.is_empty() || chunk.complete || started.elapsed() >= wait {
                return Ok(chunk);
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }

    async fn read_log(
        &self,
        project: &Project,
        job_id: &str,
        p: &wire::LogParams,
    ) -> Result<wire::LogChunk> {
        let row = self.row(&project.id, job_id).await?;
        let rank = p.rank.unwrap_or(0);
        if rank >= row.ranks {
            return Err(Error::invalid(format!(
                "rank {rank}: job {job_id} has ranks 0 to {}",
                row.ranks - 1
            )));
        }
        let attempt = p.attempt.unwrap_or(row.attempt);
        if attempt > row.attempt {
            return Err(Error::invalid(format!(
                "attempt {attempt}: job {job_id} has started {} attempt(s)",
                row.attempt
            )));
        }
        let offset = p.offset.unwrap_or(0);
        let live = row.state == "running" && attempt == row.attempt;
        let empty = |complete| wire::LogChunk {
            rank,
            attempt,
            offset,
            data: String::new(),
            next_offset: offset,
            complete,
        };
        if attempt == 0 {
            return Ok(empty(row.finished_at.is_some()));
        }
        let bytes = match self.stored_log(job_id, attempt, rank, offset).await? {
            Some(b) => b,
            None => {
                let path = self.log_path(job_id, attempt, rank);
                match read_from(&path, offset).await {
                    Ok(b) => b,
                    // Stored (and removed) since we looked.
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => self
                        .stored_log(job_id, attempt, rank, offset)
                        .await?
                        .unwrap_or_default(),
                    Err(e) => return Err(Error::io(path.display(), e)),
                }
            }
        };
        let next = offset + bytes.len() as u64;
        let complete = !live && bytes.len() < LOG_CHUNK as usize;
        Ok(wire::LogChunk {
            rank,
            attempt,
            offset,
            data: String::from_utf8_lossy(&bytes).into_owned(),
            next_offset: next,
            complete,
        })
    }

    /// Bytes from `offset` of a stored log, if it was stored.
    async fn stored_log(
        &self,
        job_id: &str,
        attempt: u32,
        rank: u32,
        offset: u64,
    ) -> Result<Option<Vec<u8>>> {
        let stored = sqlx::query(
            "SELECT location, object_key FROM job_logs WHERE job_id = $1 AND attempt = $2 AND rank = $3",
        )
        .bind(job_id)
        .bind(i64::from(attempt))
        .bind(i64::from(rank))
        .fetch_optional(self.inner.meta.reader())
        .await?;
        let Some(s) = stored else { return Ok(None) };
        let location: String = s.try_get("location")?;
        let key: ObjectKey = s.try_get::<String, _>("object_key")?.parse()?;
        let all = self.inner.storage.get_bytes(&location, &key).await?;
        let start = (offset as usize).min(all.len());
        let end = (start + LOG_CHUNK as usize).min(all.len());
        Ok(Some(all[start..end].to_vec()))
    }

    pub(crate) fn job_dir(&self, job_id: &str) -> std::path::PathBuf {
        self.inner.settings.work_dir.join(job_id)
    }

    pub(crate) fn log_path(&self, job_id: &str, attempt: u32, rank: u32) -> std::path::PathBuf {
        self.job_dir(job_id)
            .join(format!("attempt-{attempt}"))
            .join(format!("rank-{rank}.log"))
    }

    /// Every project's limits.
    pub(crate) async fn limits(&self) -> Result<HashMap<String, Limits>> {
        let rows = sqlx::query(
            "SELECT project_id, cpu_millis, memory_mb, gpus, running_jobs FROM job_quotas",
        )
        .fetch_all(self.inner.meta.reader())
        .await?;
        let mut out = HashMap::new();
        for r in rows {
            let n = |c: &str| -> Result<Option<u64>> {
                Ok(r.try_get::<Option<i64>, _>(c)?.map(|v| v.max(0) as u64))
            };
            out.insert(
                r.try_get::<String, _>("project_id")?,
                Limits {
                    cpu_millis: n("cpu_millis")?,
                    memory_mb: n("memory_mb")?,
                    gpus: n("gpus")?.map(|v| v as u32),
                    running_jobs: n("running_jobs")?.map(|v| v as u32),
                },
            );
        }
        Ok(out)
    }

    /// A project's quota and what it uses now.
    #[qanat_macros::boxed]
    pub async fn quota(&self, project: &Project) -> Result<wire::QuotaUsage> {
        let limits = self
            .limits()
            .await?
            .remove(project.id.as_str())
            .unwrap_or_default();
        let row = sqlx::query(
            "SELECT COALESCE(SUM(CASE WHEN state = 'running' THEN cpu_millis * ranks ELSE 0 END), 0) AS cpu, \
                    COALESCE(SUM(CASE WHEN state = 'running' THEN memory_mb * ranks ELSE 0 END), 0) AS mem, \
                    COALESCE(SUM(CASE WHEN state = 'running' THEN gpus * ranks ELSE 0 END), 0) AS gpus, \
                    COALESCE(SUM(CASE WHEN state = 'running' THEN 1 ELSE 0 END), 0) AS running, \
                    COALESCE(SUM(CASE WHEN state = 'queued' THEN 1 ELSE 0 END), 0) AS queued \
             FROM jobs WHERE project_id = $1 AND state IN ('running', 'queued')",
        )
        .bind(&project.id)
        .fetch_one(self.inner.meta.reader())
        .await?;
        let n = |c: &str| -> Result<u64> { Ok(row.try_get::<i64, _>(c)?.max(0) as u64) };
        Ok(wire::QuotaUsage {
            project: project.name.clone(),
            quota: wire::Quota {
                cpus: limits.cpu_millis.map(|m| m as f64 / 1000.0),
                memory: None,
                memory_mb: limits.memory_mb,
                gpus: limits.gpus,
                running_jobs: limits.running_jobs,
            },
            used: Resources {
                cpu_millis: n("cpu")?,
                memory_mb: n("mem")?,
                gpus: n("gpus")? as u32,
            },
            running_jobs: n("running")? as u32,
            queued_jobs: n("queued")? as u32,
        })
    }

    /// Replaces a project's quota (absent fields: unlimited).
    #[qanat_macros::boxed]
    pub async fn set_quota(
        &self,
        project: &Project,
        q: &wire::Quota,
        by: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<wire::QuotaUsage> {
        let cpu = match q.cpus {
            Some(c) if !c.is_finite() || c < 0.0 => {
                return Err(Error::invalid(
                    "quota cpus must be a number of cores, 0 or more",
                ))
            }
            Some(c) => Some((c * 1000.0).round() as i64),
            None => None,
        };
        let mem = match (&q.memory, q.memory_mb) {
            (Some(v), _) => Some(parse_memory(v)? as i64),
            (None, m) => m.map(|m| m as i64),
        };
        let mut tx = self.inner.meta.writer().begin().await?;
        sqlx::query(
            "INSERT INTO job_quotas (project_id, cpu_millis, memory_mb, gpus, running_jobs, updated_at, updated_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (project_id) DO UPDATE SET cpu_millis = excluded.cpu_millis, \
             memory_mb = excluded.memory_mb, gpus = excluded.gpus, running_jobs = excluded.running_jobs, \
             updated_at = excluded.updated_at, updated_by = excluded.updated_by",
        )
        .bind(&project.id)
        .bind(cpu)
        .bind(mem)
        .bind(q.gpus.map(i64::from))
        .bind(q.running_jobs.map(i64::from))
        .bind(now())
        .bind(by)
        .execute(&mut *tx)
        .await?;
        commit_audited(tx, audit).await?;
        self.inner.wake.notify_one();
        self.quota(project).await
    }
}

async fn read_from(path: &std::path::Path, offset: u64) -> std::io::Result<Vec<u8>> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let (mut f, _) = crate::safe_read::open_log(path).await?;
    f.seek(std::io::SeekFrom::Start(offset)).await?;
    let mut buf = Vec::new();
    f.take(LOG_CHUNK).read_to_end(&mut buf).await?;
    Ok(buf)
}
