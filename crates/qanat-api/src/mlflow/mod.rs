//! The MLflow REST API over `qanat-tracking`, so the `mlflow` client works unchanged:
//! tracking (experiments, runs, metrics, artifacts) in [`tracking`], logged models and
//! the model registry in [`registry`].
//!
//! Every endpoint is listed once in [`routes`] and mounted twice: at the root, for the
//! server's default MLflow project, and under `/mlflow/{project}` (set
//! `MLFLOW_TRACKING_URI=https://qanat/mlflow/<project>`). Errors keep MLflow's codes
//! through [`MlflowError`], a thin mapping over the native one.

pub(crate) mod registry;
pub(crate) mod tracking;
pub(crate) mod webhooks;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{Method as M, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use qanat_core::{DomainError, ErrorKind};
use qanat_governance::Role::{Admin, Editor, Maintainer, Viewer};
use serde_json::{json, Value};

use crate::authz::Policy;
use crate::error::ApiError;
use crate::extract::Scope;
use crate::route_table::Fragment;
use crate::route_table::Transfer::{Bounded, Streaming};
use crate::AppState;

/// An error on an MLflow route: the native mapping, except where MLflow answers with
/// another status (an existing name is 400 `RESOURCE_ALREADY_EXISTS` in MLflow, 409
/// in Qanat's own API).
pub(crate) struct MlflowError(ApiError);

fn mlflow_kind(kind: ErrorKind) -> (StatusCode, &'static str) {
    match kind {
        ErrorKind::AlreadyExists => (StatusCode::BAD_REQUEST, "RESOURCE_ALREADY_EXISTS"),
        other => ApiError::of_kind(other),
    }
}

impl<E: DomainError> From<E> for MlflowError {
    fn from(e: E) -> Self {
        let mut api = ApiError::from_domain(&e, mlflow_kind);
        if let Some(words) = e.refusal().and_then(mlflow_wording) {
            api.message = words;
        }
        MlflowError(api)
    }
}

/// MLflow's own wording for a missing object or a taken name, which its clients and
/// tests match on. Other refusals keep Qanat's wording.
fn mlflow_wording(r: &qanat_core::Refusal) -> Option<String> {
    use qanat_core::Refusal;
    Some(match r {
        Refusal::NotFound { kind, name } => match *kind {
            "registered model" => format!("Registered Model with name={name} not found"),
            "model version" => {
                // Qanat writes a version `model:NAME@VERSION`.
                let (model, version) = name.strip_prefix("model:")?.rsplit_once('@')?;
                format!("Model Version (name={model}, version={version}) not found")
            }
            "run" => format!("Run with id={name} not found"),
            "experiment" if name.bytes().all(|b| b.is_ascii_digit()) => {
                format!("No Experiment with id={name} exists")
            }
            "experiment" => format!("Could not find experiment with name {name}"),
            "logged model" => format!("Logged model with ID '{name}' not found."),
            "webhook" => format!("Webhook with ID {name} not found."),
            "tag" | "experiment tag" | "registered model tag" | "model version tag" => {
                format!("No tag with name: {name}")
            }
            "logged model tag" => format!("No tag with key '{name}' on the logged model"),
            "alias" => {
                let (model, alias) = name.rsplit_once('@')?;
                format!("Registered model alias {alias} not found for model {model}.")
            }
            _ => return None,
        },
        Refusal::AlreadyExists { kind, name } => match *kind {
            "registered model" => format!("Registered Model (name={name}) already exists."),
            "experiment" => format!("Experiment(name={name}) already exists."),
            _ => return None,
        },
        Refusal::Invalid { .. } => return None,
    })
}

impl From<ApiError> for MlflowError {
    fn from(e: ApiError) -> Self {
        MlflowError(e)
    }
}

impl IntoResponse for MlflowError {
    fn into_response(self) -> Response {
        self.0.into_response()
    }
}

/// What an MLflow handler works on: the server's state and the project the
/// authorization point resolved for the request.
pub(crate) struct Ml {
    pub state: AppState,
    pub p: qanat_governance::Project,
}

impl Ml {
    pub fn tracking(&self) -> &qanat_tracking::Tracking {
        &self.state.tracking
    }
}

impl FromRequestParts<AppState> for Ml {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let scope = Scope::from_request_parts(parts, state).await?;
        Ok(Ml {
            state: state.clone(),
            p: scope.project,
        })
    }
}

