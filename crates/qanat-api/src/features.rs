//! The feature store API: plan and apply a feature repo, read the registry. Viewers
//! read and plan; editors apply.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use qanat_features::wire::{
    ApplyRequest, FreshnessList, MaterializationRun, MaterializationRuns, MaterializeRequest,
    Materialized, ObjectHistory, OnlineRequest, OnlineResponse, Plan, PushRequest, PushResult,
    RegisteredObject, Registry, StreamList, TrainingSet, TrainingSetRequest,
};
use qanat_features::ObjectKind;
use qanat_governance::Role::{Editor, Viewer};
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
    let unmarked = crate::compliance::unmarked_pii(&state, &scope.project, &req.repo).await;
    let mut plan = state.features.plan(&scope.project, &req.repo).await?;
    plan.warnings = pii_warnings(&scope.project, &unmarked);
    Ok(Json(plan))
}

/// What a plan or an apply says about features holding personal data without
/// `pii: true`.
fn pii_warnings(project: &qanat_governance::Project, unmarked: &[String]) -> Vec<String> {
    if unmarked.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "features hold personal data without pii: true, so they are served and joined in clear: {}; mark them pii: true{}",
        unmarked.join(", "),
        if project.require_pii_declared {
            " (project requires it: the apply is refused until then)"
        } else {
            ""
        }
    )]
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
    // Personal data a view does not mark is flagged, or refused where the project
    // requires it declared.
    let unmarked = crate::compliance::unmarked_pii(&state, &scope.project, &req.repo).await;
    if scope.project.require_pii_declared && !unmarked.is_empty() {
        return Err(ApiError::bad_request(format!(
            "project '{}' requires personal data to be declared, and these features hold some without pii: true: {}; mark them pii: true and apply again (nothing was applied)",
            scope.project.name,
            unmarked.join(", ")
        )));
    }
    // Turning a feature's PII protection off is a maintainer's decision.
    let maintainer = scope
        .role
        .is_none_or(|r| r >= qanat_governance::Role::Maintainer);
    let plan = state
        .features
        .apply(
            &scope.project,
            &req.repo,
            req.expected_revision,
            &qanat_features::Applier {
                by: &caller.name,
                audit: Some(ticket.record()),
                may_unmark_pii: maintainer,
            },
        )
        .await?;
    ticket.committed();
    let mut plan = plan;
    plan.warnings = pii_warnings(&scope.project, &unmarked);
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
/// are pseudonymized unless the caller holds the project's PII permission (or is a
/// global admin).
#[utoipa::path(post, path = "/api/v1/projects/{project}/features/training-sets", tag = "features", security(("bearer" = [])),
    params(("project" = String, Path)), request_body = TrainingSetRequest,
    responses((status = 201, body = TrainingSet), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn training_set(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ApiJson(req): ApiJson<TrainingSetRequest>,
) -> Result<(StatusCode, Json<TrainingSet>), ApiError> {
    let pii_allowed = state.gov.reads_pii(&scope.project, &caller).await?;
    let set = state
        .features
        .training_set(&scope.project, &req, &caller.name, pii_allowed)
        .await?;
    Ok((StatusCode::CREATED, Json(set)))
}

/// Materializes views into the online store (editors): the newest row per entity
/// within the window; without `start`, from where each view's last run ended (or was
/// cut short). With `run_id`, its progress can be followed at
/// `features/materializations/{run_id}` while it runs.
#[utoipa::path(post, path = "/api/v1/projects/{project}/features/materialize", tag = "features", security(("bearer" = [])),
    params(("project" = String, Path)), request_body = MaterializeRequest,
    responses((status = 200, body = Vec<Materialized>), (status = 400, body = crate::ErrorBody), (status = 503, body = crate::ErrorBody)))]
pub(crate) async fn materialize(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ApiJson(req): ApiJson<MaterializeRequest>,
) -> Result<Json<Vec<Materialized>>, ApiError> {
    Ok(Json(
        state
            .features
            .materialize(&scope.project, &req, &caller.name)
            .await?,
    ))
}

/// This server's recent materialization runs in the project, newest first, with each
/// view's progress (viewers). Kept in memory: what a run leaves for good is each view's
/// materialized window (`freshness`).
#[utoipa::path(get, path = "/api/v1/projects/{project}/features/materializations", tag = "features", security(("bearer" = [])),
    params(("project" = String, Path)),
    responses((status = 200, body = MaterializationRuns)))]
pub(crate) async fn materializations(
    State(state): State<AppState>,
    scope: Scope,
) -> Json<MaterializationRuns> {
    Json(MaterializationRuns {
        runs: state.features.materializations(&scope.project),
    })
}

#[derive(Deserialize)]
pub(crate) struct RunPath {
    run_id: String,
}

/// One materialization run, as it goes or as it ended (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/features/materializations/{run_id}", tag = "features", security(("bearer" = [])),
    params(("project" = String, Path), ("run_id" = String, Path)),
    responses((status = 200, body = MaterializationRun), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn materialization(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<RunPath>,
) -> Result<Json<MaterializationRun>, ApiError> {
    Ok(Json(
        state
            .features
            .materialization(&scope.project, &path.run_id)?,
    ))
}

/// How fresh each view's online values are (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/features/freshness", tag = "features", security(("bearer" = [])),
    params(("project" = String, Path)),
    responses((status = 200, body = FreshnessList)))]
