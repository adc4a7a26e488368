//! The monitor store: monitors per deployment, their checks and HTML reports, the
//! ground truth posted for past requests, and the alerts the rules raised.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use qanat_governance::{append_audit_in, commit_audited, AuditRecord, Governance, Project};
use qanat_store::{format_micros, now_micros, MetaStore, ObjectKey, ObjectStorage};
use sqlx::Row;

use crate::profile::TableProfile;
use crate::spec::MonitorSpec;
use crate::wire::{self, Alert, Check, LabelSummary, Monitor, MonitorStatus};
use crate::{Error, Result};

/// The most labels one post may carry.
pub const MAX_LABELS: usize = 10_000;

/// Monitoring: monitors, checks, labels, alerts, and the watcher that runs them.
#[derive(Clone)]
pub struct Monitors {
    pub(crate) inner: Arc<Inner>,
}

/// (project id, model, version).
type VersionKey = (String, String, String);

pub(crate) struct Inner {
    pub(crate) meta: MetaStore,
    pub(crate) storage: ObjectStorage,
    pub(crate) gov: Governance,
    pub(crate) tracking: qanat_tracking::Tracking,
    pub(crate) serving: qanat_serving::Serving,
    pub(crate) jobs: qanat_jobs::Jobs,
    pub(crate) outbox: qanat_events::Outbox,
    /// Reference profiles by (project id, model, version): versions are immutable.
    pub(crate) references: Mutex<HashMap<VersionKey, Option<Arc<TableProfile>>>>,
    pub(crate) datasets: qanat_data::Datasets,
    /// This server's name in monitor leases (see `watch::take_lease`).
    pub(crate) holder: String,
    /// Until when this server holds each monitor's lease, by (project id, deployment).
    pub(crate) leases: Mutex<HashMap<(String, String), i64>>,
}

impl std::fmt::Debug for Monitors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitors").finish_non_exhaustive()
    }
}

pub(crate) fn parse_spec(text: &str) -> Result<MonitorSpec> {
    serde_json::from_str(text)
        .map_err(|e| Error::Internal(format!("a stored monitor spec does not parse: {e}")))
}

pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> Result<String> {
    serde_json::to_string(v).map_err(|e| Error::Internal(format!("does not serialize: {e}")))
}

fn monitor_from(r: &sqlx::any::AnyRow, project: &str) -> Result<Monitor> {
    Ok(Monitor {
        project: project.to_string(),
        deployment: r.try_get("deployment")?,
        spec: parse_spec(&r.try_get::<String, _>("spec")?)?,
        next_window: format_micros(r.try_get("next_start")?),
        checks: r.try_get("checks")?,
        created_at: format_micros(r.try_get("created_at")?),
        created_by: r.try_get("created_by")?,
        updated_at: format_micros(r.try_get("updated_at")?),
        updated_by: r.try_get("updated_by")?,
    })
}

pub(crate) fn check_from(r: &sqlx::any::AnyRow) -> Result<Check> {
    let result: String = r.try_get("result")?;
    let versions: Vec<wire::VersionCheck> = serde_json::from_str(&result)
        .map_err(|e| Error::Internal(format!("a stored check does not parse: {e}")))?;
    Ok(Check {
        deployment: r.try_get("deployment")?,
        check: r.try_get("check_no")?,
        window_start: format_micros(r.try_get("window_start")?),
        window_end: format_micros(r.try_get("window_end")?),
        rows: u64::try_from(r.try_get::<i64, _>("rows_seen")?).unwrap_or(0),
        status: r
            .try_get::<String, _>("status")?
            .parse()
            .map_err(|e| Error::Internal(format!("a stored check: {e}")))?,
        versions,
        report: r.try_get::<Option<String>, _>("report_key")?.is_some(),
        created_at: format_micros(r.try_get("created_at")?),
    })
}

