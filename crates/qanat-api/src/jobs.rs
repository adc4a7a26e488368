//! The job API: submit, list, show, cancel, retry, logs, a project's quota, and what
//! the executors offer — what `qanat jobs` and `qanat gpus` drive. Editors submit and
//! stop jobs; viewers read them; logs are governed reads (audited), since a job's
//! output may hold the data it read.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use qanat_governance::Role::{Admin, Editor, Viewer};
use qanat_jobs::wire::{
    ExecutorList, Job, JobDetail, JobList, JobListParams, LogChunk, LogParams, NewSchedule, Quota,
    QuotaUsage, Schedule, ScheduleList,
};
use qanat_jobs::JobSpec;
use serde::Deserialize;
use utoipa_axum::routes;

use crate::authz::{AuditTicket, Policy};
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, Caller, Scope};
use crate::route_table::Fragment;
use crate::AppState;

/// Submits a job (editors). It is stored before this answers, and runs when the
/// scheduler finds room for it; what can never run is refused here with the reason.
#[utoipa::path(post, path = "/api/v1/projects/{project}/jobs", tag = "jobs", security(("bearer" = [])),
    params(("project" = String, Path)), request_body = JobSpec,
    responses((status = 201, body = Job), (status = 400, body = crate::ErrorBody), (status = 403, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn submit(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ticket: AuditTicket,
    ApiJson(spec): ApiJson<JobSpec>,
) -> Result<(StatusCode, Json<Job>), ApiError> {
    let job = state
        .jobs
        .submit(&scope.project, spec, &caller.name, Some(ticket.record()))
        .await?;
    ticket.committed();
    Ok((StatusCode::CREATED, Json(job)))
}

/// A project's jobs, newest first (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/jobs", tag = "jobs", security(("bearer" = [])),
    params(("project" = String, Path), JobListParams),
    responses((status = 200, body = JobList), (status = 400, body = crate::ErrorBody)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    scope: Scope,
    ApiQuery(q): ApiQuery<JobListParams>,
) -> Result<Json<JobList>, ApiError> {
    let jobs = state.jobs.list(&scope.project, &q).await?;
    Ok(Json(JobList { jobs }))
}

#[derive(Deserialize)]
pub(crate) struct JobPath {
    job_id: String,
}

/// A job with its spec and history (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/jobs/{job_id}", tag = "jobs", security(("bearer" = [])),
    params(("project" = String, Path), ("job_id" = String, Path)),
    responses((status = 200, body = JobDetail), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn show(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<JobPath>,
) -> Result<Json<JobDetail>, ApiError> {
    Ok(Json(state.jobs.get(&scope.project, &path.job_id).await?))
}

/// Cancels a job (editors): a queued one at once, a running one after SIGTERM and
/// the grace period.
#[utoipa::path(post, path = "/api/v1/projects/{project}/jobs/{job_id}/cancel", tag = "jobs", security(("bearer" = [])),
    params(("project" = String, Path), ("job_id" = String, Path)),
    responses((status = 200, body = Job), (status = 404, body = crate::ErrorBody), (status = 409, body = crate::ErrorBody)))]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ticket: AuditTicket,
    ApiPath(path): ApiPath<JobPath>,
) -> Result<Json<Job>, ApiError> {
    let job = state
        .jobs
        .cancel(
            &scope.project,
            &path.job_id,
            &caller.name,
            Some(ticket.record()),
        )
        .await?;
    ticket.committed();
    Ok(Json(job))
}

/// Queues a failed or cancelled job again (editors).
#[utoipa::path(post, path = "/api/v1/projects/{project}/jobs/{job_id}/retry", tag = "jobs", security(("bearer" = [])),
    params(("project" = String, Path), ("job_id" = String, Path)),
    responses((status = 200, body = Job), (status = 404, body = crate::ErrorBody), (status = 409, body = crate::ErrorBody)))]
pub(crate) async fn retry(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ticket: AuditTicket,
    ApiPath(path): ApiPath<JobPath>,
) -> Result<Json<Job>, ApiError> {
    let job = state
        .jobs
        .retry(
            &scope.project,
            &path.job_id,
            &caller.name,
            Some(ticket.record()),
        )
        .await?;
    ticket.committed();
    Ok(Json(job))
}

/// A rank's log from an offset (viewers; audited). With `wait_secs`, waits for new
/// output of a running attempt (what `qanat jobs logs -f` polls).
#[utoipa::path(get, path = "/api/v1/projects/{project}/jobs/{job_id}/logs", tag = "jobs", security(("bearer" = [])),
    params(("project" = String, Path), ("job_id" = String, Path), LogParams),
    responses((status = 200, body = LogChunk), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn logs(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<JobPath>,
    ApiQuery(q): ApiQuery<LogParams>,
) -> Result<Json<LogChunk>, ApiError> {
    Ok(Json(
        state.jobs.logs(&scope.project, &path.job_id, &q).await?,
    ))
}

/// A project's job quota and its use (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/quota", tag = "jobs", security(("bearer" = [])),
    params(("project" = String, Path)),
    responses((status = 200, body = QuotaUsage)))]
