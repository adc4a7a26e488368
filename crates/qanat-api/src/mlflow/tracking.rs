//! The MLflow tracking REST API (`/api/2.0/mlflow/...`) over `qanat-tracking`, so the
//! `mlflow` Python client works unchanged. Mounted twice: at the root, for the server's
//! default MLflow project, and under `/mlflow/{project}` (set
//! `MLFLOW_TRACKING_URI=https://qanat/mlflow/<project>`). Request and response shapes
//! follow MLflow's protos as the 3.x client sends and reads them; unknown request
//! fields are ignored, as MLflow's server does.

use axum::{Extension, Json};
use qanat_tracking::wire::mlflow::{
    ArtifactFile, ArtifactList, ExperimentsPage, RunsPage, SearchExperiments, SearchRuns,
};
use qanat_tracking::{
    Batch, Experiment, Metric, MetricValue, NewRun, Param, RunInfo, RunUpdate, Tag, ViewType,
};
use serde::Deserialize;
use serde_json::{json, Value};

use super::MlJson;
use super::{done, reply, Ml, Reply};
use crate::authz::AuditTicket;
use crate::error::ApiError;
use crate::extract::{ApiQuery, Caller};

pub(super) fn required<'a>(field: &str, v: &'a Option<String>) -> Result<&'a str, ApiError> {
    v.as_deref().filter(|s| !s.is_empty()).ok_or_else(|| {
        ApiError::bad_request(format!("Missing value for required parameter '{field}'."))
    })
}

fn view_type(v: &Option<String>) -> Result<ViewType, ApiError> {
    match v.as_deref() {
        None | Some("") => Ok(ViewType::ActiveOnly),
        Some(s) => ViewType::parse(s).ok_or_else(|| {
            ApiError::bad_request(format!(
                "view_type '{s}' is not one of ACTIVE_ONLY, DELETED_ONLY, ALL"
            ))
        }),
    }
}

/// `run_id`, or the older `run_uuid`.
pub(super) fn run_id(
    run_id: &Option<String>,
    run_uuid: &Option<String>,
) -> Result<String, ApiError> {
    run_id
        .clone()
        .filter(|s| !s.is_empty())
        .or_else(|| run_uuid.clone().filter(|s| !s.is_empty()))
        .ok_or_else(|| ApiError::bad_request("Missing value for required parameter 'run_id'."))
}

fn experiment_json(e: Experiment) -> Value {
    json!({ "experiment": e })
}

// ---- probes ----

/// `GET /health`: "OK", as MLflow's server answers.
pub(crate) async fn health() -> &'static str {
    "OK"
}

/// The MLflow release whose REST API this server speaks: MLflow's own live-server
/// tests at that release are what it is checked against (`scripts/mlflow-suite.sh`).
/// Clients gate features on it, so it must not lag behind what is implemented.
pub(crate) const MLFLOW_API_VERSION: &str = "3.12.0";

/// `GET /version`: the MLflow release this server's API matches.
pub(crate) async fn version() -> &'static str {
    MLFLOW_API_VERSION
}

/// `GET /api/3.0/mlflow/server-info`.
pub(crate) async fn server_info() -> Json<Value> {
    Json(json!({ "store_type": "SqlStore", "workspaces_enabled": false }))
}

// ---- experiments ----

#[derive(Deserialize)]
pub(crate) struct CreateExperiment {
    name: Option<String>,
    artifact_location: Option<String>,
    #[serde(default)]
    tags: Vec<Tag>,
}

pub(crate) async fn create_experiment(ml: Ml, MlJson(b): MlJson<CreateExperiment>) -> Reply {
    let name = required("name", &b.name)?;
    if b.artifact_location
        .as_deref()
        .is_some_and(|l| !l.is_empty())
    {
        return Err(ApiError::bad_request(
            "artifact_location is chosen by Qanat (its encrypted, residency-checked storage); leave it out",
        ).into());
    }
    let id = ml
        .tracking()
        .create_experiment(&ml.p, name, None, &b.tags)
        .await?;
    reply("experiment_id", id)
}

#[derive(Deserialize)]
pub(crate) struct ExperimentIdQuery {
    experiment_id: Option<String>,
}

pub(crate) async fn get_experiment(ml: Ml, ApiQuery(q): ApiQuery<ExperimentIdQuery>) -> Reply {
    let id = required("experiment_id", &q.experiment_id)?;
    Ok(Json(experiment_json(
        ml.tracking().experiment(&ml.p, id).await?,
    )))
}

