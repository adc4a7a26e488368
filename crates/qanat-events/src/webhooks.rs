//! Webhooks: per project, subscribed to events, with an optional signing secret
//! (sealed at rest, never returned). The rules and wording are MLflow's, whose clients
//! create and manage them.

use base64::Engine as _;
use qanat_core::ProjectId;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::Row;

use crate::{now_ms, Error, EventType, Events, Result};
use crate::{Webhook, WebhookStatus};

const SECRET_PURPOSE: &str = "webhook-secret";

/// A webhook to create.
#[derive(Debug, Clone)]
pub struct NewWebhook {
    pub name: String,
    pub url: String,
    pub events: Vec<EventType>,
    pub description: Option<String>,
    pub secret: Option<String>,
    pub status: Option<WebhookStatus>,
    /// Who creates it.
    pub creator: String,
}

/// Changes to a webhook: `None` keeps a field.
#[derive(Debug, Clone, Default)]
pub struct WebhookUpdate {
    pub name: Option<String>,
    pub url: Option<String>,
    pub events: Option<Vec<EventType>>,
    pub description: Option<String>,
    pub secret: Option<String>,
    pub status: Option<WebhookStatus>,
}

/// One page of webhooks, newest first.
#[derive(Debug, Clone)]
pub struct WebhookPage {
    pub webhooks: Vec<Webhook>,
    pub next_page_token: Option<String>,
}

/// What a test delivery got back (MLflow's `WebhookTestResult`).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TestResult {
    pub success: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_body: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_message: Option<String>,
}

/// MLflow's name rule: 1 to 63 letters, digits, `.`, `_`, `-`, starting and ending
/// with a letter or digit.
fn check_name(name: &str) -> Result<()> {
    let b = name.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-');
    let ok = !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter().all(inner);
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "Webhook name '{name}' is invalid. It must start and end with a letter or digit, be less than 63 characters long, and contain only letters, digits, dots (.), underscores (_), and hyphens (-)."
        )))
    }
}

/// The URL's syntax and scheme (its address is checked when a delivery resolves it).
pub(crate) fn check_url(url: &str, allowed_schemes: &[String]) -> Result<url::Url> {
    if url.trim().is_empty() {
        return Err(Error::invalid(format!(
            "Webhook URL cannot be empty or just whitespace: '{url}'"
        )));
    }
    let parsed = url::Url::parse(url)
        .map_err(|e| Error::invalid(format!("Invalid webhook URL '{url}': {e}")))?;
    if !allowed_schemes.iter().any(|s| s == parsed.scheme()) {
        return Err(Error::invalid(format!(
            "Invalid webhook URL scheme: '{}'. Allowed schemes are: {}.",
            parsed.scheme(),
            allowed_schemes.join(", ")
        )));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(Error::invalid(format!(
            "Webhook URL must include a hostname: '{url}'"
        )));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Error::invalid(
            "Webhook URL must not carry credentials: use the webhook's secret to authenticate deliveries",
        ));
    }
    Ok(parsed)
}

fn check_events(events: &[EventType]) -> Result<()> {
    if events.is_empty() {
        return Err(Error::invalid(
            "Webhook events must be a non-empty list of WebhookEvent objects: [].",
        ));
    }
    Ok(())
}

const COLUMNS: &str = "webhook_id, name, description, url, secret, status, created_at, updated_at";

impl Events {
    #[qanat_macros::boxed]
    pub async fn create_webhook(&self, project: &ProjectId, new: NewWebhook) -> Result<Webhook> {
        check_name(&new.name)?;
        check_url(&new.url, &self.settings.allowed_schemes)?;
        check_events(&new.events)?;
        let secret = match new.secret.as_deref().filter(|s| !s.is_empty()) {
            Some(s) => Some(
                self.keyring
                    .seal(&self.meta, SECRET_PURPOSE, s.as_bytes())
                    .await?,
            ),
            None => None,
        };
        let id = uuid::Uuid::new_v4().to_string();
        let now = now_ms();
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query(
            "INSERT INTO webhooks (webhook_id, project_id, name, description, url, secret, status, created_at, updated_at, created_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $8, $9)",
        )
        .bind(&id)
        .bind(project.as_str())
        .bind(&new.name)
        .bind(new.description.filter(|d| !d.is_empty()))
        .bind(&new.url)
        .bind(secret)
        .bind(new.status.unwrap_or(WebhookStatus::Active).as_str())
        .bind(now)
        .bind(&new.creator)
        .execute(&mut *tx)
        .await?;
        insert_events(&mut tx, &id, &new.events).await?;
        tx.commit().await?;
        self.webhook(project, &id).await
    }

