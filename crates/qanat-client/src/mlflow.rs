//! The MLflow tracking API of a project (`/mlflow/{project}/api/2.0/mlflow/...`), for
//! what the native API does not cover: experiments and runs.

use qanat_types::tracking::wire::mlflow::{
    ArtifactList, ExperimentReply, ExperimentsPage, RunReply, RunsPage, SearchExperiments,
    SearchRuns,
};
use qanat_types::tracking::{Experiment, ModelVersion, Run};
use reqwest::Method;

use crate::{key_path, seg, ByteStream, Client, Result};

#[derive(serde::Deserialize)]
struct ModelVersionReply {
    model_version: ModelVersion,
}

fn mlflow_path(project: &str, endpoint: &str) -> String {
    format!("/mlflow/{}/api/2.0/mlflow/{endpoint}", seg(project))
}

impl Client {
    /// One page of a project's experiments.
    #[qanat_macros::boxed]
    pub async fn search_experiments(
        &self,
        project: &str,
        search: &SearchExperiments,
    ) -> Result<ExperimentsPage> {
        let path = mlflow_path(project, "experiments/search");
        self.with_body(Method::POST, &path, search).await
    }

    /// An experiment by id.
    #[qanat_macros::boxed]
    pub async fn experiment(&self, project: &str, id: &str) -> Result<Experiment> {
        let path = mlflow_path(project, "experiments/get");
        let reply: ExperimentReply = self.get_query(&path, &[("experiment_id", id)]).await?;
        Ok(reply.experiment)
    }

    /// An experiment by name.
    #[qanat_macros::boxed]
    pub async fn experiment_by_name(&self, project: &str, name: &str) -> Result<Experiment> {
        let path = mlflow_path(project, "experiments/get-by-name");
        let reply: ExperimentReply = self.get_query(&path, &[("experiment_name", name)]).await?;
        Ok(reply.experiment)
    }

    /// Deletes an experiment and its runs (project admins); restorable until `gc`
    /// purges it after the retention period.
    #[qanat_macros::boxed]
    pub async fn delete_experiment(&self, project: &str, id: &str) -> Result<()> {
        self.experiment_stage(project, "experiments/delete", id)
            .await
    }

    /// Brings back a deleted experiment and its runs (project admins).
    #[qanat_macros::boxed]
    pub async fn restore_experiment(&self, project: &str, id: &str) -> Result<()> {
        self.experiment_stage(project, "experiments/restore", id)
            .await
    }

    async fn experiment_stage(&self, project: &str, endpoint: &str, id: &str) -> Result<()> {
        let path = mlflow_path(project, endpoint);
        let body = serde_json::json!({ "experiment_id": id });
        let _: serde_json::Value = self.with_body(Method::POST, &path, &body).await?;
        Ok(())
    }

    /// One page of runs of some experiments.
    #[qanat_macros::boxed]
    pub async fn search_runs(&self, project: &str, search: &SearchRuns) -> Result<RunsPage> {
        let path = mlflow_path(project, "runs/search");
        self.with_body(Method::POST, &path, search).await
    }

    /// One run: info, params, latest metrics, tags, inputs and outputs.
    #[qanat_macros::boxed]
    pub async fn run(&self, project: &str, run_id: &str) -> Result<Run> {
        let path = mlflow_path(project, "runs/get");
        let reply: RunReply = self.get_query(&path, &[("run_id", run_id)]).await?;
        Ok(reply.run)
    }

    /// A run's artifacts directly under `path` (its artifact root when `None`); paths
    /// in the answer are relative to the root.
    #[qanat_macros::boxed]
    pub async fn run_artifacts(
        &self,
        project: &str,
        run_id: &str,
        path: Option<&str>,
    ) -> Result<ArtifactList> {
        let endpoint = mlflow_path(project, "artifacts/list");
        let mut query = vec![("run_id", run_id)];
        if let Some(p) = path {
            query.push(("path", p));
        }
        self.get_query(&endpoint, &query).await
    }

    /// An artifact's bytes by its full path (`<experiment>/<run>/artifacts/...`, the
    /// run's artifact root without `mlflow-artifacts:/`), verified as they stream.
    #[qanat_macros::boxed]
    pub async fn artifact(&self, project: &str, path: &str) -> Result<ByteStream> {
        let endpoint = format!(
            "/mlflow/{}/api/2.0/mlflow-artifacts/artifacts/{}",
            seg(project),
            key_path(path)
        );
        self.download(self.request(Method::GET, &endpoint)).await
    }

    /// Every logged value of a run's metric `key`, as (step, value), in logging order.
    #[qanat_macros::boxed]
    pub async fn metric_history(
        &self,
        project: &str,
        run_id: &str,
        key: &str,
    ) -> Result<Vec<(i64, f64)>> {
        let path = mlflow_path(project, "metrics/get-history");
        let reply: serde_json::Value = self
            .get_query(&path, &[("run_id", run_id), ("metric_key", key)])
            .await?;
        Ok(reply["metrics"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| {
                let value = match &m["value"] {
                    serde_json::Value::String(s) => s.parse().ok(),
                    v => v.as_f64(),
                }?;
                Some((m["step"].as_i64().unwrap_or(0), value))
            })
            .collect())
    }

