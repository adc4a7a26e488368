//! The trainer's jobs, start to end: a `train` job from its inputs to a stored model
//! package (read the table, log the params, train with a checkpoint after every epoch,
//! resuming from the run's last one on a later attempt, then write the package and the
//! split to the run's artifacts), and a `sweep` ([`sweep`]).
//!
//! What they need of the platform (the job's run, the serving path, other jobs) are
//! the traits [`JobRun`], [`TrainRun`] and [`sweep::Trials`], which the binary
//! implements over the API with the job's token; registering the model is the
//! binary's too. Blocking: call them off the async runtime.

pub mod sweep;

use qanat_model::package::{self, MlModelInfo};
use qanat_model::profile::{ColumnProfile, TableProfile};
use qanat_model::{Table, TrainConfig};

use crate::{Error, Result};

/// The run artifact holding the latest checkpoint.
pub const CHECKPOINT: &str = "checkpoints/last.ckpt";

/// What a job does on its run, through the platform.
pub trait JobRun {
    /// Logs metrics (`key`, value, step), params and tags to the run.
    fn log(
        &self,
        metrics: &[(String, f64, i64)],
        params: &[(String, String)],
        tags: &[(String, String)],
    ) -> Result<()>;

    /// Stores `bytes` as the run's artifact `path`, whole (replacing one there).
    fn store(&self, path: &str, bytes: Vec<u8>) -> Result<()>;

    /// The run's artifact `path`, or `None` when there is none.
    fn fetch(&self, path: &str) -> Result<Option<Vec<u8>>>;
}

/// What a train job needs besides its run: serving's view of the trained model.
pub trait TrainRun: JobRun {
    /// The trained model's outputs on `rows` of `table`, computed as serving computes
    /// them, profiled (monitoring's prediction drift compares live outputs with these).
    fn outputs_profile(
        &self,
        spec: &[u8],
        weights: &[u8],
        table: &Table,
        rows: &[usize],
    ) -> Result<Vec<(String, ColumnProfile)>>;
}

/// One train job: what it trains and on what.
#[derive(Debug, Clone)]
pub struct TrainJob {
    pub config: TrainConfig,
    /// The job's materialized inputs (`$QANAT_INPUTS`): the table's files.
    pub inputs: std::path::PathBuf,
    /// Whether this is a later attempt, which looks for a checkpoint to resume from.
    pub resumed: bool,
    /// Tags the caller knows and the trainer does not (the build's commit).
    pub tags: Vec<(String, String)>,
    /// What the package's `MLmodel` records of its run.
    pub mlmodel: MlModelInfo,
}

