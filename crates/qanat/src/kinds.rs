//! The job kinds whose process is a subcommand of this binary (`train-worker`,
//! `sweep-worker`, `optimize-worker`): each a [`WorkerKind`] made of its domain crate's
//! fields type (published as the kind's schema) and the check that reads a spec into
//! it. They are wired here, where the scheduler and the domains meet, so the
//! trainer and the runtimes do not depend on the scheduler.

use std::path::PathBuf;
use std::sync::Arc;

use qanat_data::tabular::FileProfile;
use qanat_jobs::{Kinds, WorkerKind};
use qanat_train::inputs::{ColumnFacts, InputFacts};
use serde_json::Value;

/// The standard kinds and this binary's workers, run as `program <kind>-worker`.
pub fn all(program: PathBuf) -> Kinds {
    Kinds::standard()
        .with(Arc::new(train(program.clone())))
        .with(Arc::new(sweep(program.clone())))
        .with(Arc::new(optimize(program)))
}

/// `kind: train`: its fields are a train config plus `register`; checked against the
/// inputs' stored profiles at submit.
fn train(program: PathBuf) -> WorkerKind {
    WorkerKind::new::<qanat_train::kind::TrainFields>(
        "train",
        program,
        qanat_train::kind::CONFIG_VAR,
        |params| qanat_train::config_of(params).map(|_| ()),
    )
    .with_input_check(|params, inputs| {
        let (config, _) = qanat_train::config_of(params)?;
        qanat_train::inputs::check_profiles(&config, &facts(inputs)).map_err(|e| e.to_string())
    })
}

/// The inputs' stored profiles as the columns the trainer's submit checks read.
fn facts(inputs: &[(String, Vec<FileProfile>)]) -> Vec<InputFacts> {
    inputs
        .iter()
        .map(|(name, files)| {
            let columns = files
                .iter()
                .filter_map(|f| f.profile.as_ref())
                .flat_map(|p| {
                    p.columns.iter().map(|c| ColumnFacts {
                        name: c.name.clone(),
                        data_type: c.data_type.clone(),
                        rows: p.rows,
                        nulls: c.nulls,
                        distinct: c.distinct_estimate,
                    })
                })
                .collect();
            (name.clone(), columns)
        })
        .collect()
}

/// `kind: sweep`: trials from across its space are checked against the inputs.
fn sweep(program: PathBuf) -> WorkerKind {
    WorkerKind::new::<qanat_train::sweep::SweepConfig>(
        "sweep",
        program,
        qanat_train::sweep::CONFIG_VAR,
        |params| {
            qanat_train::sweep::SweepConfig::from_value(Value::Object(params.clone()))
                .map(|_| ())
                .map_err(|e| e.to_string())
        },
    )
    .with_input_check(|params, inputs| qanat_train::sweep::check_inputs(params, &facts(inputs)))
}

/// `kind: optimize`: its one input is the holdout.
fn optimize(program: PathBuf) -> WorkerKind {
    WorkerKind::new::<qanat_runtime::kind::OptimizeParams>(
        "optimize",
        program,
        qanat_runtime::kind::CONFIG_VAR,
        |params| qanat_runtime::kind::OptimizeParams::from_params(params).map(|_| ()),
    )
    .with_input_check(|_, inputs| qanat_runtime::kind::check_holdout(inputs.len()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn refusals_name_the_kind_and_say_what_to_fix() {
        let kinds = all("qanat".into());
        let params = |v: Value| v.as_object().cloned().expect("an object");
        let optimize = kinds.get("optimize").expect("optimize");
        let ok = params(json!({"model": "model:fraud@champion", "quantize": "int8"}));
        optimize.check(&ok, "").expect("valid");
        let err = optimize.check_inputs(&ok, &[]).expect_err("no holdout");
        assert!(
            err.to_string()
                .starts_with("an optimize job: it needs its holdout"),
            "{err}"
        );
        let err = optimize
            .check(&params(json!({"quantize": "int8"})), "")
            .expect_err("no model");
        assert!(err.to_string().contains("missing field `model`"), "{err}");
        let train = kinds.get("train").expect("train");
        let err = train
            .check(&params(json!({"target": "y", "register": 3})), "")
            .expect_err("a number as a name");
        assert!(
            err.to_string().starts_with("a train job: register = 3"),
            "{err}"
        );
        assert!(kinds.get("sweep").is_ok());
    }
}
