//! Shapes of the native event API (`/api/v1/projects/{project}/webhooks…`), shared by
//! the server and the typed client.

use serde::{Deserialize, Serialize};

use super::{Delivery, Webhook};

/// A project's webhooks, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WebhookList {
    pub webhooks: Vec<Webhook>,
}

/// Deliveries, newest first, with their attempts.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct DeliveryList {
    pub deliveries: Vec<Delivery>,
}

/// How many deliveries to list.
#[derive(Debug, Clone, Default, Serialize, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DeliveryListParams {
    /// At most this many (1 to 1000, default 50).
    pub limit: Option<i64>,
}
