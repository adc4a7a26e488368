//! Monitoring: a monitor per deployment (maintainers set and delete it, viewers read its
//! checks, reports and alerts), and the ground truth of past requests (editors post
//! labels). The watcher itself runs in the server, not behind a route.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use qanat_governance::Role::{Editor, Maintainer, Viewer};
use qanat_monitor::spec::MonitorSpec;
use qanat_monitor::wire::{
    AlertList, Check, CheckList, Labels, LabelsStored, Monitor, MonitorList, MonitorStatus,
};
use serde::Deserialize;
use utoipa_axum::routes;

use crate::authz::{AuditTicket, Policy};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, Caller, Scope};
use crate::route_table::Fragment;
use crate::AppState;

#[derive(Deserialize)]
pub(crate) struct MonitorPath {
    deployment: String,
}

#[derive(Deserialize)]
pub(crate) struct CheckPath {
    deployment: String,
    /// A check number, or `latest`.
    check: String,
}

#[derive(Deserialize)]
pub(crate) struct DeploymentPath {
    name: String,
}

#[derive(Deserialize, utoipa::IntoParams)]
pub(crate) struct LimitParams {
    /// At most this many, newest first (default 20, at most 1000).
    limit: Option<i64>,
}

fn limit(q: &LimitParams) -> Result<i64, ApiError> {
    match q.limit.unwrap_or(20) {
        n @ 1..=1000 => Ok(n),
        n => Err(ApiError::bad_request(format!(
            "limit is {n}: give 1 to 1000"
        ))),
    }
}

fn check_number(s: &str) -> Result<Option<i64>, ApiError> {
    if s == "latest" {
        return Ok(None);
    }
    match s.parse::<i64>() {
        Ok(n) if n >= 1 => Ok(Some(n)),
        _ => Err(ApiError::bad_request(format!(
            "check '{s}': give a check number from 1, or latest"
        ))),
    }
}

