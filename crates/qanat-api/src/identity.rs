//! Users, tokens, the audit log and master keys.

use axum::extract::State;
use axum::http::StatusCode;
use axum::Json;
use qanat_governance::wire::{AuditFilter, CreateToken, CreateUser, TokenFilter, UpdateUser};
use qanat_governance::{
    AuditCheckpoint, AuditEntry, AuditVerification, CheckpointVerification, NewToken, TokenInfo,
    User, UserKind,
};
use qanat_store::{KeyringSource, RotationReport};
use qanat_types::store::wire::{KeyStatus, RotationView};

use crate::authz::Policy;
use crate::error::ApiError;
use crate::extract::{ApiJson, ApiPath, ApiQuery, Caller};
use crate::route_table::Fragment;
use crate::AppState;
use utoipa_axum::routes;

/// Create a user or service account (global admins).
#[utoipa::path(post, path = "/api/v1/users", tag = "identity", security(("bearer" = [])),
    request_body = CreateUser, responses((status = 201, body = User), (status = 409, body = crate::ErrorBody)))]
pub(crate) async fn create_user(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateUser>,
) -> Result<(StatusCode, Json<User>), ApiError> {
    let user = state
        .gov
        .create_user(&body.name, body.kind.unwrap_or(UserKind::User), body.admin)
        .await?;
    Ok((StatusCode::CREATED, Json(user)))
}

/// Every user (global admins).
#[utoipa::path(get, path = "/api/v1/users", tag = "identity", security(("bearer" = [])),
    responses((status = 200, body = [User])))]
pub(crate) async fn list_users(State(state): State<AppState>) -> Result<Json<Vec<User>>, ApiError> {
    Ok(Json(state.gov.users().await?))
}

/// Grant or remove global admin, disable or re-enable (global admins).
#[utoipa::path(patch, path = "/api/v1/users/{user}", tag = "identity", security(("bearer" = [])),
    params(("user" = String, Path)), request_body = UpdateUser,
    responses((status = 200, body = User), (status = 400, body = crate::ErrorBody)))]
pub(crate) async fn update_user(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(user): ApiPath<String>,
    ApiJson(body): ApiJson<UpdateUser>,
) -> Result<Json<User>, ApiError> {
    if user == caller.name && (body.admin == Some(false) || body.disabled == Some(true)) {
        return Err(ApiError::bad_request(
            "you cannot remove your own admin rights or disable yourself; ask another admin",
        ));
    }
    Ok(Json(
        state
            .gov
            .update_user(&user, body.admin, body.disabled)
            .await?,
    ))
}

/// Create an API token. The secret is in the response and nowhere else.
#[utoipa::path(post, path = "/api/v1/tokens", tag = "identity", security(("bearer" = [])),
    request_body = CreateToken, responses((status = 201, body = NewToken), (status = 403, body = crate::ErrorBody)))]
pub(crate) async fn create_token(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiJson(body): ApiJson<CreateToken>,
) -> Result<(StatusCode, Json<NewToken>), ApiError> {
    let owner = body.user.unwrap_or_else(|| caller.name.clone());
    if owner != caller.name && !caller.is_admin {
        return Err(ApiError::forbidden(
            "only global admins may create tokens for other users",
        ));
    }
    let scope = body.scope.unwrap_or_default();
    if scope == qanat_governance::TokenScope::Metrics && !caller.is_admin {
        return Err(ApiError::forbidden(
            "only global admins may create tokens scoped to metrics (they read every project's series)",
        ));
    }
    let expires_at = match body.expires_in_seconds {
        None => None,
        Some(s) if s > 0 && s <= 100 * 365 * 86_400 => {
            Some(qanat_store::now_micros() + s * 1_000_000)
        }
        Some(_) => {
            return Err(ApiError::bad_request(
                "expires_in_seconds must be between 1 and 100 years",
            ))
        }
    };
    let grant = qanat_governance::TokenGrant {
        expires_at,
        scope,
        rate_limit: body.rate_limit,
    };
    let token = state
        .gov
        .create_token_with(&owner, &body.name, &grant)
        .await?;
    Ok((StatusCode::CREATED, Json(token)))
}

/// List tokens: your own, or (global admins) anyone's.
#[utoipa::path(get, path = "/api/v1/tokens", tag = "identity", security(("bearer" = [])),
    params(TokenFilter), responses((status = 200, body = [TokenInfo])))]
pub(crate) async fn list_tokens(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiQuery(q): ApiQuery<TokenFilter>,
) -> Result<Json<Vec<TokenInfo>>, ApiError> {
    let user = if caller.is_admin {
        q.user
    } else {
        if q.user.as_deref().is_some_and(|u| u != caller.name) {
            return Err(ApiError::forbidden(
                "only global admins may list other users' tokens",
            ));
        }
        Some(caller.name.clone())
    };
    Ok(Json(state.gov.tokens(user.as_deref()).await?))
}