/// Runs `job`, logging and storing on `run`; prints its progress to stdout (the job's
/// log).
pub fn run(job: &TrainJob, run: &dyn TrainRun) -> Result<()> {
    let table = Table::read_dir(&job.inputs)?;
    println!(
        "read {} rows, columns: {}",
        table.rows(),
        table.names().join(", ")
    );
    run.log(&[], &params(&job.config, &table)?, &tags(&job.tags))
        .map_err(|e| context("logging the params", e))?;

    // Only a later attempt can find a checkpoint in its run (a first one would just
    // audit a miss).
    let resume = if job.resumed {
        run.fetch(CHECKPOINT)
            .map_err(|e| context("reading the run's last checkpoint", e))?
    } else {
        None
    };
    let mut epoch_end = |e: crate::fit::EpochEnd<'_>| {
        let m = e.metrics;
        let step = i64::from(m.epoch);
        let mut metrics: Vec<(String, f64, i64)> = m
            .values
            .iter()
            .map(|(k, v)| (k.clone(), *v, step))
            .collect();
        metrics.push(("learning_rate".into(), m.learning_rate, step));
        println!(
            "epoch {}: {}",
            m.epoch,
            m.values
                .iter()
                .map(|(k, v)| format!("{k} {v:.4}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        let checkpoint = e.checkpoint()?;
        run.log(&metrics, &[], &[])
            .and_then(|()| run.store(CHECKPOINT, checkpoint))
            .map_err(|e| context("logging the epoch", e))
    };
    let resumed = match &resume {
        Some(ckpt) => {
            println!("resuming from the run's last checkpoint ({CHECKPOINT})");
            match crate::train_table(&table, &job.config, Some(ckpt), &mut epoch_end) {
                Err(Error::Checkpoint(why)) => {
                    println!("cannot resume from it ({why}): starting over");
                    None
                }
                other => Some(other),
            }
        }
        None => None,
    };
    let trained = match resumed {
        Some(t) => t?,
        None => crate::train_table(&table, &job.config, None, &mut epoch_end)?,
    };
    let best = trained.fitted.best_epoch;
    println!(
        "best epoch {best} of {} (train rows {}, validation rows {})",
        trained.fitted.epochs_run,
        trained.train_rows.len(),
        trained.valid_rows.len()
    );
    store_package(job, run, &table, &trained)?;

    let mut summary = vec![("best_epoch".to_string(), f64::from(best), i64::from(best))];
    if let Some(m) = trained.fitted.history.get(best as usize) {
        summary.extend(
            m.values
                .iter()
                .filter(|(k, _)| k.starts_with("val_"))
                .map(|(k, v)| (format!("best_{k}"), *v, i64::from(best))),
        );
    }
    let backend = [
        (
            "qanat.backend".to_string(),
            format!("burn {}", trained.fitted.backend),
        ),
        (
            "qanat.precision".to_string(),
            trained.fitted.precision.as_str().to_string(),
        ),
    ];
    run.log(&summary, &[], &backend)
        .map_err(|e| context("logging the best epoch", e))
}

/// Writes the model package and the split to the run's artifacts: the signature
/// (`spec.json`) last but for the profile, since a package with one is complete.
fn store_package(
    job: &TrainJob,
    run: &dyn TrainRun,
    table: &Table,
    trained: &crate::Trained,
) -> Result<()> {
    // Which rows were fitted on and held out (0-based, in the order the input's files
    // are read: sorted by path, rows in file order): to reproduce or compare the run.
    let split = to_json(&serde_json::json!({
        "train": trained.train_rows,
        "validation": trained.valid_rows,
    }))?;
    let model = &trained.fitted.model;
    let weights = crate::export::safetensors(model)?;
    let spec = crate::export::spec(model, &trained.prep).to_bytes()?;
    let onnx = crate::onnx::onnx(model, &trained.prep)?;
    // The first validation rows and what the trained model outputs for them.
    let rows: Vec<usize> = trained.valid_rows.iter().take(20).copied().collect();
    let (input, output) =
        crate::export::example(model, &trained.prep, table, &rows, &Default::default())?;
    // What the model was fitted on, for monitoring to compare live traffic with
    // (docs/monitoring.md): its inputs and its target; columns the config excluded
    // (ids, times) are neither served nor compared.
    let target = job.config.target.as_str();
    let mut profiled: Vec<&str> = trained
        .prep
        .features
        .iter()
        .map(qanat_model::prep::Feature::name)
        .collect();
    profiled.push(target);
    let mut profile = TableProfile::of_rows(table, &trained.train_rows, &profiled);
    profile.target = Some(target.to_string());
    profile.predictions = run
        .outputs_profile(&spec, &weights, table, &trained.train_rows)
        .map_err(|e| context("profiling the model's outputs on its training rows", e))?;
    let mut info = job.mlmodel.clone();
    info.metadata.extend([
        ("qanat.runtime".to_string(), "native".to_string()),
        ("qanat.precision".to_string(), "f32".to_string()),
    ]);
    let mlmodel = package::mlmodel(&trained.prep, &info).into_bytes();
    for (file, bytes, what) in [
        (package::WEIGHTS, weights, "the model's weights"),
        (package::ONNX, onnx, "the model as ONNX"),
        (package::MLMODEL, mlmodel, "the model's MLmodel file"),
        (
            package::INPUT_EXAMPLE,
            to_json(&input)?,
            "the input example",
        ),
        (
            package::OUTPUT_EXAMPLE,
            to_json(&output)?,
            "the output example",
        ),
        (package::SPEC, spec, "the model's spec"),
        (
            package::REFERENCE_PROFILE,
            to_json(&profile)?,
            "the reference profile",
        ),
    ] {
        run.store(&package::in_run(file), bytes)
            .map_err(|e| context(&format!("storing {what}"), e))?;
    }
    run.store("split.json", split)
        .map_err(|e| context("storing the split", e))
}

/// The run's params: the config's set fields, the learning rate it resolves to and
/// the table's size.
fn params(config: &TrainConfig, table: &Table) -> Result<Vec<(String, String)>> {
    let value =
        serde_json::to_value(config).map_err(|e| Error::internal(format!("the config: {e}")))?;
    let mut params: Vec<(String, String)> = value
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, v)| !v.is_null() && k.as_str() != "learning_rate")
        .map(|(k, v)| {
            let s = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), s)
        })
        .collect();
    params.push(("learning_rate".into(), config.learning_rate().to_string()));
    params.push(("rows".into(), table.rows().to_string()));
    Ok(params)
}

/// The run's provenance tags: the trainer, the machine, this build, and `extra`.
fn tags(extra: &[(String, String)]) -> Vec<(String, String)> {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut tags = vec![
        ("qanat.trainer".to_string(), "native".to_string()),
        ("qanat.env.cpu".to_string(), cpu),
        ("qanat.env.cpus".to_string(), cpus.to_string()),
        (
            "qanat.env.os".to_string(),
            format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
        ),
        (
            "qanat.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
    ];
    tags.extend(extra.iter().cloned());
    tags
}

pub(crate) fn to_json(value: &impl serde::Serialize) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| Error::internal(format!("writing JSON: {e}")))
}

/// `e` with what was being done when it happened, keeping whether the input was at
/// fault.
pub fn context(doing: &str, e: Error) -> Error {
    match e {
        Error::Model(qanat_model::Error::Invalid(m)) => Error::invalid(format!("{doing}: {m}")),
        Error::Checkpoint(m) => Error::Checkpoint(format!("{doing}: {m}")),
        other => Error::internal(format!("{doing}: {other}")),
    }
}
