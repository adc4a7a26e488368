//! The outbox: one row per delivery to make, written in the transaction of the change
//! it reports, plus one row per attempt (the delivery history).
//!
//! Invariant: a delivery is `pending` until an attempt succeeds (`delivered`) or the
//! last allowed attempt fails, or its webhook goes (`failed`). A dispatcher claims a
//! due row by setting `lease_until` in a conditional UPDATE, so two servers on one
//! PostgreSQL never send the same attempt; a dispatcher that dies mid-attempt leaves
//! a lease that expires, and the row is sent again (at least once: receivers drop
//! duplicates by `X-MLflow-Delivery-Id`).

use std::sync::Arc;

use qanat_core::ProjectId;
use serde_json::{json, Value};
use sqlx::Row;
use tokio::sync::Notify;

use crate::{now_ms, Error, EventType, Events, Result};
use crate::{Attempt, Delivery};

/// What a domain records events with, inside its own transaction.
#[derive(Clone, Debug)]
pub struct Outbox {
    nats: bool,
    wake: Arc<Notify>,
}

impl Default for Outbox {
    /// An outbox for webhooks only, whose dispatcher (if any) polls.
    fn default() -> Self {
        Outbox::new(false, Arc::new(Notify::new()))
    }
}

/// The JSON body every delivery of an event carries (MLflow's shape; `workspace`
/// names the project, as MLflow names its workspace).
pub(crate) fn envelope(event: EventType, workspace: &str, data: Value) -> String {
    json!({
        "entity": event.entity().as_str(),
        "action": event.action().as_str(),
        "timestamp": chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        "data": data,
        "workspace": workspace,
    })
    .to_string()
}

impl Outbox {
    pub(crate) fn new(nats: bool, wake: Arc<Notify>) -> Self {
        Outbox { nats, wake }
    }

    /// Queues the deliveries of `event` in project `project` (named `workspace` in
    /// the payload): one per active webhook subscribed to it, and one for NATS when
    /// configured. Call inside the change's transaction, then [`Outbox::wake`] after
    /// it commits. Returns how many were queued.
    #[qanat_macros::boxed]
    pub async fn record(
        &self,
        conn: &mut sqlx::AnyConnection,
        project: &ProjectId,
        workspace: &str,
        event: EventType,
        data: Value,
    ) -> Result<usize> {
        let hooks: Vec<String> = sqlx::query(
            "SELECT w.webhook_id FROM webhooks w JOIN webhook_events e ON e.webhook_id = w.webhook_id \
             WHERE w.project_id = $1 AND w.deleted_at IS NULL AND w.status = 'ACTIVE' AND e.event = $2 \
             ORDER BY w.created_at",
        )
        .bind(project.as_str())
        .bind(event.to_string())
        .fetch_all(&mut *conn)
        .await?
        .iter()
        .map(|r| r.try_get("webhook_id"))
        .collect::<Result<_, _>>()?;
        if hooks.is_empty() && !self.nats {
            return Ok(0);
        }
        let body = envelope(event, workspace, data);
        let now = now_ms();
        let targets = hooks
            .into_iter()
            .map(|h| ("webhook", Some(h)))
            .chain(self.nats.then_some(("nats", None)));
        let mut n = 0;
        for (target, webhook) in targets {
            sqlx::query(
                "INSERT INTO event_deliveries (delivery_id, project_id, target, webhook_id, event, body, status, attempts, next_attempt_at, created_at) \
                 VALUES ($1, $2, $3, $4, $5, $6, 'pending', 0, $7, $7)",
            )
            .bind(uuid::Uuid::new_v4().to_string())
            .bind(project.as_str())
            .bind(target)
            .bind(webhook)
            .bind(event.to_string())
            .bind(&body)
            .bind(now)
            .execute(&mut *conn)
            .await?;
            n += 1;
        }
        Ok(n)
    }

    /// Tells the dispatcher that deliveries were queued (after the commit).
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    pub(crate) fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.wake.notified()
    }
}

/// A claimed delivery, ready to send.
pub(crate) struct Due {
    pub id: String,
    pub project_id: String,
    pub target: String,
    pub webhook_id: Option<String>,
    pub event: String,
    pub body: String,
    /// This attempt's number (1 for the first).
    pub attempt: i64,
}