pub(crate) async fn freshness(
    State(state): State<AppState>,
    scope: Scope,
) -> Result<Json<FreshnessList>, ApiError> {
    Ok(Json(FreshnessList {
        feature_views: state.features.freshness(&scope.project).await?,
    }))
}

/// The consumers of the project's `stream` sources (viewers): whether each is
/// attached to its JetStream subject, its lag (messages pending), rows written and
/// refused since the server started, and the last refusal or error.
#[utoipa::path(get, path = "/api/v1/projects/{project}/features/streams", tag = "features", security(("bearer" = [])),
    params(("project" = String, Path)),
    responses((status = 200, body = StreamList)))]
pub(crate) async fn streams(State(state): State<AppState>, scope: Scope) -> Json<StreamList> {
    Json(StreamList {
        streams: state.features.streams(&scope.project),
    })
}

/// A JSON body read whatever its Content-Type says (Feast clients and `curl -d` send
/// form or no types); a body that is not the JSON asked for is a 400 saying why.
pub(crate) struct AnyJson<T>(T);

impl<S: Send + Sync, T: serde::de::DeserializeOwned> axum::extract::FromRequest<S> for AnyJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, ApiError> {
        let bytes = <axum::body::Bytes as axum::extract::FromRequest<S>>::from_request(req, state)
            .await
            .map_err(|e| ApiError::bad_request(format!("the request body: {e}")))?;
        serde_json::from_slice(&bytes).map(AnyJson).map_err(|e| {
            ApiError::bad_request(format!("the request body is not the JSON expected: {e}"))
        })
    }
}

/// An online read; PII features come in clear only to holders of the project's PII
/// permission (and global admins).
async fn online_features(
    state: &AppState,
    scope: &Scope,
    caller: &qanat_governance::Principal,
    req: &OnlineRequest,
) -> Result<Json<OnlineResponse>, ApiError> {
    let clear = state.gov.reads_pii(&scope.project, caller).await?;
    Ok(Json(
        state
            .features
            .online_features(&scope.project, req, clear)
            .await?,
    ))
}

/// Feast's online read, in the default project: each entity's newest feature values,
/// with statuses (PRESENT, NULL_VALUE, NOT_FOUND, OUTSIDE_MAX_AGE) and event times
/// (viewers; audited).
#[utoipa::path(post, path = "/get-online-features", tag = "features", security(("bearer" = [])),
    request_body = OnlineRequest,
    responses((status = 200, body = OnlineResponse), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn get_online_features(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    AnyJson(req): AnyJson<OnlineRequest>,
) -> Result<Json<OnlineResponse>, ApiError> {
    online_features(&state, &scope, &caller, &req).await
}

/// [`get_online_features`] in a named project.
#[utoipa::path(post, path = "/feast/{project}/get-online-features", tag = "features", security(("bearer" = [])),
    params(("project" = String, Path)), request_body = OnlineRequest,
    responses((status = 200, body = OnlineResponse), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn get_online_features_in(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    AnyJson(req): AnyJson<OnlineRequest>,
) -> Result<Json<OnlineResponse>, ApiError> {
    online_features(&state, &scope, &caller, &req).await
}

/// Feast's push, in the default project: rows checked against each view of the push
/// source, good ones written online, bad ones listed with their reasons (editors).
#[utoipa::path(post, path = "/push", tag = "features", security(("bearer" = [])),
    request_body = PushRequest,
    responses((status = 200, body = PushResult), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn push(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    AnyJson(req): AnyJson<PushRequest>,
) -> Result<Json<PushResult>, ApiError> {
    Ok(Json(
        state
            .features
            .push(&scope.project, &req, &caller.name)
            .await?,
    ))
}

/// [`push`] in a named project.
#[utoipa::path(post, path = "/feast/{project}/push", tag = "features", security(("bearer" = [])),
    params(("project" = String, Path)), request_body = PushRequest,
    responses((status = 200, body = PushResult), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn push_in(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    AnyJson(req): AnyJson<PushRequest>,
) -> Result<Json<PushResult>, ApiError> {
    Ok(Json(
        state
            .features
            .push(&scope.project, &req, &caller.name)
            .await?,
    ))
}

pub(crate) fn routes() -> Fragment {
    Fragment::default()
        .route(
            routes!(plan),
            Policy::in_project("feature.plan", Viewer).query(),
        )
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
        .route(
            routes!(materialize),
            Policy::in_project("feature.materialize", Editor),
        )
        .route(
            routes!(materializations),
            Policy::in_project("feature.materialization.read", Viewer),
        )
        .route(
            routes!(materialization),
            Policy::in_project("feature.materialization.read", Viewer),
        )
        .route(
            routes!(freshness),
            Policy::in_project("feature.freshness", Viewer),
        )
        .route(
            routes!(streams),
            Policy::in_project("feature.streams", Viewer),
        )
        .route(
            routes!(get_online_features),
            Policy::in_project("feature.online.read", Viewer)
                .default_project()
                .query()
                .governed_read(),
        )
        .route(
            routes!(get_online_features_in),
            Policy::in_project("feature.online.read", Viewer)
                .query()
                .governed_read(),
        )
        .route(
            routes!(push),
            Policy::in_project("feature.push", Editor).default_project(),
        )
        .route(routes!(push_in), Policy::in_project("feature.push", Editor))
}
