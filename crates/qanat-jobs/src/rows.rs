//! Job rows as read from the metadata store, and the history they keep.

use qanat_core::ProjectId;
use qanat_store::format_micros;
use sqlx::any::AnyRow;
use sqlx::Row;

use crate::spec::{JobSpec, Resources};
use crate::{now, wire, Result};

/// The columns every read selects (with the project's name).
pub(crate) const JOB_COLUMNS: &str = "j.job_id, j.project_id, p.name AS project_name, j.name, j.kind, j.spec, j.executor, j.state, \
     j.priority, j.ranks, j.cpu_millis, j.memory_mb, j.gpus, j.attempt, j.failures, j.max_retries, j.preemptions, \
     j.not_before, j.submitted_at, j.submitted_by, j.started_at, j.finished_at, j.node, j.external_id, j.run_id, \
     j.token_id, j.cancel_requested, j.exit_code, j.reason, j.enforcement, j.placement, j.schedule_id, j.idle_gpus";

/// `FROM` clause matching [`JOB_COLUMNS`].
pub(crate) const JOB_FROM: &str = "jobs j JOIN projects p ON p.id = j.project_id";

/// A job as the scheduler works with it.
#[derive(Debug, Clone)]
pub(crate) struct JobRow {
    pub job_id: String,
    pub project_id: ProjectId,
    pub project_name: String,
    pub name: String,
    pub kind: String,
    pub spec: JobSpec,
    pub executor: String,
    pub state: String,
    pub priority: i64,
    pub ranks: u32,
    pub per_rank: Resources,
    pub attempt: u32,
    pub failures: u32,
    pub max_retries: u32,
    pub preemptions: u32,
    pub submitted_at: i64,
    pub submitted_by: String,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub node: Option<String>,
    pub run_id: Option<String>,
    pub token_id: Option<String>,
    pub cancel_requested: bool,
    pub exit_code: Option<i32>,
    pub reason: Option<String>,
    pub enforcement: Option<String>,
    pub placement: Option<String>,
    pub schedule_id: Option<String>,
    pub idle_gpus: Option<String>,
}

fn u32_of(row: &AnyRow, col: &str) -> Result<u32> {
    Ok(u32::try_from(row.try_get::<i64, _>(col)?).unwrap_or(0))
}

impl JobRow {
    pub(crate) fn from_row(row: &AnyRow) -> Result<Self> {
        let spec: String = row.try_get("spec")?;
        let spec: JobSpec = serde_json::from_str(&spec)
            .map_err(|e| crate::Error::Io(format!("a stored job spec does not parse: {e}")))?;
        Ok(JobRow {
            job_id: row.try_get("job_id")?,
            project_id: ProjectId::from(row.try_get::<String, _>("project_id")?),
            project_name: row.try_get("project_name")?,
            name: row.try_get("name")?,
            kind: row.try_get("kind")?,
            spec,
            executor: row.try_get("executor")?,
            state: row.try_get("state")?,
            priority: row.try_get("priority")?,
            ranks: u32_of(row, "ranks")?,
            per_rank: Resources {
                cpu_millis: u64::try_from(row.try_get::<i64, _>("cpu_millis")?).unwrap_or(0),
                memory_mb: u64::try_from(row.try_get::<i64, _>("memory_mb")?).unwrap_or(0),
                gpus: u32_of(row, "gpus")?,
            },
            attempt: u32_of(row, "attempt")?,
            failures: u32_of(row, "failures")?,
            max_retries: u32_of(row, "max_retries")?,
            preemptions: u32_of(row, "preemptions")?,
            submitted_at: row.try_get("submitted_at")?,
            submitted_by: row.try_get("submitted_by")?,
            started_at: row.try_get("started_at")?,
            finished_at: row.try_get("finished_at")?,
            node: row.try_get("node")?,
            run_id: row.try_get("run_id")?,
            token_id: row.try_get("token_id")?,
            cancel_requested: row.try_get::<i64, _>("cancel_requested")? != 0,
            exit_code: row
                .try_get::<Option<i64>, _>("exit_code")?
                .map(|c| c as i32),
            reason: row.try_get("reason")?,
            enforcement: row.try_get("enforcement")?,
            placement: row.try_get("placement")?,
            schedule_id: row.try_get("schedule_id")?,
            idle_gpus: row.try_get("idle_gpus")?,
        })
    }

    /// All ranks together.
    pub(crate) fn total(&self) -> Resources {
        self.per_rank.times(self.ranks)
    }

    /// How long an attempt may run: the spec's timeout, else `default` (the
    /// server's); `None` for no limit.
    pub(crate) fn timeout(
        &self,
        default: Option<std::time::Duration>,
    ) -> Option<std::time::Duration> {
        self.spec
            .timeout
            .as_deref()
            .and_then(|t| humantime::parse_duration(t).ok())
            .or(default)
    }

    pub(crate) fn preemptible(&self) -> bool {
        self.spec.preemptible.unwrap_or(true)
    }

    pub(crate) fn view(&self) -> wire::Job {
        wire::Job {
            job_id: self.job_id.clone(),
            project: self.project_name.clone(),
            name: self.name.clone(),
            kind: self.kind.clone(),
            executor: self.executor.clone(),
            state: self.state.clone(),
            priority: self.priority,
            ranks: self.ranks,
            resources: self.per_rank,
            attempt: self.attempt,
            failures: self.failures,
            max_retries: self.max_retries,
            preemptions: self.preemptions,
            submitted_at: format_micros(self.submitted_at),
            submitted_by: self.submitted_by.clone(),
            started_at: self.started_at.map(format_micros),
            finished_at: self.finished_at.map(format_micros),
            reason: self.reason.clone(),
            exit_code: self.exit_code,
            run_id: self.run_id.clone(),
            enforcement: self.enforcement.clone(),
            placement: self.placement.clone(),
            cancel_requested: self.cancel_requested,
            schedule_id: self.schedule_id.clone(),
            idle_gpus: self.idle_gpus.clone(),
        }
    }
}

/// Appends one step to a job's history, on the caller's connection or transaction.
pub(crate) async fn record_event(
    conn: &mut sqlx::AnyConnection,
    job_id: &str,
    attempt: u32,
    event: &str,
    message: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO job_events (job_id, seq, at, attempt, event, message) \
         VALUES ($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM job_events WHERE job_id = $2), $3, $4, $5, $6)",
    )
    .bind(job_id)
    .bind(job_id)
    .bind(now())
    .bind(i64::from(attempt))
    .bind(event)
    .bind(message)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

pub(crate) async fn events(
    meta: &qanat_store::MetaStore,
    job_id: &str,
) -> Result<Vec<wire::JobEvent>> {
    let rows = sqlx::query(
        "SELECT at, attempt, event, message FROM job_events WHERE job_id = $1 ORDER BY seq",
    )
    .bind(job_id)
    .fetch_all(meta.reader())
    .await?;
    rows.iter()
        .map(|r| {
            Ok(wire::JobEvent {
                at: format_micros(r.try_get("at")?),
                attempt: u32_of(r, "attempt")?,
                event: r.try_get("event")?,
                message: r.try_get("message")?,
            })
        })
        .collect()
}
