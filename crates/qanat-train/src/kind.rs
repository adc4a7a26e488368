//! `kind: train`: Qanat's trainer as a job. The scheduler runs it like any job — queue,
//! resources, cgroups, retries, logs, the job's token and run — and the process it
//! starts is this binary's `train-worker`, which reads the job's inputs, trains, logs
//! to the job's run and registers the model.

use std::path::PathBuf;

use qanat_jobs::{JobKind, ProcessPlan};
use serde_json::{Map, Value};

use crate::TrainConfig;

/// The variable the worker reads its config from (JSON).
pub const CONFIG_VAR: &str = "QANAT_TRAIN_CONFIG";

/// The `train` kind, starting `program train-worker`.
#[derive(Debug, Clone)]
pub struct TrainKind {
    program: PathBuf,
}

impl TrainKind {
    /// `program`: the `qanat` binary the worker runs as (this server's own).
    pub fn new(program: PathBuf) -> Self {
        TrainKind { program }
    }
}

/// The train config of a job's kind-specific fields: all of them but `register`
/// (the model name to register the result under).
pub fn config_of(params: &Map<String, Value>) -> Result<(TrainConfig, Option<String>), String> {
    let mut fields = params.clone();
    let register = match fields.remove("register") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if !s.trim().is_empty() => Some(s),
        Some(other) => {
            return Err(format!(
                "register = {other}: name the registered model to add the trained version to, e.g. register: churn"
            ))
        }
    };
    let config = TrainConfig::from_value(Value::Object(fields)).map_err(|e| e.to_string())?;
    Ok((config, register))
}

impl JobKind for TrainKind {
    fn name(&self) -> &'static str {
        "train"
    }

    fn check(&self, params: &Map<String, Value>, _path: &str) -> qanat_jobs::Result<()> {
        config_of(params)
            .map(|_| ())
            .map_err(|e| qanat_jobs::Error::Invalid(format!("a train job: {e}")))
    }

    fn check_inputs(
        &self,
        params: &Map<String, Value>,
        inputs: &[(String, Vec<qanat_data::tabular::FileProfile>)],
    ) -> qanat_jobs::Result<()> {
        let (config, _) = config_of(params).map_err(qanat_jobs::Error::Invalid)?;
        crate::inputs::check_profiles(&config, inputs)
            .map_err(|e| qanat_jobs::Error::Invalid(format!("a train job: {e}")))
    }

    fn plan(
        &self,
        params: &Map<String, Value>,
        _rank: u32,
        _ranks: u32,
    ) -> qanat_jobs::Result<ProcessPlan> {
        Ok(worker_plan(
            &self.program,
            "train-worker",
            CONFIG_VAR,
            params,
        ))
    }
}

/// The process of a kind run by this binary: `program subcommand`, with the job's
/// fields as JSON in `var`.
pub fn worker_plan(
    program: &std::path::Path,
    subcommand: &str,
    var: &str,
    params: &Map<String, Value>,
) -> ProcessPlan {
    ProcessPlan {
        program: program.display().to_string(),
        args: vec![subcommand.into()],
        env: vec![(var.into(), Value::Object(params.clone()).to_string())],
        working_dir: None,
    }
}
