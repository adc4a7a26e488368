//! Datasets: create and list them; push (chunks, then a manifest commit); pull
//! (manifest, then files); log and tags.

use axum::body::Body;
use axum::extract::State;
use axum::http::StatusCode;
use axum::http::{header, HeaderName};
use axum::response::{IntoResponse, Response};
use axum::Json;
use qanat_data::tabular::{declared_pii, protected_columns, redact_profile, undeclared_pii};
use qanat_data::wire::{
    ChunkIds, ChunkStored, CommitVersion, CopyBody, DiffParams, DiffView, ListDatasets,
    MissingChunks, PseudonymizedFile, TagBody, VersionWithManifest,
};
use qanat_data::{
    pack, ChunkId, Dataset, DatasetVersion, Erasure, ErasureRequest, NewDataset, UpdateDataset,
    VersionRef, MAX_CHUNK,
};
use qanat_governance::wire::LineageParams;

use crate::error::{ApiError, ReadNote};
use qanat_governance::Role::{Admin, Editor, Viewer};
use utoipa_axum::routes;

use crate::authz::Policy;
use crate::extract::{ApiJson, ApiPath, Caller, Scope};
use crate::route_table::Fragment;
use crate::AppState;

fn version_ref(s: &str) -> Result<VersionRef, ApiError> {
    s.parse::<VersionRef>()
        .map_err(|e| ApiError::bad_request(e.to_string()))
}

/// Create a dataset (editors).
#[utoipa::path(post, path = "/api/v1/projects/{project}/datasets", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path)), request_body = NewDataset,
    responses((status = 201, body = Dataset), (status = 403, body = crate::ErrorBody), (status = 409, body = crate::ErrorBody)))]
pub(crate) async fn create(
    State(state): State<AppState>,
    Caller(caller): Caller,
    scope: Scope,
    ApiJson(body): ApiJson<NewDataset>,
) -> Result<(StatusCode, Json<Dataset>), ApiError> {
    let p = scope.project;
    let d = state.datasets.create(&p, body, &caller.name).await?;
    Ok((StatusCode::CREATED, Json(d)))
}

/// A project's datasets (with `deleted=true`: the deleted ones not purged yet).
#[utoipa::path(get, path = "/api/v1/projects/{project}/datasets", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ListDatasets), responses((status = 200, body = [Dataset])))]
pub(crate) async fn list(
    State(state): State<AppState>,
    scope: Scope,
    crate::extract::ApiQuery(q): crate::extract::ApiQuery<ListDatasets>,
) -> Result<Json<Vec<Dataset>>, ApiError> {
    let p = scope.project;
    Ok(Json(if q.deleted {
        state.datasets.list_deleted(&p).await?
    } else {
        state.datasets.list(&p).await?
    }))
}

