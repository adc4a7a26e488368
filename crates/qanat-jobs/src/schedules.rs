//! Cron schedules: a job spec submitted at every firing of a cron expression (five
//! fields, UTC: minute hour day-of-month month day-of-week, or six with seconds
//! first), as a nightly retraining would be. A firing is claimed by moving `next_at` with a conditional UPDATE, so two
//! servers never submit it twice; firings missed while no server ran are not made up
//! (the next one is computed from now), as Kubernetes CronJobs do past their deadline.

use chrono::{TimeZone, Utc};
use qanat_governance::{commit_audited, AuditRecord, Project};
use sqlx::Row;

use crate::spec::JobSpec;
use crate::{now, wire, Error, Jobs, Result};

/// Parses a cron expression, saying what is wrong with one that does not parse.
pub fn parse_cron(expr: &str) -> Result<croner::Cron> {
    let fields = expr.split_whitespace().count();
    if !(5..=6).contains(&fields) {
        return Err(Error::invalid(format!(
            "cron '{expr}' has {fields} fields; write five: minute hour day-of-month month day-of-week, e.g. '0 3 * * *' for 03:00 UTC daily (or six, seconds first)"
        )));
    }
    croner::Cron::new(expr).with_seconds_optional().parse().map_err(|e| {
        Error::invalid(format!(
            "cron '{expr}' is not valid ({e}); write five fields: minute hour day-of-month month day-of-week, e.g. '*/15 * * * *'"
        ))
    })
}

/// The first firing of `cron` after `after` (micros), in micros.
pub(crate) fn next_after(cron: &croner::Cron, after: i64) -> Result<i64> {
    let t = Utc
        .timestamp_micros(after)
        .single()
        .ok_or_else(|| Error::invalid("a time out of range"))?;
    let next = cron
        .find_next_occurrence(&t, false)
        .map_err(|e| Error::invalid(format!("the cron expression never fires again ({e})")))?;
    Ok(next.timestamp_micros())
}

fn schedule_from(r: &sqlx::any::AnyRow, project: &str) -> Result<wire::Schedule> {
    let spec: String = r.try_get("spec")?;
    Ok(wire::Schedule {
        schedule_id: r.try_get("schedule_id")?,
        project: project.to_string(),
        name: r.try_get("name")?,
        cron: r.try_get("cron")?,
        job: serde_json::from_str(&spec)
            .map_err(|e| Error::Io(format!("a stored schedule does not parse: {e}")))?,
        next_at: qanat_store::format_micros(r.try_get("next_at")?),
        created_at: qanat_store::format_micros(r.try_get("created_at")?),
        created_by: r.try_get("created_by")?,
    })
}