    /// A webhook of this project ("Webhook with ID … not found." otherwise).
    #[qanat_macros::boxed]
    pub async fn webhook(&self, project: &ProjectId, id: &str) -> Result<Webhook> {
        let row = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM webhooks WHERE project_id = $1 AND webhook_id = $2 AND deleted_at IS NULL"
        ))
        .bind(project.as_str())
        .bind(id)
        .fetch_optional(self.meta.reader())
        .await?
        .ok_or_else(|| Error::not_found("webhook", id))?;
        let mut w = webhook_from(&row)?;
        w.events = self
            .event_lists(&[id.to_string()])
            .await?
            .pop()
            .unwrap_or_default();
        Ok(w)
    }

    /// The project's webhooks, newest first, `max_results` (1 to 1000) per page.
    #[qanat_macros::boxed]
    pub async fn list_webhooks(
        &self,
        project: &ProjectId,
        max_results: Option<i64>,
        page_token: Option<&str>,
    ) -> Result<WebhookPage> {
        let max = max_results.unwrap_or(100);
        if !(1..=1000).contains(&max) {
            return Err(Error::invalid("max_results must be between 1 and 1000."));
        }
        // Keyset paging on (created_at, webhook_id), newest first.
        let after = match page_token.filter(|t| !t.is_empty()) {
            Some(t) => Some(decode_token(t)?),
            None => None,
        };
        let (at, id) = after.unwrap_or((i64::MAX, String::new()));
        let rows = sqlx::query(&format!(
            "SELECT {COLUMNS} FROM webhooks WHERE project_id = $1 AND deleted_at IS NULL \
             AND (created_at < $2 OR (created_at = $2 AND webhook_id < $3) OR $4 = 0) \
             ORDER BY created_at DESC, webhook_id DESC LIMIT $5"
        ))
        .bind(project.as_str())
        .bind(at)
        .bind(&id)
        .bind(i64::from(page_token.is_some_and(|t| !t.is_empty())))
        .bind(max + 1)
        .fetch_all(self.meta.reader())
        .await?;
        let mut webhooks = rows.iter().map(webhook_from).collect::<Result<Vec<_>>>()?;
        let next_page_token = if webhooks.len() as i64 > max {
            webhooks.truncate(max as usize);
            webhooks
                .last()
                .map(|w| encode_token(w.creation_timestamp, &w.webhook_id))
        } else {
            None
        };
        let ids: Vec<String> = webhooks.iter().map(|w| w.webhook_id.clone()).collect();
        for (w, events) in webhooks.iter_mut().zip(self.event_lists(&ids).await?) {
            w.events = events;
        }
        Ok(WebhookPage {
            webhooks,
            next_page_token,
        })
    }

    #[qanat_macros::boxed]
    pub async fn update_webhook(
        &self,
        project: &ProjectId,
        id: &str,
        update: WebhookUpdate,
    ) -> Result<Webhook> {
        let before = self.webhook(project, id).await?;
        if let Some(n) = &update.name {
            check_name(n)?;
        }
        if let Some(u) = &update.url {
            check_url(u, &self.settings.allowed_schemes)?;
        }
        if let Some(e) = &update.events {
            check_events(e)?;
        }
        let old_secret = self.sealed_secret(id).await?;
        let new_secret = match update.secret.as_deref() {
            Some(s) if !s.is_empty() => Some(
                self.keyring
                    .seal(&self.meta, SECRET_PURPOSE, s.as_bytes())
                    .await?,
            ),
            _ => None,
        };
        // Strictly later than the last change, even within one millisecond.
        let now = now_ms().max(before.last_updated_timestamp + 1);
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query(
            "UPDATE webhooks SET name = COALESCE($1, name), url = COALESCE($2, url), \
             description = COALESCE($3, description), secret = COALESCE($4, secret), \
             status = COALESCE($5, status), updated_at = $6 WHERE webhook_id = $7",
        )
        .bind(update.name)
        .bind(update.url)
        .bind(update.description)
        .bind(new_secret.clone())
        .bind(update.status.map(|s| s.as_str()))
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        if let Some(events) = &update.events {
            sqlx::query("DELETE FROM webhook_events WHERE webhook_id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            insert_events(&mut tx, id, events).await?;
        }
        tx.commit().await?;
        if let (Some(_), Some(old)) = (new_secret, old_secret) {
            // The replaced secret's key goes: no copy of the old row opens any more.
            self.keyring.forget(&self.meta, &old).await?;
        }
        self.webhook(project, id).await
    }

    /// Deletes a webhook; its queued deliveries are dropped (marked failed).
    #[qanat_macros::boxed]
    pub async fn delete_webhook(&self, project: &ProjectId, id: &str) -> Result<()> {
        self.webhook(project, id).await?;
        let secret = self.sealed_secret(id).await?;
        let now = now_ms();
        let mut tx = self.meta.writer().begin().await?;
        sqlx::query(
            "UPDATE webhooks SET deleted_at = $1, updated_at = $1, secret = NULL WHERE webhook_id = $2",
        )
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        sqlx::query(
            "UPDATE event_deliveries SET status = 'failed', last_error = 'the webhook was deleted', finished_at = $1, lease_until = NULL \
             WHERE webhook_id = $2 AND status = 'pending'",
        )
        .bind(now)
        .bind(id)
        .execute(&mut *tx)
        .await?;
        tx.commit().await?;
        if let Some(s) = secret {
            self.keyring.forget(&self.meta, &s).await?;
        }
        Ok(())
    }

    /// Sends an example of `event` (default: the webhook's first) now, signed as a
    /// real delivery, and says what came back. Nothing is queued or retried.
    #[qanat_macros::boxed]
    pub async fn test_webhook(
        &self,
        project: &ProjectId,
        workspace: &str,
        id: &str,
        event: Option<EventType>,
    ) -> Result<TestResult> {
        let hook = self.webhook(project, id).await?;
        let event = match event {
            Some(e) => e,
            None => hook
                .events
                .first()
                .map(EventType::from_mlflow)
                .transpose()?
                .ok_or_else(|| Error::invalid("the webhook subscribes to no event"))?,
        };
        let body = crate::outbox::envelope(event, workspace, event.example());
        let delivery_id = uuid::Uuid::new_v4().to_string();
        let secret = self.secret_of(id).await?;
        Ok(
            match crate::dispatch::post(self, &hook.url, &delivery_id, &body, secret.as_deref())
                .await
            {
                Ok((status, text)) => TestResult {
                    success: (200..300).contains(&status),
                    response_status: Some(i64::from(status)),
                    response_body: Some(text),
                    error_message: None,
                },
                Err(e) => TestResult {
                    success: false,
                    response_status: None,
                    response_body: None,
                    error_message: Some(format!("Failed to test webhook: {e}")),
                },
            },
        )
    }

    /// Removes every webhook and delivery of a project being purged (their secrets'
    /// keys first).
    #[qanat_macros::boxed]
    pub async fn purge_project(&self, project: &str) -> Result<()> {
        let sealed: Vec<String> =
            sqlx::query("SELECT secret FROM webhooks WHERE project_id = $1 AND secret IS NOT NULL")
                .bind(project)
                .fetch_all(self.meta.reader())
                .await?
                .iter()
                .map(|r| r.try_get("secret"))
                .collect::<Result<_, _>>()?;
        for s in sealed {
            self.keyring.forget(&self.meta, &s).await?;
        }
        let mut tx = self.meta.writer().begin().await?;
        for sql in [
            "DELETE FROM event_delivery_attempts WHERE delivery_id IN (SELECT delivery_id FROM event_deliveries WHERE project_id = $1)",
            "DELETE FROM event_deliveries WHERE project_id = $1",
            "DELETE FROM webhook_events WHERE webhook_id IN (SELECT webhook_id FROM webhooks WHERE project_id = $1)",
            "DELETE FROM webhooks WHERE project_id = $1",
        ] {
            sqlx::query(sql).bind(project).execute(&mut *tx).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    async fn sealed_secret(&self, id: &str) -> Result<Option<String>> {
        let row = sqlx::query("SELECT secret FROM webhooks WHERE webhook_id = $1")
            .bind(id)
            .fetch_optional(self.meta.reader())
            .await?;
        Ok(match row {
            Some(r) => r.try_get::<Option<String>, _>("secret")?,
            None => None,
        })
    }

    /// The webhook's secret, opened (deliveries sign with it).
    pub(crate) async fn secret_of(&self, id: &str) -> Result<Option<Vec<u8>>> {
        match self.sealed_secret(id).await? {
            Some(s) => Ok(Some(
                self.keyring.open(&self.meta, SECRET_PURPOSE, &s).await?,
            )),
            None => Ok(None),
        }
    }

    /// The events of each webhook in `ids`, in order, MLflow's wire form.
    async fn event_lists(&self, ids: &[String]) -> Result<Vec<Vec<Value>>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let rows = sqlx::query(
                "SELECT event FROM webhook_events WHERE webhook_id = $1 ORDER BY position",
            )
            .bind(id)
            .fetch_all(self.meta.reader())
            .await?;
            let mut events = Vec::with_capacity(rows.len());
            for r in rows {
                let name: String = r.try_get("event")?;
                events.push(name.parse::<EventType>()?.to_mlflow());
            }
            out.push(events);
        }
        Ok(out)
    }
}

