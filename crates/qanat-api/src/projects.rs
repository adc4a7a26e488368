//! Projects, their residency policy, and their members.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use qanat_governance::wire::{CreateProject, SetMember, UpdateProject};
use qanat_governance::{Member, PiiReader, Project};

use qanat_governance::Role::{Admin, Maintainer, Viewer};
use utoipa_axum::routes;

use crate::authz::Policy;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, Caller, Scope};
use crate::route_table::Fragment;
use crate::AppState;

/// Create a project (global admins). The creator becomes its admin.
#[utoipa::path(post, path = "/api/v1/projects", tag = "projects", security(("bearer" = [])),
    request_body = CreateProject,
    responses((status = 201, body = Project), (status = 400, body = crate::ErrorBody),
              (status = 409, body = crate::ErrorBody)))]
pub(crate) async fn create(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiJson(body): ApiJson<CreateProject>,
) -> Result<(StatusCode, Json<Project>), ApiError> {
    let regions = match body.allowed_regions {
        Some(r) => r,
        None => {
            let default = state.storage.location(state.storage.default_location())?;
            vec![default.region.to_string()]
        }
    };
    regions_have_storage(&state, &regions)?;
    let p = state
        .gov
        .create_project(&body.name, &body.description, &regions, &caller)
        .await?;
    Ok((StatusCode::CREATED, Json(p)))
}

/// A residency policy may only allow regions that some configured storage location is
/// in: a region with nowhere to put bytes is a typo or a missing location, and would
/// only surface later as a refused write.
fn regions_have_storage(state: &AppState, regions: &[String]) -> Result<(), ApiError> {
    let stored: std::collections::BTreeSet<String> = state
        .storage
        .locations()
        .into_iter()
        .map(|l| l.region.to_string())
        .collect();
    for r in regions {
        // A malformed name gets the format error.
        r.parse::<qanat_store::Region>()?;
        if !stored.contains(r) {
            let known: Vec<&str> = stored.iter().map(String::as_str).collect();
            return Err(ApiError::bad_request(format!(
                "region '{r}' has no storage location; configured regions: {} (add a [[storage.locations]] entry in that region first)",
                known.join(", ")
            )));
        }
    }
    Ok(())
}

/// Projects the caller can see.
#[utoipa::path(get, path = "/api/v1/projects", tag = "projects", security(("bearer" = [])),
    responses((status = 200, body = [Project])))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Caller(caller): Caller,
) -> Result<Json<Vec<Project>>, ApiError> {
    Ok(Json(state.gov.projects_for(&caller).await?))
}

/// One project.
#[utoipa::path(get, path = "/api/v1/projects/{project}", tag = "projects", security(("bearer" = [])),
    params(("project" = String, Path)),
    responses((status = 200, body = Project), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn get_one(scope: Scope) -> Json<Project> {
    Json(scope.project)
}

/// Change a project's description or residency policy (project admins).
#[utoipa::path(patch, path = "/api/v1/projects/{project}", tag = "projects", security(("bearer" = [])),
    params(("project" = String, Path)), request_body = UpdateProject,
    responses((status = 200, body = Project), (status = 400, body = crate::ErrorBody)))]
pub(crate) async fn update(
    State(state): State<AppState>,
    scope: Scope,
    ApiJson(body): ApiJson<UpdateProject>,
) -> Result<Json<Project>, ApiError> {
    if let Some(regions) = &body.allowed_regions {
        regions_have_storage(&state, regions)?;
    }
    Ok(Json(state.gov.update_project(&scope.project, &body).await?))
}

/// Delete a project (its admins): every request naming it gets 404 at once, its data
/// stays until `gc` purges it after the retention period, and a global admin can
/// restore it until then.
#[utoipa::path(delete, path = "/api/v1/projects/{project}", tag = "projects", security(("bearer" = [])),
    params(("project" = String, Path)),
    responses((status = 200, body = Project), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn delete_one(
    State(state): State<AppState>,
    Caller(caller): Caller,
    scope: Scope,
) -> Result<Json<Project>, ApiError> {
    Ok(Json(
        state.gov.delete_project(&scope.project, &caller).await?,
    ))
}

/// Bring back a deleted project that `gc` has not purged yet (global admins).
#[utoipa::path(post, path = "/api/v1/projects/{project}/restore", tag = "projects", security(("bearer" = [])),
    params(("project" = String, Path)),
    responses((status = 200, body = Project), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn restore(
    State(state): State<AppState>,
    ApiPath(project): ApiPath<String>,
) -> Result<Json<Project>, ApiError> {
    Ok(Json(state.gov.restore_project(&project).await?))
}

/// Deleted projects that `gc` has not purged yet (global admins).
#[utoipa::path(get, path = "/api/v1/deleted-projects", tag = "projects", security(("bearer" = [])),
    responses((status = 200, body = [Project])))]