impl Jobs {
    /// Creates a schedule; its job spec is checked now as a submit would check it.
    #[qanat_macros::boxed]
    pub async fn create_schedule(
        &self,
        project: &Project,
        new: wire::NewSchedule,
        by: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<wire::Schedule> {
        qanat_core::Name::parse_as("schedule name", &new.name)
            .map_err(|e| Error::invalid(e.to_string()))?;
        let cron = parse_cron(&new.cron)?;
        self.check_spec(project, new.job.clone()).await?;
        let id = format!("sch-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let t = now();
        let next = next_after(&cron, t)?;
        let spec = serde_json::to_string(&new.job)
            .map_err(|e| Error::invalid(format!("the job spec does not serialize: {e}")))?;
        let mut tx = self.inner.meta.writer().begin().await?;
        sqlx::query(
            "INSERT INTO job_schedules (schedule_id, project_id, name, cron, spec, next_at, created_at, created_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(&id)
        .bind(&project.id)
        .bind(&new.name)
        .bind(new.cron.trim())
        .bind(&spec)
        .bind(next)
        .bind(t)
        .bind(by)
        .execute(&mut *tx)
        .await?;
        commit_audited(tx, audit).await?;
        self.schedule(project, &id).await
    }

    #[qanat_macros::boxed]
    pub async fn schedule(&self, project: &Project, id: &str) -> Result<wire::Schedule> {
        let r = sqlx::query(
            "SELECT * FROM job_schedules WHERE schedule_id = $1 AND project_id = $2 AND deleted_at IS NULL",
        )
        .bind(id)
        .bind(&project.id)
        .fetch_optional(self.inner.meta.reader())
        .await?
        .ok_or_else(|| Error::not_found("schedule", id))?;
        schedule_from(&r, &project.name)
    }

    #[qanat_macros::boxed]
    pub async fn schedules(&self, project: &Project) -> Result<Vec<wire::Schedule>> {
        let rows = sqlx::query(
            "SELECT * FROM job_schedules WHERE project_id = $1 AND deleted_at IS NULL ORDER BY created_at",
        )
        .bind(&project.id)
        .fetch_all(self.inner.meta.reader())
        .await?;
        rows.iter()
            .map(|r| schedule_from(r, &project.name))
            .collect()
    }

    /// Deletes a schedule: it fires no more (jobs it submitted stay).
    #[qanat_macros::boxed]
    pub async fn delete_schedule(
        &self,
        project: &Project,
        id: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<()> {
        let mut tx = self.inner.meta.writer().begin().await?;
        let n = sqlx::query(
            "UPDATE job_schedules SET deleted_at = $1 WHERE schedule_id = $2 AND project_id = $3 AND deleted_at IS NULL",
        )
        .bind(now())
        .bind(id)
        .bind(&project.id)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if n == 0 {
            return Err(Error::not_found("schedule", id));
        }
        commit_audited(tx, audit).await?;
        Ok(())
    }

    /// Submits the job of every schedule that is due (called by the scheduler).
    pub(crate) async fn fire_schedules(&self) -> Result<()> {
        let inner = &self.inner;
        let t = now();
        let due = sqlx::query(
            "SELECT s.*, p.name AS project_name FROM job_schedules s JOIN projects p ON p.id = s.project_id \
             WHERE s.deleted_at IS NULL AND s.paused = 0 AND s.next_at <= $1 AND p.deleted_at IS NULL",
        )
        .bind(t)
        .fetch_all(inner.meta.reader())
        .await?;
        for r in due {
            let id: String = r.try_get("schedule_id")?;
            let name: String = r.try_get("name")?;
            let project_name: String = r.try_get("project_name")?;
            let was: i64 = r.try_get("next_at")?;
            let expr: String = r.try_get("cron")?;
            let next = parse_cron(&expr).and_then(|c| next_after(&c, t));
            let claimed = sqlx::query(
                "UPDATE job_schedules SET next_at = $1, paused = $2 WHERE schedule_id = $3 AND next_at = $4",
            )
            .bind(next.as_ref().copied().unwrap_or(i64::MAX))
            .bind(i64::from(next.is_err()))
            .bind(&id)
            .bind(was)
            .execute(inner.meta.writer())
            .await?
            .rows_affected();
            if claimed == 0 {
                continue;
            }
            let project = inner.gov.project(&project_name).await?;
            let spec: JobSpec = serde_json::from_str(&r.try_get::<String, _>("spec")?)
                .map_err(|e| Error::Io(format!("a stored schedule does not parse: {e}")))?;
            let rec = AuditRecord::by_service(
                "scheduler",
                "job.submit",
                format!("project:{project_name}/schedule:{id}"),
                Some(&project_name),
            )
            .with_detail(format!("schedule '{name}' ({expr}) fired"));
            match self
                .submit_as(
                    &project,
                    spec,
                    &format!("schedule:{name}"),
                    Some(&rec),
                    Some(&id),
                )
                .await
            {
                Ok(job) => tracing::info!(schedule = %id, job = %job.job_id, "schedule fired"),
                Err(e) => tracing::warn!(schedule = %id, error = %e, "a scheduled job was refused"),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cron_expressions_fire_when_they_say() {
        let c = parse_cron("0 3 * * *").expect("daily");
        // 2026-01-01T00:00:00Z -> 03:00 the same day.
        let t0 = 1_767_225_600_000_000;
        assert_eq!(next_after(&c, t0).expect("next"), t0 + 3 * 3600 * 1_000_000);
        let c = parse_cron("*/2 * * * * *").expect("every 2 s");
        assert_eq!(next_after(&c, t0).expect("next"), t0 + 2_000_000);
    }

    #[test]
    fn a_bad_cron_says_how_to_write_one() {
        for bad in ["* * *", "61 * * * *", "every day", "* * * * * * * *"] {
            let e = parse_cron(bad).expect_err("refused").to_string();
            assert!(e.contains("minute hour day-of-month"), "{bad}: {e}");
        }
    }
}
