//! `qanat optimize-worker`: the process an `optimize` job runs (started by the
//! scheduler, never by hand). It fetches the source version's package, applies the
//! method, measures both models on the job's input (the holdout), logs the report to the
//! job's run — params, metrics, `report.json` — stores the result as the run's `model/`
//! artifacts and registers it as a new version derived from the source when it passes
//! the gate (or the job forces it). A refused result fails the job with the verdict.

use anyhow::{anyhow, bail, Context, Result};
use qanat_model::package::{self, MlModelInfo, INPUT_EXAMPLE, REFERENCE_PROFILE};
use qanat_model::Table;
use qanat_runtime::imported::Imported;
use qanat_runtime::kind::{OptimizeParams, CONFIG_VAR};
use qanat_runtime::optimize::Optimized;
use qanat_runtime::package::NativeModel;
use qanat_runtime::RuntimeKind;

use super::train_worker::{artifact_if_any, job_client};

fn var(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| {
        format!(
            "{name} is not set: optimize-worker runs inside an optimize job, started by the scheduler"
        )
    })
}

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

/// The source model, fetched.
enum Source {
    /// `spec.json` and `weights.safetensors`.
    Native(Vec<u8>, Vec<u8>),
    /// `model.onnx` of a model made elsewhere.
    Onnx(Vec<u8>),
}