#[derive(Deserialize)]
pub(crate) struct ExperimentNameQuery {
    experiment_name: Option<String>,
}

pub(crate) async fn get_experiment_by_name(
    ml: Ml,
    ApiQuery(q): ApiQuery<ExperimentNameQuery>,
) -> Reply {
    let name = required("experiment_name", &q.experiment_name)?;
    Ok(Json(experiment_json(
        ml.tracking().experiment_by_name(&ml.p, name).await?,
    )))
}

async fn search_experiments(ml: Ml, b: SearchExperiments) -> Reply {
    let page = ml
        .tracking()
        .search_experiments(
            &ml.p,
            view_type(&b.view_type)?,
            b.max_results,
            b.page_token.as_deref(),
            b.filter.as_deref(),
            &b.order_by,
        )
        .await?;
    Ok(Json(
        serde_json::to_value(ExperimentsPage {
            experiments: page.items,
            next_page_token: page.next_page_token,
        })
        .map_err(|e| ApiError::internal(e.to_string()))?,
    ))
}

pub(crate) async fn search_experiments_post(ml: Ml, MlJson(b): MlJson<SearchExperiments>) -> Reply {
    search_experiments(ml, b).await
}

#[derive(Deserialize)]
pub(crate) struct SearchExperimentsQuery {
    max_results: Option<i64>,
    page_token: Option<String>,
    filter: Option<String>,
    view_type: Option<String>,
}

pub(crate) async fn search_experiments_get(
    ml: Ml,
    ApiQuery(q): ApiQuery<SearchExperimentsQuery>,
    axum::extract::RawQuery(raw): axum::extract::RawQuery,
) -> Reply {
    let b = SearchExperiments {
        max_results: q.max_results,
        page_token: q.page_token,
        filter: q.filter,
        view_type: q.view_type,
        // A list field of a GET: the key repeated.
        order_by: query_values(&raw, "order_by")
            .into_iter()
            .filter(|o| !o.is_empty())
            .collect(),
    };
    search_experiments(ml, b).await
}

#[derive(Deserialize)]
pub(crate) struct UpdateExperiment {
    experiment_id: Option<String>,
    new_name: Option<String>,
}

pub(crate) async fn update_experiment(ml: Ml, MlJson(b): MlJson<UpdateExperiment>) -> Reply {
    let id = required("experiment_id", &b.experiment_id)?;
    if let Some(name) = b.new_name.as_deref().filter(|n| !n.is_empty()) {
        ml.tracking().rename_experiment(&ml.p, id, name).await?;
    }
    done()
}

#[derive(Deserialize)]
pub(crate) struct ExperimentIdBody {
    experiment_id: Option<String>,
}

pub(crate) async fn delete_experiment(ml: Ml, MlJson(b): MlJson<ExperimentIdBody>) -> Reply {
    let id = required("experiment_id", &b.experiment_id)?;
    ml.tracking().set_experiment_stage(&ml.p, id, true).await?;
    done()
}

pub(crate) async fn restore_experiment(ml: Ml, MlJson(b): MlJson<ExperimentIdBody>) -> Reply {
    let id = required("experiment_id", &b.experiment_id)?;
    ml.tracking().set_experiment_stage(&ml.p, id, false).await?;
    done()
}

#[derive(Deserialize)]
pub(crate) struct ExperimentTag {
    experiment_id: Option<String>,
    key: Option<String>,
    #[serde(default)]
    value: String,
}

pub(crate) async fn set_experiment_tag(ml: Ml, MlJson(b): MlJson<ExperimentTag>) -> Reply {
    let id = required("experiment_id", &b.experiment_id)?;
    let key = required("key", &b.key)?;
    ml.tracking()
        .set_experiment_tag(
            &ml.p,
            id,
            &Tag {
                key: key.to_string(),
                value: b.value,
            },
        )
        .await?;
    done()
}

pub(crate) async fn delete_experiment_tag(ml: Ml, MlJson(b): MlJson<ExperimentTag>) -> Reply {
    let id = required("experiment_id", &b.experiment_id)?;
    let key = required("key", &b.key)?;
    ml.tracking().delete_experiment_tag(&ml.p, id, key).await?;
    done()
}

// ---- runs ----

