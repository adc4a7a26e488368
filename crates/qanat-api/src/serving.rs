//! The Open Inference Protocol (KServe v2) over REST, for every project's deployments
//! and registered models: server and model health and metadata, and inference with JSON
//! and binary tensors (`qanat_serving`). Errors are OIP's `{"error": "..."}`.
//!
//! Each route answers at its `/v2…` path for the server's default project (or the
//! project a `qanat-project` header names) and at `/oip/{project}/v2…` for any
//! project: Triton's HTTP client takes `host:port/oip/<project>` as its URL, and
//! KServe's clients a base URL; the gRPC service reads the same header.
//!
//! The probes and server metadata are public, as load balancers and Triton's clients
//! expect; model metadata and inference need a viewer of the project. Every answer is
//! recorded in the inference log (`qanat_serving::log`) rather than the audit chain,
//! whose hash-chained write per request would cap throughput; refusals are audited.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use qanat_governance::Role::{Editor, Viewer};
use qanat_serving::oip::{InferRequest, InferResponse, ModelMetadata, ServerMetadata};
use serde::Deserialize;
use serde_json::json;
use utoipa_axum::routes;

use crate::authz::Policy;
use crate::error::{ApiError, ErrorNote};
use crate::extract::{ApiPath, Caller, Scope};
use crate::route_table::Fragment;
use crate::AppState;

/// An error in OIP's shape: the status Qanat maps it to, the body `{"error": message}`.
pub(crate) struct OipError(ApiError);

impl<E: Into<ApiError>> From<E> for OipError {
    fn from(e: E) -> Self {
        OipError(e.into())
    }
}

impl IntoResponse for OipError {
    fn into_response(self) -> Response {
        let mut resp = self.0.into_response();
        // The caller-facing message (generic for an internal error, whose detail is
        // logged under the request id).
        let message = resp
            .extensions()
            .get::<ErrorNote>()
            .map(|n| n.0.clone())
            .unwrap_or_default();
        *resp.body_mut() = Body::from(json!({ "error": message }).to_string());
        resp
    }
}

/// Every error under `/v2` in OIP's one shape, `{"error": message}`, whichever layer
/// answered it (authorization's 401/403, a rate limit's 429, an unknown route's 404,
/// a body over the limit, an internal error's generic message).
pub(crate) async fn one_error_shape(
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let path = req.uri().path();
    let oip = path == "/v2" || path.starts_with("/v2/") || path.starts_with("/oip/");
    let resp = next.run(req).await;
    if !oip || resp.status().as_u16() < 400 {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    // Error bodies are small; anything larger is cut to its first 64 KiB.
    let bytes = axum::body::to_bytes(body, 64 << 10)
        .await
        .unwrap_or_default();
    let message = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(v) if v.get("error").is_some_and(serde_json::Value::is_string) => {
            return Response::from_parts(parts, Body::from(bytes));
        }
        Ok(v) => v
            .get("message")
            .and_then(serde_json::Value::as_str)
            .map_or_else(|| v.to_string(), str::to_string),
        Err(_) => String::from_utf8_lossy(&bytes).trim().to_string(),
    };
    let message = if message.is_empty() {
        parts
            .status
            .canonical_reason()
            .unwrap_or("error")
            .to_string()
    } else {
        message
    };
    parts.headers.remove(axum::http::header::CONTENT_LENGTH);
    parts
        .headers
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Response::from_parts(parts, Body::from(json!({ "error": message }).to_string()))
}

type Reply<T> = Result<Json<T>, OipError>;

#[derive(Deserialize)]
pub(crate) struct ModelPath {
    name: String,
}

#[derive(Deserialize)]
pub(crate) struct VersionPath {
    name: String,
    version: String,
}

/// The server: name, version and the protocol extensions it speaks.
#[utoipa::path(get, path = "/v2", tag = "serving",
    responses((status = 200, body = ServerMetadata)))]
pub(crate) async fn server_metadata() -> Json<ServerMetadata> {
    Json(ServerMetadata {
        name: "qanat".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        extensions: vec!["binary_tensor_data".into(), "model_repository".into()],
    })
}

/// Live: the process answers.
#[utoipa::path(get, path = "/v2/health/live", tag = "serving", responses((status = 200)))]
pub(crate) async fn live() -> Json<serde_json::Value> {
    Json(json!({ "live": true }))
}

