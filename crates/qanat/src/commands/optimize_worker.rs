//! `qanat optimize-worker`: the process an `optimize` job runs (started by the
//! scheduler, never by hand). It fetches the source version's package, applies the
//! method, measures both models on the job's input (the holdout), logs the report to the
//! job's run — params, metrics, `report.json` — stores the result as the run's `model/`
//! artifacts and registers it as a new version derived from the source when it passes
//! the gate (or the job forces it). A refused result fails the job with the verdict.

use anyhow::{anyhow, bail, Context, Result};
use qanat_runtime::kind::{OptimizeParams, CONFIG_VAR};
use qanat_runtime::package::{self, NativeModel};
use qanat_train::Table;

use super::train_worker::{artifact_if_any, job_client};

fn var(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| {
        format!(
            "{name} is not set: optimize-worker runs inside an optimize job, started by the scheduler"
        )
    })
}

/// Files of the source package copied into the result when present. Not
/// `output_example.json`: those are the source model's outputs, not the result's.
const EXAMPLES: [&str; 1] = ["input_example.json"];

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
    let Some(spec) = fetch(&client, &project, &base, package::SPEC).await? else {
        bail!(
            "{source_node} has no {}: it has no signature, so it cannot be optimized (models trained by `qanat train` carry one)",
            package::SPEC
        );
    };
    let Some(weights) = fetch(&client, &project, &base, package::WEIGHTS).await? else {
        bail!(
            "{source_node} has no {}: the native runtime needs its weights",
            package::WEIGHTS
        );
    };
    let mut examples = Vec::new();
    for file in EXAMPLES {
        if let Some(bytes) = fetch(&client, &project, &base, file).await? {
            examples.push((file, bytes));
        }
    }
    println!(
        "optimizing {source_node} ({}) with {}, measured on the {} runtime",
        uri,
        method.as_str(),
        runtime.as_str()
    );

    let chosen = method.clone();
    let (optimized, report) = tokio::task::spawn_blocking(move || -> Result<_> {
        let model = NativeModel::from_bytes(&spec, &weights)?;
        let table = Table::read_dir(std::path::Path::new(&inputs))?;
        let rows = qanat_runtime::evaluate::labelled_rows(&table, &model.spec().preprocessing)?;
        println!(
            "input: {} rows, {} with the target",
            table.rows(),
            rows.len()
        );
        Ok(qanat_runtime::optimize::optimize(
            &model, chosen, &table, &rows, &settings,
        )?)
    })
    .await??;

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
        ("optimized_layers".to_string(), format!("{:?}", n.layers)),
    ];
    let tags = vec![
        ("qanat.optimize.verdict".to_string(), report.verdict.clone()),
        ("qanat.runtime".to_string(), runtime.as_str().to_string()),
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
        .push(("qanat.runtime".to_string(), runtime.as_str().to_string()));
    for (file, bytes) in examples {
        client
            .upload_artifact(&project, &root, &format!("model/{file}"), bytes)
            .await
            .with_context(|| format!("storing {file}"))?;
    }
    // spec.json comes last in `files`: a package with a signature is complete.
    for (file, bytes) in optimized.files(&info)? {
        client
            .upload_artifact(&project, &root, &format!("model/{file}"), bytes)
            .await
            .with_context(|| format!("storing the optimized model's {file}"))?;
    }
    let name = p.register.clone().unwrap_or_else(|| version.name.clone());
    let v = client
        .register_version(
            &project,
            &name,
            &format!("runs:/{run_id}/model"),
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
                ("qanat.runtime".to_string(), runtime.as_str().to_string()),
                ("qanat.precision".to_string(), n.precision.clone()),
            ],
        )
        .await
        .with_context(|| format!("registering the optimized model as '{name}'"))?;
    if report.passed {
        println!("registered model '{name}' version {v}, derived from {source_node}");
    } else {
        println!(
            "registered model '{name}' version {v}, derived from {source_node}, although it exceeds the budget (forced)"
        );
    }
    Ok(())
}