    /// Logs metrics, params and tags to a run in one call (MLflow's `runs/log-batch`:
    /// all or nothing). `metrics` are (key, value, step); their time is now.
    #[qanat_macros::boxed]
    pub async fn log_batch(
        &self,
        project: &str,
        run_id: &str,
        metrics: &[(String, f64, i64)],
        params: &[(String, String)],
        tags: &[(String, String)],
    ) -> Result<()> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as i64);
        let body = serde_json::json!({
            "run_id": run_id,
            "metrics": metrics.iter().map(|(k, v, step)| serde_json::json!({
                "key": k, "value": v, "timestamp": now, "step": step,
            })).collect::<Vec<_>>(),
            "params": params.iter().map(|(k, v)| serde_json::json!({"key": k, "value": v})).collect::<Vec<_>>(),
            "tags": tags.iter().map(|(k, v)| serde_json::json!({"key": k, "value": v})).collect::<Vec<_>>(),
        });
        let path = mlflow_path(project, "runs/log-batch");
        let _: serde_json::Value = self.with_body(Method::POST, &path, &body).await?;
        Ok(())
    }

    /// Stores `bytes` as the artifact `rel` of the run whose artifact root is `root`
    /// (`mlflow-artifacts:/<experiment>/<run>/artifacts`).
    #[qanat_macros::boxed]
    pub async fn upload_artifact(
        &self,
        project: &str,
        root: &str,
        rel: &str,
        bytes: Vec<u8>,
    ) -> Result<()> {
        let base = root
            .trim_start_matches("mlflow-artifacts:")
            .trim_matches('/');
        let endpoint = format!(
            "/mlflow/{}/api/2.0/mlflow-artifacts/artifacts/{}/{}",
            seg(project),
            key_path(base),
            key_path(rel.trim_start_matches('/'))
        );
        self.send(self.request(Method::PUT, &endpoint).body(bytes))
            .await
            .map(|_| ())
    }

    /// A registered model's version by number or alias (MLflow's `model-versions/get`
    /// or `registered-models/alias`).
    #[qanat_macros::boxed]
    pub async fn model_version(
        &self,
        project: &str,
        name: &str,
        selector: &qanat_core::Selector,
    ) -> Result<ModelVersion> {
        let reply: ModelVersionReply = match selector {
            qanat_core::Selector::Label(alias) => {
                let path = mlflow_path(project, "registered-models/alias");
                self.get_query(&path, &[("name", name), ("alias", alias.as_str())])
                    .await?
            }
            qanat_core::Selector::Version(n) => {
                let path = mlflow_path(project, "model-versions/get");
                self.get_query(&path, &[("name", name), ("version", &n.to_string())])
                    .await?
            }
            qanat_core::Selector::Latest => {
                let detail = self.model(project, name).await?;
                let newest = detail
                    .versions
                    .iter()
                    .map(|v| v.version.as_str())
                    .max_by_key(|v| v.parse::<i64>().unwrap_or(0))
                    .ok_or_else(|| crate::Error::Api {
                        status: 404,
                        code: "RESOURCE_DOES_NOT_EXIST".into(),
                        message: format!("model '{name}' has no versions"),
                    })?
                    .to_string();
                let path = mlflow_path(project, "model-versions/get");
                self.get_query(&path, &[("name", name), ("version", &newest)])
                    .await?
            }
        };
        Ok(reply.model_version)
    }

    /// Where a version's files are (`mlflow-artifacts:/...`).
    #[qanat_macros::boxed]
    pub async fn model_version_download_uri(
        &self,
        project: &str,
        name: &str,
        version: &str,
    ) -> Result<String> {
        let path = mlflow_path(project, "model-versions/get-download-uri");
        let reply: serde_json::Value = self
            .get_query(&path, &[("name", name), ("version", version)])
            .await?;
        Ok(reply["artifact_uri"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }

    /// Registers the model that run `run_id` stored under its `model/` artifacts
    /// (`runs:/<run>/model`) as a new version of `name` with `tags`, creating the
    /// registered model when it does not exist; the version's number.
    #[qanat_macros::boxed]
    pub async fn register_run_model(
        &self,
        project: &str,
        name: &str,
        run_id: &str,
        tags: &[(String, String)],
    ) -> Result<String> {
        let source = format!("runs:/{run_id}/model");
        let create = mlflow_path(project, "registered-models/create");
        let made: Result<serde_json::Value> = self
            .with_body(Method::POST, &create, &serde_json::json!({ "name": name }))
            .await;
        match made {
            Ok(_) => {}
            Err(crate::Error::Api { code, .. }) if code == "RESOURCE_ALREADY_EXISTS" => {}
            Err(e) => return Err(e),
        }
        let path = mlflow_path(project, "model-versions/create");
        let v: serde_json::Value = self
            .with_body(
                Method::POST,
                &path,
                &serde_json::json!({
                    "name": name, "source": source, "run_id": run_id,
                    "tags": tags.iter().map(|(k, v)| serde_json::json!({"key": k, "value": v})).collect::<Vec<_>>(),
                }),
            )
            .await?;
        Ok(v["model_version"]["version"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }
}
