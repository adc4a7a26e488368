//! Deployments: create, change, promote, roll back, delete (editors) and read
//! (viewers) the endpoints serving answers under. Every change is one audited
//! transaction, and this server's routes switch before the call returns; other
//! servers (`qanat serve` replicas) follow within their refresh period.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use qanat_governance::Project;
use qanat_governance::Role::{Editor, Viewer};
use qanat_serving::deploy::wire::{
    DeploymentList, LogList, NewDeployment, Promote, RevisionList, Rollback,
};
use qanat_serving::{Deployment, DeploymentSpec, DeploymentStatus};
use serde::Deserialize;
use utoipa_axum::routes;

use crate::authz::{AuditTicket, Policy};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, Caller, Scope};
use crate::route_table::Fragment;
use crate::AppState;

#[derive(Deserialize)]
pub(crate) struct DeploymentPath {
    name: String,
}

/// A change committed: the ticket is closed and this server switches to it.
async fn changed(
    state: &AppState,
    project: &Project,
    ticket: AuditTicket,
    d: Deployment,
) -> Deployment {
    ticket.committed();
    switch(state, project, &d.name).await;
    d
}

/// Switches this server's route for `name` to what the store now says. The change
/// is committed whatever happens here; a failure is logged, and the refresh loop
/// tries again.
async fn switch(state: &AppState, project: &Project, name: &str) {
    // A version's first load may take minutes (a Python model's environment): past a
    // few seconds the route is rebuilt in the background and the change answered.
    let serving = state.serving.clone();
    let (project, name) = (project.clone(), name.to_string());
    let rebuild = tokio::spawn(async move {
        if let Err(e) = serving.refresh(&project, &name).await {
            tracing::warn!(deployment = %name, error = %e, "the deployment changed but this server's route could not be rebuilt yet");
        }
    });
    let _ = tokio::time::timeout(std::time::Duration::from_secs(10), rebuild).await;
}

/// Creates a deployment (editors): its targets must exist in the registry. It is
/// loaded and health-probed here before this answers.
#[utoipa::path(post, path = "/api/v1/projects/{project}/deployments", tag = "serving", security(("bearer" = [])),
    params(("project" = String, Path)), request_body = NewDeployment,
    responses((status = 201, body = Deployment), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody), (status = 409, body = crate::ErrorBody)))]
pub(crate) async fn create(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ticket: AuditTicket,
    ApiJson(body): ApiJson<NewDeployment>,
) -> Result<(StatusCode, Json<Deployment>), ApiError> {
    // A version no runtime accepts is refused here, not answered 4xx forever after.
    state
        .serving
        .check_servable(&scope.project, &body.spec)
        .await?;
    let d = state
        .serving
        .deployments()
        .create(
            &scope.project,
            &body.name,
            body.spec,
            &caller.name,
            Some(ticket.record()),
        )
        .await?;
    let d = changed(&state, &scope.project, ticket, d).await;
    Ok((StatusCode::CREATED, Json(d)))
}

/// A project's deployments (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/deployments", tag = "serving", security(("bearer" = [])),
    params(("project" = String, Path)),
    responses((status = 200, body = DeploymentList)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    scope: Scope,
) -> Result<Json<DeploymentList>, ApiError> {
    let deployments = state.serving.deployments().list(&scope.project).await?;
    Ok(Json(DeploymentList { deployments }))
}

