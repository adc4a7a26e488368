//! `qanat train-worker`: the process a `train` job runs. The job itself — read the
//! inputs, train with a checkpoint after every epoch, store the model package — is
//! `qanat_train::job`; this gives it the job's run through the API (with the job's
//! own short-lived token) and registers the model when the job names one.
//!
//! A later attempt of the job (after a crash, a kill or a preemption) resumes from the
//! run's `checkpoints/last.ckpt` (Qanat's encrypted artifact store, replaced
//! atomically) and ends with the bits an uninterrupted run ends with.

use anyhow::{anyhow, Context, Result};
use qanat_train::job::TrainJob;
use qanat_train::kind;

use super::worker::{mlmodel_info, var, JobRun};

const WORKER: &str = "train-worker";

pub async fn run() -> Result<()> {
    let params: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&var(WORKER, kind::CONFIG_VAR)?)
            .context("reading the train config")?;
    let (config, register) = kind::config_of(&params).map_err(|e| anyhow!(e))?;
    let run = JobRun::of_job(WORKER).await?;
    let mut tags = Vec::new();
    // The commit the binary was built from, when the build said (QANAT_GIT_COMMIT).
    if let Some(commit) = option_env!("QANAT_GIT_COMMIT") {
        tags.push(("mlflow.source.git.commit".to_string(), commit.to_string()));
    }
    let job = TrainJob {
        config,
        inputs: var(WORKER, "QANAT_INPUTS")?.into(),
        resumed: std::env::var("QANAT_RESUMED").as_deref() == Ok("true"),
        tags,
        mlmodel: mlmodel_info(&run.run_id),
    };
    let run = tokio::task::spawn_blocking(move || qanat_train::job::run(&job, &run).map(|()| run))
        .await??;
    if let Some(name) = register {
        println!("registered {}", run.register(&name, &[]).await?);
    }
    Ok(())
}