/// Delete a dataset (project admins): hidden at once, restorable, and purged with its
/// bytes by `gc` after the retention period (`retention.deleted_days`).
#[utoipa::path(delete, path = "/api/v1/projects/{project}/datasets/{dataset}", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path)),
    responses((status = 200, body = Dataset), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn delete_one(
    State(state): State<AppState>,
    Caller(caller): Caller,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
) -> Result<Json<Dataset>, ApiError> {
    let (_, dataset) = path;
    Ok(Json(
        state
            .datasets
            .delete(&scope.project, &dataset, &caller.name)
            .await?,
    ))
}

/// Bring back a deleted dataset that `gc` has not purged yet (project admins).
#[utoipa::path(post, path = "/api/v1/projects/{project}/datasets/{dataset}/restore", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path)),
    responses((status = 200, body = Dataset), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn restore(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
) -> Result<Json<Dataset>, ApiError> {
    let (_, dataset) = path;
    Ok(Json(
        state.datasets.restore(&scope.project, &dataset).await?,
    ))
}

/// One dataset.
#[utoipa::path(get, path = "/api/v1/projects/{project}/datasets/{dataset}", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path)),
    responses((status = 200, body = Dataset), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn get_one(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
) -> Result<Json<Dataset>, ApiError> {
    let (_, dataset) = path;
    Ok(Json(state.datasets.get(&scope.project, &dataset).await?))
}

/// Which of these chunks still need uploading (editors; part of a push).
#[utoipa::path(post, path = "/api/v1/projects/{project}/datasets/{dataset}/chunks/missing", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path)), request_body = ChunkIds,
    responses((status = 200, body = MissingChunks)))]
pub(crate) async fn missing(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<ChunkIds>,
) -> Result<Json<MissingChunks>, ApiError> {
    let (_, dataset) = path;
    if body.ids.len() > 10_000 {
        return Err(ApiError::bad_request(
            "ask about at most 10000 chunks at a time",
        ));
    }
    let d = state.datasets.get(&scope.project, &dataset).await?;
    Ok(Json(MissingChunks {
        missing: state.datasets.missing_chunks(&d, &body.ids).await?,
    }))
}

/// Upload one chunk (editors; part of a push). The body must hash to the id.
#[utoipa::path(put, path = "/api/v1/projects/{project}/datasets/{dataset}/chunks/{chunk}", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path), ("chunk" = String, Path, description = "BLAKE3 of the bytes, hex")),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, body = ChunkStored), (status = 400, body = crate::ErrorBody), (status = 403, body = crate::ErrorBody)))]
pub(crate) async fn put_chunk(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String, String)>,
    body: Body,
) -> Result<(StatusCode, Json<ChunkStored>), ApiError> {
    let (_, dataset, chunk) = path;
    let id: ChunkId = chunk.parse()?;
    let p = scope.project;
    let d = state.datasets.get(&p, &dataset).await?;
    let data = read_body(body, MAX_CHUNK as usize, "a chunk").await?;
    let new = state.datasets.put_chunk(&p, &d, id, data).await?;
    Ok((StatusCode::CREATED, Json(ChunkStored { id: chunk, new })))
}

/// Packs processed at once, whatever the number of clients.
static PACK_SLOTS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(8);

/// Upload a pack of chunks in one request (editors; part of a push). The body is a
/// sequence of frames: the chunk's 32-byte BLAKE3 id, its length as a big-endian u32,
/// its bytes; at most 64 chunks. Every chunk must hash to its id, or nothing is stored.
#[utoipa::path(post, path = "/api/v1/projects/{project}/datasets/{dataset}/chunks", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path)),
    request_body(content = Vec<u8>, content_type = "application/octet-stream"),
    responses((status = 201, body = qanat_data::PackStored), (status = 400, body = crate::ErrorBody), (status = 403, body = crate::ErrorBody)))]
pub(crate) async fn put_pack(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
    body: Body,
) -> Result<(StatusCode, Json<qanat_data::PackStored>), ApiError> {
    let (_, dataset) = path;
    let p = scope.project;
    let d = state.datasets.get(&p, &dataset).await?;
    // Packs are held whole in memory (body plus sealed copies): bound how many at once.
    let _slot = PACK_SLOTS.acquire().await.map_err(|_| {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "TEMPORARILY_UNAVAILABLE",
            "the server is shutting down",
        )
    })?;
    let data = read_body(body, pack::MAX_PACK_BYTES, "a chunk pack").await?;
    let chunks = pack::parse(data)?;
    let stored = state.datasets.put_chunks(&p, &d, chunks).await?;
    Ok((StatusCode::CREATED, Json(stored)))
}

/// Reads a whole body of at most `limit` bytes. Over the limit is a 413; any other
/// failure (the client went away, a broken transfer encoding) is the caller's to fix
/// too, and says what happened.
async fn read_body(body: Body, limit: usize, what: &str) -> Result<bytes::Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let cause = e.into_inner();
        if cause.is::<http_body_util::LengthLimitError>() {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "REQUEST_TOO_LARGE",
                format!("{what} is at most {limit} bytes"),
            )
        } else {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "MALFORMED_REQUEST",
                format!("reading {what} failed: {cause}"),
            )
        }
    })
}

