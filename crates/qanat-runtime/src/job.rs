//! An `optimize` job, start to end: fetch the source version's package (kept in
//! memory: nothing of the model is written to local disk), apply the method, measure
//! both models on the job's input (the holdout), log the report to the job's run —
//! params, metrics, `report.json` — and store the result as the run's `model/`
//! artifacts when it passes the gate (or the job forces it). A refused result is an
//! error that carries the verdict.
//!
//! What it needs of the platform is its run ([`JobRun`]) and the source's files
//! ([`SourceFiles`]), which the binary implements over the API with the job's token;
//! registering the result is the binary's too.
//! Blocking: call it off the async runtime.

use std::collections::HashMap;

use qanat_core::ObjectRef;
use qanat_model::package::{self, MlModelInfo, INPUT_EXAMPLE, REFERENCE_PROFILE};
use qanat_model::Table;
use qanat_train::job::JobRun;

use crate::imported::Imported;
use crate::kind::OptimizeParams;
use crate::optimize::{Method, Optimized, Report, Settings};
use crate::package::NativeModel;
use crate::{Error, Result, RuntimeKind};

/// Files of the source package copied into the result when present: its input
/// example, and the profile of its training data that monitors compare live traffic
/// with (the result was fitted on the same rows, and its outputs are the source's
/// within the gate's budget). Not `output_example.json`: those are the source model's
/// outputs, not the result's.
const CARRIED: [&str; 2] = [INPUT_EXAMPLE, REFERENCE_PROFILE];

/// Files of an imported ONNX model's directory (as `mlflow.onnx.log_model` writes it)
/// kept with a quantized version: its environment and input examples.
const IMPORTED_FILES: [&str; 6] = [
    INPUT_EXAMPLE,
    "serving_input_example.json",
    "conda.yaml",
    "python_env.yaml",
    "requirements.txt",
    "registered_model_meta",
];

/// What an optimize job needs besides its run: the source version's files.
pub trait SourceFiles {
    /// The file `file` of the source version's package, or `None` when it has none.
    fn file(&self, file: &str) -> qanat_train::Result<Option<Vec<u8>>>;
}

/// One optimize job.
#[derive(Debug, Clone)]
pub struct OptimizeJob {
    pub params: OptimizeParams,
    /// The source version, by number (`model:fraud@3`).
    pub source: ObjectRef,
    /// Where the source is stored (for the log).
    pub source_uri: String,
    /// The job's materialized input (`$QANAT_INPUTS`): the holdout's files.
    pub inputs: std::path::PathBuf,
    /// What the result's `MLmodel` records of its run.
    pub mlmodel: MlModelInfo,
}

/// What a job that passed (or was forced) stored.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub report: Report,
    /// The tags the registered version carries: where it came from and what it is.
    pub tags: Vec<(String, String)>,
}

/// The source model, fetched.
enum Source {
    /// `spec.json` and `weights.safetensors`.
    Native(Vec<u8>, Vec<u8>),
    /// `model.onnx` of a model made elsewhere.
    Onnx(Vec<u8>),
}

