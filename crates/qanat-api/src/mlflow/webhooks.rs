//! MLflow's model registry webhooks (`/api/2.0/mlflow/webhooks…`, `webhooks.proto`)
//! over `qanat-events`: per project, their secrets sealed and never returned.

use qanat_events::{EventType, NewWebhook, WebhookStatus, WebhookUpdate};
use serde::Deserialize;
use serde_json::{json, Value};

use super::tracking::required;
use super::{done, reply, Ml, MlJson, Reply};
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery, Caller};

fn events_of(list: &[Value]) -> Result<Vec<EventType>, qanat_events::Error> {
    list.iter().map(EventType::from_mlflow).collect()
}

/// The fields of `CreateWebhook` and `UpdateWebhook` (the same in `webhooks.proto`).
#[derive(Deserialize)]
pub(crate) struct WebhookFields {
    name: Option<String>,
    url: Option<String>,
    events: Option<Vec<Value>>,
    description: Option<String>,
    secret: Option<String>,
    status: Option<Value>,
}

pub(crate) async fn create_webhook(
    ml: Ml,
    Caller(caller): Caller,
    MlJson(b): MlJson<WebhookFields>,
) -> Reply {
    let name = required("name", &b.name)?.to_string();
    let url = required("url", &b.url)?.to_string();
    let events = b
        .events
        .ok_or_else(|| ApiError::bad_request("Missing value for required parameter 'events'."))?;
    let status = b
        .status
        .as_ref()
        .map(WebhookStatus::parse)
        .transpose()
        .map_err(qanat_events::Error::Invalid)?;
    let hook = ml
        .state
        .events
        .create_webhook(
            &ml.p.id,
            NewWebhook {
                name,
                url,
                events: events_of(&events)?,
                description: b.description,
                secret: b.secret,
                status,
                creator: caller.name,
            },
        )
        .await?;
    reply("webhook", hook)
}

#[derive(Deserialize)]
pub(crate) struct ListWebhooks {
    max_results: Option<String>,
    page_token: Option<String>,
}

pub(crate) async fn list_webhooks(ml: Ml, ApiQuery(q): ApiQuery<ListWebhooks>) -> Reply {
    let max = match q.max_results.as_deref().filter(|m| !m.is_empty()) {
        Some(m) => Some(m.parse::<i64>().map_err(|_| {
            ApiError::bad_request(format!(
                "Invalid value {m} for parameter 'max_results' supplied"
            ))
        })?),
        None => None,
    };
    let page = ml
        .state
        .events
        .list_webhooks(&ml.p.id, max, q.page_token.as_deref())
        .await?;
    let mut out = reply("webhooks", page.webhooks)?;
    if let Some(t) = page.next_page_token {
        out["next_page_token"] = json!(t);
    }
    Ok(out)
}

#[derive(Deserialize)]
pub(crate) struct WebhookPath {
    webhook_id: String,
}

pub(crate) async fn get_webhook(ml: Ml, ApiPath(path): ApiPath<WebhookPath>) -> Reply {
    let hook = ml.state.events.webhook(&ml.p.id, &path.webhook_id).await?;
    reply("webhook", hook)
}

/// As MLflow, an empty value leaves its field as it is.
fn given(v: Option<String>) -> Option<String> {
    v.filter(|s| !s.is_empty())
}

pub(crate) async fn update_webhook(
    ml: Ml,
    ApiPath(path): ApiPath<WebhookPath>,
    MlJson(b): MlJson<WebhookFields>,
) -> Reply {
    let events = match b.events.filter(|e| !e.is_empty()) {
        Some(e) => Some(events_of(&e)?),
        None => None,
    };
    let hook = ml
        .state
        .events
        .update_webhook(
            &ml.p.id,
            &path.webhook_id,
            WebhookUpdate {
                name: given(b.name),
                url: given(b.url),
                events,
                description: given(b.description),
                secret: given(b.secret),
                status: b
                    .status
                    .as_ref()
                    .map(WebhookStatus::parse)
                    .transpose()
                    .map_err(qanat_events::Error::Invalid)?,
            },
        )
        .await?;
    reply("webhook", hook)
}

pub(crate) async fn delete_webhook(ml: Ml, ApiPath(path): ApiPath<WebhookPath>) -> Reply {
    ml.state
        .events
        .delete_webhook(&ml.p.id, &path.webhook_id)
        .await?;
    done()
}

#[derive(Deserialize)]
pub(crate) struct TestWebhook {
    event: Option<Value>,
}

pub(crate) async fn test_webhook(
    ml: Ml,
    ApiPath(path): ApiPath<WebhookPath>,
    MlJson(b): MlJson<TestWebhook>,
) -> Reply {
    let event = b.event.as_ref().map(EventType::from_mlflow).transpose()?;
    let result = ml
        .state
        .events
        .test_webhook(&ml.p.id, &ml.p.name, &path.webhook_id, event)
        .await?;
    reply("result", result)
}