/// Commit a version from uploaded chunks (editors). Atomic: all or nothing.
#[utoipa::path(post, path = "/api/v1/projects/{project}/datasets/{dataset}/versions", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path)), request_body = CommitVersion,
    responses((status = 201, body = DatasetVersion), (status = 400, body = crate::ErrorBody)))]
pub(crate) async fn commit(
    State(state): State<AppState>,
    Caller(caller): Caller,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<CommitVersion>,
) -> Result<(StatusCode, Json<DatasetVersion>), ApiError> {
    let (_, dataset) = path;
    let p = scope.project;
    let d = state.datasets.get(&p, &dataset).await?;
    let derived_from = body
        .derived_from
        .iter()
        .map(|r| qanat_core::ObjectRef::parse_of(qanat_core::Kind::Dataset, r))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ApiError::bad_request(format!("derived_from: {e}")))?;
    let v = state
        .datasets
        .commit(
            &p,
            &d,
            body.manifest,
            &body.message,
            &caller.name,
            &derived_from,
        )
        .await?;
    Ok((StatusCode::CREATED, Json(v)))
}

/// A dataset's versions, newest first.
#[utoipa::path(get, path = "/api/v1/projects/{project}/datasets/{dataset}/versions", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path)),
    responses((status = 200, body = [DatasetVersion])))]
pub(crate) async fn log(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
) -> Result<Json<Vec<DatasetVersion>>, ApiError> {
    let (_, dataset) = path;
    let d = state.datasets.get(&scope.project, &dataset).await?;
    Ok(Json(state.datasets.versions(&d).await?))
}

