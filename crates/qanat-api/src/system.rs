//! Health, readiness, metrics, the OpenAPI document, and who-am-I.

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use qanat_governance::wire::{ProjectRole, WhoAmI};
use qanat_governance::Project;
use qanat_types::store::wire::LocationView;
use serde_json::json;

use utoipa_axum::routes;

use crate::authz::Policy;
use crate::error::ApiError;
use crate::extract::Caller;
use crate::route_table::Fragment;
use crate::AppState;

/// Liveness: the process answers.
#[utoipa::path(get, path = "/healthz", tag = "system", responses((status = 200, description = "alive")))]
pub(crate) async fn healthz() -> Json<serde_json::Value> {
    Json(json!({"status": "ok"}))
}

/// Readiness: the metadata store and every storage location answer.
#[utoipa::path(get, path = "/readyz", tag = "system", responses(
    (status = 200, description = "ready"), (status = 503, description = "a dependency is down")))]
pub(crate) async fn readyz(State(state): State<AppState>) -> Response {
    let db = state.meta.ping().await;
    let storage = state.storage.check().await;
    let check = |r: &Result<(), qanat_store::Error>| match r {
        Ok(()) => "ok".to_string(),
        Err(e) => e.to_string(),
    };
    let body = json!({
        "status": if db.is_ok() && storage.is_ok() { "ready" } else { "unavailable" },
        "checks": {"metadata": check(&db), "storage": check(&storage)},
    });
    let status = if db.is_ok() && storage.is_ok() {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (status, Json(body)).into_response()
}

/// Request counts and latency histograms, feature freshness and stream consumer lag,
/// in the Prometheus text format. Global admins and tokens scoped to `metrics`; without
/// a token only where `server.metrics_anonymous` is on, summed over every label but
/// `le` and `quantile`.
#[utoipa::path(get, path = "/metrics", tag = "system", responses((status = 200, description = "metrics", content_type = "text/plain")))]
pub(crate) async fn metrics(
    State(state): State<AppState>,
    caller: Option<axum::Extension<qanat_governance::Principal>>,
) -> Response {
    state.metrics.observe_features(&state.features).await;
    state.metrics.observe_monitors(&state.monitor).await;
    let text = state.metrics.render();
    // Labels name projects, models, deployments and feature views: an anonymous
    // caller gets each series summed over them.
    let text = match caller {
        Some(_) => text,
        None => crate::metrics::without_labels(&text),
    };
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// This OpenAPI document.
#[utoipa::path(get, path = "/api/v1/openapi.json", tag = "system", responses((status = 200, description = "OpenAPI 3 document")))]
pub(crate) async fn openapi(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        crate::openapi::openapi_json(state.jobs.kinds()),
    )
        .into_response()
}

/// The caller's identity and projects.
#[utoipa::path(get, path = "/api/v1/whoami", tag = "identity", security(("bearer" = [])),
    responses((status = 200, body = WhoAmI), (status = 401, body = crate::ErrorBody)))]
pub(crate) async fn whoami(
    State(state): State<AppState>,
    Caller(p): Caller,
) -> Result<Json<WhoAmI>, ApiError> {
    let projects: Vec<Project> = state.gov.projects_for(&p).await?;
    let mut out = Vec::with_capacity(projects.len());
    for proj in projects {
        let role = state.gov.role_in(&p.user_id, &proj.name).await?;
        out.push(ProjectRole {
            project: proj.name,
            role,
        });
    }
    Ok(Json(WhoAmI {
        principal: p,
        projects: out,
    }))
}

/// How a command-line client logs in through single sign-on (404 when it is not
/// configured). Public: it names the provider and a public client, nothing secret,
/// and asks the provider nothing.
#[utoipa::path(get, path = "/api/v1/auth/sso", tag = "identity",
    responses((status = 200, body = qanat_governance::wire::SsoSettings), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn sso_settings(
    State(state): State<AppState>,
) -> Result<Json<qanat_governance::wire::SsoSettings>, ApiError> {
    let Some(oidc) = state.gov.oidc() else {
        return Err(ApiError::not_found(
            "single sign-on is not configured on this server ([security.oidc]); log in with a token",
        ));
    };
    let c = oidc.config();
    Ok(Json(qanat_governance::wire::SsoSettings {
        issuer: c.issuer.clone(),
        client_id: c.cli_client_id.clone(),
        scopes: c.cli_scopes.clone(),
    }))
}

/// Configured storage locations and their regions (never their credentials).
#[utoipa::path(get, path = "/api/v1/storage/locations", tag = "storage", security(("bearer" = [])),
    responses((status = 200, body = [LocationView])))]
pub(crate) async fn locations(State(state): State<AppState>) -> Json<Vec<LocationView>> {
    let default = state.storage.default_location().to_string();
    Json(
        state
            .storage
            .locations()
            .into_iter()
            .map(|l| LocationView {
                default: l.name == default,
                name: l.name,
                region: l.region.to_string(),
                kind: l.kind.to_string(),
            })
            .collect(),
    )
}

/// Probes, metrics, the OpenAPI document, who-am-I and storage locations.
pub(crate) fn routes() -> Fragment {
    Fragment::default()
        .route(routes!(healthz), Policy::public("health"))
        .route(routes!(readyz), Policy::public("ready"))
        .route(routes!(metrics), Policy::global_admin("metrics").metrics())
        .route(routes!(openapi), Policy::public("openapi"))
        .route(routes!(whoami), Policy::authenticated("whoami"))
        .route(routes!(sso_settings), Policy::public("auth.sso_settings"))
        .route(routes!(locations), Policy::authenticated("storage.list"))
}