async fn insert_events(
    tx: &mut sqlx::Transaction<'_, sqlx::Any>,
    id: &str,
    events: &[EventType],
) -> Result<()> {
    let mut seen = Vec::new();
    for e in events {
        if seen.contains(e) {
            continue;
        }
        seen.push(*e);
        sqlx::query("INSERT INTO webhook_events (webhook_id, event, position) VALUES ($1, $2, $3)")
            .bind(id)
            .bind(e.to_string())
            .bind(seen.len() as i64)
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

fn webhook_from(row: &sqlx::any::AnyRow) -> Result<Webhook> {
    let status: String = row.try_get("status")?;
    Ok(Webhook {
        webhook_id: row.try_get("webhook_id")?,
        name: row.try_get("name")?,
        description: row.try_get("description")?,
        url: row.try_get("url")?,
        events: Vec::new(),
        status: if status == "DISABLED" {
            WebhookStatus::Disabled
        } else {
            WebhookStatus::Active
        },
        creation_timestamp: row.try_get("created_at")?,
        last_updated_timestamp: row.try_get("updated_at")?,
        has_secret: row.try_get::<Option<String>, _>("secret")?.is_some(),
    })
}

fn encode_token(at: i64, id: &str) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{at}:{id}"))
}

fn decode_token(t: &str) -> Result<(i64, String)> {
    let bad = || Error::invalid(format!("Invalid page token '{t}'"));
    let text = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(t)
        .ok()
        .and_then(|b| String::from_utf8(b).ok())
        .ok_or_else(bad)?;
    let (at, id) = text.split_once(':').ok_or_else(bad)?;
    Ok((at.parse().map_err(|_| bad())?, id.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_urls_follow_mlflow_rules() {
        assert!(check_name("test_webhook").is_ok());
        assert!(check_name("a").is_ok());
        assert!(check_name("-a").is_err());
        assert!(check_name("a-").is_err());
        assert!(check_name(&"a".repeat(64)).is_err());
        assert!(check_name("a b").is_err());
        let https = ["https".to_string()];
        assert!(check_url("https://example.com/hook", &https).is_ok());
        let e = check_url("   ", &https).expect_err("blank");
        assert!(e.to_string().contains("cannot be empty or just whitespace"));
        let e = check_url("ftp://example.com", &https).expect_err("scheme");
        assert!(e.to_string().contains("Invalid webhook URL scheme"));
        let e = check_url("http://[invalid", &https).expect_err("syntax");
        assert!(e.to_string().starts_with("Invalid webhook URL"));
        assert!(check_url("https://user:pw@example.com/", &https).is_err());
    }

    #[test]
    fn page_tokens_round_trip_and_junk_is_refused() {
        let t = encode_token(17, "abc-def");
        assert_eq!(decode_token(&t).expect("ok"), (17, "abc-def".to_string()));
        assert!(decode_token("!!").is_err());
    }
}