/// `ApiJson` for MLflow's routes: a field of the wrong type or a missing one is
/// refused in MLflow's words ("Invalid value 123 for parameter 'name' supplied",
/// "Missing value for required parameter 'run_id'"), which its clients match on.
pub(crate) struct MlJson<T>(pub T);

impl<T: serde::de::DeserializeOwned> axum::extract::FromRequest<AppState> for MlJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: axum::extract::Request, state: &AppState) -> Result<Self, ApiError> {
        crate::extract::read_json(req, state, mlflow_data_error)
            .await
            .map(MlJson)
    }
}

fn mlflow_data_error(body: &[u8], rej: axum::extract::rejection::JsonRejection) -> ApiError {
    let text = rej.body_text();
    let detail = text
        .split_once("target type: ")
        .map_or(text.as_str(), |(_, d)| d);
    if let Some((before, field)) = detail
        .split_once("missing field `")
        .and_then(|(before, rest)| rest.split_once('`').map(|(f, _)| (before, f)))
    {
        // `metrics[0]: missing field `timestamp`` names where: MLflow says
        // `metrics[0].timestamp`.
        let at = before.trim_end().trim_end_matches(':');
        let field = if at.is_empty() {
            field.to_string()
        } else {
            format!("{at}.{field}")
        };
        return ApiError::bad_request(format!("Missing value for required parameter '{field}'."));
    }
    // `metrics[0].value: invalid type: …` names the field; MLflow shows its value.
    let path = detail.split_once(": ").map(|(p, _)| p).unwrap_or("");
    let pointer: String = path
        .split(['.', '['])
        .map(|s| format!("/{}", s.trim_end_matches(']')))
        .collect();
    let value = serde_json::from_slice::<Value>(body)
        .ok()
        .and_then(|v| v.pointer(&pointer).cloned());
    match value {
        Some(v) if !path.is_empty() => {
            ApiError::bad_request(format!("Invalid value {v} for parameter '{path}' supplied"))
        }
        _ => crate::extract::json_rejection(rej),
    }
}

/// An MLflow answer: a JSON object, or an error with MLflow's codes.
pub(crate) type Reply = Result<Json<Value>, MlflowError>;

/// `{ key: value }`.
pub(crate) fn reply(key: &str, value: impl serde::Serialize) -> Reply {
    let value = serde_json::to_value(value).map_err(|e| ApiError::internal(e.to_string()))?;
    Ok(Json(json!({ key: value })))
}

/// `{}`: what MLflow answers to a write that returns nothing.
pub(crate) fn done() -> Reply {
    Ok(Json(json!({})))
}

