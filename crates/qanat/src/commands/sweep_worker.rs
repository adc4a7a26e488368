//! `qanat sweep-worker`: the process a `sweep` job runs. The sweep itself — trials as
//! child `train` jobs, `parallel` at once, ASHA, its state in the run's
//! `sweep/state.json` so that a later attempt goes on — is `qanat_train::job::sweep`;
//! this gives it the job's run and the jobs API, and registers the best trial's model.

use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use qanat_train::job::sweep::{SweepJob, TrialJob};
use qanat_train::sweep::{SweepConfig, CONFIG_VAR};
use serde_json::{json, Map, Value};

use super::worker::{var, JobRun};

const WORKER: &str = "sweep-worker";

/// The sweep's trials, through the jobs API: children of the sweep's run, reading the
/// sweep job's inputs, in its experiment.
struct Trials {
    run: JobRun,
    inputs: Vec<qanat_core::ObjectRef>,
    experiment: Option<String>,
}

pub async fn run() -> Result<()> {
    let config = SweepConfig::from_value(
        serde_json::from_str(&var(WORKER, CONFIG_VAR)?).context("reading the sweep config")?,
    )
    .map_err(|e| anyhow!(e))?;
    let register = config.register.clone();
    let job_id = var(WORKER, "QANAT_JOB_ID")?;
    let run = JobRun::of_job(WORKER).await?;
    let me = run.client.job(&run.project, &job_id).await?;
    let trials = Trials {
        run: run.clone(),
        inputs: me.spec.inputs.clone(),
        experiment: me.spec.experiment.clone(),
    };
    let job = SweepJob {
        config,
        job_id,
        poll: Duration::from_millis(500),
    };
    let (run, best) = tokio::task::spawn_blocking(move || {
        qanat_train::job::sweep::run(&job, &run, &trials).map(|best| (run, best))
    })
    .await??;
    if let Some(name) = register {
        let (c, p) = (&run.client, &run.project);
        let v = c
            .register_run_model(p, &name, &best.run_id, &[])
            .await
            .with_context(|| format!("registering the best trial's model as '{name}'"))?;
        println!(
            "registered {} (trial {})",
            qanat_core::ObjectRef::at(qanat_core::Kind::Model, name.as_str(), &v),
            best.number
        );
    }
    Ok(())
}

fn trial(j: qanat_jobs::wire::Job) -> TrialJob {
    TrialJob {
        job_id: j.job_id,
        run_id: j.run_id,
        state: j.state,
        reason: j.reason,
    }
}

fn failed(doing: &str, e: impl std::fmt::Display) -> qanat_train::Error {
    qanat_train::Error::internal(format!("{doing}: {e}"))
}

impl qanat_train::job::sweep::Trials for Trials {
    fn submit(&self, name: &str, mut fields: Map<String, Value>) -> qanat_train::Result<TrialJob> {
        fields.insert("name".into(), json!(name));
        fields.insert("kind".into(), json!("train"));
        fields.insert("inputs".into(), json!(self.inputs));
        fields.insert("parent_run".into(), json!(self.run.run_id));
        if let Some(e) = &self.experiment {
            fields.insert("experiment".into(), json!(e));
        }
        let spec: qanat_jobs::JobSpec = serde_json::from_value(Value::Object(fields))
            .map_err(|e| qanat_train::Error::invalid(format!("a trial's job spec: {e}")))?;
        let (c, p) = (&self.run.client, &self.run.project);
        self.run
            .handle
            .block_on(c.submit_job(p, &spec))
            .map(trial)
            .map_err(|e| failed("submitting a trial", e))
    }

    fn find(&self, name: &str) -> qanat_train::Result<Option<TrialJob>> {
        let (c, p) = (&self.run.client, &self.run.project);
        let params = qanat_jobs::wire::JobListParams {
            state: None,
            limit: Some(1000),
        };
        let list = self
            .run
            .handle
            .block_on(c.jobs(p, &params))
            .map_err(|e| failed("listing the jobs", e))?;
        Ok(list.jobs.into_iter().find(|j| j.name == name).map(trial))
    }

    fn job(&self, id: &str) -> qanat_train::Result<TrialJob> {
        let (c, p) = (&self.run.client, &self.run.project);
        self.run
            .handle
            .block_on(c.job(p, id))
            .map(|d| trial(d.job))
            .map_err(|e| failed(&format!("reading job {id}"), e))
    }

    fn cancel(&self, id: &str) -> qanat_train::Result<bool> {
        let (c, p) = (&self.run.client, &self.run.project);
        match self.run.handle.block_on(c.cancel_job(p, id)) {
            Ok(_) => Ok(true),
            Err(qanat_client::Error::Api { status: 409, .. }) => Ok(false),
            Err(e) => Err(failed(&format!("cancelling job {id}"), e)),
        }
    }

    fn history(&self, run_id: &str, key: &str) -> qanat_train::Result<Vec<(i64, f64)>> {
        let (c, p) = (&self.run.client, &self.run.project);
        self.run
            .handle
            .block_on(c.metric_history(p, run_id, key))
            .map_err(|e| failed(&format!("reading {key} of run {run_id}"), e))
    }

    fn metric(&self, run_id: &str, key: &str) -> qanat_train::Result<Option<f64>> {
        let (c, p) = (&self.run.client, &self.run.project);
        let run = self
            .run
            .handle
            .block_on(c.run(p, run_id))
            .map_err(|e| failed(&format!("reading run {run_id}"), e))?;
        Ok(run
            .data
            .metrics
            .iter()
            .find(|m| m.key == key)
            .map(|m| m.value.0))
    }
}