/// One version with its manifest (viewers; audited as the start of a pull). For a
/// reader without the project's PII permission, the profiles of personal-data columns
/// hold no values and `pseudonymized` lists the files they get pseudonymized.
#[utoipa::path(get, path = "/api/v1/projects/{project}/datasets/{dataset}/versions/{version}", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path), ("version" = String, Path, description = "number, v<number>, tag or latest")),
    responses((status = 200, body = VersionWithManifest), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn show(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ApiPath(path): ApiPath<(String, String, String)>,
) -> Result<Response, ApiError> {
    let (_, dataset, version) = path;
    let d = state.datasets.get(&scope.project, &dataset).await?;
    let v = state.datasets.resolve(&d, &version_ref(&version)?).await?;
    let clear = state.gov.reads_pii(&scope.project, &caller).await?;
    let shown = shown_version(&state, &d, v, clear).await?;
    let note = pii_note(&shown.protected, clear);
    let mut resp = Json(shown.body).into_response();
    if let Some(n) = note {
        resp.extensions_mut().insert(ReadNote(n));
    }
    Ok(resp)
}

/// A version as one reader may see it, and the personal-data columns of each file.
pub(crate) struct ShownVersion {
    pub body: VersionWithManifest,
    /// (file index, path, columns) of every file with personal data.
    pub protected: Vec<PseudonymizedFile>,
}

/// The version, its manifest and its profiles, with the undeclared personal data
/// flagged and, unless `clear`, the values of personal-data columns taken out of the
/// profiles.
pub(crate) async fn shown_version(
    state: &AppState,
    d: &Dataset,
    mut v: DatasetVersion,
    clear: bool,
) -> Result<ShownVersion, ApiError> {
    let manifest = state.datasets.manifest(d, &v).await?;
    let mut profiles = state.datasets.profiles(d, &v).await?;
    let declared = declared_pii(d.schema.as_ref(), &d.pii_columns);
    v.undeclared_pii = undeclared_pii(&profiles, &declared);
    let mut protected = Vec::new();
    for (index, f) in manifest.files.iter().enumerate() {
        let Some(fp) = profiles.iter_mut().find(|p| p.path == f.path) else {
            continue;
        };
        if !clear {
            // Why a table was not profiled may quote one of its rows.
            if let Some(e) = &mut fp.error {
                *e = without_values(e);
            }
        }
        let columns = match fp.profile.as_mut() {
            Some(p) => {
                let columns = protected_columns(p, &declared);
                if !clear {
                    redact_profile(p, &columns);
                }
                columns
            }
            None => declared.clone(),
        };
        if columns.is_empty() {
            continue;
        }
        protected.push(PseudonymizedFile {
            index,
            path: f.path.clone(),
            columns,
        });
    }
    Ok(ShownVersion {
        body: VersionWithManifest {
            version: v,
            manifest,
            profiles,
            pseudonymized: if clear { Vec::new() } else { protected.clone() },
        },
        protected,
    })
}

/// A profiling error without the row it may quote (Arrow's CSV errors end with the
/// row's values).
fn without_values(e: &str) -> String {
    let cut = ["Row data", "row data", "Row:"]
        .iter()
        .filter_map(|m| e.find(m))
        .min()
        .unwrap_or(e.len());
    let mut out: String = e[..cut].chars().take(300).collect();
    if cut < e.len() {
        out.push_str("(the row's values are left out)");
    }
    out
}

/// What the audit entry of a read adds about personal data: read in clear (with the
/// PII permission) or pseudonymized.
pub(crate) fn pii_note(protected: &[PseudonymizedFile], clear: bool) -> Option<String> {
    if protected.is_empty() {
        return None;
    }
    let files: Vec<String> = protected
        .iter()
        .take(20)
        .map(|p| {
            let cols: Vec<String> = p
                .columns
                .iter()
                .map(|c| c.escape_debug().to_string())
                .collect();
            format!("{} [{}]", p.path.escape_debug(), cols.join(", "))
        })
        .collect();
    let more = if protected.len() > 20 {
        format!(" and {} more file(s)", protected.len() - 20)
    } else {
        String::new()
    };
    Some(format!(
        "{}: {}{more}",
        if clear {
            "PII read in clear (PII permission)"
        } else {
            "PII pseudonymized"
        },
        files.join("; ")
    ))
}

/// One file of a version, by its index in the manifest (viewers; audited). A table
/// with personal data comes pseudonymized to a reader without the project's PII
/// permission: its own bytes, size and BLAKE3 (`X-Qanat-Blake3`,
/// `X-Qanat-Pseudonymized: 1`); read in clear, the audit entry says so.
#[utoipa::path(get, path = "/api/v1/projects/{project}/datasets/{dataset}/versions/{version}/files/{index}", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path), ("version" = String, Path), ("index" = usize, Path)),
    responses((status = 200, content_type = "application/octet-stream", description = "the file's bytes"), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn file(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ApiPath(path): ApiPath<(String, String, String, usize)>,
) -> Result<Response, ApiError> {
    let (_, dataset, version, index) = path;
    let d = state.datasets.get(&scope.project, &dataset).await?;
    let v = state.datasets.resolve(&d, &version_ref(&version)?).await?;
    let manifest = state.datasets.manifest(&d, &v).await?;
    let entry = manifest.files.get(index).cloned().ok_or_else(|| {
        ApiError::not_found(format!(
            "version {} has {} files; no file #{index}",
            v.version,
            manifest.files.len()
        ))
    })?;
    state.datasets.check_not_erased(&d, &entry).await?;
    let table = state
        .datasets
        .pii_columns(&d, &v)
        .await?
        .remove(&entry.path);
    let Some(table) = table else {
        return crate::objects::verified_stream(
            entry.size,
            state.datasets.file_stream(&d, entry),
            "dataset file",
        )
        .await;
    };
    let protected = [PseudonymizedFile {
        index,
        path: entry.path.clone(),
        columns: table.columns.clone(),
    }];
    if state.gov.reads_pii(&scope.project, &caller).await? {
        let mut resp = crate::objects::verified_stream(
            entry.size,
            state.datasets.file_stream(&d, entry),
            "dataset file",
        )
        .await?;
        if let Some(n) = pii_note(&protected, true) {
            resp.extensions_mut().insert(ReadNote(n));
        }
        return Ok(resp);
    }
    let [PseudonymizedFile { columns, .. }] = protected;
    let done = state
        .datasets
        .pseudonymized_file(&d, &entry, columns.clone())
        .await?;
    // Fail closed: a column the profile names that the rewriter did not find is not
    // sent in clear.
    if table.profiled {
        if let Some(c) = columns.iter().find(|c| !done.columns.contains(c)) {
            return Err(ApiError::internal(format!(
                "{}: personal-data column '{}' was not found to pseudonymize; the file is not sent",
                entry.path,
                c.escape_debug()
            )));
        }
    }
    let file = tokio::fs::File::from_std(
        done.file
            .reopen()
            .map_err(|e| ApiError::internal(format!("reopening a pseudonymized file: {e}")))?,
    );
    // The name goes now; the open file keeps the bytes until the response ends.
    drop(done.file);
    let body = Body::from_stream(tokio_util::io::ReaderStream::with_capacity(file, 1 << 20));
    let mut resp = (
        [
            (header::CONTENT_TYPE, "application/octet-stream".to_string()),
            (header::CONTENT_LENGTH, done.size.to_string()),
            (HeaderName::from_static("x-qanat-blake3"), done.blake3),
            (
                HeaderName::from_static("x-qanat-pseudonymized"),
                "1".to_string(),
            ),
        ],
        body,
    )
        .into_response();
    let note = pii_note(
        &[PseudonymizedFile {
            index,
            path: entry.path.clone(),
            columns: done.columns,
        }],
        false,
    );
    if let Some(n) = note {
        resp.extensions_mut().insert(ReadNote(n));
    }
    Ok(resp)
}

/// Declare which columns of a dataset hold personal data (editors; audited): the
/// whole list, beside the schema's `pii: true` columns. Declared columns are
/// pseudonymized for readers without the PII permission and no longer flagged.
#[utoipa::path(patch, path = "/api/v1/projects/{project}/datasets/{dataset}", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path)), request_body = UpdateDataset,
    responses((status = 200, body = Dataset), (status = 400, body = crate::ErrorBody), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn update(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ApiPath(path): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<UpdateDataset>,
) -> Result<Json<Dataset>, ApiError> {
    let (_, dataset) = path;
    let d = state.datasets.get(&scope.project, &dataset).await?;
    let d = match &body.pii_columns {
        Some(cols) => {
            // Taking a column out of the declaration shows it in clear to every
            // reader (of every version): a project admin's or a PII reader's call.
            if let Some(c) = d.pii_columns.iter().find(|c| !cols.contains(c)) {
                let may = scope.role.is_some_and(|r| r >= Admin)
                    || state.gov.reads_pii(&scope.project, &caller).await?;
                if !may {
                    return Err(ApiError::forbidden(format!(
                        "undeclaring '{}' would show it in clear to every reader; only a project admin or a holder of the project's PII permission may",
                        c.escape_debug()
                    )));
                }
            }
            state
                .datasets
                .set_pii_columns(&scope.project, &d, cols)
                .await?
        }
        None => d,
    };
    Ok(Json(d))
}

/// Name a version (editors). Tags are immutable.
#[utoipa::path(put, path = "/api/v1/projects/{project}/datasets/{dataset}/tags/{tag}", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path), ("tag" = String, Path)), request_body = TagBody,
    responses((status = 200, body = DatasetVersion), (status = 409, body = crate::ErrorBody)))]
pub(crate) async fn tag(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String, String)>,
    ApiJson(body): ApiJson<TagBody>,
) -> Result<Json<DatasetVersion>, ApiError> {
    let (_, dataset, tag) = path;
    let d = state.datasets.get(&scope.project, &dataset).await?;
    let v = state
        .datasets
        .resolve(&d, &version_ref(&body.version)?)
        .await?;
    Ok(Json(state.datasets.tag(&d, &tag, v.version).await?))
}