pub(crate) async fn quota(
    State(state): State<AppState>,
    scope: Scope,
) -> Result<Json<QuotaUsage>, ApiError> {
    Ok(Json(state.jobs.quota(&scope.project).await?))
}

/// Replaces a project's job quota; absent fields are unlimited (global admins: a
/// project may not raise its own).
#[utoipa::path(put, path = "/api/v1/projects/{project}/quota", tag = "jobs", security(("bearer" = [])),
    params(("project" = String, Path)), request_body = Quota,
    responses((status = 200, body = QuotaUsage), (status = 400, body = crate::ErrorBody), (status = 403, body = crate::ErrorBody)))]
pub(crate) async fn set_quota(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ticket: AuditTicket,
    ApiJson(q): ApiJson<Quota>,
) -> Result<Json<QuotaUsage>, ApiError> {
    if !caller.is_admin {
        return Err(ApiError::forbidden(
            "only a global administrator may change a project's quota",
        ));
    }
    let usage = state
        .jobs
        .set_quota(&scope.project, &q, &caller.name, Some(ticket.record()))
        .await?;
    ticket.committed();
    Ok(Json(usage))
}

/// What each executor offers: capacity, free resources, GPUs and who holds them
/// (any signed-in user).
#[utoipa::path(get, path = "/api/v1/executors", tag = "jobs", security(("bearer" = [])),
    responses((status = 200, body = ExecutorList)))]
pub(crate) async fn executors(State(state): State<AppState>) -> Json<ExecutorList> {
    Json(state.jobs.executors())
}

/// Creates a cron schedule that submits its job at every firing (editors). The job
/// spec is checked now, as a submit would check it.
#[utoipa::path(post, path = "/api/v1/projects/{project}/schedules", tag = "jobs", security(("bearer" = [])),
    params(("project" = String, Path)), request_body = NewSchedule,
    responses((status = 201, body = Schedule), (status = 400, body = crate::ErrorBody), (status = 403, body = crate::ErrorBody)))]
pub(crate) async fn create_schedule(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ticket: AuditTicket,
    ApiJson(new): ApiJson<NewSchedule>,
) -> Result<(StatusCode, Json<Schedule>), ApiError> {
    let s = state
        .jobs
        .create_schedule(&scope.project, new, &caller.name, Some(ticket.record()))
        .await?;
    ticket.committed();
    Ok((StatusCode::CREATED, Json(s)))
}

/// A project's schedules (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/schedules", tag = "jobs", security(("bearer" = [])),
    params(("project" = String, Path)),
    responses((status = 200, body = ScheduleList)))]
pub(crate) async fn list_schedules(
    State(state): State<AppState>,
    scope: Scope,
) -> Result<Json<ScheduleList>, ApiError> {
    Ok(Json(ScheduleList {
        schedules: state.jobs.schedules(&scope.project).await?,
    }))
}

#[derive(Deserialize)]
pub(crate) struct SchedulePath {
    schedule_id: String,
}

/// Deletes a schedule; the jobs it submitted stay (editors).
#[utoipa::path(delete, path = "/api/v1/projects/{project}/schedules/{schedule_id}", tag = "jobs", security(("bearer" = [])),
    params(("project" = String, Path), ("schedule_id" = String, Path)),
    responses((status = 204), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn delete_schedule(
    State(state): State<AppState>,
    scope: Scope,
    ticket: AuditTicket,
    ApiPath(path): ApiPath<SchedulePath>,
) -> Result<StatusCode, ApiError> {
    state
        .jobs
        .delete_schedule(&scope.project, &path.schedule_id, Some(ticket.record()))
        .await?;
    ticket.committed();
    Ok(StatusCode::NO_CONTENT)
}

pub(crate) fn routes() -> Fragment {
    Fragment::default()
        .route(routes!(submit), Policy::in_project("job.submit", Editor))
        .route(routes!(list), Policy::in_project("job.list", Viewer))
        .route(routes!(show), Policy::in_project("job.read", Viewer))
        .route(routes!(cancel), Policy::in_project("job.cancel", Editor))
        .route(routes!(retry), Policy::in_project("job.retry", Editor))
        .route(
            routes!(logs),
            Policy::in_project("job.logs", Viewer).governed_read(),
        )
        .route(routes!(quota), Policy::in_project("job.quota.read", Viewer))
        .route(
            routes!(set_quota),
            Policy::in_project("job.quota.set", Admin),
        )
        .route(routes!(executors), Policy::authenticated("executor.list"))
        .route(
            routes!(create_schedule),
            Policy::in_project("job.schedule.create", Editor),
        )
        .route(
            routes!(list_schedules),
            Policy::in_project("job.schedule.list", Viewer),
        )
        .route(
            routes!(delete_schedule),
            Policy::in_project("job.schedule.delete", Editor),
        )
}