/// Revoke a token: yours, or (global admins) anyone's.
#[utoipa::path(delete, path = "/api/v1/tokens/{id}", tag = "identity", security(("bearer" = [])),
    params(("id" = String, Path)), responses((status = 200, body = TokenInfo), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn revoke_token(
    State(state): State<AppState>,
    Caller(caller): Caller,
    ApiPath(id): ApiPath<String>,
) -> Result<Json<TokenInfo>, ApiError> {
    let token = state.gov.token(&id).await?;
    if token.user != caller.name && !caller.is_admin {
        return Err(ApiError::not_found(format!("token '{id}' does not exist")));
    }
    Ok(Json(state.gov.revoke_token(&id).await?))
}

/// Read the audit log with filters (global admins).
#[utoipa::path(get, path = "/api/v1/audit", tag = "audit", security(("bearer" = [])),
    params(AuditFilter), responses((status = 200, body = [AuditEntry])))]
pub(crate) async fn audit(
    State(state): State<AppState>,
    ApiQuery(p): ApiQuery<AuditFilter>,
) -> Result<Json<Vec<AuditEntry>>, ApiError> {
    Ok(Json(state.gov.query_audit(&p).await?))
}

/// Recompute the audit hash chain and report any entry changed, deleted or reordered.
#[utoipa::path(get, path = "/api/v1/audit/verify", tag = "audit", security(("bearer" = [])),
    responses((status = 200, body = AuditVerification)))]
pub(crate) async fn verify_audit(
    State(state): State<AppState>,
) -> Result<Json<AuditVerification>, ApiError> {
    Ok(Json(state.gov.verify_audit().await?))
}

/// Check checkpoints kept outside the database (the lines `{"checkpoint": …}` of an
/// audit sink) against the chain: a log truncated or rewritten below any of them is
/// reported.
#[utoipa::path(post, path = "/api/v1/audit/verify-checkpoints", tag = "audit", security(("bearer" = [])),
    request_body = [AuditCheckpoint], responses((status = 200, body = CheckpointVerification)))]
pub(crate) async fn verify_checkpoints(
    State(state): State<AppState>,
    ApiJson(checkpoints): ApiJson<Vec<AuditCheckpoint>>,
) -> Result<Json<CheckpointVerification>, ApiError> {
    if checkpoints.is_empty() {
        return Err(ApiError::bad_request(
            "send at least one checkpoint (the {\"checkpoint\": …} lines of an audit sink)",
        ));
    }
    let keys = state.storage.keyring();
    Ok(Json(
        state.gov.verify_checkpoints(keys, &checkpoints).await?,
    ))
}

/// Master key status (ids only, never keys).
#[utoipa::path(get, path = "/api/v1/admin/keys", tag = "keys", security(("bearer" = [])),
    responses((status = 200, body = KeyStatus)))]
pub(crate) async fn keys(State(state): State<AppState>) -> Json<KeyStatus> {
    let ring = state.storage.keyring();
    Json(KeyStatus {
        active_key_id: ring.active_key_id(),
        key_ids: ring.key_ids(),
        source: match ring.source() {
            KeyringSource::File(_) => "file".into(),
            KeyringSource::Env => "env".into(),
        },
    })
}

/// Rotate the master key: re-wrap every data key under a new master key; objects are
/// not rewritten and stay readable.
#[utoipa::path(post, path = "/api/v1/admin/keys/rotate", tag = "keys", security(("bearer" = [])),
    responses((status = 200, body = RotationView), (status = 400, body = crate::ErrorBody)))]
pub(crate) async fn rotate_keys(
    State(state): State<AppState>,
) -> Result<Json<RotationView>, ApiError> {
    let report: RotationReport =
        state
            .storage
            .keyring()
            .rotate(&state.meta)
            .await
            .map_err(|e| match e {
                qanat_store::Error::Keys(m) if m.contains("QANAT_MASTER_KEY") => {
                    ApiError::bad_request(m)
                }
                other => other.into(),
            })?;
    Ok(Json(RotationView {
        new_key_id: report.new_key_id,
        retired_key_ids: report.retired_key_ids,
        rewrapped_data_keys: report.rewrapped_data_keys,
    }))
}

/// Identities and tokens, the audit log, and master keys.
pub(crate) fn routes() -> Fragment {
    Fragment::default()
        .route(routes!(create_user), Policy::global_admin("user.create"))
        .route(routes!(list_users), Policy::global_admin("user.list"))
        .route(routes!(update_user), Policy::global_admin("user.update"))
        .route(routes!(create_token), Policy::authenticated("token.create"))
        .route(routes!(list_tokens), Policy::authenticated("token.list"))
        .route(routes!(revoke_token), Policy::authenticated("token.revoke"))
        .route(routes!(audit), Policy::global_admin("audit.read"))
        .route(routes!(verify_audit), Policy::global_admin("audit.verify"))
        .route(
            routes!(verify_checkpoints),
            Policy::global_admin("audit.verify_checkpoints").query(),
        )
        .route(routes!(keys), Policy::global_admin("keys.status"))
        .route(routes!(rotate_keys), Policy::global_admin("keys.rotate"))
}