/// Files added, removed and changed between two versions (viewers; audited).
#[utoipa::path(get, path = "/api/v1/projects/{project}/datasets/{dataset}/diff", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path), DiffParams),
    responses((status = 200, body = DiffView), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn diff(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ApiPath(path): ApiPath<(String, String)>,
    crate::extract::ApiQuery(q): crate::extract::ApiQuery<DiffParams>,
) -> Result<Json<DiffView>, ApiError> {
    let (_, dataset) = path;
    let d = state.datasets.get(&scope.project, &dataset).await?;
    let a = state.datasets.resolve(&d, &version_ref(&q.from)?).await?;
    let b = state.datasets.resolve(&d, &version_ref(&q.to)?).await?;
    let ma = state.datasets.manifest(&d, &a).await?;
    let mb = state.datasets.manifest(&d, &b).await?;
    let mut pa = state.datasets.profiles(&d, &a).await?;
    let mut pb = state.datasets.profiles(&d, &b).await?;
    if !state.gov.reads_pii(&scope.project, &caller).await? {
        redact_profiles(&d, &mut pa);
        redact_profiles(&d, &mut pb);
    }
    Ok(Json(DiffView {
        from: a.version,
        to: b.version,
        diff: qanat_data::diff(&ma, &mb)?,
        tables: qanat_data::table_deltas(&pa, &pb),
    }))
}

/// Profiles without the values of personal-data columns (declared or found), as a
/// reader without the PII permission sees them.
pub(crate) fn redact_profiles(d: &Dataset, profiles: &mut [qanat_data::FileProfile]) {
    let declared = declared_pii(d.schema.as_ref(), &d.pii_columns);
    for p in profiles.iter_mut().filter_map(|fp| fp.profile.as_mut()) {
        let columns = protected_columns(p, &declared);
        redact_profile(p, &columns);
    }
}

/// A lineage node for `reference`, checked to exist and made canonical (a model alias
/// or dataset tag becomes its version number).
async fn canonical_ref(
    state: &AppState,
    p: &qanat_governance::Project,
    reference: &str,
) -> Result<String, ApiError> {
    use qanat_core::{Kind, ObjectRef, Selector};
    let r: ObjectRef = reference
        .parse()
        .map_err(|e: qanat_core::RefError| ApiError::bad_request(e.to_string()))?;
    let canonical = match r.kind {
        Kind::Dataset => state.datasets.canonical_ref(p, &r).await?,
        Kind::Model => {
            let version = match r.selector_or_latest() {
                Selector::Version(n) => {
                    state
                        .tracking
                        .model_version(p, &r.name, &n.to_string())
                        .await?
                        .version
                }
                Selector::Label(alias) => {
                    state
                        .tracking
                        .version_by_alias(p, &r.name, alias.as_str())
                        .await?
                        .version
                }
                Selector::Latest => {
                    return Err(ApiError::bad_request(format!(
                        "'{reference}': name the model version or alias, e.g. {}",
                        ObjectRef::at(Kind::Model, r.name, "champion")
                    )))
                }
            };
            let version = version.parse().map_err(|_| {
                ApiError::internal(format!("model version '{version}' is not a number"))
            })?;
            ObjectRef::version(Kind::Model, r.name, version)
        }
        Kind::Run => {
            state.tracking.run(p, &r.name).await?;
            r
        }
        Kind::LoggedModel => {
            state.tracking.logged_model(p, &r.name, true).await?;
            r
        }
        Kind::User | Kind::DriftReport | Kind::InferenceLog | Kind::Erasure => r,
        Kind::FeatureView => {
            let version = match r.selector_or_latest() {
                Selector::Version(n) => Some(n),
                Selector::Latest => None,
                Selector::Label(l) => {
                    return Err(ApiError::bad_request(format!(
                        "'{reference}': feature views have version numbers, not labels ('{l}')"
                    )))
                }
            };
            let o = state
                .features
                .object(p, qanat_features::ObjectKind::FeatureView, &r.name, version)
                .await?;
            ObjectRef::version(Kind::FeatureView, o.name, o.version)
        }
    };
    Ok(canonical.to_string())
}

/// Where an object came from: its upstream lineage graph (viewers).
#[utoipa::path(get, path = "/api/v1/projects/{project}/lineage", tag = "lineage", security(("bearer" = [])),
    params(("project" = String, Path), LineageParams),
    responses((status = 200, body = qanat_governance::LineageGraph), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn lineage(
    State(state): State<AppState>,
    scope: Scope,
    crate::extract::ApiQuery(q): crate::extract::ApiQuery<LineageParams>,
) -> Result<Json<qanat_governance::LineageGraph>, ApiError> {
    let p = scope.project;
    let root = canonical_ref(&state, &p, &q.reference).await?;
    let depth = q.depth.unwrap_or(10).min(100);
    Ok(Json(state.gov.lineage_upstream(&p.id, &root, depth).await?))
}

/// Copy a version into another dataset, possibly in another storage location
/// (editors; residency is checked at the destination).
#[utoipa::path(post, path = "/api/v1/projects/{project}/datasets/{dataset}/copy", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path)), request_body = CopyBody,
    responses((status = 201, body = DatasetVersion), (status = 403, body = crate::ErrorBody)))]