pub(crate) fn alert_from(r: &sqlx::any::AnyRow) -> Result<Alert> {
    let detail: String = r.try_get("detail")?;
    let mut a: Alert = serde_json::from_str(&detail)
        .map_err(|e| Error::Internal(format!("a stored alert does not parse: {e}")))?;
    a.state = r.try_get("state")?;
    Ok(a)
}

/// Where a check's HTML report is stored.
pub(crate) fn report_key(project_id: &str, deployment: &str, check: i64) -> String {
    let unique = &uuid::Uuid::new_v4().simple().to_string()[..8];
    format!("projects/{project_id}/monitor/{deployment}/checks/{check:08}-{unique}.html")
}

impl Monitors {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        meta: MetaStore,
        storage: ObjectStorage,
        gov: Governance,
        tracking: qanat_tracking::Tracking,
        serving: qanat_serving::Serving,
        jobs: qanat_jobs::Jobs,
        outbox: qanat_events::Outbox,
        datasets: qanat_data::Datasets,
    ) -> Self {
        Monitors {
            inner: Arc::new(Inner {
                meta,
                storage,
                gov,
                tracking,
                serving,
                jobs,
                outbox,
                references: Mutex::new(HashMap::new()),
                datasets,
                holder: format!("watcher-{}", uuid::Uuid::new_v4().simple()),
                leases: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Creates the monitor of `deployment`, or replaces its spec (its windows go on
    /// from where they were).
    #[qanat_macros::boxed]
    pub async fn put(
        &self,
        project: &Project,
        deployment: &str,
        spec: MonitorSpec,
        by: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<Monitor> {
        spec.check().map_err(Error::Invalid)?;
        self.inner
            .serving
            .deployments()
            .get(project, deployment)
            .await?;
        let now = now_micros();
        let spec_json = to_json(&spec)?;
        let mut tx = self.inner.meta.writer().begin().await?;
        sqlx::query(
            "INSERT INTO monitors (project_id, deployment, spec, next_start, checks, created_at, created_by, updated_at, updated_by) \
             VALUES ($1, $2, $3, $4, 0, $4, $5, $4, $5) \
             ON CONFLICT (project_id, deployment) DO UPDATE SET spec = excluded.spec, updated_at = excluded.updated_at, updated_by = excluded.updated_by",
        )
        .bind(project.id.as_str())
        .bind(deployment)
        .bind(&spec_json)
        .bind(now)
        .bind(by)
        .execute(&mut *tx)
        .await?;
        commit_audited(tx, audit).await?;
        self.get(project, deployment).await
    }

    #[qanat_macros::boxed]
    pub async fn get(&self, project: &Project, deployment: &str) -> Result<Monitor> {
        let r = sqlx::query("SELECT * FROM monitors WHERE project_id = $1 AND deployment = $2")
            .bind(project.id.as_str())
            .bind(deployment)
            .fetch_optional(self.inner.meta.reader())
            .await?
            .ok_or_else(|| qanat_core::Refusal::not_found("monitor", deployment))?;
        monitor_from(&r, &project.name)
    }

    #[qanat_macros::boxed]
    pub async fn list(&self, project: &Project) -> Result<Vec<Monitor>> {
        let rows = sqlx::query("SELECT * FROM monitors WHERE project_id = $1 ORDER BY deployment")
            .bind(project.id.as_str())
            .fetch_all(self.inner.meta.reader())
            .await?;
        rows.iter()
            .map(|r| monitor_from(r, &project.name))
            .collect()
    }

    /// Deletes the monitor, its checks, alerts and labels (their reports stay in
    /// storage until the project is purged; the audit chain keeps what happened).
    #[qanat_macros::boxed]
    pub async fn delete(
        &self,
        project: &Project,
        deployment: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<()> {
        let mut tx = self.inner.meta.writer().begin().await?;
        for table in ["monitor_alerts", "monitor_checks", "monitor_labels"] {
            sqlx::query(&format!(
                "DELETE FROM {table} WHERE project_id = $1 AND deployment = $2"
            ))
            .bind(project.id.as_str())
            .bind(deployment)
            .execute(&mut *tx)
            .await?;
        }
        let gone = sqlx::query("DELETE FROM monitors WHERE project_id = $1 AND deployment = $2")
            .bind(project.id.as_str())
            .bind(deployment)
            .execute(&mut *tx)
            .await?;
        if gone.rows_affected() != 1 {
            return Err(qanat_core::Refusal::not_found("monitor", deployment).into());
        }
        commit_audited(tx, audit).await?;
        Ok(())
    }

    /// The newest `limit` checks, newest first.
    #[qanat_macros::boxed]
    pub async fn checks(
        &self,
        project: &Project,
        deployment: &str,
        limit: i64,
    ) -> Result<Vec<Check>> {
        self.get(project, deployment).await?;
        let rows = sqlx::query(
            "SELECT * FROM monitor_checks WHERE project_id = $1 AND deployment = $2 ORDER BY check_no DESC LIMIT $3",
        )
        .bind(project.id.as_str())
        .bind(deployment)
        .bind(limit)
        .fetch_all(self.inner.meta.reader())
        .await?;
        rows.iter().map(check_from).collect()
    }

    /// Check number `check`, or the newest with `None`.
    #[qanat_macros::boxed]
    pub async fn check(
        &self,
        project: &Project,
        deployment: &str,
        check: Option<i64>,
    ) -> Result<Check> {
        let r = self.check_row(project, deployment, check).await?;
        check_from(&r)
    }

    async fn check_row(
        &self,
        project: &Project,
        deployment: &str,
        check: Option<i64>,
    ) -> Result<sqlx::any::AnyRow> {
        self.get(project, deployment).await?;
        let q = match check {
            Some(_) => "SELECT * FROM monitor_checks WHERE project_id = $1 AND deployment = $2 AND check_no = $3",
            None => "SELECT * FROM monitor_checks WHERE project_id = $1 AND deployment = $2 AND check_no > $3 ORDER BY check_no DESC LIMIT 1",
        };
        sqlx::query(q)
            .bind(project.id.as_str())
            .bind(deployment)
            .bind(check.unwrap_or(0))
            .fetch_optional(self.inner.meta.reader())
            .await?
            .ok_or_else(|| match check {
                Some(n) => qanat_core::Refusal::not_found("check", format!("{deployment}#{n}")),
                None => qanat_core::Refusal::not_found(
                    "check",
                    format!("{deployment} (no window has been checked yet)"),
                ),
            })
            .map_err(Error::from)
    }

    /// The HTML report of check `check` (the newest with `None`), with its number.
    #[qanat_macros::boxed]
    pub async fn report(
        &self,
        project: &Project,
        deployment: &str,
        check: Option<i64>,
    ) -> Result<(i64, bytes::Bytes)> {
        let r = self.check_row(project, deployment, check).await?;
        let n: i64 = r.try_get("check_no")?;
        let Some(key) = r.try_get::<Option<String>, _>("report_key")? else {
            let status: String = r.try_get("status")?;
            return Err(qanat_core::Refusal::not_found(
                "report",
                format!("{deployment}#{n} (the window was not tested: {status})"),
            )
            .into());
        };
        let key: ObjectKey = key.parse()?;
        let location = self.inner.storage.default_location().to_string();
        Ok((n, self.inner.storage.get_bytes(&location, &key).await?))
    }

    /// The newest `limit` alerts, newest first.
    #[qanat_macros::boxed]
    pub async fn alerts(
        &self,
        project: &Project,
        deployment: &str,
        limit: i64,
    ) -> Result<Vec<Alert>> {
        self.get(project, deployment).await?;
        let rows = sqlx::query(
            "SELECT * FROM monitor_alerts WHERE project_id = $1 AND deployment = $2 ORDER BY alert_no DESC LIMIT $3",
        )
        .bind(project.id.as_str())
        .bind(deployment)
        .bind(limit)
        .fetch_all(self.inner.meta.reader())
        .await?;
        rows.iter().map(alert_from).collect()
    }

    /// The monitor, its newest checks and alerts, and how its labels matched.
    #[qanat_macros::boxed]
    pub async fn status(&self, project: &Project, deployment: &str) -> Result<MonitorStatus> {
        let monitor = self.get(project, deployment).await?;
        let checks = self.checks(project, deployment, 10).await?;
        let alerts = self.alerts(project, deployment, 10).await?;
        let labels = self.label_summary(project, deployment).await?;
        Ok(MonitorStatus {
            monitor,
            checks,
            alerts,
            labels,
        })
    }

    async fn label_summary(&self, project: &Project, deployment: &str) -> Result<LabelSummary> {
        let reader = self.inner.meta.reader();
        // Labels posted before the newest window that ended, looked for in every
        // window since: those still unmatched name no logged request.
        let r = sqlx::query(
            "SELECT COALESCE(MAX(window_end), 0) AS ended FROM monitor_checks WHERE project_id = $1 AND deployment = $2",
        )
        .bind(project.id.as_str())
        .bind(deployment)
        .fetch_one(reader)
        .await?;
        let ended: i64 = r.try_get("ended")?;
        let r = sqlx::query(
            "SELECT COUNT(*) AS posted, \
             COALESCE(SUM(CASE WHEN check_no IS NOT NULL THEN 1 ELSE 0 END), 0) AS matched, \
             COALESCE(SUM(CASE WHEN check_no IS NULL AND created_at < $3 THEN 1 ELSE 0 END), 0) AS unmatched \
             FROM monitor_labels WHERE project_id = $1 AND deployment = $2",
        )
        .bind(project.id.as_str())
        .bind(deployment)
        .bind(ended)
        .fetch_one(reader)
        .await?;
        let n =
            |c: &str| -> Result<u64> { Ok(u64::try_from(r.try_get::<i64, _>(c)?).unwrap_or(0)) };
        let (posted, matched, unmatched) = (n("posted")?, n("matched")?, n("unmatched")?);
        let examples = if unmatched > 0 {
            sqlx::query(
                "SELECT request_id FROM monitor_labels WHERE project_id = $1 AND deployment = $2 \
                 AND check_no IS NULL AND created_at < $3 ORDER BY created_at LIMIT 5",
            )
            .bind(project.id.as_str())
            .bind(deployment)
            .bind(ended)
            .fetch_all(reader)
            .await?
            .iter()
            .map(|r| r.try_get("request_id"))
            .collect::<Result<Vec<String>, _>>()?
        } else {
            Vec::new()
        };
        Ok(LabelSummary {
            posted,
            matched,
            unmatched,
            unmatched_examples: examples,
            pending: posted - matched - unmatched,
        })
    }

    /// Stores the ground truth of past requests of `deployment`. A label for an id
    /// already labelled replaces it (and is matched again).
    #[qanat_macros::boxed]
    pub async fn post_labels(
        &self,
        project: &Project,
        deployment: &str,
        labels: wire::Labels,
        by: &str,
        audit: Option<&AuditRecord>,
    ) -> Result<wire::LabelsStored> {
        self.inner
            .serving
            .deployments()
            .get(project, deployment)
            .await?;
        if labels.labels.is_empty() {
            return Err(Error::Invalid(
                "labels is empty: give [{\"id\": \"<request id>\", \"value\": <the true value>}, ...]".into(),
            ));
        }
        if labels.labels.len() > MAX_LABELS {
            return Err(Error::Invalid(format!(
                "{} labels in one post: send at most {MAX_LABELS} at a time",
                labels.labels.len()
            )));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, l) in labels.labels.iter().enumerate() {
            if l.id.is_empty() || l.id.len() > 256 {
                return Err(Error::Invalid(format!(
                    "labels[{i}].id is empty or longer than 256 characters: give the request's x-request-id or its own id"
                )));
            }
            if !seen.insert(l.id.as_str()) {
                return Err(Error::Invalid(format!(
                    "labels[{i}]: id '{}' is given twice in this post",
                    l.id
                )));
            }
            let ok = match &l.value {
                serde_json::Value::Array(v) => v.iter().all(|x| !x.is_object() && !x.is_array()),
                serde_json::Value::Object(_) | serde_json::Value::Null => false,
                _ => true,
            };
            if !ok {
                return Err(Error::Invalid(format!(
                    "labels[{i}].value for '{}' is not a class, a number or a list of them (one per row of the request)",
                    l.id
                )));
            }
        }
        let now = now_micros();
        let mut stored = 0u64;
        let mut replaced = 0u64;
        let mut tx = self.inner.meta.writer().begin().await?;
        for l in &labels.labels {
            let value = l.value.to_string();
            let n = sqlx::query(
                "INSERT INTO monitor_labels (project_id, deployment, request_id, label, check_no, created_at, created_by) \
                 VALUES ($1, $2, $3, $4, NULL, $5, $6) ON CONFLICT (project_id, deployment, request_id) DO NOTHING",
            )
            .bind(project.id.as_str())
            .bind(deployment)
            .bind(&l.id)
            .bind(&value)
            .bind(now)
            .bind(by)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n == 1 {
                stored += 1;
                continue;
            }
            sqlx::query(
                "UPDATE monitor_labels SET label = $1, check_no = NULL, created_at = $2, created_by = $3 \
                 WHERE project_id = $4 AND deployment = $5 AND request_id = $6",
            )
            .bind(&value)
            .bind(now)
            .bind(by)
            .bind(project.id.as_str())
            .bind(deployment)
            .bind(&l.id)
            .execute(&mut *tx)
            .await?;
            replaced += 1;
        }
        if let Some(rec) = audit {
            let mut rec = rec.clone();
            rec.detail = format!(
                "{} labels ({stored} new, {replaced} replaced)",
                stored + replaced
            );
            append_audit_in(&mut tx, &rec).await?;
        }
        tx.commit().await?;
        Ok(wire::LabelsStored { stored, replaced })
    }

    /// What `/metrics` shows: each monitor's newest check, and its checks and alerts
    /// counted by status and state, across live projects.
    #[qanat_macros::boxed]
    pub async fn snapshot(&self) -> Result<wire::Snapshot> {
        let reader = self.inner.meta.reader();
        let latest = sqlx::query(
            "SELECT c.*, p.name AS project_name FROM monitor_checks c \
             JOIN monitors m ON m.project_id = c.project_id AND m.deployment = c.deployment AND m.checks = c.check_no \
             JOIN projects p ON p.id = c.project_id WHERE p.deleted_at IS NULL",
        )
        .fetch_all(reader)
        .await?
        .iter()
        .map(|r| Ok((r.try_get::<String, _>("project_name")?, check_from(r)?)))
        .collect::<Result<Vec<_>>>()?;
        let counted = |sql: &'static str| async move {
            sqlx::query(sql)
                .fetch_all(reader)
                .await?
                .iter()
                .map(|r| {
                    Ok((
                        r.try_get::<String, _>("project_name")?,
                        r.try_get::<String, _>("deployment")?,
                        r.try_get::<String, _>("word")?,
                        r.try_get::<i64, _>("n")?,
                    ))
                })
                .collect::<Result<Vec<_>>>()
        };
        let checks = counted(
            "SELECT p.name AS project_name, c.deployment, c.status AS word, COUNT(*) AS n FROM monitor_checks c \
             JOIN projects p ON p.id = c.project_id WHERE p.deleted_at IS NULL GROUP BY p.name, c.deployment, c.status",
        )
        .await?;
        let alerts = counted(
            "SELECT p.name AS project_name, a.deployment, a.state AS word, COUNT(*) AS n FROM monitor_alerts a \
             JOIN projects p ON p.id = a.project_id WHERE p.deleted_at IS NULL GROUP BY p.name, a.deployment, a.state",
        )
        .await?;
        Ok(wire::Snapshot {
            latest,
            checks,
            alerts,
        })
    }
}