#[derive(Deserialize)]
pub(crate) struct CreateRun {
    experiment_id: Option<String>,
    run_name: Option<String>,
    start_time: Option<i64>,
    #[serde(default)]
    tags: Vec<Tag>,
}

pub(crate) async fn create_run(
    ml: Ml,
    Caller(caller): Caller,
    ticket: Option<Extension<AuditTicket>>,
    MlJson(b): MlJson<CreateRun>,
) -> Reply {
    let run = ml
        .tracking()
        .create_run_audited(
            &ml.p,
            NewRun {
                experiment_id: b.experiment_id.unwrap_or_else(|| "0".into()),
                // The authenticated caller, not whatever user_id the client claims.
                user_id: caller.name,
                run_name: b.run_name,
                start_time: b.start_time,
                tags: b.tags,
            },
            ticket.as_ref().map(|t| t.record()),
        )
        .await?;
    if let Some(t) = &ticket {
        t.committed();
    }
    reply("run", run)
}

#[derive(Deserialize)]
pub(crate) struct RunIdQuery {
    run_id: Option<String>,
    run_uuid: Option<String>,
}

pub(crate) async fn get_run(ml: Ml, ApiQuery(q): ApiQuery<RunIdQuery>) -> Reply {
    let id = run_id(&q.run_id, &q.run_uuid)?;
    Ok(Json(json!({ "run": ml.tracking().run(&ml.p, &id).await? })))
}

#[derive(Deserialize)]
pub(crate) struct UpdateRun {
    run_id: Option<String>,
    run_uuid: Option<String>,
    status: Option<String>,
    end_time: Option<i64>,
    run_name: Option<String>,
}

pub(crate) async fn update_run(ml: Ml, MlJson(b): MlJson<UpdateRun>) -> Reply {
    let id = run_id(&b.run_id, &b.run_uuid)?;
    let info: RunInfo = ml
        .tracking()
        .update_run(
            &ml.p,
            &id,
            RunUpdate {
                status: b.status,
                end_time: b.end_time,
                run_name: b.run_name,
            },
        )
        .await?;
    reply("run_info", info)
}

#[derive(Deserialize)]
pub(crate) struct RunIdBody {
    run_id: Option<String>,
}

pub(crate) async fn delete_run(ml: Ml, MlJson(b): MlJson<RunIdBody>) -> Reply {
    let id = required("run_id", &b.run_id)?;
    ml.tracking().set_run_stage(&ml.p, id, true).await?;
    done()
}

pub(crate) async fn restore_run(ml: Ml, MlJson(b): MlJson<RunIdBody>) -> Reply {
    let id = required("run_id", &b.run_id)?;
    ml.tracking().set_run_stage(&ml.p, id, false).await?;
    done()
}

#[derive(Deserialize)]
pub(crate) struct LogParam {
    run_id: Option<String>,
    run_uuid: Option<String>,
    key: Option<String>,
    value: Option<String>,
}

pub(crate) async fn log_param(
    ml: Ml,
    ticket: Option<Extension<AuditTicket>>,
    MlJson(b): MlJson<LogParam>,
) -> Reply {
    let id = run_id(&b.run_id, &b.run_uuid)?;
    let key = required("key", &b.key)?.to_string();
    let batch = Batch {
        params: vec![Param {
            key,
            value: b.value.unwrap_or_default(),
        }],
        ..Batch::default()
    };
    write_batch(&ml, &id, batch, ticket).await
}

#[derive(Deserialize)]
pub(crate) struct LogMetric {
    run_id: Option<String>,
    run_uuid: Option<String>,
    key: Option<String>,
    value: Option<MetricValue>,
    timestamp: Option<i64>,
    #[serde(default)]
    step: i64,
    /// The logged model the metric is about, and the dataset it was measured on.
    model_id: Option<String>,
    dataset_name: Option<String>,
    dataset_digest: Option<String>,
}

pub(crate) async fn log_metric(
    ml: Ml,
    ticket: Option<Extension<AuditTicket>>,
    MlJson(b): MlJson<LogMetric>,
) -> Reply {
    let id = run_id(&b.run_id, &b.run_uuid)?;
    let key = required("key", &b.key)?.to_string();
    let value = b
        .value
        .ok_or_else(|| ApiError::bad_request("Missing value for required parameter 'value'."))?;
    let timestamp = b.timestamp.ok_or_else(|| {
        ApiError::bad_request("Missing value for required parameter 'timestamp'.")
    })?;
    let batch = Batch {
        metrics: vec![Metric {
            key,
            value,
            timestamp,
            step: b.step,
            model_id: b.model_id,
            dataset_name: b.dataset_name,
            dataset_digest: b.dataset_digest,
            ..Metric::default()
        }],
        ..Batch::default()
    };
    write_batch(&ml, &id, batch, ticket).await
}

