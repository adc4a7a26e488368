//! A project's encrypted object area: stream bytes in and out of a storage location,
//! with the project's residency policy checked before anything is written.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use qanat_governance::{check_residency, Project};
use qanat_store::{ObjectInfo, ObjectKey};
use qanat_types::store::wire::{LocationParam, ObjectListParams, ObjectView};

use qanat_governance::Role::{Editor, Viewer};
use utoipa_axum::routes;

use crate::authz::Policy;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery, Scope};
use crate::route_table::Fragment;
use crate::AppState;

/// Where a project's object lives in storage: under the project's stable id, so names
/// can change without moving bytes.
fn storage_key(project: &Project, key: Option<&str>) -> Result<ObjectKey, ApiError> {
    let base = format!("projects/{}/files", project.id);
    match key {
        None => Ok(base.parse()?),
        Some(k) => {
            let user_key: ObjectKey = k.parse()?;
            Ok(format!("{base}/{user_key}").parse()?)
        }
    }
}

fn resolve_location(state: &AppState, requested: Option<String>) -> String {
    requested.unwrap_or_else(|| state.storage.default_location().to_string())
}

/// Store an object (editors). The body streams straight into encrypted storage.
#[utoipa::path(put, path = "/api/v1/projects/{project}/objects/{*key}", tag = "objects", security(("bearer" = [])),
    params(("project" = String, Path), ("key" = String, Path), LocationParam),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, body = ObjectView), (status = 403, body = crate::ErrorBody, description = "forbidden, or residency violation")))]
pub(crate) async fn put_object(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<LocationParam>,
    body: Body,
) -> Result<(StatusCode, Json<ObjectView>), ApiError> {
    let (_, key) = path;
    let project = scope.project;
    let location = resolve_location(&state, q.location);
    let info = state.storage.location(&location)?;
    check_residency(&project, &info)?;
    let skey = storage_key(&project, Some(&key))?;
    let reader =
        tokio_util::io::StreamReader::new(body.into_data_stream().map_err(std::io::Error::other));
    let size = state.storage.put_reader(&location, &skey, reader).await?;
    Ok((
        StatusCode::CREATED,
        Json(ObjectView {
            key,
            location,
            region: info.region.to_string(),
            size,
            last_modified: None,
        }),
    ))
}

/// Read an object (viewers; audited). The plaintext streams out, each chunk verified.
#[utoipa::path(get, path = "/api/v1/projects/{project}/objects/{*key}", tag = "objects", security(("bearer" = [])),
    params(("project" = String, Path), ("key" = String, Path), LocationParam),
    responses((status = 200, content_type = "application/octet-stream", description = "the object's bytes"),
              (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn get_object(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<LocationParam>,
) -> Result<Response, ApiError> {
    let (_, key) = path;
    let project = scope.project;
    let location = resolve_location(&state, q.location);
    let skey = storage_key(&project, Some(&key))?;
    verified_download(&state, &location, &skey).await
}

/// Streams a stored object's verified plaintext. The first chunk is verified before the
/// status goes out, so a damaged small object (one chunk) gets a clean error status
/// instead of a 200 whose body breaks off. A later chunk that fails verification aborts
/// the response mid-body: the client sees a truncated transfer, never unverified bytes.
pub(crate) async fn verified_download(
    state: &AppState,
    location: &str,
    key: &ObjectKey,
) -> Result<Response, ApiError> {
    // The length comes from the object being read, so that it always matches the
    // bytes sent (the index can be a version behind after a crash).
    let (size, stream) = state.storage.get_sized(location, key).await?;
    verified_stream(size, stream, "object").await
}

/// Answers with the `size` bytes of `stream` once its first chunk came out whole
/// (decrypted and verified): a failure before the status goes out is a clean error; a
/// later one cuts the body short. `what` names the stream in the log.
pub(crate) async fn verified_stream<S, E>(
    size: u64,
    stream: S,
    what: &'static str,
) -> Result<Response, ApiError>
where
    S: futures::Stream<Item = Result<Bytes, E>> + Send + 'static,
    E: std::fmt::Display + Into<ApiError> + 'static,
{
    let mut stream = Box::pin(stream);
    let first = match stream.next().await {
        Some(chunk) => chunk.map_err(Into::into)?,
        None => Bytes::new(),
    };
    let rest = futures::stream::once(async move { Ok(first) }).chain(stream);
    let body = Body::from_stream(rest.map_err(move |e| {
        tracing::error!(error = %e, "{what} stream failed");
        std::io::Error::other(e.to_string())
    }));
    Ok((
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, size.to_string()),
        ],
        body,
    )
        .into_response())
}

/// Delete an object and its data key (editors).
#[utoipa::path(delete, path = "/api/v1/projects/{project}/objects/{*key}", tag = "objects", security(("bearer" = [])),
    params(("project" = String, Path), ("key" = String, Path), LocationParam),
    responses((status = 204), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn delete_object(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
    ApiQuery(q): ApiQuery<LocationParam>,
) -> Result<StatusCode, ApiError> {
    let (_, key) = path;
    let project = scope.project;
    let location = resolve_location(&state, q.location);
    let skey = storage_key(&project, Some(&key))?;
    state.storage.delete(&location, &skey).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// List a project's objects.
#[utoipa::path(get, path = "/api/v1/projects/{project}/objects", tag = "objects", security(("bearer" = [])),
    params(("project" = String, Path), ObjectListParams),
    responses((status = 200, body = [ObjectView])))]
pub(crate) async fn list(
    State(state): State<AppState>,
    scope: Scope,
    ApiQuery(q): ApiQuery<ObjectListParams>,
) -> Result<Json<Vec<ObjectView>>, ApiError> {
    let project = scope.project;
    let location = resolve_location(&state, q.location);
    let info = state.storage.location(&location)?;
    let base = storage_key(&project, None)?;
    let prefix = storage_key(&project, q.prefix.as_deref())?;
    let strip = format!("{base}/");
    let objects: Vec<ObjectInfo> = state.storage.list(&location, Some(&prefix)).await?;
    Ok(Json(
        objects
            .into_iter()
            .map(|o| ObjectView {
                key: o.key.strip_prefix(&strip).unwrap_or(&o.key).to_string(),
                location: location.clone(),
                region: info.region.to_string(),
                size: o.size,
                last_modified: Some(o.last_modified.to_rfc3339()),
            })
            .collect(),
    ))
}

/// The project's encrypted file area. Transfers stream; listing and deletion do not.
pub(crate) fn routes() -> Fragment {
    Fragment::default()
        .route(routes!(list), Policy::in_project("object.list", Viewer))
        .streaming(
            routes!(put_object),
            Policy::in_project("object.write", Editor),
        )
        .streaming(
            routes!(get_object),
            Policy::in_project("object.read", Viewer).governed_read(),
        )
        .route(
            routes!(delete_object),
            Policy::in_project("object.delete", Editor),
        )
}