pub(crate) async fn copy(
    State(state): State<AppState>,
    Caller(caller): Caller,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
    ApiJson(body): ApiJson<CopyBody>,
) -> Result<(StatusCode, Json<DatasetVersion>), ApiError> {
    let (_, dataset) = path;
    let p = scope.project;
    let src = state.datasets.get(&p, &dataset).await?;
    let dst = state.datasets.get(&p, &body.to).await?;
    let version = version_ref(body.version.as_deref().unwrap_or("latest"))?;
    let v = state
        .datasets
        .copy_version(&p, &src, &version, &dst, &body.message, &caller.name)
        .await?;
    Ok((StatusCode::CREATED, Json(v)))
}

/// Erase one data subject's rows from a dataset (project admins; audited): a new
/// version without them, and the chunks of every older version that held them
/// destroyed (their data keys first), recorded in lineage as `erasure:<request_id>`.
/// Sending the same request again finishes one that stopped part-way.
#[utoipa::path(post, path = "/api/v1/projects/{project}/datasets/{dataset}/erasures", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path)), request_body = ErasureRequest,
    responses((status = 201, body = Erasure), (status = 400, body = crate::ErrorBody), (status = 409, body = crate::ErrorBody)))]
pub(crate) async fn erase(
    State(state): State<AppState>,
    scope: Scope,
    Caller(caller): Caller,
    ApiPath(path): ApiPath<(String, String)>,
    body: axum::body::Bytes,
) -> Result<Response, ApiError> {
    let (_, dataset) = path;
    // The body names the subject's values: a malformed one is refused without
    // quoting it (the refusal goes to the audit log).
    let body: ErasureRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(format!(
            "the body is not an erasure request ({:?} at line {} column {}): send {{\"request_id\": \"…\", \"match\": [{{\"column\": \"…\", \"values\": [\"…\"]}}], \"reason\": \"…\"}} with every value as text",
            e.classify(),
            e.line(),
            e.column()
        ))
    })?;
    let d = state.datasets.get(&scope.project, &dataset).await?;
    // The work goes on if the request times out or the caller leaves: an erasure
    // stopped half-way is finished by sending it again, but need not be.
    let datasets = state.datasets.clone();
    let project = scope.project.clone();
    let by = caller.name.clone();
    let e = tokio::spawn(async move { datasets.erase(&project, &d, &body, &by).await })
        .await
        .map_err(|e| ApiError::internal(format!("the erasure stopped: {e}")))??;
    // The audit entry names the request and what it did, never the values.
    let note = format!(
        "erasure {} of {} ({}): {} row(s) removed{}, {} file(s) of {} version(s) held them, {} chunk(s) destroyed{}",
        e.request_id,
        e.dataset,
        e.columns.join(", "),
        e.rows_removed,
        e.new_version
            .map(|v| format!(" in new version {v}"))
            .unwrap_or_default(),
        e.files.len(),
        e.files
            .iter()
            .map(|f| f.version)
            .collect::<std::collections::BTreeSet<_>>()
            .len(),
        e.chunks_shredded,
        if e.also_unreadable.is_empty() {
            String::new()
        } else {
            format!(
                "; also unreadable now: {}",
                e.also_unreadable
                    .iter()
                    .map(|a| format!("{}@{} {}", a.dataset, a.version, a.path))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
    );
    let mut resp = (StatusCode::CREATED, Json(e)).into_response();
    resp.extensions_mut().insert(ReadNote(note));
    Ok(resp)
}

/// The erasures of a dataset (viewers; audited): each request, what it matched on
/// (the columns, never the values), and what it removed and destroyed.
#[utoipa::path(get, path = "/api/v1/projects/{project}/datasets/{dataset}/erasures", tag = "datasets", security(("bearer" = [])),
    params(("project" = String, Path), ("dataset" = String, Path)),
    responses((status = 200, body = [Erasure]), (status = 404, body = crate::ErrorBody)))]