#[derive(Deserialize)]
pub(crate) struct LogBatch {
    run_id: Option<String>,
    #[serde(default)]
    metrics: Vec<Metric>,
    #[serde(default)]
    params: Vec<Param>,
    #[serde(default)]
    tags: Vec<Tag>,
}

pub(crate) async fn log_batch(
    ml: Ml,
    ticket: Option<Extension<AuditTicket>>,
    MlJson(b): MlJson<LogBatch>,
) -> Reply {
    let id = required("run_id", &b.run_id)?;
    let batch = Batch {
        metrics: b.metrics,
        params: b.params,
        tags: b.tags,
    };
    write_batch(&ml, id, batch, ticket).await
}

/// Logs `batch` with the request's audit entry in the same transaction.
async fn write_batch(
    ml: &Ml,
    run_id: &str,
    batch: Batch,
    ticket: Option<Extension<AuditTicket>>,
) -> Reply {
    let p = &ml.p;
    let audit = ticket.as_ref().map(|t| t.record());
    ml.tracking().log_batch(p, run_id, batch, audit).await?;
    if let Some(t) = &ticket {
        t.committed();
    }
    done()
}

#[derive(Deserialize)]
pub(crate) struct SetTag {
    run_id: Option<String>,
    run_uuid: Option<String>,
    key: Option<String>,
    #[serde(default)]
    value: String,
}

pub(crate) async fn set_tag(
    ml: Ml,
    ticket: Option<Extension<AuditTicket>>,
    MlJson(b): MlJson<SetTag>,
) -> Reply {
    let id = run_id(&b.run_id, &b.run_uuid)?;
    let key = required("key", &b.key)?.to_string();
    let batch = Batch {
        tags: vec![Tag {
            key,
            value: b.value,
        }],
        ..Batch::default()
    };
    write_batch(&ml, &id, batch, ticket).await
}

#[derive(Deserialize)]
pub(crate) struct DeleteTag {
    run_id: Option<String>,
    key: Option<String>,
}

pub(crate) async fn delete_tag(ml: Ml, MlJson(b): MlJson<DeleteTag>) -> Reply {
    let id = required("run_id", &b.run_id)?;
    let key = required("key", &b.key)?;
    ml.tracking().delete_tag(&ml.p, id, key).await?;
    done()
}

pub(crate) async fn search_runs(ml: Ml, MlJson(b): MlJson<SearchRuns>) -> Reply {
    let page = ml
        .tracking()
        .search_runs(
            &ml.p,
            &b.experiment_ids,
            b.filter.as_deref(),
            &b.order_by,
            view_type(&b.run_view_type)?,
            b.max_results,
            b.page_token.as_deref(),
        )
        .await?;
    Ok(Json(
        serde_json::to_value(RunsPage {
            runs: page.items,
            next_page_token: page.next_page_token,
        })
        .map_err(|e| ApiError::internal(e.to_string()))?,
    ))
}

#[derive(Deserialize)]
pub(crate) struct HistoryQuery {
    run_id: Option<String>,
    run_uuid: Option<String>,
    metric_key: Option<String>,
    max_results: Option<i64>,
    page_token: Option<String>,
}

pub(crate) async fn metric_history(ml: Ml, ApiQuery(q): ApiQuery<HistoryQuery>) -> Reply {
    let id = run_id(&q.run_id, &q.run_uuid)?;
    let key = required("metric_key", &q.metric_key)?;
    let page = ml
        .tracking()
        .metric_history(&ml.p, &id, key, q.max_results, q.page_token.as_deref())
        .await?;
    let mut out = json!({ "metrics": page.items });
    if let Some(t) = page.next_page_token {
        out["next_page_token"] = json!(t);
    }
    Ok(Json(out))
}

