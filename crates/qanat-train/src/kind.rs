//! `kind: train`'s fields: Qanat's trainer as a job. The scheduler runs it like any job
//! — queue, resources, cgroups, retries, logs, the job's token and run — and the
//! process it starts is the binary's `train-worker`, which reads the job's inputs,
//! trains, logs to the job's run and registers the model. The kind itself is wired in
//! the binary (`crates/qanat/src/kinds.rs`), so the trainer does not depend on the
//! scheduler.

use serde_json::{Map, Value};

use crate::TrainConfig;

/// A `train` job's fields, as the API publishes them: a train config and the model to
/// register the result under ([`config_of`] reads them).
#[derive(Debug, Clone, utoipa::ToSchema)]
pub struct TrainFields {
    #[serde(flatten)]
    pub config: TrainConfig,
    /// The registered model the trained version is added to (created when missing).
    pub register: Option<String>,
}

/// The variable the worker reads its config from (JSON).
pub const CONFIG_VAR: &str = "QANAT_TRAIN_CONFIG";

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
