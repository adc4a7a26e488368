//! The native model-registry API: list and show registered models, and move aliases
//! (set, promote, rollback, delete) atomically with a recorded history — what
//! `qanat models` drives. The same registry is reachable through the MLflow API.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use qanat_tracking::wire::{AliasMoved, AliasTarget, ModelDetail, ModelList, ModelListParams};
use serde::Deserialize;

use crate::error::ApiError;
use qanat_governance::Role::{Maintainer, Viewer};
use utoipa_axum::routes;

use crate::authz::{AuditTicket, Policy};
use crate::extract::{ApiJson, ApiPath, ApiQuery, Scope};
use crate::route_table::Fragment;
use crate::AppState;

/// Registered models of a project (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/models", tag = "models", security(("bearer" = [])),
    params(("project" = String, Path), ModelListParams),
    responses((status = 200, body = ModelList), (status = 400, body = crate::ErrorBody)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    scope: Scope,
    ApiQuery(q): ApiQuery<ModelListParams>,
) -> Result<Json<ModelList>, ApiError> {
    let p = scope.project;
    let page = state
        .tracking
        .search_registered_models(&p, q.filter.as_deref(), &[], q.max_results, None)
        .await?;
    Ok(Json(ModelList { models: page.items }))
}

#[derive(Deserialize)]
pub(crate) struct ModelPath {
    name: String,
}

/// A registered model with all its versions and its alias history (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/models/{name}", tag = "models", security(("bearer" = [])),
    params(("project" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = ModelDetail), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn show(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<ModelPath>,
) -> Result<Json<ModelDetail>, ApiError> {
    let p = scope.project;
    let model = state.tracking.registered_model(&p, &path.name).await?;
    let versions = state.tracking.versions(&p, &path.name).await?;
    let history = state.tracking.alias_history(&p, &path.name).await?;
    Ok(Json(ModelDetail {
        model,
        versions,
        alias_history: history,
    }))
}

#[derive(Deserialize)]
pub(crate) struct AliasPath {
    name: String,
    alias: String,
}

async fn move_to(
    state: &AppState,
    p: &qanat_governance::Project,
    path: &AliasPath,
    version: &str,
    reason: &str,
    ticket: &AuditTicket,
) -> Result<Json<AliasMoved>, ApiError> {
    let before = state
        .tracking
        .set_alias(p, &path.name, &path.alias, version, reason, ticket.record())
        .await?;
    ticket.committed();
    Ok(Json(AliasMoved {
        name: path.name.clone(),
        alias: path.alias.clone(),
        version: Some(
            state
                .tracking
                .model_version(p, &path.name, version)
                .await?
                .version,
        ),
        previous_version: before,
    }))
}

/// Points an alias at a version (maintainers; audited, kept in the alias history).
#[utoipa::path(put, path = "/api/v1/projects/{project}/models/{name}/aliases/{alias}", tag = "models", security(("bearer" = [])),
    params(("project" = String, Path), ("name" = String, Path), ("alias" = String, Path)), request_body = AliasTarget,
    responses((status = 200, body = AliasMoved), (status = 400, body = crate::ErrorBody), (status = 403, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn set_alias(
    State(state): State<AppState>,
    scope: Scope,
    ticket: AuditTicket,
    ApiPath(path): ApiPath<AliasPath>,
    ApiJson(b): ApiJson<AliasTarget>,
) -> Result<Json<AliasMoved>, ApiError> {
    move_to(&state, &scope.project, &path, &b.version, "set", &ticket).await
}

/// Promotes a version: moves the alias (e.g. `production`) to it in one transaction
/// (maintainers; audited). `rollback` undoes it.
#[utoipa::path(post, path = "/api/v1/projects/{project}/models/{name}/aliases/{alias}/promote", tag = "models", security(("bearer" = [])),
    params(("project" = String, Path), ("name" = String, Path), ("alias" = String, Path)), request_body = AliasTarget,
    responses((status = 200, body = AliasMoved), (status = 400, body = crate::ErrorBody), (status = 403, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn promote(
    State(state): State<AppState>,
    scope: Scope,
    ticket: AuditTicket,
    ApiPath(path): ApiPath<AliasPath>,
    ApiJson(b): ApiJson<AliasTarget>,
) -> Result<Json<AliasMoved>, ApiError> {
    move_to(
        &state,
        &scope.project,
        &path,
        &b.version,
        "promote",
        &ticket,
    )
    .await
}

/// Moves the alias one step back along its history; each rollback goes one step
/// further (maintainers; audited).
#[utoipa::path(post, path = "/api/v1/projects/{project}/models/{name}/aliases/{alias}/rollback", tag = "models", security(("bearer" = [])),
    params(("project" = String, Path), ("name" = String, Path), ("alias" = String, Path)),
    responses((status = 200, body = AliasMoved), (status = 400, body = crate::ErrorBody), (status = 403, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn rollback(
    State(state): State<AppState>,
    scope: Scope,
    ticket: AuditTicket,
    ApiPath(path): ApiPath<AliasPath>,
) -> Result<Json<AliasMoved>, ApiError> {
    let (before, now) = state
        .tracking
        .rollback_alias(&scope.project, &path.name, &path.alias, ticket.record())
        .await?;
    ticket.committed();
    Ok(Json(AliasMoved {
        name: path.name,
        alias: path.alias,
        version: Some(now),
        previous_version: before,
    }))
}

/// Removes an alias (maintainers; audited).
#[utoipa::path(delete, path = "/api/v1/projects/{project}/models/{name}/aliases/{alias}", tag = "models", security(("bearer" = [])),
    params(("project" = String, Path), ("name" = String, Path), ("alias" = String, Path)),
    responses((status = 204), (status = 403, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn delete_alias(
    State(state): State<AppState>,
    scope: Scope,
    ticket: AuditTicket,
    ApiPath(path): ApiPath<AliasPath>,
) -> Result<StatusCode, ApiError> {
    state
        .tracking
        .delete_alias(&scope.project, &path.name, &path.alias, ticket.record())
        .await?;
    ticket.committed();
    Ok(StatusCode::NO_CONTENT)
}

/// The native registry: viewers read; moving an alias needs a maintainer.
pub(crate) fn routes() -> Fragment {
    let release = |action| Policy::in_project(action, Maintainer);
    Fragment::default()
        .route(routes!(list), Policy::in_project("model.list", Viewer))
        .route(routes!(show), Policy::in_project("model.read", Viewer))
        .route(routes!(set_alias), release("model.alias.set"))
        .route(routes!(delete_alias), release("model.alias.delete"))
        .route(routes!(promote), release("model.promote"))
        .route(routes!(rollback), release("model.rollback"))
}