/// Every value of a query parameter (`run_id=a&run_id=b`), and the first of another.
fn query_values(raw: &Option<String>, key: &str) -> Vec<String> {
    raw.as_deref()
        .map(|q| {
            form_urlencoded::parse(q.as_bytes())
                .filter(|(k, _)| k == key)
                .map(|(_, v)| v.into_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn query_int(raw: &Option<String>, key: &str) -> Result<Option<i64>, ApiError> {
    match query_values(raw, key).into_iter().find(|v| !v.is_empty()) {
        Some(v) => v.trim().parse().map(Some).map_err(|_| {
            ApiError::bad_request(format!("Invalid value {v} for parameter '{key}' supplied"))
        }),
        None => Ok(None),
    }
}

/// Metric points with the run each came from (`MetricWithRunId`).
fn with_run_ids(points: Vec<(String, Metric)>) -> Reply {
    let metrics: Vec<Value> = points
        .into_iter()
        .map(|(run, m)| {
            let mut v = serde_json::to_value(m).unwrap_or_default();
            v["run_id"] = json!(run);
            v
        })
        .collect();
    Ok(Json(json!({ "metrics": metrics })))
}

/// Most runs one bulk history request may name (MLflow's limit).
const MAX_BULK_RUNS: usize = 100;

/// The non-empty values of `key`, refused in MLflow's words (`none`, `too_many`
/// given the count) when there are none or more than [`MAX_BULK_RUNS`].
fn bulk_runs(
    raw: &Option<String>,
    key: &str,
    none: &str,
    too_many: impl Fn(usize) -> String,
) -> Result<Vec<String>, ApiError> {
    let runs: Vec<String> = query_values(raw, key)
        .into_iter()
        .filter(|r| !r.is_empty())
        .collect();
    if runs.is_empty() {
        return Err(ApiError::bad_request(none));
    }
    if runs.len() > MAX_BULK_RUNS {
        return Err(ApiError::bad_request(too_many(runs.len())));
    }
    Ok(runs)
}

/// The first non-empty value of `metric_key`, or `missing` as the refusal.
fn metric_key(raw: &Option<String>, missing: &str) -> Result<String, ApiError> {
    query_values(raw, "metric_key")
        .into_iter()
        .find(|k| !k.is_empty())
        .ok_or_else(|| ApiError::bad_request(missing))
}

pub(crate) async fn metric_history_bulk(
    ml: Ml,
    axum::extract::RawQuery(raw): axum::extract::RawQuery,
) -> Reply {
    let runs = bulk_runs(
        &raw,
        "run_id",
        "GetMetricHistoryBulk request must specify at least one run_id.",
        |n| {
            format!("GetMetricHistoryBulk request cannot specify more than {MAX_BULK_RUNS} run_ids. Received {n} run_ids.")
        },
    )?;
    let key = metric_key(
        &raw,
        "GetMetricHistoryBulk request must specify a metric_key.",
    )?;
    let max = query_int(&raw, "max_results")?
        .unwrap_or(25_000)
        .clamp(1, 25_000);
    let points = ml
        .tracking()
        .metric_history_bulk(&ml.p, &runs, &key, max)
        .await?;
    with_run_ids(points)
}

/// Most sampled steps per run (MLflow's limit).
const MAX_SAMPLED_STEPS: i64 = 2500;

pub(crate) async fn metric_history_bulk_interval(
    ml: Ml,
    axum::extract::RawQuery(raw): axum::extract::RawQuery,
) -> Reply {
    let runs = bulk_runs(
        &raw,
        "run_ids",
        "Missing value for required parameter 'run_ids'.",
        |n| {
            format!("GetMetricHistoryBulkInterval request must specify at most {MAX_BULK_RUNS} run_ids. Received {n} run_ids.")
        },
    )?;
    let key = metric_key(&raw, "Missing value for required parameter 'metric_key'.")?;
    let range = match (query_int(&raw, "start_step")?, query_int(&raw, "end_step")?) {
        (Some(a), Some(b)) if a > b => {
            return Err(ApiError::bad_request(format!(
                "end_step must be greater than start_step. Found start_step={a} and end_step={b}."
            ))
            .into())
        }
        (Some(a), Some(b)) => Some((a, b)),
        (None, None) => None,
        _ => {
            return Err(ApiError::bad_request(
                "If either start step or end step are specified, both must be specified.",
            )
            .into())
        }
    };
    let max = query_int(&raw, "max_results")?.unwrap_or(MAX_SAMPLED_STEPS);
    if !(1..=MAX_SAMPLED_STEPS).contains(&max) {
        return Err(ApiError::bad_request(format!(
            "max_results must be between 1 and {MAX_SAMPLED_STEPS}."
        ))
        .into());
    }
    let points = ml
        .tracking()
        .metric_history_sampled(&ml.p, &runs, &key, max as usize, range)
        .await?;
    with_run_ids(points)
}

#[derive(Deserialize)]
pub(crate) struct SearchDatasets {
    #[serde(default)]
    experiment_ids: Vec<String>,
}

/// Most experiments one dataset search may name (MLflow's limit).
const MAX_DATASET_SEARCH_EXPERIMENTS: usize = 20;

pub(crate) async fn search_datasets(ml: Ml, MlJson(b): MlJson<SearchDatasets>) -> Reply {
    if b.experiment_ids.is_empty() {
        return Err(ApiError::bad_request(
            "SearchDatasets request must specify at least one experiment_id.",
        )
        .into());
    }
    if b.experiment_ids.len() > MAX_DATASET_SEARCH_EXPERIMENTS {
        return Err(ApiError::bad_request(format!(
            "SearchDatasets request cannot specify more than {MAX_DATASET_SEARCH_EXPERIMENTS} experiment_ids. Received {} experiment_ids.",
            b.experiment_ids.len()
        ))
        .into());
    }
    let found = ml
        .tracking()
        .dataset_summaries(&ml.p, &b.experiment_ids)
        .await?;
    reply("dataset_summaries", found)
}

// ---- artifacts (proxied: `mlflow-artifacts:/<experiment>/...`) ----

/// The storage key of an artifact path. The path must be relative with no `.`/`..`
/// segment (after percent-decoding), and start with an experiment of this project.
pub(crate) async fn artifact_key(ml: &Ml, path: &str) -> Result<qanat_store::ObjectKey, ApiError> {
    let p = &ml.p;
    let user: qanat_store::ObjectKey = path.parse().map_err(|e: qanat_store::Error| {
        ApiError::bad_request(format!("invalid artifact path: {e}"))
    })?;
    let experiment = user.as_str().split('/').next().unwrap_or_default();
    if ml.tracking().experiment(p, experiment).await.is_err() {
        return Err(ApiError::not_found(format!(
            "artifact path '{path}' does not start with an experiment of project '{}'",
            p.name
        )));
    }
    Ok(format!("projects/{}/mlflow-artifacts/{user}", p.id).parse()?)
}

pub(crate) fn artifacts_location(ml: &Ml) -> Result<String, ApiError> {
    let location = ml.state.storage.default_location().to_string();
    let info = ml.state.storage.location(&location)?;
    qanat_governance::check_residency(&ml.p, &info)?;
    Ok(location)
}

#[derive(Deserialize)]
pub(crate) struct ArtifactPath {
    path: String,
}

pub(crate) async fn put_artifact(
    ml: Ml,
    crate::extract::ApiPath(a): crate::extract::ApiPath<ArtifactPath>,
    body: axum::body::Body,
) -> Reply {
    use futures::TryStreamExt;
    let location = artifacts_location(&ml)?;
    let key = artifact_key(&ml, &a.path).await?;
    let reader =
        tokio_util::io::StreamReader::new(body.into_data_stream().map_err(std::io::Error::other));
    ml.state.storage.put_reader(&location, &key, reader).await?;
    done()
}

pub(crate) async fn get_artifact(
    ml: Ml,
    crate::extract::ApiPath(a): crate::extract::ApiPath<ArtifactPath>,
) -> Result<axum::response::Response, ApiError> {
    let location = artifacts_location(&ml)?;
    let key = artifact_key(&ml, &a.path).await?;
    crate::objects::verified_download(&ml.state, &location, &key).await
}

pub(crate) async fn delete_artifact(
    ml: Ml,
    crate::extract::ApiPath(a): crate::extract::ApiPath<ArtifactPath>,
) -> Reply {
    let location = artifacts_location(&ml)?;
    let key = artifact_key(&ml, &a.path).await?;
    // Deleting a directory deletes what is under it, as MLflow's server does.
    let under: qanat_store::ObjectKey = key.clone();
    let mut gone = 0;
    for o in ml.state.storage.list(&location, Some(&under)).await? {
        let k: qanat_store::ObjectKey = o.key.parse()?;
        ml.state.storage.delete(&location, &k).await?;
        gone += 1;
    }
    if gone == 0 {
        ml.state.storage.delete(&location, &key).await?;
    }
    done()
}

#[derive(Deserialize)]
pub(crate) struct RunArtifactQuery {
    run_uuid: Option<String>,
    run_id: Option<String>,
    path: Option<String>,
}

/// Where `path` (relative to a run's artifact root) is stored: MLflow's UI routes
/// name a run and a path. A path that is absolute or climbs (`..`, also
/// percent-encoded) is refused with MLflow's "Invalid path".
async fn run_artifact(
    ml: &Ml,
    q: &RunArtifactQuery,
) -> Result<(String, qanat_store::ObjectKey), ApiError> {
    let run = q
        .run_uuid
        .as_deref()
        .or(q.run_id.as_deref())
        .filter(|r| !r.is_empty())
        .ok_or_else(|| ApiError::bad_request("Request must specify run_uuid."))?;
    let path = q
        .path
        .as_deref()
        .filter(|p| !p.is_empty())
        .ok_or_else(|| ApiError::bad_request("Request must specify path."))?;
    let decoded = relative_path(path)?;
    if decoded.is_empty() {
        return Err(ApiError::bad_request("Invalid path"));
    }
    let info = ml.tracking().run(&ml.p, run).await?.info;
    let location = artifacts_location(ml)?;
    let key = artifact_key(ml, &format!("{}/{decoded}", info.artifact_root())).await?;
    Ok((location, key))
}

/// A path under a run's (or a model version's) artifacts, percent-decoded before it
/// is checked: absolute paths, backslashes and `..` segments are refused in MLflow's
/// words ("Invalid path"); `.` and empty segments are dropped.
pub(crate) fn relative_path(path: &str) -> Result<String, ApiError> {
    let decoded = percent_decode_fully(path);
    if decoded.starts_with('/')
        || decoded.contains('\\')
        || decoded.chars().any(char::is_control)
        || decoded.split('/').any(|s| s == "..")
    {
        return Err(ApiError::bad_request("Invalid path"));
    }
    Ok(decoded
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect::<Vec<_>>()
        .join("/"))
}

/// `s` percent-decoded until it no longer changes, so `%252e%252e` is seen as `..`.
fn percent_decode_fully(s: &str) -> String {
    let mut cur = s.to_string();
    for _ in 0..4 {
        let next = percent_encoding::percent_decode_str(&cur)
            .decode_utf8_lossy()
            .into_owned();
        if next == cur {
            break;
        }
        cur = next;
    }
    cur
}

/// The UI's upload of one file into a run's artifacts (`POST /ajax-api/2.0/mlflow/upload-artifact?run_uuid=&path=`, body = the bytes).
pub(crate) async fn upload_run_artifact(
    ml: Ml,
    ApiQuery(q): ApiQuery<RunArtifactQuery>,
    body: axum::body::Body,
) -> Reply {
    use futures::{StreamExt, TryStreamExt};
    let (location, key) = run_artifact(&ml, &q).await?;
    let mut stream = body.into_data_stream();
    let first = loop {
        match stream.next().await {
            Some(Ok(chunk)) if chunk.is_empty() => continue,
            Some(Ok(chunk)) => break chunk,
            Some(Err(e)) => {
                return Err(ApiError::bad_request(format!("reading the body: {e}")).into())
            }
            None => return Err(ApiError::bad_request("Request must specify data.").into()),
        }
    };
    let all = futures::stream::iter([Ok(first)])
        .chain(stream)
        .map_err(std::io::Error::other);
    let reader = tokio_util::io::StreamReader::new(all);
    ml.state.storage.put_reader(&location, &key, reader).await?;
    done()
}

/// The UI's download of one run artifact (`GET /get-artifact?run_uuid=&path=`).
pub(crate) async fn get_run_artifact(
    ml: Ml,
    ApiQuery(q): ApiQuery<RunArtifactQuery>,
) -> Result<axum::response::Response, ApiError> {
    let (location, key) = run_artifact(&ml, &q).await?;
    crate::objects::verified_download(&ml.state, &location, &key).await
}

#[derive(Deserialize)]
pub(crate) struct VersionArtifactQuery {
    name: Option<String>,
    version: Option<String>,
    path: Option<String>,
}

/// The UI's download of one file of a model version
/// (`GET /model-versions/get-artifact?name=&version=&path=`).
pub(crate) async fn get_model_version_artifact(
    ml: Ml,
    ApiQuery(q): ApiQuery<VersionArtifactQuery>,
) -> Result<axum::response::Response, ApiError> {
    let name = required("name", &q.name)?;
    let version = required("version", &q.version)?;
    let path = relative_path(required("path", &q.path)?)?;
    if path.is_empty() {
        return Err(ApiError::bad_request("Invalid path"));
    }
    let uri = ml.tracking().download_uri(&ml.p, name, version).await?;
    let root = uri
        .strip_prefix("mlflow-artifacts:/")
        .unwrap_or(&uri)
        .trim_matches('/');
    let location = artifacts_location(&ml)?;
    let key = artifact_key(&ml, &format!("{root}/{path}")).await?;
    crate::objects::verified_download(&ml.state, &location, &key).await
}

/// The entries directly under `dir` (an artifact path, or "" for none): files with
/// their sizes, and sub-directories. Names are relative to `dir`.
pub(crate) async fn list_dir(ml: &Ml, dir: &str) -> Result<Vec<(String, bool, u64)>, ApiError> {
    // `.` segments name the directory they are in (the client lists `<root>/.` to
    // download a whole tree); `..` is still refused by the key's rules.
    let dir = dir
        .split('/')
        .filter(|s| !s.is_empty() && *s != ".")
        .collect::<Vec<_>>()
        .join("/");
    let dir = dir.as_str();
    if dir.is_empty() {
        return Err(ApiError::bad_request(
            "list a path under an experiment, e.g. path=1/<run_id>/artifacts",
        ));
    }
    let location = artifacts_location(ml)?;
    let key = artifact_key(ml, dir).await?;
    let base = format!("{key}/");
    // A name can be a file and a directory at once (`model` and `model/weights`), as
    // in S3: both are listed.
    let mut out: std::collections::BTreeMap<(String, bool), u64> = Default::default();
    for o in ml.state.storage.list(&location, Some(&key)).await? {
        let Some(rest) = o.key.strip_prefix(&base) else {
            continue;
        };
        match rest.split_once('/') {
            Some((sub, _)) => {
                out.insert((sub.to_string(), true), 0);
            }
            None => {
                out.insert((rest.to_string(), false), o.size);
            }
        }
    }
    Ok(out.into_iter().map(|((n, d), s)| (n, d, s)).collect())
}

#[derive(Deserialize)]
pub(crate) struct ListQuery {
    path: Option<String>,
}

/// `GET /api/2.0/mlflow-artifacts/artifacts?path=<dir>`: basenames.
pub(crate) async fn list_artifacts_proxy(ml: Ml, ApiQuery(q): ApiQuery<ListQuery>) -> Reply {
    let entries = list_dir(&ml, q.path.as_deref().unwrap_or("")).await?;
    let files: Vec<ArtifactFile> = entries
        .into_iter()
        .map(|(name, is_dir, size)| ArtifactFile {
            path: name,
            is_dir,
            file_size: (!is_dir).then_some(size),
        })
        .collect();
    reply("files", files)
}

#[derive(Deserialize)]
pub(crate) struct RunArtifactsQuery {
    run_id: Option<String>,
    run_uuid: Option<String>,
    path: Option<String>,
}

/// `GET /api/2.0/mlflow/artifacts/list`: a run's artifacts, paths relative to its root.
pub(crate) async fn list_run_artifacts(ml: Ml, ApiQuery(q): ApiQuery<RunArtifactsQuery>) -> Reply {
    let id = run_id(&q.run_id, &q.run_uuid)?;
    let run = ml.tracking().run(&ml.p, &id).await?;
    let root = run.info.artifact_root().to_string();
    // `.` is the root, as MLflow's `download_artifacts(run_id, ".")` asks for it.
    let path = q.path.unwrap_or_default();
    let sub = relative_path(path.trim_start_matches('/'))?;
    let dir = if sub.is_empty() {
        root
    } else {
        format!("{root}/{sub}")
    };
    let entries = list_dir(&ml, &dir).await?;
    let files: Vec<ArtifactFile> = entries
        .into_iter()
        .map(|(name, is_dir, size)| ArtifactFile {
            path: if sub.is_empty() {
                name
            } else {
                format!("{sub}/{name}")
            },
            is_dir,
            file_size: (!is_dir).then_some(size),
        })
        .collect();
    let list = ArtifactList {
        root_uri: Some(run.info.artifact_uri),
        files,
    };
    Ok(Json(
        serde_json::to_value(list).map_err(|e| ApiError::internal(e.to_string()))?,
    ))
}