/// The `MLmodel` file of a version derived from an imported model: the source's, with
/// this run's id, path and time, without the source's model ids, and with Qanat's
/// metadata; a minimal `onnx` + `python_function` one when the source had none.
fn derived_mlmodel(source: Option<&[u8]>, info: &MlModelInfo) -> Result<String> {
    use serde_yaml_ng::{Mapping, Value};
    let mut doc: Mapping = match source {
        Some(bytes) => serde_yaml_ng::from_slice(bytes).context("reading the source's MLmodel")?,
        None => serde_yaml_ng::from_str(
            "flavors:\n  onnx:\n    code: null\n    data: model.onnx\n    providers: [CPUExecutionProvider]\n  python_function:\n    data: model.onnx\n    loader_module: mlflow.onnx\n",
        )?,
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
    Ok(serde_yaml_ng::to_string(&doc)?)
}

async fn fetch(
    client: &qanat_client::Client,
    project: &str,
    base: &str,
    file: &str,
) -> Result<Option<Vec<u8>>> {
    artifact_if_any(client, project, &format!("{base}/{file}"))
        .await
        .with_context(|| format!("reading the source model's {file}"))
}

pub async fn run() -> Result<()> {
    let fields: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&var(CONFIG_VAR)?).context("reading the optimize job's fields")?;
    let p = OptimizeParams::from_params(&fields).map_err(|e| anyhow!(e))?;
    let (source, method, runtime) = (
        p.source().map_err(|e| anyhow!(e))?,
        p.method().map_err(|e| anyhow!(e))?,
        p.runtime().map_err(|e| anyhow!(e))?,
    );
    let settings = qanat_runtime::optimize::Settings {
        budget: p.budget().map_err(|e| anyhow!(e))?,
        seconds: p.timing_seconds.unwrap_or(1.0),
        runtime,
        tune: p.fine_tune().map_err(|e| anyhow!(e))?,
    };
    // Before any fetching or training: a runtime that cannot run here fails the job now.
    if p.runtime() == Ok(RuntimeKind::Onnxruntime) {
        qanat_runtime::onnx::onnxruntime::library().map_err(|e| anyhow!(e))?;
    }
    let project = var("QANAT_PROJECT")?;
    let run_id = var("MLFLOW_RUN_ID")?;
    let inputs = std::env::var("QANAT_INPUTS").map_err(|_| {
        anyhow!("an optimize job needs its holdout as input: qanat optimize … --holdout dataset:NAME@VERSION")
    })?;
    let client = job_client(var)?;

    let version = client
        .model_version(&project, &source.name, &source.selector_or_latest())
        .await
        .with_context(|| format!("finding {source}"))?;
    let source_node = format!("model:{}@{}", version.name, version.version);
    let uri = client
        .model_version_download_uri(&project, &version.name, &version.version)
        .await?;
    let base = uri
        .strip_prefix("mlflow-artifacts:")
        .ok_or_else(|| {
            anyhow!("{source_node} is stored at {uri}, outside this server's artifacts")
        })?
        .trim_matches('/')
        .to_string();
    // The package stays in memory: nothing of the model is written to local disk.
    let spec = fetch(&client, &project, &base, package::SPEC).await?;
    let mut onnx = match spec {
        Some(_) => None,
        None => fetch(&client, &project, &base, package::ONNX).await?,
    };
    // Tensors kept beside the model (mlflow.onnx.log_model's default) are read in.
    if let Some(bytes) = &onnx {
        let mut files = std::collections::HashMap::new();
        for file in qanat_runtime::onnx::external_files(bytes)? {
            let Some(data) = fetch(&client, &project, &base, &file).await? else {
                bail!("{source_node}'s model.onnx keeps tensors in {file}, which is not beside it");
            };
            files.insert(file, data);
        }
        if !files.is_empty() {
            onnx = Some(qanat_runtime::onnx::with_external(bytes, &files)?);
        }
    }
    let imported = onnx.is_some();
    // What the model is, before anything else is fetched: no copy of its bytes.
    let source_input = match (spec, onnx) {
        (Some(spec), _) => {
            let Some(weights) = fetch(&client, &project, &base, package::WEIGHTS).await? else {
                bail!(
                    "{source_node} has no {}: the native runtime needs its weights",
                    package::WEIGHTS
                );
            };
            Source::Native(spec, weights)
        }
        (None, Some(bytes)) => Source::Onnx(bytes),
        (None, None) => bail!(
            "{source_node} has neither {} (a model trained by `qanat train`) nor {} (an ONNX \
             model): it has no signature, so it cannot be optimized",
            package::SPEC,
            package::ONNX
        ),
    };
    let mut examples = Vec::new();
    let keep: &[&str] = if imported { &IMPORTED_FILES } else { &CARRIED };
    for file in keep {
        if let Some(bytes) = fetch(&client, &project, &base, file).await? {
            examples.push((*file, bytes));
        }
    }
    let source_mlmodel = if imported {
        fetch(&client, &project, &base, package::MLMODEL).await?
    } else {
        None
    };
    // A model made elsewhere runs on tract unless the job says otherwise.
    let runtime = if imported && p.runtime.is_none() {
        RuntimeKind::Tract
    } else {
        runtime
    };
    let settings = qanat_runtime::optimize::Settings {
        runtime,
        ..settings
    };
    println!(
        "optimizing {source_node} ({}{}) with {}, measured on the {} runtime",
        uri,
        if matches!(source_input, Source::Onnx(_)) {
            ", an ONNX model made elsewhere"
        } else {
            ""
        },
        method.as_str(),
        runtime.as_str()
    );

    let chosen = method.clone();
    let described = qanat_runtime::imported::Described {
        target: p.target.clone().unwrap_or_default(),
        task: p.task,
        features: p.features.clone(),
    };
    let signature = source_mlmodel
        .as_deref()
        .map(|m| qanat_model::package::signature_columns(m, "inputs"));
    let (optimized, report) = tokio::task::spawn_blocking(move || -> Result<_> {
        let table = Table::read_dir(std::path::Path::new(&inputs))?;
        match source_input {
            Source::Native(spec, weights) => {
                let model = NativeModel::from_bytes(&spec, &weights)?;
                let rows =
                    qanat_runtime::evaluate::labelled_rows(&table, &model.spec().preprocessing)?;
                println!(
                    "input: {} rows, {} with the target",
                    table.rows(),
                    rows.len()
                );
                let (m, r) =
                    qanat_runtime::optimize::optimize(&model, chosen, &table, &rows, &settings)?;
                Ok((Optimized::Native(Box::new(m)), r))
            }
            Source::Onnx(bytes) => {
                let all: Vec<usize> = (0..table.rows()).collect();
                let model = Imported::new(
                    bytes,
                    &described,
                    signature.as_ref().and_then(|s| s.as_deref()),
                    &table,
                    &all,
                    settings.runtime,
                )?;
                let rows = qanat_runtime::evaluate::labelled_rows(&table, model.preprocessing())?;
                println!(
                    "input: {} rows, {} with the target; the model reads {:?}; its scores are {:?}",
                    table.rows(),
                    rows.len(),
                    model.features(),
                    model.scores()
                );
                Ok(qanat_runtime::optimize::optimize_imported(
                    &model, chosen, &table, &rows, &settings,
                )?)
            }
        }
    })
    .await??;

    let (o, n) = (&report.original, &report.optimized);
    // The runtime the result is measured on and made for (a student: native).
    let made_for = n.runtime.as_str();
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
    let params = vec![
        ("source".to_string(), source_node.clone()),
        ("method".to_string(), method.as_str().to_string()),
        ("holdout_rows".to_string(), report.holdout_rows.to_string()),
        ("allowed_drop".to_string(), report.allowed_drop.to_string()),
        ("force".to_string(), p.force.to_string()),
        ("runtime".to_string(), runtime.as_str().to_string()),
        ("optimized_runtime".to_string(), made_for.to_string()),
        ("optimized_layers".to_string(), format!("{:?}", n.layers)),
    ];
    let mut params = params;
    // The method's own settings (sparsity, hidden widths, temperature …) and training's.
    if let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(&report.method) {
        for (_, v) in fields {
            if let serde_json::Value::Object(values) = v {
                for (k, v) in values {
                    params.push((k, v.to_string()));
                }
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
    let tags = vec![
        ("qanat.optimize.verdict".to_string(), report.verdict.clone()),
        ("qanat.runtime".to_string(), made_for.to_string()),
        ("qanat.precision".to_string(), n.precision.clone()),
    ];
    client
        .log_batch(&project, &run_id, &metrics, &params, &tags)
        .await
        .context("logging the report")?;
    let run = client.run(&project, &run_id).await?;
    let root = run.info.artifact_uri;
    client
        .upload_artifact(
            &project,
            &root,
            "report.json",
            serde_json::to_vec_pretty(&report)?,
        )
        .await
        .context("storing report.json")?;

    if !report.passed && !p.force {
        bail!(
            "{} — not registered (force: true registers it anyway); the report is in run {run_id}",
            report.verdict
        );
    }
    let mut info = super::train_worker::mlmodel_info(&run_id);
    info.metadata
        .push(("qanat.runtime".to_string(), made_for.to_string()));
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    match &optimized {
        Optimized::Native(model) => {
            // A student of an imported model takes columns, not the source's input.
            if !imported {
                files.extend(examples.into_iter().map(|(f, b)| (f.to_string(), b)));
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
            info.metadata
                .push(("qanat.precision".to_string(), n.precision.clone()));
            info.metadata
                .push(("qanat.derived_from".to_string(), source_node.clone()));
            files.extend(examples.into_iter().map(|(f, b)| (f.to_string(), b)));
            files.push((package::ONNX.to_string(), model.bytes().to_vec()));
            // MLmodel last: it is what makes the directory a model for mlflow.
            files.push((
                package::MLMODEL.to_string(),
                derived_mlmodel(source_mlmodel.as_deref(), &info)?.into_bytes(),
            ));
        }
    }
    for (file, bytes) in files {
        client
            .upload_artifact(&project, &root, &package::in_run(&file), bytes)
            .await
            .with_context(|| format!("storing the optimized model's {file}"))?;
    }
    let name = p.register.clone().unwrap_or_else(|| version.name.clone());
    let v = client
        .register_run_model(
            &project,
            &name,
            &run_id,
            &[
                (
                    qanat_tracking::DERIVED_FROM_TAG.to_string(),
                    source_node.clone(),
                ),
                (
                    "qanat.optimization".to_string(),
                    method.as_str().to_string(),
                ),
                ("qanat.runtime".to_string(), made_for.to_string()),
                ("qanat.precision".to_string(), n.precision.clone()),
            ],
        )
        .await
        .with_context(|| format!("registering the optimized model as '{name}'"))?;
    if report.passed {
        println!("registered model:{name}@{v}, derived from {source_node}");
    } else {
        println!(
            "registered model:{name}@{v}, derived from {source_node}, although it exceeds the budget (forced)"
        );
    }
    Ok(())
}
