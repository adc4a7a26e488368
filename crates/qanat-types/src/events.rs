//! Webhooks and their deliveries as MLflow's webhook API and the native event API show
//! them (`qanat-events` stores and sends them).

use serde::{Deserialize, Serialize};
use serde_json::Value;

pub mod wire;

/// Whether a webhook receives events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum WebhookStatus {
    Active,
    Disabled,
}

impl WebhookStatus {
    /// The word MLflow writes.
    pub fn as_str(self) -> &'static str {
        match self {
            WebhookStatus::Active => "ACTIVE",
            WebhookStatus::Disabled => "DISABLED",
        }
    }

    /// MLflow's enum, by name or number; the error says what to write.
    pub fn parse(v: &Value) -> Result<WebhookStatus, String> {
        match v {
            Value::String(s) if s.eq_ignore_ascii_case("active") => Ok(WebhookStatus::Active),
            Value::String(s) if s.eq_ignore_ascii_case("disabled") => Ok(WebhookStatus::Disabled),
            Value::Number(n) if n.as_i64() == Some(1) => Ok(WebhookStatus::Active),
            Value::Number(n) if n.as_i64() == Some(2) => Ok(WebhookStatus::Disabled),
            other => Err(format!(
                "Invalid webhook status {other}: use ACTIVE or DISABLED"
            )),
        }
    }
}

/// A webhook as MLflow's API shows it (the secret never leaves the server).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Webhook {
    pub webhook_id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    pub url: String,
    /// `[{"entity": "MODEL_VERSION", "action": "CREATED"}]`.
    #[schema(value_type = Vec<Object>)]
    pub events: Vec<Value>,
    pub status: WebhookStatus,
    /// Epoch milliseconds.
    pub creation_timestamp: i64,
    pub last_updated_timestamp: i64,
    #[serde(skip)]
    pub has_secret: bool,
}

/// One delivery of one event to one webhook (or NATS), with its attempts.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Delivery {
    pub delivery_id: String,
    /// `webhook` or `nats`.
    pub target: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub webhook_id: Option<String>,
    /// `model_version.created`, …
    pub event: String,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    pub attempts: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// Epoch milliseconds.
    pub created_at: i64,
    /// When the next attempt is due (pending deliveries).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_attempt_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<i64>,
    /// Every attempt so far, oldest first.
    pub attempt_log: Vec<Attempt>,
}

/// One try at a delivery.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Attempt {
    pub attempt: i64,
    /// Epoch milliseconds.
    pub at: i64,
    pub duration_ms: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_status: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}
