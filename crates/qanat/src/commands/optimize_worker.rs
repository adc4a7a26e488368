//! `qanat optimize-worker`: the process an `optimize` job runs. The job itself — fetch
//! the source package, apply the method, measure both models on the holdout, log the
//! report, store the result — is `qanat_runtime::job`; this finds the source version
//! through the API (with the job's own token), gives the job its run, and registers
//! the result as a new version derived from the source.

use anyhow::{anyhow, Context, Result};
use qanat_runtime::job::OptimizeJob;
use qanat_runtime::kind::{OptimizeParams, CONFIG_VAR};

use super::worker::{artifact_if_any, mlmodel_info, var, JobRun};

const WORKER: &str = "optimize-worker";

/// The source version's files, read through the API.
struct Source {
    run: JobRun,
    /// The source's artifact folder (`<experiment>/<run>/artifacts/model`).
    base: String,
}

pub async fn run() -> Result<()> {
    let fields: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&var(WORKER, CONFIG_VAR)?)
            .context("reading the optimize job's fields")?;
    let params = OptimizeParams::from_params(&fields).map_err(|e| anyhow!(e))?;
    let source = params.source().map_err(|e| anyhow!(e))?;
    let inputs = std::env::var("QANAT_INPUTS").map_err(|_| {
        anyhow!("an optimize job needs its holdout as input: qanat optimize … --holdout dataset:NAME@VERSION")
    })?;
    let run = JobRun::of_job(WORKER).await?;
    let (c, p) = (&run.client, &run.project);
    let version = c
        .model_version(p, &source.name, &source.selector_or_latest())
        .await
        .with_context(|| format!("finding {source}"))?;
    let source = qanat_core::ObjectRef::at(
        qanat_core::Kind::Model,
        version.name.as_str(),
        &version.version,
    );
    let uri = c
        .model_version_download_uri(p, &version.name, &version.version)
        .await?;
    let base = uri
        .strip_prefix("mlflow-artifacts:")
        .ok_or_else(|| anyhow!("{source} is stored at {uri}, outside this server's artifacts"))?
        .trim_matches('/')
        .to_string();
    let name = params.register.clone().unwrap_or(version.name);
    let job = OptimizeJob {
        params,
        source: source.clone(),
        source_uri: uri,
        inputs: inputs.into(),
        mlmodel: mlmodel_info(&run.run_id),
    };
    let files = Source {
        run: run.clone(),
        base,
    };
    let (run, outcome) = tokio::task::spawn_blocking(move || {
        qanat_runtime::job::run(&job, &run, &files).map(|o| (run, o))
    })
    .await??;
    let registered = run.register(&name, &outcome.tags).await?;
    if outcome.report.passed {
        println!("registered {registered}, derived from {source}");
    } else {
        println!(
            "registered {registered}, derived from {source}, although it exceeds the budget (forced)"
        );
    }
    Ok(())
}

impl qanat_runtime::job::SourceFiles for Source {
    fn file(&self, file: &str) -> qanat_train::Result<Option<Vec<u8>>> {
        let (c, p) = (&self.run.client, &self.run.project);
        let path = format!("{}/{file}", self.base);
        self.run
            .handle
            .block_on(artifact_if_any(c, p, &path))
            .map_err(|e| qanat_train::Error::internal(e.to_string()))
    }
}
