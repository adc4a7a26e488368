//! MLflow 3 logged models, run inputs/outputs and the model registry over
//! `qanat-tracking` (the rest of the MLflow API is in `mlflow.rs`). Shapes follow
//! MLflow's `service.proto` and `model_registry.proto` as the 3.x client uses them.

use axum::extract::RawQuery;
use qanat_tracking::{
    DatasetInput, ModelInput, ModelOrder, ModelOutput, NewLoggedModel, NewModelVersion, Page,
    Param, ResolvedInput, Tag,
};
use serde::Deserialize;
use serde_json::{json, Value};

use super::tracking::required;
use super::MlJson;
use super::{done, reply, Ml, Reply};
use crate::authz::AuditTicket;
use crate::error::ApiError;
use crate::extract::{ApiPath, ApiQuery, Caller};

/// Every value of a repeated query parameter (`order_by=a&order_by=b`), which the
/// client sends for list fields of GET requests.
fn list_param(raw: &Option<String>, key: &str) -> Vec<String> {
    raw.as_deref()
        .map(|q| {
            form_urlencoded::parse(q.as_bytes())
                .filter(|(k, _)| k == key)
                .map(|(_, v)| v.into_owned())
                .filter(|v| !v.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// `{ key: [items], next_page_token }`, the token left out on the last page.
fn page<T: serde::Serialize>(key: &str, found: Page<T>) -> Reply {
    let mut out = reply(key, found.items)?;
    if let Some(t) = found.next_page_token {
        out["next_page_token"] = json!(t);
    }
    Ok(out)
}

// ---- logged models ----

#[derive(Deserialize)]
pub(crate) struct CreateLoggedModel {
    experiment_id: Option<String>,
    name: Option<String>,
    model_type: Option<String>,
    source_run_id: Option<String>,
    #[serde(default)]
    params: Vec<Param>,
    #[serde(default)]
    tags: Vec<Tag>,
}

pub(crate) async fn create_logged_model(
    ml: Ml,
    Caller(caller): Caller,
    MlJson(b): MlJson<CreateLoggedModel>,
) -> Reply {
    let experiment_id = required("experiment_id", &b.experiment_id)?.to_string();
    let model = ml
        .tracking()
        .create_logged_model(
            &ml.p,
            NewLoggedModel {
                experiment_id,
                name: b.name,
                model_type: b.model_type,
                source_run_id: b.source_run_id,
                params: b.params,
                tags: b.tags,
                creator: caller.name,
            },
        )
        .await?;
    reply("model", model)
}

#[derive(Deserialize)]
pub(crate) struct ModelIdPath {
    model_id: String,
}

#[derive(Deserialize)]
pub(crate) struct AllowDeleted {
    allow_deleted: Option<String>,
}

pub(crate) async fn get_logged_model(
    ml: Ml,
    ApiPath(path): ApiPath<ModelIdPath>,
    ApiQuery(q): ApiQuery<AllowDeleted>,
) -> Reply {
    let allow = q
        .allow_deleted
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let model = ml
        .tracking()
        .logged_model(&ml.p, &path.model_id, allow)
        .await?;
    reply("model", model)
}

#[derive(Deserialize)]
pub(crate) struct Finalize {
    status: Option<Value>,
}

pub(crate) async fn finalize_logged_model(
    ml: Ml,
    ApiPath(path): ApiPath<ModelIdPath>,
    MlJson(b): MlJson<Finalize>,
) -> Reply {
    let status = match b.status {
        Some(Value::String(s)) => s,
        Some(Value::Number(n)) => n.to_string(),
        _ => {
            return Err(ApiError::bad_request(
                "Missing value for required parameter 'status' (LOGGED_MODEL_READY or LOGGED_MODEL_UPLOAD_FAILED)",
            ).into())
        }
    };
    let model = ml
        .tracking()
        .finalize_logged_model(&ml.p, &path.model_id, &status)
        .await?;
    reply("model", model)
}

pub(crate) async fn delete_logged_model(ml: Ml, ApiPath(path): ApiPath<ModelIdPath>) -> Reply {
    ml.tracking()
        .delete_logged_model(&ml.p, &path.model_id)
        .await?;
    done()
}

#[derive(Deserialize)]
pub(crate) struct ModelArtifactQuery {
    artifact_directory_path: Option<String>,
    artifact_file_path: Option<String>,
}

/// The artifact root of a logged model, as an artifact path (`<exp>/models/<id>/artifacts`).
async fn model_root(ml: &Ml, model_id: &str) -> Result<String, super::MlflowError> {
    let model = ml.tracking().logged_model(&ml.p, model_id, false).await?;
    let uri = model.info.artifact_uri;
    Ok(uri
        .strip_prefix("mlflow-artifacts:/")
        .unwrap_or(&uri)
        .trim_matches('/')
        .to_string())
}

/// The entries directly under a directory of a logged model's files (the UI's view).
pub(crate) async fn list_logged_model_artifacts(
    ml: Ml,
    ApiPath(path): ApiPath<ModelIdPath>,
    ApiQuery(q): ApiQuery<ModelArtifactQuery>,
) -> Reply {
    let root = model_root(&ml, &path.model_id).await?;
    let sub = super::tracking::relative_path(q.artifact_directory_path.as_deref().unwrap_or(""))?;
    let dir = if sub.is_empty() {
        root.clone()
    } else {
        format!("{root}/{sub}")
    };
    let files: Vec<Value> = super::tracking::list_dir(&ml, &dir)
        .await?
        .into_iter()
        .map(|(name, is_dir, size)| {
            let p = if sub.is_empty() {
                name
            } else {
                format!("{sub}/{name}")
            };
            let mut f = json!({"path": p, "is_dir": is_dir});
            if !is_dir {
                f["file_size"] = json!(size);
            }
            f
        })
        .collect();
    Ok(axum::Json(json!({
        "root_uri": format!("mlflow-artifacts:/{root}"),
        "files": files,
    })))
}

/// One file of a logged model (the UI's download).
pub(crate) async fn get_logged_model_artifact(
    ml: Ml,
    ApiPath(path): ApiPath<ModelIdPath>,
    ApiQuery(q): ApiQuery<ModelArtifactQuery>,
) -> Result<axum::response::Response, super::MlflowError> {
    let root = model_root(&ml, &path.model_id).await?;
    let file =
        super::tracking::relative_path(required("artifact_file_path", &q.artifact_file_path)?)?;
    if file.is_empty() {
        return Err(ApiError::bad_request("Invalid path").into());
    }
    let location = super::tracking::artifacts_location(&ml)?;
    let key = super::tracking::artifact_key(&ml, &format!("{root}/{file}")).await?;
    Ok(crate::objects::verified_download(&ml.state, &location, &key).await?)
}

#[derive(Deserialize)]
pub(crate) struct ModelTags {
    #[serde(default)]
    tags: Vec<Tag>,
}

pub(crate) async fn set_logged_model_tags(
    ml: Ml,
    ApiPath(path): ApiPath<ModelIdPath>,
    MlJson(b): MlJson<ModelTags>,
) -> Reply {
    ml.tracking()
        .set_logged_model_tags(&ml.p, &path.model_id, &b.tags)
        .await?;
    done()
}

#[derive(Deserialize)]
pub(crate) struct ModelTagPath {
    model_id: String,
    tag_key: String,
}

pub(crate) async fn delete_logged_model_tag(ml: Ml, ApiPath(path): ApiPath<ModelTagPath>) -> Reply {
    ml.tracking()
        .delete_logged_model_tag(&ml.p, &path.model_id, &path.tag_key)
        .await?;
    done()
}

#[derive(Deserialize)]
pub(crate) struct ModelParams {
    #[serde(default)]
    params: Vec<Param>,
}

pub(crate) async fn log_logged_model_params(
    ml: Ml,
    ApiPath(path): ApiPath<ModelIdPath>,
    MlJson(b): MlJson<ModelParams>,
) -> Reply {
    ml.tracking()
        .log_logged_model_params(&ml.p, &path.model_id, &b.params)
        .await?;
    done()
}

#[derive(Deserialize)]
struct OrderBy {
    field_name: Option<String>,
    #[serde(default = "yes")]
    ascending: bool,
}

fn yes() -> bool {
    true
}

#[derive(Deserialize)]
pub(crate) struct SearchLoggedModels {
    #[serde(default)]
    experiment_ids: Vec<String>,
    filter: Option<String>,
    max_results: Option<i64>,
    #[serde(default)]
    order_by: Vec<OrderBy>,
    page_token: Option<String>,
    #[serde(default)]
    datasets: Vec<Value>,
}

pub(crate) async fn search_logged_models(ml: Ml, MlJson(b): MlJson<SearchLoggedModels>) -> Reply {
    if !b.datasets.is_empty() {
        return Err(ApiError::bad_request(
            "searching logged models by dataset is not supported yet; leave 'datasets' out",
        )
        .into());
    }
    let order =
        b.order_by
            .into_iter()
            .map(|o| {
                Ok(ModelOrder {
                    field_name: o.field_name.filter(|f| !f.is_empty()).ok_or_else(|| {
                        ApiError::bad_request("order_by entries need a field_name")
                    })?,
                    ascending: o.ascending,
                })
            })
            .collect::<Result<Vec<_>, ApiError>>()?;
    let found = ml
        .tracking()
        .search_logged_models(
            &ml.p,
            &b.experiment_ids,
            b.filter.as_deref(),
            &order,
            b.max_results,
            b.page_token.as_deref(),
        )
        .await?;
    page("models", found)
}

// ---- run inputs and outputs ----

#[derive(Deserialize)]
pub(crate) struct LogOutputs {
    run_id: Option<String>,
    #[serde(default)]
    models: Vec<ModelOutput>,
}

pub(crate) async fn log_outputs(ml: Ml, MlJson(b): MlJson<LogOutputs>) -> Reply {
    let id = required("run_id", &b.run_id)?;
    ml.tracking().log_outputs(&ml.p, id, &b.models).await?;
    done()
}

#[derive(Deserialize)]
pub(crate) struct LogInputs {
    run_id: Option<String>,
    #[serde(default)]
    datasets: Vec<DatasetInput>,
    #[serde(default)]
    models: Vec<ModelInput>,
}

/// The `qanat://<project>/<dataset>[@<version|tag>]` URI a dataset source names, if
/// any: the source is JSON (`{"uri": …}`, `{"url": …}`, `{"path": …}`) or the URI itself.
fn qanat_uri(source: &str) -> Option<String> {
    let find = |s: &str| {
        s.trim()
            .starts_with("qanat://")
            .then(|| s.trim().to_string())
    };
    if let Ok(Value::Object(m)) = serde_json::from_str::<Value>(source) {
        return ["uri", "url", "path"]
            .iter()
            .filter_map(|k| m.get(*k).and_then(Value::as_str))
            .find_map(find);
    }
    find(source)
}

/// Links a dataset input to its Qanat dataset version when its source is one.
async fn resolve_input(ml: &Ml, input: DatasetInput) -> Result<ResolvedInput, ApiError> {
    let (state, p) = (&ml.state, &ml.p);
    let Some(uri) = qanat_uri(&input.dataset.source) else {
        return Ok(ResolvedInput { input, qanat: None });
    };
    let rest = uri.trim_start_matches("qanat://");
    let (proj, reference) = rest.split_once('/').ok_or_else(|| {
        ApiError::bad_request(format!(
            "dataset source '{uri}' should be qanat://<project>/<dataset>@<version>"
        ))
    })?;
    if proj != p.name {
        return Err(ApiError::bad_request(format!(
            "dataset source '{uri}' is in project '{proj}'; runs of project '{}' can only record datasets of their own project",
            p.name
        )));
    }
    let reference = qanat_core::ObjectRef::parse_of(qanat_core::Kind::Dataset, reference)
        .map_err(|e| ApiError::bad_request(format!("dataset source '{uri}': {e}")))?;
    let node = state.datasets.canonical_ref(p, &reference).await?;
    let version = match node.selector {
        Some(qanat_core::Selector::Version(v)) => v.to_string(),
        _ => String::new(),
    };
    let (name, version) = (node.name.clone(), version);
    Ok(ResolvedInput {
        input,
        qanat: Some((name, version, node)),
    })
}

pub(crate) async fn log_inputs(ml: Ml, MlJson(b): MlJson<LogInputs>) -> Reply {
    let id = required("run_id", &b.run_id)?.to_string();
    let mut resolved = Vec::with_capacity(b.datasets.len());
    for d in b.datasets {
        resolved.push(resolve_input(&ml, d).await?);
    }
    ml.tracking()
        .log_inputs(&ml.p, &id, &resolved, &b.models)
        .await?;
    done()
}

// ---- registered models ----

#[derive(Deserialize)]
pub(crate) struct CreateRegisteredModel {
    name: Option<String>,
    description: Option<String>,
    #[serde(default)]
    tags: Vec<Tag>,
}

pub(crate) async fn create_registered_model(
    ml: Ml,
    MlJson(b): MlJson<CreateRegisteredModel>,
) -> Reply {
    let name = required("name", &b.name)?;
    let m = ml
        .tracking()
        .create_registered_model(&ml.p, name, b.description.as_deref(), &b.tags)
        .await?;
    reply("registered_model", m)
}

#[derive(Deserialize)]
pub(crate) struct NameQuery {
    name: Option<String>,
}

pub(crate) async fn get_registered_model(ml: Ml, ApiQuery(q): ApiQuery<NameQuery>) -> Reply {
    let name = required("name", &q.name)?;
    let m = ml.tracking().registered_model(&ml.p, name).await?;
    reply("registered_model", m)
}

#[derive(Deserialize)]
pub(crate) struct SearchQuery {
    filter: Option<String>,
    max_results: Option<i64>,
    page_token: Option<String>,
}

impl SearchQuery {
    /// The filter, the page size and the page token.
    fn args(&self) -> (Option<&str>, Option<i64>, Option<&str>) {
        (
            self.filter.as_deref(),
            self.max_results,
            self.page_token.as_deref(),
        )
    }
}

pub(crate) async fn search_registered_models(
    ml: Ml,
    ApiQuery(q): ApiQuery<SearchQuery>,
    RawQuery(raw): RawQuery,
) -> Reply {
    let order = list_param(&raw, "order_by");
    let (filter, max, token) = q.args();
    let found = ml
        .tracking()
        .search_registered_models(&ml.p, filter, &order, max, token);
    page("registered_models", found.await?)
}

#[derive(Deserialize)]
pub(crate) struct UpdateRegisteredModel {
    name: Option<String>,
    description: Option<String>,
}

pub(crate) async fn update_registered_model(
    ml: Ml,
    MlJson(b): MlJson<UpdateRegisteredModel>,
) -> Reply {
    let name = required("name", &b.name)?;
    let m = ml
        .tracking()
        .update_registered_model(&ml.p, name, b.description.as_deref())
        .await?;
    reply("registered_model", m)
}

#[derive(Deserialize)]
pub(crate) struct RenameRegisteredModel {
    name: Option<String>,
    new_name: Option<String>,
}

pub(crate) async fn rename_registered_model(
    ml: Ml,
    MlJson(b): MlJson<RenameRegisteredModel>,
) -> Reply {
    let name = required("name", &b.name)?;
    let new_name = required("new_name", &b.new_name)?;
    let m = ml
        .tracking()
        .rename_registered_model(&ml.p, name, new_name)
        .await?;
    reply("registered_model", m)
}

#[derive(Deserialize)]
pub(crate) struct NameBody {
    name: Option<String>,
}

pub(crate) async fn delete_registered_model(ml: Ml, MlJson(b): MlJson<NameBody>) -> Reply {
    let name = required("name", &b.name)?;
    ml.tracking().delete_registered_model(&ml.p, name).await?;
    done()
}

#[derive(Deserialize)]
pub(crate) struct ModelTagBody {
    name: Option<String>,
    version: Option<String>,
    key: Option<String>,
    #[serde(default)]
    value: String,
}

pub(crate) async fn set_registered_model_tag(ml: Ml, MlJson(b): MlJson<ModelTagBody>) -> Reply {
    let name = required("name", &b.name)?;
    let key = required("key", &b.key)?.to_string();
    ml.tracking()
        .set_registered_model_tag(
            &ml.p,
            name,
            &Tag {
                key,
                value: b.value,
            },
        )
        .await?;
    done()
}

pub(crate) async fn delete_registered_model_tag(ml: Ml, MlJson(b): MlJson<ModelTagBody>) -> Reply {
    let name = required("name", &b.name)?;
    let key = required("key", &b.key)?;
    ml.tracking()
        .delete_registered_model_tag(&ml.p, name, key)
        .await?;
    done()
}

#[derive(Deserialize)]
pub(crate) struct LatestVersions {
    name: Option<String>,
    #[serde(default)]
    stages: Vec<String>,
}

async fn latest_versions(ml: Ml, b: LatestVersions) -> Reply {
    let name = required("name", &b.name)?;
    let versions = ml
        .tracking()
        .latest_versions(&ml.p, name, &b.stages)
        .await?;
    reply("model_versions", versions)
}

pub(crate) async fn latest_versions_post(ml: Ml, MlJson(b): MlJson<LatestVersions>) -> Reply {
    latest_versions(ml, b).await
}

pub(crate) async fn latest_versions_get(
    ml: Ml,
    ApiQuery(q): ApiQuery<NameQuery>,
    RawQuery(raw): RawQuery,
) -> Reply {
    let b = LatestVersions {
        name: q.name,
        stages: list_param(&raw, "stages"),
    };
    latest_versions(ml, b).await
}

// ---- model versions ----

#[derive(Deserialize)]
pub(crate) struct CreateModelVersion {
    name: Option<String>,
    source: Option<String>,
    run_id: Option<String>,
    model_id: Option<String>,
    run_link: Option<String>,
    description: Option<String>,
    #[serde(default)]
    tags: Vec<Tag>,
}

pub(crate) async fn create_model_version(
    ml: Ml,
    Caller(caller): Caller,
    MlJson(b): MlJson<CreateModelVersion>,
) -> Reply {
    let name = required("name", &b.name)?.to_string();
    let source = required("source", &b.source)?.to_string();
    let v = ml
        .tracking()
        .create_model_version(
            &ml.p,
            NewModelVersion {
                name,
                source,
                run_id: b.run_id,
                model_id: b.model_id,
                run_link: b.run_link,
                description: b.description,
                tags: b.tags,
                user: caller.name,
            },
        )
        .await?;
    // Monitoring's reference for a model trained elsewhere: profiled from the
    // training dataset its run logged, after the answer (a large table takes a while;
    // the monitor computes it on first need if this did not finish).
    let (monitor, project, name, version) = (
        ml.state.monitor.clone(),
        ml.p.clone(),
        v.name.clone(),
        v.version.clone(),
    );
    tokio::spawn(async move {
        if let Err(e) = monitor.prepare_reference(&project, &name, &version).await {
            tracing::warn!(model = %name, version = %version, error = %e, "the version's reference profile was not computed");
        }
    });
    reply("model_version", v)
}

#[derive(Deserialize)]
pub(crate) struct VersionQuery {
    name: Option<String>,
    version: Option<String>,
}

pub(crate) async fn get_model_version(ml: Ml, ApiQuery(q): ApiQuery<VersionQuery>) -> Reply {
    let name = required("name", &q.name)?;
    let version = required("version", &q.version)?;
    let v = ml.tracking().model_version(&ml.p, name, version).await?;
    reply("model_version", v)
}

#[derive(Deserialize)]
pub(crate) struct UpdateModelVersion {
    name: Option<String>,
    version: Option<String>,
    description: Option<String>,
}

pub(crate) async fn update_model_version(ml: Ml, MlJson(b): MlJson<UpdateModelVersion>) -> Reply {
    let name = required("name", &b.name)?;
    let version = required("version", &b.version)?;
    let v = ml
        .tracking()
        .update_model_version(&ml.p, name, version, b.description.as_deref())
        .await?;
    reply("model_version", v)
}

pub(crate) async fn delete_model_version(
    ml: Ml,
    Caller(caller): Caller,
    MlJson(b): MlJson<VersionQuery>,
) -> Reply {
    let name = required("name", &b.name)?;
    let version = required("version", &b.version)?;
    ml.tracking()
        .delete_model_version(&ml.p, name, version, &caller.name)
        .await?;
    done()
}

pub(crate) async fn search_model_versions(
    ml: Ml,
    ApiQuery(q): ApiQuery<SearchQuery>,
    RawQuery(raw): RawQuery,
) -> Reply {
    let order = list_param(&raw, "order_by");
    let (filter, max, token) = q.args();
    page(
        "model_versions",
        ml.tracking()
            .search_model_versions(&ml.p, filter, &order, max, token)
            .await?,
    )
}

#[derive(Deserialize)]
pub(crate) struct TransitionStage {
    name: Option<String>,
    version: Option<String>,
    stage: Option<String>,
    #[serde(default)]
    archive_existing_versions: bool,
}

pub(crate) async fn transition_stage(ml: Ml, MlJson(b): MlJson<TransitionStage>) -> Reply {
    let name = required("name", &b.name)?;
    let version = required("version", &b.version)?;
    let stage = required("stage", &b.stage)?;
    let v = ml
        .tracking()
        .transition_stage(&ml.p, name, version, stage, b.archive_existing_versions)
        .await?;
    reply("model_version", v)
}

pub(crate) async fn download_uri(ml: Ml, ApiQuery(q): ApiQuery<VersionQuery>) -> Reply {
    let name = required("name", &q.name)?;
    let version = required("version", &q.version)?;
    let uri = ml.tracking().download_uri(&ml.p, name, version).await?;
    reply("artifact_uri", uri)
}

pub(crate) async fn set_model_version_tag(ml: Ml, MlJson(b): MlJson<ModelTagBody>) -> Reply {
    let name = required("name", &b.name)?;
    let version = required("version", &b.version)?;
    let key = required("key", &b.key)?.to_string();
    ml.tracking()
        .set_model_version_tag(
            &ml.p,
            name,
            version,
            &Tag {
                key,
                value: b.value,
            },
        )
        .await?;
    done()
}

pub(crate) async fn delete_model_version_tag(ml: Ml, MlJson(b): MlJson<ModelTagBody>) -> Reply {
    let name = required("name", &b.name)?;
    let version = required("version", &b.version)?;
    let key = required("key", &b.key)?;
    ml.tracking()
        .delete_model_version_tag(&ml.p, name, version, key)
        .await?;
    done()
}

// ---- aliases ----

#[derive(Deserialize)]
pub(crate) struct AliasBody {
    name: Option<String>,
    alias: Option<String>,
    version: Option<String>,
}

pub(crate) async fn set_alias(ml: Ml, ticket: AuditTicket, MlJson(b): MlJson<AliasBody>) -> Reply {
    let name = required("name", &b.name)?;
    let alias = required("alias", &b.alias)?;
    let version = required("version", &b.version)?;
    ml.tracking()
        .set_alias(&ml.p, name, alias, version, "set", ticket.record())
        .await?;
    ticket.committed();
    done()
}

pub(crate) async fn delete_alias(
    ml: Ml,
    ticket: AuditTicket,
    MlJson(b): MlJson<AliasBody>,
) -> Reply {
    let name = required("name", &b.name)?;
    let alias = required("alias", &b.alias)?;
    ml.tracking()
        .delete_alias(&ml.p, name, alias, ticket.record())
        .await?;
    ticket.committed();
    done()
}

pub(crate) async fn get_by_alias(ml: Ml, ApiQuery(q): ApiQuery<AliasBody>) -> Reply {
    let name = required("name", &q.name)?;
    let alias = required("alias", &q.alias)?;
    let v = ml.tracking().version_by_alias(&ml.p, name, alias).await?;
    reply("model_version", v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_qanat_uris_in_dataset_sources() {
        assert_eq!(
            qanat_uri(r#"{"uri": "qanat://fraud/tx@3"}"#).as_deref(),
            Some("qanat://fraud/tx@3")
        );
        assert_eq!(
            qanat_uri("qanat://fraud/tx").as_deref(),
            Some("qanat://fraud/tx")
        );
        assert_eq!(qanat_uri(r#"{"url": "https://example.com/a.csv"}"#), None);
        assert_eq!(qanat_uri("s3://bucket/x"), None);
        assert_eq!(
            list_param(&Some("order_by=name+ASC&x=1&order_by=b".into()), "order_by"),
            vec!["name ASC".to_string(), "b".to_string()]
        );
    }
}
