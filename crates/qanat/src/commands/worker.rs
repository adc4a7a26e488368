//! What the workers (the processes `train`, `sweep` and `optimize` jobs run, started by
//! the scheduler, never by hand) share: the job's environment, a client with the job's
//! token, and the job's run as the domain crates' job traits see it.

use anyhow::{Context, Result};
use futures::TryStreamExt;
use qanat_model::package;

/// The job variable `name`, saying which worker needs it when it is missing.
pub(crate) fn var(worker: &str, name: &str) -> Result<String> {
    std::env::var(name).with_context(|| {
        format!("{name} is not set: {worker} runs inside a job, started by the scheduler")
    })
}

/// The client a worker inside a job talks to the server with: `QANAT_URL` and
/// `QANAT_TOKEN`, trusting `QANAT_CA_CERT` when the scheduler names one.
pub(crate) fn job_client(worker: &str) -> Result<qanat_client::Client> {
    let mut b =
        qanat_client::Client::builder(var(worker, "QANAT_URL")?).token(var(worker, "QANAT_TOKEN")?);
    if let Some(ca) = std::env::var_os("QANAT_CA_CERT") {
        let pem = std::fs::read(&ca)
            .with_context(|| format!("reading QANAT_CA_CERT {}", ca.to_string_lossy()))?;
        b = b.ca_certificate_pem(pem);
    }
    Ok(b.build()?)
}

/// The bytes of the artifact at `path` (`<experiment>/<run>/artifacts/...`), or `None`
/// when there is none.
pub(crate) async fn artifact_if_any(
    client: &qanat_client::Client,
    project: &str,
    path: &str,
) -> Result<Option<Vec<u8>>, qanat_client::Error> {
    match client.artifact(project, path).await {
        Ok(stream) => {
            let chunks: Vec<bytes::Bytes> = stream.try_collect().await?;
            Ok(Some(chunks.concat()))
        }
        Err(qanat_client::Error::Api { status: 404, .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// What the `MLmodel` file of a model stored under run `run_id`'s `model/` records.
pub(crate) fn mlmodel_info(run_id: &str) -> package::MlModelInfo {
    package::MlModelInfo {
        run_id: run_id.to_string(),
        artifact_path: package::DIR.to_string(),
        // As MLflow writes it (Python's str of a UTC datetime).
        created: chrono::Utc::now()
            .format("%Y-%m-%d %H:%M:%S%.6f")
            .to_string(),
        metadata: Vec::new(),
    }
}

/// A job's run, reached through the API from a blocking thread.
#[derive(Clone)]
pub(crate) struct JobRun {
    pub client: qanat_client::Client,
    pub project: String,
    pub run_id: String,
    /// The run's artifact root (`mlflow-artifacts:/…`).
    pub root: String,
    pub handle: tokio::runtime::Handle,
}

impl JobRun {
    /// The run of the job this process runs in (`QANAT_PROJECT`, `MLFLOW_RUN_ID`).
    pub(crate) async fn of_job(worker: &str) -> Result<JobRun> {
        let client = job_client(worker)?;
        let project = var(worker, "QANAT_PROJECT")?;
        let run_id = var(worker, "MLFLOW_RUN_ID")?;
        let run = client.run(&project, &run_id).await?;
        Ok(JobRun {
            root: run.info.artifact_uri.clone(),
            client,
            project,
            run_id,
            handle: tokio::runtime::Handle::current(),
        })
    }

    /// The artifact path of `path` in this run.
    pub(crate) fn artifact_path(&self, path: &str) -> String {
        let base = self
            .root
            .trim_start_matches("mlflow-artifacts:")
            .trim_matches('/');
        format!("{base}/{path}")
    }

    pub(crate) async fn log(
        &self,
        metrics: &[(String, f64, i64)],
        params: &[(String, String)],
        tags: &[(String, String)],
    ) -> Result<(), qanat_client::Error> {
        self.client
            .log_batch(&self.project, &self.run_id, metrics, params, tags)
            .await
    }

    pub(crate) async fn store(
        &self,
        path: &str,
        bytes: Vec<u8>,
    ) -> Result<(), qanat_client::Error> {
        self.client
            .upload_artifact(&self.project, &self.root, path, bytes)
            .await
    }

    pub(crate) async fn fetch(&self, path: &str) -> Result<Option<Vec<u8>>, qanat_client::Error> {
        artifact_if_any(&self.client, &self.project, &self.artifact_path(path)).await
    }

    /// Registers the run's model as a version of `name`, with `tags`; the version.
    pub(crate) async fn register(
        &self,
        name: &str,
        tags: &[(String, String)],
    ) -> Result<qanat_core::ObjectRef> {
        let v = self
            .client
            .register_run_model(&self.project, name, &self.run_id, tags)
            .await
            .with_context(|| format!("registering the model as '{name}'"))?;
        Ok(qanat_core::ObjectRef::at(qanat_core::Kind::Model, name, &v))
    }
}

/// The trainer's view of the run: every call blocks on the API.
impl qanat_train::job::JobRun for JobRun {
    fn log(
        &self,
        metrics: &[(String, f64, i64)],
        params: &[(String, String)],
        tags: &[(String, String)],
    ) -> qanat_train::Result<()> {
        self.handle
            .block_on(JobRun::log(self, metrics, params, tags))
            .map_err(|e| qanat_train::Error::internal(e.to_string()))
    }

    fn store(&self, path: &str, bytes: Vec<u8>) -> qanat_train::Result<()> {
        self.handle
            .block_on(JobRun::store(self, path, bytes))
            .map_err(|e| qanat_train::Error::internal(e.to_string()))
    }

    fn fetch(&self, path: &str) -> qanat_train::Result<Option<Vec<u8>>> {
        self.handle
            .block_on(JobRun::fetch(self, path))
            .map_err(|e| qanat_train::Error::internal(e.to_string()))
    }
}

/// The trained model's outputs, as serving computes them.
impl qanat_train::job::TrainRun for JobRun {
    fn outputs_profile(
        &self,
        spec: &[u8],
        weights: &[u8],
        table: &qanat_model::Table,
        rows: &[usize],
    ) -> qanat_train::Result<Vec<(String, qanat_model::profile::ColumnProfile)>> {
        qanat_serving::outputs::profile(spec, weights, table, rows)
            .map_err(|e| qanat_train::Error::internal(e.to_string()))
    }
}
