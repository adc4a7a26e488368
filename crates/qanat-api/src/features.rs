//! The feature store API: plan and apply a feature repo, read the registry. Viewers
//! read and plan; editors apply.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use qanat_features::wire::{
    ApplyRequest, ObjectHistory, Plan, RegisteredObject, Registry, TrainingSet, TrainingSetRequest,
};
use qanat_features::ObjectKind;
use qanat_governance::Role::{Editor, Maintainer, Viewer};
use serde::Deserialize;
use utoipa_axum::routes;

use crate::authz::{AuditTicket, Policy};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, Caller, Scope};
use crate::route_table::Fragment;
use crate::AppState;

/// What applying a feature repo would change, object by object (viewers). Writes
/// nothing; a repo with problems is refused with all of them.
#[utoipa::path(post, path = "/api/v1/projects/{project}/features/plan", tag = "features", security(("bearer" = [])),
    params(("project" = String, Path)), request_body = ApplyRequest,
    responses((status = 200, body = Plan), (status = 400, body = crate::ErrorBody)))]
pub(crate) async fn plan(
    State(state): State<AppState>,
    scope: Scope,
    ApiJson(req): ApiJson<ApplyRequest>,
) -> Result<Json<Plan>, ApiError> {
    Ok(Json(state.features.plan(&scope.project, &req.repo).await?))
}

/// Applies a feature repo (editors): the registry then holds exactly its objects, with
/// a new version of each object whose logic changed. All or nothing; with
/// `expected_revision`, refused (409) if the registry changed since the plan.
#[utoipa::path(post, path = "/api/v1/projects/{project}/features/apply", tag = "features", security(("bearer" = [])),
    params(("project" = String, Path)), request_body = ApplyRequest,
    responses((status = 200, body = Plan), (status = 400, body = crate::ErrorBody), (status = 409, body = crate::ErrorBody)))]
pub(crate) async fn apply(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ticket: AuditTicket,
    ApiJson(req): ApiJson<ApplyRequest>,
) -> Result<Json<Plan>, ApiError> {
    let plan = state
        .features
        .apply(
            &scope.project,
            &req.repo,
            req.expected_revision,
            &caller.name,
            Some(ticket.record()),
        )
        .await?;
    ticket.committed();
    Ok(Json(plan))
}

/// Every live object of the project's feature registry at its newest version
/// (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/features/registry", tag = "features", security(("bearer" = [])),
    params(("project" = String, Path)),
    responses((status = 200, body = Registry)))]
pub(crate) async fn registry(
    State(state): State<AppState>,
    scope: Scope,
) -> Result<Json<Registry>, ApiError> {
    Ok(Json(state.features.registry(&scope.project).await?))
}

#[derive(Deserialize)]
pub(crate) struct ObjectPath {
    kind: String,
    name: String,
}

#[derive(Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct VersionQuery {
    /// A version number; the newest when absent.
    version: Option<i64>,
}

fn kind_of(word: &str) -> Result<ObjectKind, ApiError> {
    word.parse::<ObjectKind>()
        .map_err(|e| ApiError::from(qanat_features::Error::from(e)))
}

/// One registry object at a version, the newest by default (viewers); removed objects
/// are still found.
#[utoipa::path(get, path = "/api/v1/projects/{project}/features/objects/{kind}/{name}", tag = "features", security(("bearer" = [])),
    params(("project" = String, Path), ("kind" = String, Path, description = "entity, source, feature_view or feature_service"), ("name" = String, Path), VersionQuery),
    responses((status = 200, body = RegisteredObject), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn object(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<ObjectPath>,
    ApiQuery(q): ApiQuery<VersionQuery>,
) -> Result<Json<RegisteredObject>, ApiError> {
    let kind = kind_of(&path.kind)?;
    Ok(Json(
        state
            .features
            .object(&scope.project, kind, &path.name, q.version)
            .await?,
    ))
}

/// Every version of one registry object, newest first (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/features/objects/{kind}/{name}/versions", tag = "features", security(("bearer" = [])),
    params(("project" = String, Path), ("kind" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = ObjectHistory), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn history(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<ObjectPath>,
) -> Result<Json<ObjectHistory>, ApiError> {
    let kind = kind_of(&path.kind)?;
    Ok(Json(
        state
            .features
            .history(&scope.project, kind, &path.name)
            .await?,
    ))
}

/// Builds a training set (editors): the entity rows of a dataset version joined point
/// in time with feature views, written as a new version of the output dataset with
/// lineage to the feature view versions and the dataset versions read. PII features
/// are pseudonymized unless the caller is a maintainer of the project (or an admin).
#[utoipa::path(post, path = "/api/v1/projects/{project}/features/training-sets", tag = "features", security(("bearer" = [])),
    params(("project" = String, Path)), request_body = TrainingSetRequest,
    responses((status = 201, body = TrainingSet), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn training_set(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ApiJson(req): ApiJson<TrainingSetRequest>,
) -> Result<(StatusCode, Json<TrainingSet>), ApiError> {
    let pii_allowed = pii_allowed(&scope, caller.is_admin);
    let set = state
        .features
        .training_set(&scope.project, &req, &caller.name, pii_allowed)
        .await?;
    Ok((StatusCode::CREATED, Json(set)))
}

/// Whether the caller may see PII features in clear: the project's maintainers and
/// admins, and global admins.
fn pii_allowed(scope: &Scope, global_admin: bool) -> bool {
    global_admin || scope.role.is_some_and(|r| r >= Maintainer)
}

pub(crate) fn routes() -> Fragment {
    Fragment::default()
        .route(routes!(plan), Policy::in_project("feature.plan", Viewer))
        .route(routes!(apply), Policy::in_project("feature.apply", Editor))
        .route(
            routes!(training_set),
            Policy::in_project("feature.training_set", Editor),
        )
        .route(
            routes!(registry),
            Policy::in_project("feature.registry.read", Viewer),
        )
        .route(
            routes!(object),
            Policy::in_project("feature.object.read", Viewer),
        )
        .route(
            routes!(history),
            Policy::in_project("feature.object.history", Viewer),
        )
}