pub(crate) async fn list_erasures(
    State(state): State<AppState>,
    scope: Scope,
    ApiPath(path): ApiPath<(String, String)>,
) -> Result<Json<Vec<Erasure>>, ApiError> {
    let (_, dataset) = path;
    Ok(Json(
        state
            .datasets
            .erasures(&scope.project, Some(&dataset))
            .await?,
    ))
}

/// A version's manifest may list many files; its JSON gets a larger limit.
const MAX_MANIFEST_BYTES: usize = 256 << 20;

/// Datasets and lineage. Chunk uploads are staging writes (audited when the commit
/// makes them visible); file reads, copies and gc stream.
pub(crate) fn routes() -> Fragment {
    let read = |action| Policy::in_project(action, Viewer).governed_read();
    let write = |action| Policy::in_project(action, Editor);
    Fragment::default()
        .route(routes!(create), write("dataset.create"))
        .route(routes!(list), read("dataset.list"))
        .route(routes!(get_one), read("dataset.get"))
        .route(routes!(update), write("dataset.declare_pii"))
        .route(
            routes!(delete_one),
            Policy::in_project("dataset.delete", Admin),
        )
        .route(
            routes!(restore),
            Policy::in_project("dataset.restore", Admin),
        )
        .route(routes!(missing), write("dataset.push.check").staging())
        .route(routes!(put_pack), write("dataset.push.chunks").staging())
        .route(routes!(put_chunk), write("dataset.push.chunk").staging())
        .route(routes!(commit), write("dataset.push"))
        .body_limit(MAX_MANIFEST_BYTES)
        .route(routes!(log), read("dataset.log"))
        .route(routes!(show), read("dataset.pull"))
        .streaming(routes!(file), read("dataset.read"))
        .streaming(routes!(copy), write("dataset.copy"))
        .route(routes!(diff), read("dataset.diff"))
        .route(routes!(tag), write("dataset.tag"))
        .route(routes!(lineage), read("lineage.read"))
        .route(routes!(erase), Policy::in_project("dataset.erase", Admin))
        .route(routes!(list_erasures), read("dataset.erasures"))
}