/// Runs `job` on `run`. Prints its progress and report to stdout (the job's log).
pub fn run(job: &OptimizeJob, run: &dyn JobRun, files: &dyn SourceFiles) -> Result<Outcome> {
    let p = &job.params;
    let method = p.method().map_err(Error::invalid)?;
    let runtime = p.runtime().map_err(Error::invalid)?;
    // Before any fetching or training: a runtime that cannot run here fails the job now.
    if runtime == RuntimeKind::Onnxruntime {
        crate::onnx::onnxruntime::library()?;
    }
    let source = &job.source;
    let fetch = |file: &str| -> Result<Option<Vec<u8>>> {
        let doing = format!("reading the source model's {file}");
        Ok(files
            .file(file)
            .map_err(|e| qanat_train::job::context(&doing, e))?)
    };
    let spec = fetch(package::SPEC)?;
    let mut onnx = match spec {
        Some(_) => None,
        None => fetch(package::ONNX)?,
    };
    // Tensors kept beside the model (mlflow.onnx.log_model's default) are read in.
    if let Some(bytes) = &onnx {
        let mut files = HashMap::new();
        for file in crate::onnx::external_files(bytes)? {
            let Some(data) = fetch(&file)? else {
                return Err(Error::invalid(format!(
                    "{source}'s model.onnx keeps tensors in {file}, which is not beside it"
                )));
            };
            files.insert(file, data);
        }
        if !files.is_empty() {
            onnx = Some(crate::onnx::with_external(bytes, &files)?);
        }
    }
    let imported = onnx.is_some();
    // What the model is, before anything else is fetched: no copy of its bytes.
    let source_model = match (spec, onnx) {
        (Some(spec), _) => {
            let Some(weights) = fetch(package::WEIGHTS)? else {
                return Err(Error::invalid(format!(
                    "{source} has no {}: the native runtime needs its weights",
                    package::WEIGHTS
                )));
            };
            Source::Native(spec, weights)
        }
        (None, Some(bytes)) => Source::Onnx(bytes),
        (None, None) => {
            return Err(Error::invalid(format!(
                "{source} has neither {} (a model trained by `qanat train`) nor {} (an ONNX \
                 model): it has no signature, so it cannot be optimized",
                package::SPEC,
                package::ONNX
            )))
        }
    };
    let mut examples = Vec::new();
    for file in if imported {
        &IMPORTED_FILES[..]
    } else {
        &CARRIED[..]
    } {
        if let Some(bytes) = fetch(file)? {
            examples.push((file.to_string(), bytes));
        }
    }
    let source_mlmodel = if imported {
        fetch(package::MLMODEL)?
    } else {
        None
    };
    let settings = Settings {
        budget: p.budget().map_err(Error::invalid)?,
        seconds: p.timing_seconds.unwrap_or(1.0),
        // A model made elsewhere runs on tract unless the job says otherwise.
        runtime: if imported && p.runtime.is_none() {
            RuntimeKind::Tract
        } else {
            runtime
        },
        tune: p.fine_tune().map_err(Error::invalid)?,
    };
    println!(
        "optimizing {source} ({}{}) with {}, measured on the {} runtime",
        job.source_uri,
        if imported {
            ", an ONNX model made elsewhere"
        } else {
            ""
        },
        method.as_str(),
        settings.runtime.as_str()
    );
    let signature = source_mlmodel
        .as_deref()
        .and_then(|m| package::signature_columns(m, "inputs"));
    let table = Table::read_dir(&job.inputs)?;
    let (optimized, report) = apply(
        job,
        source_model,
        method.clone(),
        &table,
        signature.as_deref(),
        &settings,
    )?;
    print_report(&report, &method);
    log_report(job, run, &report, &method, &settings)?;
    if !report.passed && !p.force {
        return Err(Error::invalid(format!(
            "{} — not registered (force: true registers it anyway); the report is in run {}",
            report.verdict, job.mlmodel.run_id
        )));
    }

    let made_for = report.optimized.runtime.as_str();
    let precision = report.optimized.precision.clone();
    let mut info = job.mlmodel.clone();
    info.metadata
        .push(("qanat.runtime".to_string(), made_for.to_string()));
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    match &optimized {
        Optimized::Native(model) => {
            // A student of an imported model takes columns, not the source's input.
            if !imported {
                files.extend(examples);
            }
            // spec.json comes last in `files`: a package with a signature is complete.
            files.extend(
                model
                    .files(&info)?
                    .into_iter()
                    .map(|(f, b)| (f.to_string(), b)),
            );
        }
        Optimized::Onnx(model) => {
            info.metadata.extend([
                ("qanat.precision".to_string(), precision.clone()),
                ("qanat.derived_from".to_string(), source.to_string()),
            ]);
            files.extend(examples);
            files.push((package::ONNX.to_string(), model.bytes().to_vec()));
            // MLmodel last: it is what makes the directory a model for mlflow.
            let mlmodel = derived_mlmodel(source_mlmodel.as_deref(), &info)?;
            files.push((package::MLMODEL.to_string(), mlmodel.into_bytes()));
        }
    }
    for (file, bytes) in files {
        run.store(&package::in_run(&file), bytes).map_err(|e| {
            qanat_train::job::context(&format!("storing the optimized model's {file}"), e)
        })?;
    }
    let tags = vec![
        // The registry's DERIVED_FROM_TAG: registering makes it a lineage edge.
        ("qanat.derived_from".to_string(), source.to_string()),
        (
            "qanat.optimization".to_string(),
            method.as_str().to_string(),
        ),
        ("qanat.runtime".to_string(), made_for.to_string()),
        ("qanat.precision".to_string(), precision),
    ];
    Ok(Outcome { report, tags })
}