/// How an attempt ended.
pub(crate) enum Outcome {
    Delivered(Option<i64>),
    /// Worth another try (timeouts, refused connections, 408, 429, 5xx).
    Retry(Option<i64>, String),
    /// Not worth another (other 4xx, a URL refused by policy, a deleted webhook).
    Fail(Option<i64>, String),
}

const DELIVERY_COLUMNS: &str = "delivery_id, target, webhook_id, event, status, attempts, response_status, last_error, created_at, next_attempt_at, finished_at";

impl Events {
    /// The deliveries of a project, newest first: all, or one webhook's.
    #[qanat_macros::boxed]
    pub async fn deliveries(
        &self,
        project: &ProjectId,
        webhook_id: Option<&str>,
        limit: i64,
    ) -> Result<Vec<Delivery>> {
        if let Some(id) = webhook_id {
            self.webhook(project, id).await?;
        }
        let rows = sqlx::query(&format!(
            "SELECT {DELIVERY_COLUMNS} FROM event_deliveries WHERE project_id = $1 AND ($2 = '' OR webhook_id = $2) \
             ORDER BY created_at DESC, delivery_id DESC LIMIT $3"
        ))
        .bind(project.as_str())
        .bind(webhook_id.unwrap_or(""))
        .bind(limit.clamp(1, 1000))
        .fetch_all(self.meta.reader())
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let status: String = r.try_get("status")?;
            let id: String = r.try_get("delivery_id")?;
            let attempt_log = sqlx::query(
                "SELECT attempt, at, duration_ms, response_status, error FROM event_delivery_attempts WHERE delivery_id = $1 ORDER BY attempt",
            )
            .bind(&id)
            .fetch_all(self.meta.reader())
            .await?
            .iter()
            .map(|a| {
                Ok(Attempt {
                    attempt: a.try_get("attempt")?,
                    at: a.try_get("at")?,
                    duration_ms: a.try_get("duration_ms")?,
                    response_status: a.try_get("response_status")?,
                    error: a.try_get("error")?,
                })
            })
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
            out.push(Delivery {
                delivery_id: id,
                target: r.try_get("target")?,
                webhook_id: r.try_get("webhook_id")?,
                event: r.try_get("event")?,
                next_attempt_at: if status == "pending" {
                    Some(r.try_get("next_attempt_at")?)
                } else {
                    None
                },
                status,
                attempts: r.try_get("attempts")?,
                response_status: r.try_get("response_status")?,
                last_error: r.try_get("last_error")?,
                created_at: r.try_get("created_at")?,
                finished_at: r.try_get("finished_at")?,
                attempt_log,
            });
        }
        Ok(out)
    }

    /// Claims up to `n` due deliveries for `lease_ms`.
    pub(crate) async fn claim_due(&self, n: usize, lease_ms: i64) -> Result<Vec<Due>> {
        let now = now_ms();
        let ids: Vec<String> = sqlx::query(
            "SELECT delivery_id FROM event_deliveries WHERE status = 'pending' AND next_attempt_at <= $1 \
             AND (lease_until IS NULL OR lease_until < $1) ORDER BY next_attempt_at LIMIT $2",
        )
        .bind(now)
        .bind(n as i64)
        .fetch_all(self.meta.reader())
        .await?
        .iter()
        .map(|r| r.try_get("delivery_id"))
        .collect::<Result<_, _>>()?;
        let mut out = Vec::new();
        for id in ids {
            let claimed = sqlx::query(
                "UPDATE event_deliveries SET lease_until = $1, attempts = attempts + 1 \
                 WHERE delivery_id = $2 AND status = 'pending' AND (lease_until IS NULL OR lease_until < $3)",
            )
            .bind(now + lease_ms)
            .bind(&id)
            .bind(now)
            .execute(self.meta.writer())
            .await?
            .rows_affected();
            if claimed != 1 {
                continue; // another dispatcher took it
            }
            let r = sqlx::query(
                "SELECT delivery_id, project_id, target, webhook_id, event, body, attempts FROM event_deliveries WHERE delivery_id = $1",
            )
            .bind(&id)
            .fetch_one(self.meta.writer())
            .await?;
            out.push(Due {
                id,
                project_id: r.try_get("project_id")?,
                target: r.try_get("target")?,
                webhook_id: r.try_get("webhook_id")?,
                event: r.try_get("event")?,
                body: r.try_get("body")?,
                attempt: r.try_get("attempts")?,
            });
        }
        Ok(out)
    }

    /// Records an attempt and moves the delivery on: delivered, retried later, or
    /// failed for good.
    pub(crate) async fn finish_attempt(
        &self,
        due: &Due,
        started: i64,
        outcome: Outcome,
    ) -> Result<()> {
        let now = now_ms();
        let (status, code, error, next) = match outcome {
            Outcome::Delivered(code) => ("delivered", code, None, None),
            Outcome::Retry(code, e) if (due.attempt as u32) < self.settings.max_attempts => {
                let wait = backoff_ms(self.settings.retry_base.as_millis() as i64, due.attempt);
                ("pending", code, Some(e), Some(now + wait))
            }
            Outcome::Retry(code, e) | Outcome::Fail(code, e) => ("failed", code, Some(e), None),
        };
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query(
            "INSERT INTO event_delivery_attempts (delivery_id, attempt, at, duration_ms, response_status, error) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(&due.id)
        .bind(due.attempt)
        .bind(started)
        .bind((now - started).max(0))
        .bind(code)
        .bind(error.clone())
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE event_deliveries SET status = $1, response_status = $2, last_error = $3, lease_until = NULL, \
             next_attempt_at = COALESCE($4, next_attempt_at), finished_at = $5 WHERE delivery_id = $6 AND status = 'pending'",
        )
        .bind(status)
        .bind(code)
        .bind(error)
        .bind(next)
        .bind((status != "pending").then_some(now))
        .bind(&due.id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        Ok(())
    }

    /// Forgets what is older than `before_ms` (epoch ms) in a project: finished
    /// deliveries (delivered or failed) with their attempts, and deleted webhooks with
    /// their event lists. Pending deliveries always stay. Returns how many deliveries
    /// went. `gc` calls it with the retention period's cutoff.
    #[qanat_macros::boxed]
    pub async fn purge_history(&self, project: &ProjectId, before_ms: i64) -> Result<u64> {
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query(
            "DELETE FROM event_delivery_attempts WHERE delivery_id IN (SELECT delivery_id FROM event_deliveries \
             WHERE project_id = $1 AND status <> 'pending' AND finished_at < $2)",
        )
        .bind(project.as_str())
        .bind(before_ms)
        .execute(&mut *tx)
        .await?;
        let gone = sqlx::query(
            "DELETE FROM event_deliveries WHERE project_id = $1 AND status <> 'pending' AND finished_at < $2",
        )
        .bind(project.as_str())
        .bind(before_ms)
        .execute(&mut *tx)
        .await?
        .rows_affected();
        // A deleted webhook goes once no delivery names it any more.
        let dead = "SELECT w.webhook_id FROM webhooks w WHERE w.project_id = $1 AND w.deleted_at < $2 \
                    AND NOT EXISTS (SELECT 1 FROM event_deliveries d WHERE d.webhook_id = w.webhook_id)";
        // Its event list first: the list names it.
        for table in ["webhook_events", "webhooks"] {
            sqlx::query(&format!("DELETE FROM {table} WHERE webhook_id IN ({dead})"))
                .bind(project.as_str())
                .bind(before_ms)
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(gone)
    }

    /// The project's name (NATS subjects and payloads name projects by name).
    pub(crate) async fn project_name(&self, project_id: &str) -> Result<String> {
        sqlx::query("SELECT name FROM projects WHERE id = $1")
            .bind(project_id)
            .fetch_optional(self.meta.reader())
            .await?
            .map(|r| r.try_get("name"))
            .transpose()?
            .ok_or_else(|| Error::not_found("project", project_id))
    }
}

/// The wait before attempt `attempt + 1`: `base · 2^(attempt-1)`, capped at a minute,
/// plus up to a fifth more at random so retries of many deliveries spread out.
fn backoff_ms(base: i64, attempt: i64) -> i64 {
    let exp = base.saturating_mul(1i64 << (attempt - 1).clamp(0, 16));
    let wait = exp.min(60_000);
    wait + rand::random::<u64>()
        .checked_rem((wait / 5).max(1) as u64)
        .unwrap_or(0) as i64
}

#[cfg(test)]
mod tests {
    #[test]
    fn backoff_doubles_and_is_capped() {
        for (attempt, low) in [(1, 1000), (2, 2000), (3, 4000), (4, 8000), (10, 60_000)] {
            let w = super::backoff_ms(1000, attempt);
            assert!(w >= low && w <= low + low / 5, "attempt {attempt}: {w}");
        }
    }
}