/// Every MLflow endpoint: reads need viewers, writes editors; moving an alias or a
/// stage (what serving follows), renaming a registered model (which carries its
/// aliases to the new name) and deleting registry entries need maintainers; deleting
/// or restoring an experiment (which `gc` purges with its runs after the retention
/// period) needs a project admin. Webhooks, read or written, need maintainers: a
/// webhook's URL is often itself a credential (chat and CI hooks), and a webhook
/// sends registry data out of the installation.
/// Artifact bytes stream for as long as they keep flowing.
pub(crate) fn routes() -> Fragment {
    // MLflow's searches are POSTs that only read.
    let read = |action| Policy::in_project(action, Viewer).query();
    let write = |action| Policy::in_project(action, Editor);
    let release = |action| Policy::in_project(action, Maintainer);
    let own = |action| Policy::in_project(action, Admin);
    let f = Fragment::default()
        .foreign(
            M::GET,
            "/health",
            Policy::public("health"),
            Bounded,
            tracking::health,
        )
        .foreign(
            M::GET,
            "/version",
            Policy::public("version"),
            Bounded,
            tracking::version,
        )
        .mlflow(
            M::GET,
            "/api/3.0/mlflow/server-info",
            Policy::public("mlflow.server_info"),
            Bounded,
            tracking::server_info,
        );
    macro_rules! mount {
        ($f:expr; $(($method:expr, $path:literal, $policy:expr, $transfer:expr, $handler:expr),)*) => {
            $f$(.mlflow($method, $path, $policy, $transfer, $handler))*
        };
    }
    mount!(f;
        (M::POST, "/api/2.0/mlflow/experiments/create", write("mlflow.experiment.create"), Bounded, tracking::create_experiment),
        (M::GET, "/api/2.0/mlflow/experiments/get", read("mlflow.experiment.get"), Bounded, tracking::get_experiment),
        (M::GET, "/api/2.0/mlflow/experiments/get-by-name", read("mlflow.experiment.get"), Bounded, tracking::get_experiment_by_name),
        (M::POST, "/api/2.0/mlflow/experiments/search", read("mlflow.experiment.search"), Bounded, tracking::search_experiments_post),
        (M::GET, "/api/2.0/mlflow/experiments/search", read("mlflow.experiment.search"), Bounded, tracking::search_experiments_get),
        (M::POST, "/api/2.0/mlflow/experiments/search-datasets", read("mlflow.experiment.search_datasets"), Bounded, tracking::search_datasets),
        (M::POST, "/api/2.0/mlflow/experiments/update", write("mlflow.experiment.update"), Bounded, tracking::update_experiment),
        (M::POST, "/api/2.0/mlflow/experiments/delete", own("mlflow.experiment.delete"), Bounded, tracking::delete_experiment),
        (M::POST, "/api/2.0/mlflow/experiments/restore", own("mlflow.experiment.restore"), Bounded, tracking::restore_experiment),
        (M::POST, "/api/2.0/mlflow/experiments/set-experiment-tag", write("mlflow.experiment.tag"), Bounded, tracking::set_experiment_tag),
        (M::POST, "/api/2.0/mlflow/experiments/delete-experiment-tag", write("mlflow.experiment.untag"), Bounded, tracking::delete_experiment_tag),
        (M::POST, "/api/2.0/mlflow/runs/create", write("mlflow.run.create"), Bounded, tracking::create_run),
        (M::GET, "/api/2.0/mlflow/runs/get", read("mlflow.run.get"), Bounded, tracking::get_run),
        (M::POST, "/api/2.0/mlflow/runs/update", write("mlflow.run.update"), Bounded, tracking::update_run),
        (M::POST, "/api/2.0/mlflow/runs/delete", write("mlflow.run.delete"), Bounded, tracking::delete_run),
        (M::POST, "/api/2.0/mlflow/runs/restore", write("mlflow.run.restore"), Bounded, tracking::restore_run),
        (M::POST, "/api/2.0/mlflow/runs/log-parameter", write("mlflow.run.log"), Bounded, tracking::log_param),
        (M::POST, "/api/2.0/mlflow/runs/log-metric", write("mlflow.run.log"), Bounded, tracking::log_metric),
        (M::POST, "/api/2.0/mlflow/runs/log-batch", write("mlflow.run.log"), Bounded, tracking::log_batch),
        (M::POST, "/api/2.0/mlflow/runs/set-tag", write("mlflow.run.tag"), Bounded, tracking::set_tag),
        (M::POST, "/api/2.0/mlflow/runs/delete-tag", write("mlflow.run.untag"), Bounded, tracking::delete_tag),
        (M::POST, "/api/2.0/mlflow/runs/search", read("mlflow.run.search"), Bounded, tracking::search_runs),
        (M::GET, "/api/2.0/mlflow/metrics/get-history", read("mlflow.metric.history"), Bounded, tracking::metric_history),
        (M::GET, "/api/2.0/mlflow/metrics/get-history-bulk", read("mlflow.metric.history"), Bounded, tracking::metric_history_bulk),
        (M::GET, "/api/2.0/mlflow/metrics/get-history-bulk-interval", read("mlflow.metric.history"), Bounded, tracking::metric_history_bulk_interval),
        (M::POST, "/api/2.0/mlflow/upload-artifact", write("mlflow.artifact.put"), Streaming, tracking::upload_run_artifact),
        (M::GET, "/get-artifact", read("mlflow.artifact.get").governed_read(), Streaming, tracking::get_run_artifact),
        (M::GET, "/model-versions/get-artifact", read("mlflow.artifact.get").governed_read(), Streaming, tracking::get_model_version_artifact),
        (M::GET, "/api/2.0/mlflow/artifacts/list", read("mlflow.artifact.list"), Bounded, tracking::list_run_artifacts),
        (M::GET, "/api/2.0/mlflow-artifacts/artifacts", read("mlflow.artifact.list"), Bounded, tracking::list_artifacts_proxy),
        (M::PUT, "/api/2.0/mlflow-artifacts/artifacts/{*path}", write("mlflow.artifact.put"), Streaming, tracking::put_artifact),
        (M::GET, "/api/2.0/mlflow-artifacts/artifacts/{*path}", read("mlflow.artifact.get").governed_read(), Streaming, tracking::get_artifact),
        (M::DELETE, "/api/2.0/mlflow-artifacts/artifacts/{*path}", write("mlflow.artifact.delete"), Bounded, tracking::delete_artifact),
        (M::POST, "/api/2.0/mlflow/logged-models", write("mlflow.logged_model.create"), Bounded, registry::create_logged_model),
        (M::POST, "/api/2.0/mlflow/logged-models/search", read("mlflow.logged_model.search"), Bounded, registry::search_logged_models),
        (M::GET, "/api/2.0/mlflow/logged-models/{model_id}", read("mlflow.logged_model.get"), Bounded, registry::get_logged_model),
        (M::PATCH, "/api/2.0/mlflow/logged-models/{model_id}", write("mlflow.logged_model.finalize"), Bounded, registry::finalize_logged_model),
        (M::DELETE, "/api/2.0/mlflow/logged-models/{model_id}", write("mlflow.logged_model.delete"), Bounded, registry::delete_logged_model),
        (M::PATCH, "/api/2.0/mlflow/logged-models/{model_id}/tags", write("mlflow.logged_model.tag"), Bounded, registry::set_logged_model_tags),
        (M::DELETE, "/api/2.0/mlflow/logged-models/{model_id}/tags/{tag_key}", write("mlflow.logged_model.untag"), Bounded, registry::delete_logged_model_tag),
        (M::GET, "/api/2.0/mlflow/logged-models/{model_id}/artifacts/directories", read("mlflow.artifact.list"), Bounded, registry::list_logged_model_artifacts),
        (M::GET, "/api/2.0/mlflow/logged-models/{model_id}/artifacts/files", read("mlflow.artifact.get").governed_read(), Streaming, registry::get_logged_model_artifact),
        (M::POST, "/api/2.0/mlflow/logged-models/{model_id}/params", write("mlflow.logged_model.params"), Bounded, registry::log_logged_model_params),
        (M::POST, "/api/2.0/mlflow/runs/outputs", write("mlflow.run.outputs"), Bounded, registry::log_outputs),
        (M::POST, "/api/2.0/mlflow/runs/log-inputs", write("mlflow.run.inputs"), Bounded, registry::log_inputs),
        (M::POST, "/api/2.0/mlflow/registered-models/create", write("mlflow.registered_model.create"), Bounded, registry::create_registered_model),
        (M::GET, "/api/2.0/mlflow/registered-models/get", read("mlflow.registered_model.get"), Bounded, registry::get_registered_model),
        (M::GET, "/api/2.0/mlflow/registered-models/search", read("mlflow.registered_model.search"), Bounded, registry::search_registered_models),
        (M::PATCH, "/api/2.0/mlflow/registered-models/update", write("mlflow.registered_model.update"), Bounded, registry::update_registered_model),
        (M::POST, "/api/2.0/mlflow/registered-models/rename", release("mlflow.registered_model.rename"), Bounded, registry::rename_registered_model),
        (M::DELETE, "/api/2.0/mlflow/registered-models/delete", release("mlflow.registered_model.delete"), Bounded, registry::delete_registered_model),
        (M::POST, "/api/2.0/mlflow/registered-models/set-tag", write("mlflow.registered_model.tag"), Bounded, registry::set_registered_model_tag),
        (M::DELETE, "/api/2.0/mlflow/registered-models/delete-tag", write("mlflow.registered_model.untag"), Bounded, registry::delete_registered_model_tag),
        (M::POST, "/api/2.0/mlflow/registered-models/get-latest-versions", read("mlflow.registered_model.latest"), Bounded, registry::latest_versions_post),
        (M::GET, "/api/2.0/mlflow/registered-models/get-latest-versions", read("mlflow.registered_model.latest"), Bounded, registry::latest_versions_get),
        (M::POST, "/api/2.0/mlflow/registered-models/alias", release("mlflow.model_alias.set"), Bounded, registry::set_alias),
        (M::DELETE, "/api/2.0/mlflow/registered-models/alias", release("mlflow.model_alias.delete"), Bounded, registry::delete_alias),
        (M::GET, "/api/2.0/mlflow/registered-models/alias", read("mlflow.model_alias.get"), Bounded, registry::get_by_alias),
        (M::POST, "/api/2.0/mlflow/model-versions/create", write("mlflow.model_version.create"), Bounded, registry::create_model_version),
        (M::GET, "/api/2.0/mlflow/model-versions/get", read("mlflow.model_version.get"), Bounded, registry::get_model_version),
        (M::PATCH, "/api/2.0/mlflow/model-versions/update", write("mlflow.model_version.update"), Bounded, registry::update_model_version),
        (M::DELETE, "/api/2.0/mlflow/model-versions/delete", release("mlflow.model_version.delete"), Bounded, registry::delete_model_version),
        (M::GET, "/api/2.0/mlflow/model-versions/search", read("mlflow.model_version.search"), Bounded, registry::search_model_versions),
        (M::POST, "/api/2.0/mlflow/model-versions/transition-stage", release("mlflow.model_version.stage"), Bounded, registry::transition_stage),
        (M::GET, "/api/2.0/mlflow/model-versions/get-download-uri", read("mlflow.model_version.download_uri"), Bounded, registry::download_uri),
        (M::POST, "/api/2.0/mlflow/model-versions/set-tag", write("mlflow.model_version.tag"), Bounded, registry::set_model_version_tag),
        (M::DELETE, "/api/2.0/mlflow/model-versions/delete-tag", write("mlflow.model_version.untag"), Bounded, registry::delete_model_version_tag),
        (M::POST, "/api/2.0/mlflow/webhooks", release("mlflow.webhook.create"), Bounded, webhooks::create_webhook),
        (M::GET, "/api/2.0/mlflow/webhooks", release("mlflow.webhook.list"), Bounded, webhooks::list_webhooks),
        (M::GET, "/api/2.0/mlflow/webhooks/{webhook_id}", release("mlflow.webhook.get"), Bounded, webhooks::get_webhook),
        (M::PATCH, "/api/2.0/mlflow/webhooks/{webhook_id}", release("mlflow.webhook.update"), Bounded, webhooks::update_webhook),
        (M::DELETE, "/api/2.0/mlflow/webhooks/{webhook_id}", release("mlflow.webhook.delete"), Bounded, webhooks::delete_webhook),
        (M::POST, "/api/2.0/mlflow/webhooks/{webhook_id}/test", release("mlflow.webhook.test"), Bounded, webhooks::test_webhook),
    )
}