/// Creates the monitor of a deployment, or replaces its spec (maintainers: its
/// actions move aliases and deployments by themselves). Its windows
/// start now; a replaced spec goes on from the window it was at.
#[utoipa::path(put, path = "/api/v1/projects/{project}/monitors/{deployment}", tag = "monitoring", security(("bearer" = [])),
    params(("project" = String, Path), ("deployment" = String, Path)), request_body = MonitorSpec,
    responses((status = 200, body = Monitor), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn put(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ticket: AuditTicket,
    ApiPath(path): ApiPath<MonitorPath>,
    ApiJson(spec): ApiJson<MonitorSpec>,
) -> Result<Json<Monitor>, ApiError> {
    let m = state
        .monitor
        .put(
            &scope.project,
            &path.deployment,
            spec,
            &caller.name,
            Some(ticket.record()),
        )
        .await?;
    ticket.committed();
    Ok(Json(m))
}

/// A project's monitors (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/monitors", tag = "monitoring", security(("bearer" = [])),
    params(("project" = String, Path)),
    responses((status = 200, body = MonitorList)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    scope: Scope,
) -> Result<Json<MonitorList>, ApiError> {
    Ok(Json(MonitorList {
        monitors: state.monitor.list(&scope.project).await?,
    }))
}

/// A monitor with its newest checks and alerts and how its labels matched
/// (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/monitors/{deployment}", tag = "monitoring", security(("bearer" = [])),
    params(("project" = String, Path), ("deployment" = String, Path)),
    responses((status = 200, body = MonitorStatus), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn status(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<MonitorPath>,
) -> Result<Json<MonitorStatus>, ApiError> {
    Ok(Json(
        state
            .monitor
            .status(&scope.project, &path.deployment)
            .await?,
    ))
}

/// Deletes a monitor with its checks, alerts and labels (maintainers).
#[utoipa::path(delete, path = "/api/v1/projects/{project}/monitors/{deployment}", tag = "monitoring", security(("bearer" = [])),
    params(("project" = String, Path), ("deployment" = String, Path)),
    responses((status = 204), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn delete(
    State(state): State<AppState>,
    scope: Scope,
    ticket: AuditTicket,
    ApiPath(path): ApiPath<MonitorPath>,
) -> Result<StatusCode, ApiError> {
    state
        .monitor
        .delete(&scope.project, &path.deployment, Some(ticket.record()))
        .await?;
    ticket.committed();
    Ok(StatusCode::NO_CONTENT)
}

/// A monitor's checks, newest first (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/monitors/{deployment}/checks", tag = "monitoring", security(("bearer" = [])),
    params(("project" = String, Path), ("deployment" = String, Path), LimitParams),
    responses((status = 200, body = CheckList), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn checks(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<MonitorPath>,
    ApiQuery(q): ApiQuery<LimitParams>,
) -> Result<Json<CheckList>, ApiError> {
    let checks = state
        .monitor
        .checks(&scope.project, &path.deployment, limit(&q)?)
        .await?;
    Ok(Json(CheckList { checks }))
}

/// One check: each version's drift per column, prediction drift and live quality
/// (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/monitors/{deployment}/checks/{check}", tag = "monitoring", security(("bearer" = [])),
    params(("project" = String, Path), ("deployment" = String, Path), ("check" = String, Path, description = "a check number, or latest")),
    responses((status = 200, body = Check), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn check(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<CheckPath>,
) -> Result<Json<Check>, ApiError> {
    let n = check_number(&path.check)?;
    Ok(Json(
        state
            .monitor
            .check(&scope.project, &path.deployment, n)
            .await?,
    ))
}

/// A check's report: one self-contained HTML page (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/monitors/{deployment}/checks/{check}/report", tag = "monitoring", security(("bearer" = [])),
    params(("project" = String, Path), ("deployment" = String, Path), ("check" = String, Path, description = "a check number, or latest")),
    responses((status = 200, content_type = "text/html"), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn report(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<CheckPath>,
) -> Result<Response, ApiError> {
    let n = check_number(&path.check)?;
    let (n, html) = state
        .monitor
        .report(&scope.project, &path.deployment, n)
        .await?;
    Ok((
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8".to_string()),
            (
                header::HeaderName::from_static("x-qanat-check"),
                n.to_string(),
            ),
        ],
        html,
    )
        .into_response())
}

/// A monitor's alerts, newest first, with what each action did (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/monitors/{deployment}/alerts", tag = "monitoring", security(("bearer" = [])),
    params(("project" = String, Path), ("deployment" = String, Path), LimitParams),
    responses((status = 200, body = AlertList), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn alerts(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<MonitorPath>,
    ApiQuery(q): ApiQuery<LimitParams>,
) -> Result<Json<AlertList>, ApiError> {
    let alerts = state
        .monitor
        .alerts(&scope.project, &path.deployment, limit(&q)?)
        .await?;
    Ok(Json(AlertList { alerts }))
}

/// Posts the ground truth of past requests of a deployment (editors): by the
/// request's `x-request-id` or its own `id`, one value per row. Labels are matched
/// with the windows their requests fell in, and scored as live quality.
#[utoipa::path(post, path = "/api/v1/projects/{project}/deployments/{name}/labels", tag = "monitoring", security(("bearer" = [])),
    params(("project" = String, Path), ("name" = String, Path)), request_body = Labels,
    responses((status = 200, body = LabelsStored), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn labels(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ticket: AuditTicket,
    ApiPath(path): ApiPath<DeploymentPath>,
    ApiJson(body): ApiJson<Labels>,
) -> Result<Json<LabelsStored>, ApiError> {
    let stored = state
        .monitor
        .post_labels(
            &scope.project,
            &path.name,
            body,
            &caller.name,
            Some(ticket.record()),
        )
        .await?;
    ticket.committed();
    Ok(Json(stored))
}

pub(crate) fn routes() -> Fragment {
    Fragment::default()
        // A monitor's actions move aliases and roll deployments back by themselves:
        // setting one takes what moving an alias takes.
        .route(
            routes!(put),
            Policy::in_project("monitor.write", Maintainer),
        )
        .route(routes!(list), Policy::in_project("monitor.list", Viewer))
        .route(routes!(status), Policy::in_project("monitor.read", Viewer))
        .route(
            routes!(delete),
            Policy::in_project("monitor.delete", Editor),
        )
        .route(routes!(checks), Policy::in_project("monitor.read", Viewer))
        .route(routes!(check), Policy::in_project("monitor.read", Viewer))
        .route(routes!(report), Policy::in_project("monitor.read", Viewer))
        .route(routes!(alerts), Policy::in_project("monitor.read", Viewer))
        .route(
            routes!(labels),
            Policy::in_project("deployment.labels.write", Editor),
        )
        .body_limit(8 << 20)
}