/// Ready: the server takes inference requests.
#[utoipa::path(get, path = "/v2/health/ready", tag = "serving", responses((status = 200)))]
pub(crate) async fn ready() -> Json<serde_json::Value> {
    Json(json!({ "ready": true }))
}

async fn metadata(
    state: &AppState,
    scope: &Scope,
    name: &str,
    version: Option<&str>,
) -> Reply<ModelMetadata> {
    Ok(Json(
        state
            .serving
            .metadata(&scope.project, name, version)
            .await?,
    ))
}

/// A model's metadata: its versions, inputs and outputs (the newest version's).
#[utoipa::path(get, path = "/v2/models/{name}", tag = "serving", security(("bearer" = [])),
    params(("name" = String, Path)),
    responses((status = 200, body = ModelMetadata), (status = 404)))]
pub(crate) async fn model_metadata(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<ModelPath>,
) -> Reply<ModelMetadata> {
    metadata(&state, &scope, &path.name, None).await
}

/// A version's metadata.
#[utoipa::path(get, path = "/v2/models/{name}/versions/{version}", tag = "serving", security(("bearer" = [])),
    params(("name" = String, Path), ("version" = String, Path)),
    responses((status = 200, body = ModelMetadata), (status = 404)))]
pub(crate) async fn version_metadata(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<VersionPath>,
) -> Reply<ModelMetadata> {
    metadata(&state, &scope, &path.name, Some(&path.version)).await
}

async fn readiness(
    state: &AppState,
    scope: &Scope,
    name: &str,
    version: Option<&str>,
) -> Reply<serde_json::Value> {
    state.serving.ready(&scope.project, name, version).await?;
    Ok(Json(json!({ "name": name, "ready": true })))
}

/// Ready when the newest version is loaded (it is loaded on this call if need be).
#[utoipa::path(get, path = "/v2/models/{name}/ready", tag = "serving", security(("bearer" = [])),
    params(("name" = String, Path)), responses((status = 200), (status = 404)))]
pub(crate) async fn model_ready(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<ModelPath>,
) -> Reply<serde_json::Value> {
    readiness(&state, &scope, &path.name, None).await
}

/// Ready when the version is loaded.
#[utoipa::path(get, path = "/v2/models/{name}/versions/{version}/ready", tag = "serving", security(("bearer" = [])),
    params(("name" = String, Path), ("version" = String, Path)), responses((status = 200), (status = 404)))]
pub(crate) async fn version_ready(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<VersionPath>,
) -> Reply<serde_json::Value> {
    readiness(&state, &scope, &path.name, Some(&path.version)).await
}

/// The header of Triton's binary tensor extension: the length of the JSON part.
const JSON_LENGTH: &str = "inference-header-content-length";
/// The key a sticky (A/B) deployment routes by, when the request carries one.
const ROUTING_KEY: &str = "x-routing-key";

/// Reads the request (JSON whatever its content type — Triton's clients send none —
/// or JSON and binary tensors), runs it, and writes the response the same way.
async fn run(
    state: &AppState,
    scope: &Scope,
    principal: &qanat_governance::Principal,
    name: &str,
    version: Option<&str>,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<Response, OipError> {
    use qanat_serving::oip;
    let json_length = match headers.get(JSON_LENGTH) {
        None => None,
        Some(v) => Some(
            v.to_str()
                .ok()
                .and_then(|v| v.trim().parse::<usize>().ok())
                .ok_or_else(|| {
                    OipError(ApiError::bad_request(
                        "Inference-Header-Content-Length is not a byte count",
                    ))
                })?,
        ),
    };
    let req = oip::decode(body, json_length)?;
    let (parameters, outputs) = (req.parameters.clone(), req.outputs.clone());
    let caller = qanat_serving::Caller {
        actor: &principal.name,
        request_id: crate::request_id(headers),
        routing_key: headers.get(ROUTING_KEY).and_then(|v| v.to_str().ok()),
    };
    let answer = state
        .serving
        .infer(&scope.project, name, version, req, caller)
        .await?;
    let (bytes, json_length) = oip::encode(answer, parameters.as_ref(), outputs.as_deref())?;
    let mut resp = Response::new(Body::from(bytes));
    let h = resp.headers_mut();
    match json_length {
        None => {
            h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        Some(n) => {
            h.insert(
                CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            h.insert(JSON_LENGTH, HeaderValue::from(n));
        }
    }
    Ok(resp)
}

/// Inference on the newest version: tensors in (JSON, or JSON and binary data with
/// Triton's binary tensor extension), the model's outputs out.
#[utoipa::path(post, path = "/v2/models/{name}/infer", tag = "serving", security(("bearer" = [])),
    params(("name" = String, Path)), request_body = InferRequest,
    responses((status = 200, body = InferResponse), (status = 400), (status = 404)))]
pub(crate) async fn model_infer(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ApiPath(path): ApiPath<ModelPath>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OipError> {
    run(&state, &scope, &caller, &path.name, None, &headers, &body).await
}

/// Inference on a version.
#[utoipa::path(post, path = "/v2/models/{name}/versions/{version}/infer", tag = "serving", security(("bearer" = [])),
    params(("name" = String, Path), ("version" = String, Path)), request_body = InferRequest,
    responses((status = 200, body = InferResponse), (status = 400), (status = 404)))]