/// Applies `method` to the source model, measured on `table`.
fn apply(
    job: &OptimizeJob,
    source: Source,
    method: Method,
    table: &Table,
    signature: Option<&[String]>,
    settings: &Settings,
) -> Result<(Optimized, Report)> {
    match source {
        Source::Native(spec, weights) => {
            let model = NativeModel::from_bytes(&spec, &weights)?;
            let rows = crate::evaluate::labelled_rows(table, &model.spec().preprocessing)?;
            println!(
                "input: {} rows, {} with the target",
                table.rows(),
                rows.len()
            );
            let (m, r) = crate::optimize::optimize(&model, method, table, &rows, settings)?;
            Ok((Optimized::Native(Box::new(m)), r))
        }
        Source::Onnx(bytes) => {
            let p = &job.params;
            let described = crate::imported::Described {
                target: p.target.clone().unwrap_or_default(),
                task: p.task,
                features: p.features.clone(),
            };
            let all: Vec<usize> = (0..table.rows()).collect();
            let model = Imported::new(bytes, &described, signature, table, &all, settings.runtime)?;
            let rows = crate::evaluate::labelled_rows(table, model.preprocessing())?;
            println!(
                "input: {} rows, {} with the target; the model reads {:?}; its scores are {:?}",
                table.rows(),
                rows.len(),
                model.features(),
                model.scores()
            );
            crate::optimize::optimize_imported(&model, method, table, &rows, settings)
        }
    }
}

fn print_report(report: &Report, method: &Method) {
    let (o, n) = (&report.original, &report.optimized);
    println!(
        "{}: {} {:.4} → {:.4}; weights {} → {} bytes ({:.0}%); batch 1 p50 {:.1} → {:.1} µs; batch 64 {:.0} → {:.0} rows/s ({:.2}x)",
        report.method.as_str(),
        o.quality.metric,
        o.quality.value,
        n.quality.value,
        o.size_bytes,
        n.size_bytes,
        report.size_ratio() * 100.0,
        o.speed.p50_us_batch1,
        n.speed.p50_us_batch1,
        o.speed.rows_per_s,
        n.speed.rows_per_s,
        report.speedup()
    );
    if method.needs_training_rows() {
        println!(
            "layers {:?} → {:?}; hidden-layer sparsity {:.3} → {:.3}; fidelity to the original {:.4}",
            o.layers, n.layers, o.sparsity, n.sparsity, report.fidelity
        );
    }
    if !report.kept_float.is_empty() {
        println!(
            "left in float by the accuracy-aware fallback: {}",
            report.kept_float.join(", ")
        );
    }
    println!("{}", report.verdict);
}