pub(crate) async fn deleted(State(state): State<AppState>) -> Result<Json<Vec<Project>>, ApiError> {
    Ok(Json(state.gov.deleted_projects().await?))
}

/// Members of a project.
#[utoipa::path(get, path = "/api/v1/projects/{project}/members", tag = "projects", security(("bearer" = [])),
    params(("project" = String, Path)), responses((status = 200, body = [Member])))]
pub(crate) async fn members(
    State(state): State<AppState>,
    scope: Scope,
) -> Result<Json<Vec<Member>>, ApiError> {
    Ok(Json(state.gov.members(&scope.project).await?))
}

/// Grant a user a role (maintainers; only admins may grant admin).
#[utoipa::path(put, path = "/api/v1/projects/{project}/members/{user}", tag = "projects", security(("bearer" = [])),
    params(("project" = String, Path), ("user" = String, Path)), request_body = SetMember,
    responses((status = 200, body = Member), (status = 403, body = crate::ErrorBody)))]
pub(crate) async fn set_member(
    State(state): State<AppState>,
    Caller(caller): Caller,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<SetMember>,
) -> Result<Json<Member>, ApiError> {
    let (_, user) = path;
    let gov = &state.gov;
    let member = gov
        .set_member(&scope.project, &user, body.role, &caller, scope.role)
        .await?;
    Ok(Json(member))
}

/// Remove a user from a project (maintainers).
#[utoipa::path(delete, path = "/api/v1/projects/{project}/members/{user}", tag = "projects", security(("bearer" = [])),
    params(("project" = String, Path), ("user" = String, Path)),
    responses((status = 204), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn remove_member(
    State(state): State<AppState>,
    Caller(caller): Caller,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let (_, user) = path;
    let gov = &state.gov;
    gov.remove_member(&scope.project, &user, &caller, scope.role)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Who holds the project's PII permission: personal data in clear on every path
/// (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/pii-readers", tag = "projects", security(("bearer" = [])),
    params(("project" = String, Path)), responses((status = 200, body = [PiiReader])))]
pub(crate) async fn pii_readers(
    State(state): State<AppState>,
    scope: Scope,
) -> Result<Json<Vec<PiiReader>>, ApiError> {
    Ok(Json(state.gov.pii_readers(&scope.project).await?))
}

/// Grant a user the project's PII permission (project admins; audited): they read
/// personal data in clear where others get pseudonyms, and each such read is
/// audited. It gives no access their role does not.
#[utoipa::path(put, path = "/api/v1/projects/{project}/pii-readers/{user}", tag = "projects", security(("bearer" = [])),
    params(("project" = String, Path), ("user" = String, Path)),
    responses((status = 200, body = PiiReader), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn grant_pii(
    State(state): State<AppState>,
    Caller(caller): Caller,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
) -> Result<Json<PiiReader>, ApiError> {
    let (_, user) = path;
    Ok(Json(
        state.gov.grant_pii(&scope.project, &user, &caller).await?,
    ))
}

/// Take the project's PII permission from a user (project admins; audited).
#[utoipa::path(delete, path = "/api/v1/projects/{project}/pii-readers/{user}", tag = "projects", security(("bearer" = [])),
    params(("project" = String, Path), ("user" = String, Path)),
    responses((status = 204), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn revoke_pii(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let (_, user) = path;
    state.gov.revoke_pii(&scope.project, &user).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Projects and their members.
pub(crate) fn routes() -> Fragment {
    Fragment::default()
        .route(routes!(create), Policy::global_admin("project.create"))
        .route(routes!(list), Policy::authenticated("project.list"))
        .route(routes!(get_one), Policy::in_project("project.get", Viewer))
        .route(
            routes!(update),
            Policy::in_project("project.update_policy", Admin),
        )
        .route(
            routes!(delete_one),
            Policy::in_project("project.delete", Admin),
        )
        .route(routes!(restore), Policy::global_admin("project.restore"))
        .route(
            routes!(deleted),
            Policy::global_admin("project.list_deleted"),
        )
        .route(routes!(members), Policy::in_project("member.list", Viewer))
        .route(
            routes!(set_member),
            Policy::in_project("member.set", Maintainer),
        )
        .route(
            routes!(remove_member),
            Policy::in_project("member.remove", Maintainer),
        )
        .route(
            routes!(pii_readers),
            Policy::in_project("pii.list_readers", Viewer),
        )
        .route(routes!(grant_pii), Policy::in_project("pii.grant", Admin))
        .route(routes!(revoke_pii), Policy::in_project("pii.revoke", Admin))
}