pub(crate) async fn version_infer(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ApiPath(path): ApiPath<VersionPath>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, OipError> {
    run(
        &state,
        &scope,
        &caller,
        &path.name,
        Some(&path.version),
        &headers,
        &body,
    )
    .await
}

/// `POST /v2/repository/index`'s body.
#[derive(Deserialize, Default, utoipa::ToSchema)]
#[serde(default)]
pub(crate) struct IndexRequest {
    /// Only the models ready on this server.
    ready: bool,
}

/// Triton's model-repository extension: the default project's deployments and
/// registered models, each `READY` on this server or `UNAVAILABLE` with the reason
/// (`unloaded` until a request or a load brings it in).
#[utoipa::path(post, path = "/v2/repository/index", tag = "serving", security(("bearer" = [])),
    request_body = IndexRequest,
    responses((status = 200, body = Vec<qanat_serving::RepositoryEntry>)))]
pub(crate) async fn repository_index(
    State(state): State<AppState>,
    scope: Scope,
    body: Bytes,
) -> Reply<Vec<qanat_serving::RepositoryEntry>> {
    let req: IndexRequest = if body.iter().all(u8::is_ascii_whitespace) {
        IndexRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            OipError(ApiError::bad_request(format!(
                "the body is not a repository index request: {e}"
            )))
        })?
    };
    Ok(Json(
        state
            .serving
            .repository_index(&scope.project, req.ready)
            .await?,
    ))
}

/// Loads a deployment or registered model on this server (editors): its versions are
/// loaded and probed before this answers.
#[utoipa::path(post, path = "/v2/repository/models/{name}/load", tag = "serving", security(("bearer" = [])),
    params(("name" = String, Path)), responses((status = 200), (status = 404)))]
pub(crate) async fn repository_load(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<ModelPath>,
) -> Reply<serde_json::Value> {
    state.serving.load(&scope.project, &path.name).await?;
    Ok(Json(json!({})))
}

/// Unloads a deployment or model from this server (editors); the next request loads
/// it again. Requests in flight finish.
#[utoipa::path(post, path = "/v2/repository/models/{name}/unload", tag = "serving", security(("bearer" = [])),
    params(("name" = String, Path)), responses((status = 200), (status = 404)))]
pub(crate) async fn repository_unload(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<ModelPath>,
) -> Reply<serde_json::Value> {
    state.serving.unload(&scope.project, &path.name).await?;
    Ok(Json(json!({})))
}

pub(crate) fn routes() -> Fragment {
    let read = |action| Policy::in_project(action, Viewer);
    // What a token scoped to inference may call.
    let oip = |action| read(action).inference();
    let editor = |action| Policy::in_project(action, Editor);
    // Each route at `/v2…` for the default project and at `/oip/{project}/v2…`.
    Fragment::default()
        .oip(routes!(server_metadata), Policy::public("serving.server"))
        .oip(routes!(live), Policy::public("serving.live"))
        .oip(routes!(ready), Policy::public("serving.ready"))
        .oip(routes!(model_metadata), oip("serving.model.read"))
        .oip(routes!(version_metadata), oip("serving.model.read"))
        .oip(routes!(model_ready), oip("serving.model.read"))
        .oip(routes!(version_ready), oip("serving.model.read"))
        // Each answer goes to the inference log (who, when, what, which version),
        // off the request path; refusals are audited by the authorization point.
        .oip(routes!(model_infer), oip("serving.infer").query())
        .oip(routes!(version_infer), oip("serving.infer").query())
        .oip(
            routes!(repository_index),
            read("serving.repository.index").query(),
        )
        .oip(routes!(repository_load), editor("serving.repository.load"))
        .oip(
            routes!(repository_unload),
            editor("serving.repository.unload"),
        )
}