/// A deployment and how this server serves it: each target's version, health,
/// traffic, batching and (for shadows) how its answers compare (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/deployments/{name}", tag = "serving", security(("bearer" = [])),
    params(("project" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = DeploymentStatus), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn status(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<DeploymentPath>,
) -> Result<Json<DeploymentStatus>, ApiError> {
    Ok(Json(
        state.serving.status(&scope.project, &path.name).await?,
    ))
}

/// Replaces a deployment's spec (editors): a new revision.
#[utoipa::path(put, path = "/api/v1/projects/{project}/deployments/{name}", tag = "serving", security(("bearer" = [])),
    params(("project" = String, Path), ("name" = String, Path)), request_body = DeploymentSpec,
    responses((status = 200, body = Deployment), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn update(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ticket: AuditTicket,
    ApiPath(path): ApiPath<DeploymentPath>,
    ApiJson(spec): ApiJson<DeploymentSpec>,
) -> Result<Json<Deployment>, ApiError> {
    state.serving.check_servable(&scope.project, &spec).await?;
    let d = state
        .serving
        .deployments()
        .update(
            &scope.project,
            &path.name,
            spec,
            &caller.name,
            Some(ticket.record()),
        )
        .await?;
    Ok(Json(changed(&state, &scope.project, ticket, d).await))
}

/// Promotes a canary or shadow to take all the traffic (editors).
#[utoipa::path(post, path = "/api/v1/projects/{project}/deployments/{name}/promote", tag = "serving", security(("bearer" = [])),
    params(("project" = String, Path), ("name" = String, Path)), request_body = Promote,
    responses((status = 200, body = Deployment), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn promote(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ticket: AuditTicket,
    ApiPath(path): ApiPath<DeploymentPath>,
    ApiJson(body): ApiJson<Promote>,
) -> Result<Json<Deployment>, ApiError> {
    let d = state
        .serving
        .deployments()
        .promote(
            &scope.project,
            &path.name,
            body.to.as_deref(),
            &caller.name,
            Some(ticket.record()),
        )
        .await?;
    Ok(Json(changed(&state, &scope.project, ticket, d).await))
}

/// Restores an earlier revision (editors): the one before the current by default.
#[utoipa::path(post, path = "/api/v1/projects/{project}/deployments/{name}/rollback", tag = "serving", security(("bearer" = [])),
    params(("project" = String, Path), ("name" = String, Path)), request_body = Rollback,
    responses((status = 200, body = Deployment), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn rollback(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ticket: AuditTicket,
    ApiPath(path): ApiPath<DeploymentPath>,
    ApiJson(body): ApiJson<Rollback>,
) -> Result<Json<Deployment>, ApiError> {
    let d = state
        .serving
        .deployments()
        .rollback(
            &scope.project,
            &path.name,
            body.revision,
            &caller.name,
            Some(ticket.record()),
        )
        .await?;
    Ok(Json(changed(&state, &scope.project, ticket, d).await))
}

/// A deployment's revisions, newest first (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/deployments/{name}/revisions", tag = "serving", security(("bearer" = [])),
    params(("project" = String, Path), ("name" = String, Path)),
    responses((status = 200, body = RevisionList), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn revisions(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<DeploymentPath>,
) -> Result<Json<RevisionList>, ApiError> {
    let revisions = state
        .serving
        .deployments()
        .revisions(&scope.project, &path.name)
        .await?;
    Ok(Json(RevisionList { revisions }))
}

/// Deletes a deployment (editors): its name answers no more (or, if a registered
/// model has that name, answers as that model).
#[utoipa::path(delete, path = "/api/v1/projects/{project}/deployments/{name}", tag = "serving", security(("bearer" = [])),
    params(("project" = String, Path), ("name" = String, Path)),
    responses((status = 204), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    scope: Scope,
    ticket: AuditTicket,
    ApiPath(path): ApiPath<DeploymentPath>,
) -> Result<StatusCode, ApiError> {
    state
        .serving
        .deployments()
        .delete(&scope.project, &path.name, Some(ticket.record()))
        .await?;
    ticket.committed();
    switch(&state, &scope.project, &path.name).await;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize, utoipa::IntoParams)]
pub(crate) struct LogParams {
    /// At most this many records, newest first (default 100, at most 10,000).
    limit: Option<usize>,
}

/// The newest records of the inference log of a deployment (or a registered model
/// served by name): inputs (PII pseudonymized), outputs, version, latency, who asked.
/// Viewers; a governed read (audited).
#[utoipa::path(get, path = "/api/v1/projects/{project}/deployments/{name}/log", tag = "serving", security(("bearer" = [])),
    params(("project" = String, Path), ("name" = String, Path), LogParams),
    responses((status = 200, body = LogList), (status = 400, body = crate::ErrorBody)))]
pub(crate) async fn log(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<DeploymentPath>,
    ApiQuery(q): ApiQuery<LogParams>,
) -> Result<Json<LogList>, ApiError> {
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > 10_000 {
        return Err(ApiError::bad_request("limit is 1 to 10000 records"));
    }
    let records = state
        .serving
        .log_records(&scope.project, &path.name, limit)
        .await?;
    Ok(Json(LogList {
        records,
        stats: state.serving.log_stats(),
    }))
}

pub(crate) fn routes() -> Fragment {
    Fragment::default()
        .route(
            routes!(create),
            Policy::in_project("deployment.create", Editor),
        )
        .route(routes!(list), Policy::in_project("deployment.list", Viewer))
        .route(
            routes!(status),
            Policy::in_project("deployment.read", Viewer),
        )
        .route(
            routes!(update),
            Policy::in_project("deployment.update", Editor),
        )
        .route(
            routes!(promote),
            Policy::in_project("deployment.promote", Editor),
        )
        .route(
            routes!(rollback),
            Policy::in_project("deployment.rollback", Editor),
        )
        .route(
            routes!(revisions),
            Policy::in_project("deployment.read", Viewer),
        )
        .route(
            routes!(delete),
            Policy::in_project("deployment.delete", Editor),
        )
        .route(
            routes!(log),
            Policy::in_project("deployment.log.read", Viewer).governed_read(),
        )
}
