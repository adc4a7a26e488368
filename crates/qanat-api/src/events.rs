//! The native event API: a project's webhooks and their delivery history (what
//! `qanat webhooks` shows). Webhooks are created and changed through MLflow's API
//! (`/api/2.0/mlflow/webhooks`), which the `mlflow` client drives; both need
//! maintainers, since a webhook's URL is often a credential.

use axum::extract::State;
use axum::Json;
use qanat_events::wire::{DeliveryList, DeliveryListParams, WebhookList};
use qanat_governance::Role::Maintainer;
use serde::Deserialize;
use utoipa_axum::routes;

use crate::authz::Policy;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery, Scope};
use crate::route_table::Fragment;
use crate::AppState;

/// A project's webhooks, newest first (maintainers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/webhooks", tag = "events", security(("bearer" = [])),
    params(("project" = String, Path)),
    responses((status = 200, body = WebhookList)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    scope: Scope,
) -> Result<Json<WebhookList>, ApiError> {
    let mut webhooks = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let page = state
            .events
            .list_webhooks(&scope.project.id, Some(1000), token.as_deref())
            .await?;
        webhooks.extend(page.webhooks);
        match page.next_page_token {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    Ok(Json(WebhookList { webhooks }))
}

#[derive(Deserialize)]
pub(crate) struct WebhookPath {
    webhook_id: String,
}

/// A webhook's deliveries, newest first, each with its attempts (maintainers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/webhooks/{webhook_id}/deliveries", tag = "events", security(("bearer" = [])),
    params(("project" = String, Path), ("webhook_id" = String, Path), DeliveryListParams),
    responses((status = 200, body = DeliveryList), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn deliveries(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<WebhookPath>,
    ApiQuery(q): ApiQuery<DeliveryListParams>,
) -> Result<Json<DeliveryList>, ApiError> {
    let deliveries = state
        .events
        .deliveries(
            &scope.project.id,
            Some(&path.webhook_id),
            q.limit.unwrap_or(50),
        )
        .await?;
    Ok(Json(DeliveryList { deliveries }))
}

/// Every delivery of a project, webhooks' and NATS', newest first (maintainers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/event-deliveries", tag = "events", security(("bearer" = [])),
    params(("project" = String, Path), DeliveryListParams),
    responses((status = 200, body = DeliveryList)))]
pub(crate) async fn all_deliveries(
    State(state): State<AppState>,
    scope: Scope,
    ApiQuery(q): ApiQuery<DeliveryListParams>,
) -> Result<Json<DeliveryList>, ApiError> {
    let deliveries = state
        .events
        .deliveries(&scope.project.id, None, q.limit.unwrap_or(50))
        .await?;
    Ok(Json(DeliveryList { deliveries }))
}

pub(crate) fn routes() -> Fragment {
    Fragment::default()
        .route(
            routes!(list),
            Policy::in_project("webhook.list", Maintainer),
        )
        .route(
            routes!(deliveries),
            Policy::in_project("webhook.deliveries", Maintainer),
        )
        .route(
            routes!(all_deliveries),
            Policy::in_project("event.deliveries", Maintainer),
        )
}