/// Logs the report to the run: both models' metrics, the settings, the verdict, and
/// `report.json`.
fn log_report(
    job: &OptimizeJob,
    run: &dyn JobRun,
    report: &Report,
    method: &Method,
    settings: &Settings,
) -> Result<()> {
    let (o, n) = (&report.original, &report.optimized);
    let made_for = n.runtime.as_str();
    let mut metrics: Vec<(String, f64, i64)> = Vec::new();
    for (side, m) in [("original", o), ("optimized", n)] {
        for (k, v) in &m.quality.metrics {
            metrics.push((format!("{side}_{k}"), *v, 0));
        }
        metrics.extend([
            (format!("{side}_size_bytes"), m.size_bytes as f64, 0),
            (format!("{side}_p50_us_batch1"), m.speed.p50_us_batch1, 0),
            (format!("{side}_p99_us_batch1"), m.speed.p99_us_batch1, 0),
            (format!("{side}_p50_us_batch64"), m.speed.p50_us_batch64, 0),
            (format!("{side}_p99_us_batch64"), m.speed.p99_us_batch64, 0),
            (format!("{side}_rows_per_s"), m.speed.rows_per_s, 0),
        ]);
    }
    metrics.extend([
        ("quality_drop".to_string(), report.quality_drop, 0),
        ("optimized_sparsity".to_string(), n.sparsity, 0),
        ("fidelity".to_string(), report.fidelity, 0),
        ("size_ratio".to_string(), report.size_ratio(), 0),
        ("speedup".to_string(), report.speedup(), 0),
    ]);
    let mut params = vec![
        ("source".to_string(), job.source.to_string()),
        ("method".to_string(), method.as_str().to_string()),
        ("holdout_rows".to_string(), report.holdout_rows.to_string()),
        ("allowed_drop".to_string(), report.allowed_drop.to_string()),
        ("force".to_string(), job.params.force.to_string()),
        ("runtime".to_string(), settings.runtime.as_str().to_string()),
        ("optimized_runtime".to_string(), made_for.to_string()),
        ("optimized_layers".to_string(), format!("{:?}", n.layers)),
    ];
    // The method's own settings (sparsity, hidden widths, temperature …) and training's.
    if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(&report.method) {
        for (_, v) in fields {
            if let serde_json::Value::Object(values) = v {
                params.extend(values.into_iter().map(|(k, v)| (k, v.to_string())));
            }
        }
    }
    if method.needs_training_rows() {
        params.extend([
            (
                "finetune_epochs".to_string(),
                settings.tune.epochs.to_string(),
            ),
            (
                "learning_rate".to_string(),
                settings.tune.learning_rate.to_string(),
            ),
            ("seed".to_string(), settings.tune.seed.to_string()),
        ]);
    }
    if !report.kept_float.is_empty() {
        params.push(("kept_float".to_string(), report.kept_float.join(",")));
    }
    let tags = [
        ("qanat.optimize.verdict".to_string(), report.verdict.clone()),
        ("qanat.runtime".to_string(), made_for.to_string()),
        ("qanat.precision".to_string(), n.precision.clone()),
    ];
    run.log(&metrics, &params, &tags)
        .map_err(|e| qanat_train::job::context("logging the report", e))?;
    let json = serde_json::to_vec_pretty(report)
        .map_err(|e| Error::internal(format!("writing report.json: {e}")))?;
    run.store("report.json", json)
        .map_err(|e| qanat_train::job::context("storing report.json", e))?;
    Ok(())
}

/// The `MLmodel` file of a version derived from an imported model: the source's, with
/// this run's id, path and time, without the source's model ids, and with Qanat's
/// metadata; a minimal `onnx` + `python_function` one when the source had none.
fn derived_mlmodel(source: Option<&[u8]>, info: &MlModelInfo) -> Result<String> {
    use serde_yaml_ng::{Mapping, Value};
    let yaml = |e: serde_yaml_ng::Error| Error::invalid(format!("the source's MLmodel: {e}"));
    let mut doc: Mapping = match source {
        Some(bytes) => serde_yaml_ng::from_slice(bytes).map_err(yaml)?,
        None => serde_yaml_ng::from_str(
            "flavors:\n  onnx:\n    code: null\n    data: model.onnx\n    providers: [CPUExecutionProvider]\n  python_function:\n    data: model.onnx\n    loader_module: mlflow.onnx\n",
        )
        .map_err(yaml)?,
    };
    for stale in ["model_uuid", "model_id", "model_size_bytes"] {
        doc.remove(stale);
    }
    doc.insert("run_id".into(), Value::from(info.run_id.clone()));
    doc.insert(
        "artifact_path".into(),
        Value::from(info.artifact_path.clone()),
    );
    doc.insert("utc_time_created".into(), Value::from(info.created.clone()));
    let mut metadata = match doc.remove("metadata") {
        Some(Value::Mapping(m)) => m,
        _ => Mapping::new(),
    };
    for (k, v) in &info.metadata {
        metadata.insert(Value::from(k.clone()), Value::from(v.clone()));
    }
    doc.insert("metadata".into(), Value::Mapping(metadata));
    serde_yaml_ng::to_string(&doc).map_err(|e| Error::internal(format!("writing MLmodel: {e}")))
}
