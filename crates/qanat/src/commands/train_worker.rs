//! `qanat train-worker`: the process a `train` job runs (started by the scheduler,
//! never by hand). It reads the job's inputs, trains, logs params and per-epoch
//! metrics to the job's run, stores the model files as the run's `model/` artifacts and
//! registers a version when the job names a model — all through the API with the
//! job's own short-lived token.
//!
//! After every epoch the fit's state goes to the run's artifacts as
//! `checkpoints/last.ckpt` (Qanat's encrypted artifact store, replaced atomically); a
//! later attempt of the job (after a crash, a kill or a preemption) resumes from it and
//! ends with the bits an uninterrupted run ends with.

use anyhow::{anyhow, Context, Result};
use futures::TryStreamExt;
use qanat_model::{package, Table};
use qanat_train::kind;

/// The run artifact holding the latest checkpoint.
const CHECKPOINT: &str = "checkpoints/last.ckpt";

/// The bytes of the artifact at `path` (`<experiment>/<run>/artifacts/...`), or `None`
/// when there is none.
pub(crate) async fn artifact_if_any(
    client: &qanat_client::Client,
    project: &str,
    path: &str,
) -> Result<Option<Vec<u8>>, qanat_client::Error> {
    match client.artifact(project, path).await {
        Ok(stream) => {
            let chunks: Vec<bytes::Bytes> = stream.try_collect().await?;
            Ok(Some(chunks.concat()))
        }
        Err(qanat_client::Error::Api { status: 404, .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The latest checkpoint of the run whose artifact root is `root`, if any.
async fn last_checkpoint(
    client: &qanat_client::Client,
    project: &str,
    root: &str,
) -> Result<Option<Vec<u8>>> {
    let base = root
        .trim_start_matches("mlflow-artifacts:")
        .trim_matches('/');
    artifact_if_any(client, project, &format!("{base}/{CHECKPOINT}"))
        .await
        .context("reading the run's last checkpoint")
}

fn var(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| {
        format!("{name} is not set: train-worker runs inside a train job, started by the scheduler")
    })
}

/// The client a worker inside a job talks to the server with: `QANAT_URL` and
/// `QANAT_TOKEN`, trusting `QANAT_CA_CERT` when the scheduler names one.
pub(crate) fn job_client(var: fn(&str) -> Result<String>) -> Result<qanat_client::Client> {
    let mut b = qanat_client::Client::builder(var("QANAT_URL")?).token(var("QANAT_TOKEN")?);
    if let Some(ca) = std::env::var_os("QANAT_CA_CERT") {
        let pem = std::fs::read(&ca)
            .with_context(|| format!("reading QANAT_CA_CERT {}", ca.to_string_lossy()))?;
        b = b.ca_certificate_pem(pem);
    }
    Ok(b.build()?)
}

pub async fn run() -> Result<()> {
    let params: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&var(kind::CONFIG_VAR)?).context("reading the train config")?;
    let (config, register) = kind::config_of(&params).map_err(|e| anyhow!(e))?;
    let project = var("QANAT_PROJECT")?;
    let run_id = var("MLFLOW_RUN_ID")?;
    let inputs = std::path::PathBuf::from(var("QANAT_INPUTS")?);
    let client = job_client(var)?;

    let target = config.target.clone();
    let table = tokio::task::spawn_blocking(move || Table::read_dir(&inputs)).await??;
    println!(
        "read {} rows, columns: {}",
        table.rows(),
        table.names().join(", ")
    );
    let mut params: Vec<(String, String)> = serde_json::to_value(&config)?
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| {
            let s = match v {
                serde_json::Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.clone(), s)
        })
        .collect();
    params.retain(|(k, _)| k != "learning_rate");
    params.push(("learning_rate".into(), config.learning_rate().to_string()));
    params.push(("rows".into(), table.rows().to_string()));
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| std::env::consts::ARCH.to_string());
    let mut tags = vec![
        ("qanat.trainer".to_string(), "native".to_string()),
        ("qanat.env.cpu".to_string(), cpu),
        (
            "qanat.env.cpus".to_string(),
            std::thread::available_parallelism()
                .map_or(1, |n| n.get())
                .to_string(),
        ),
        (
            "qanat.env.os".to_string(),
            format!("{}-{}", std::env::consts::OS, std::env::consts::ARCH),
        ),
        (
            "qanat.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
    ];
    // The commit the binary was built from, when the build said (QANAT_GIT_COMMIT).
    if let Some(commit) = option_env!("QANAT_GIT_COMMIT") {
        tags.push(("mlflow.source.git.commit".to_string(), commit.to_string()));
    }
    client
        .log_batch(&project, &run_id, &[], &params, &tags)
        .await
        .context("logging the params")?;

    let run = client.run(&project, &run_id).await?;
    let root = run.info.artifact_uri.clone();
    // Only a later attempt of the job can find a checkpoint in its run (the first one
    // would just audit a miss).
    let resume = if std::env::var("QANAT_RESUMED").as_deref() == Ok("true") {
        last_checkpoint(&client, &project, &root).await?
    } else {
        None
    };
    let handle = tokio::runtime::Handle::current();
    let (c, p, r, a) = (
        client.clone(),
        project.clone(),
        run_id.clone(),
        root.clone(),
    );
    let cfg = config.clone();
    let trained = tokio::task::spawn_blocking(move || {
        let mut epoch_end = |e: qanat_train::fit::EpochEnd<'_>| {
            let m = e.metrics;
            let mut metrics: Vec<(String, f64, i64)> = m
                .values
                .iter()
                .map(|(k, v)| (k.clone(), *v, i64::from(m.epoch)))
                .collect();
            metrics.push(("learning_rate".into(), m.learning_rate, i64::from(m.epoch)));
            println!(
                "epoch {}: {}",
                m.epoch,
                m.values
                    .iter()
                    .map(|(k, v)| format!("{k} {v:.4}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            let ckpt = e.checkpoint()?;
            handle
                .block_on(async {
                    c.log_batch(&p, &r, &metrics, &[], &[]).await?;
                    c.upload_artifact(&p, &a, CHECKPOINT, ckpt).await
                })
                .map_err(|e| qanat_train::Error::Internal(format!("logging the epoch: {e}")))
        };
        let resumed = match &resume {
            Some(ckpt) => {
                println!("resuming from the run's last checkpoint ({CHECKPOINT})");
                match qanat_train::train_table(&table, &cfg, Some(ckpt), &mut epoch_end) {
                    Err(qanat_train::Error::Checkpoint(why)) => {
                        println!("cannot resume from it ({why}): starting over");
                        None
                    }
                    other => Some(other),
                }
            }
            None => None,
        };
        let trained = match resumed {
            Some(t) => t,
            None => qanat_train::train_table(&table, &cfg, None, &mut epoch_end),
        };
        trained.map(|t| (t, table))
    })
    .await?;
    let (trained, table) = trained?;
    let best = trained.fitted.best_epoch;
    println!(
        "best epoch {best} of {} (train rows {}, validation rows {})",
        trained.fitted.epochs_run,
        trained.train_rows.len(),
        trained.valid_rows.len()
    );
    // Which rows were fitted on and held out (0-based, in the order the input's files
    // are read: sorted by path, rows in file order): to reproduce or compare the run.
    let split = serde_json::to_vec(&serde_json::json!({
        "train": trained.train_rows,
        "validation": trained.valid_rows,
    }))?;
    let weights = qanat_train::export::safetensors(&trained.fitted.model)?;
    let spec = qanat_train::export::spec(&trained.fitted.model, &trained.prep).to_bytes()?;
    let onnx = qanat_train::onnx::onnx(&trained.fitted.model, &trained.prep)?;
    // The first validation rows and what the trained model outputs for them.
    let rows: Vec<usize> = trained.valid_rows.iter().take(20).copied().collect();
    let (input, output) = qanat_train::export::example(
        &trained.fitted.model,
        &trained.prep,
        &table,
        &rows,
        &Default::default(),
    )?;
    // What the model was fitted on, profiled for monitoring to compare live traffic
    // with (docs/monitoring.md); it travels with the model's files.
    // The model's inputs and its target: columns the config excluded (ids, times)
    // are neither served nor compared.
    let mut profiled: Vec<&str> = trained
        .prep
        .features
        .iter()
        .map(qanat_model::prep::Feature::name)
        .collect();
    profiled.push(target.as_str());
    let mut profile = reference_profile(&table, &trained.train_rows, &profiled);
    profile.target = Some(target.clone());
    profile.predictions = prediction_profile(&weights, &spec, &table, &trained.train_rows)
        .context("profiling the model's outputs on its training rows")?;
    let profile = serde_json::to_vec(&profile)?;
    let mut info = mlmodel_info(&run_id);
    info.metadata.extend([
        ("qanat.runtime".to_string(), "native".to_string()),
        ("qanat.precision".to_string(), "f32".to_string()),
    ]);
    let mlmodel = package::mlmodel(&trained.prep, &info).into_bytes();
    // The signature last but for the profile: a package with one is complete.
    for (file, bytes, what) in [
        (package::WEIGHTS, weights, "the model's weights"),
        (package::ONNX, onnx, "the model as ONNX"),
        (package::MLMODEL, mlmodel, "the model's MLmodel file"),
        (
            package::INPUT_EXAMPLE,
            serde_json::to_vec(&input)?,
            "the input example",
        ),
        (
            package::OUTPUT_EXAMPLE,
            serde_json::to_vec(&output)?,
            "the output example",
        ),
        (package::SPEC, spec, "the model's spec"),
        (package::REFERENCE_PROFILE, profile, "the reference profile"),
    ] {
        client
            .upload_artifact(&project, &root, &package::in_run(file), bytes)
            .await
            .with_context(|| format!("storing {what}"))?;
    }
    client
        .upload_artifact(&project, &root, "split.json", split)
        .await
        .context("storing the split")?;
    let mut summary = vec![("best_epoch".to_string(), f64::from(best), i64::from(best))];
    if let Some(m) = trained.fitted.history.get(best as usize) {
        summary.extend(
            m.values
                .iter()
                .filter(|(k, _)| k.starts_with("val_"))
                .map(|(k, v)| (format!("best_{k}"), *v, i64::from(best))),
        );
    }
    let backend = vec![
        (
            "qanat.backend".to_string(),
            format!("burn {}", trained.fitted.backend),
        ),
        (
            "qanat.precision".to_string(),
            trained.fitted.precision.as_str().to_string(),
        ),
    ];
    client
        .log_batch(&project, &run_id, &summary, &[], &backend)
        .await?;
    if let Some(name) = register {
        let v = client
            .register_run_model(&project, &name, &run_id, &[])
            .await
            .with_context(|| format!("registering the model as '{name}'"))?;
        println!("registered model:{name}@{v}");
    }
    Ok(())
}

/// What the `MLmodel` file of a model stored under run `run_id`'s `model/` records.
pub(crate) fn mlmodel_info(run_id: &str) -> package::MlModelInfo {
    package::MlModelInfo {
        run_id: run_id.to_string(),
        artifact_path: package::DIR.to_string(),
        // As MLflow writes it (Python's str of a UTC datetime).
        created: chrono::Utc::now()
            .format("%Y-%m-%d %H:%M:%S%.6f")
            .to_string(),
        metadata: Vec::new(),
    }
}

/// Training rows the outputs are profiled on, at most (evenly spread).
const PREDICTION_ROWS: usize = 50_000;

/// The model's outputs on its training rows — `label`, `probability` (binary) or
/// `prediction` (regression) — computed as serving computes them, profiled for
/// monitoring's prediction drift.
fn prediction_profile(
    weights: &[u8],
    spec: &[u8],
    table: &qanat_model::table::Table,
    rows: &[usize],
) -> Result<Vec<(String, qanat_model::profile::ColumnProfile)>> {
    use qanat_model::table::Values as V;
    use qanat_serving::oip::{self, InferRequest, RequestInput};
    use serde_json::Value;
    let model = qanat_runtime::package::NativeModel::from_bytes(spec, weights)?;
    let loaded = qanat_serving::Loaded {
        name: "reference".into(),
        version: "1".into(),
        inputs: oip::input_metadata(&model),
        outputs: oip::output_metadata(&model),
        model: qanat_serving::Model::Native(model),
    };
    let step = rows.len().div_ceil(PREDICTION_ROWS).max(1);
    let picked: Vec<usize> = rows.iter().step_by(step).copied().collect();
    let mut outputs: std::collections::BTreeMap<String, Vec<Value>> = Default::default();
    for chunk in picked.chunks(oip::MAX_ROWS) {
        let mut inputs = Vec::new();
        for m in &loaded.inputs {
            let col = table.column(&m.name)?;
            let data: Vec<Value> = chunk
                .iter()
                .map(|&r| match &col.values {
                    V::Numeric(v) => v
                        .get(r)
                        .filter(|x| !x.is_nan())
                        .map_or(Value::Null, |x| serde_json::json!(x)),
                    V::Text(v) => v
                        .get(r)
                        .cloned()
                        .flatten()
                        .map_or(Value::Null, Value::String),
                    V::Unsupported(..) => Value::Null,
                })
                .collect();
            inputs.push(RequestInput {
                name: m.name.clone(),
                shape: vec![chunk.len() as i64, 1],
                datatype: m.datatype.clone(),
                parameters: None,
                data: Value::Array(data),
                raw: None,
            });
        }
        let answer = oip::infer(
            &loaded,
            InferRequest {
                id: None,
                parameters: None,
                inputs,
                outputs: None,
            },
        )?;
        for o in answer.outputs {
            if !["label", "probability", "prediction"].contains(&o.name.as_str()) {
                continue;
            }
            let mut flat = Vec::new();
            oip::flatten_values(&o.data, &mut flat);
            outputs
                .entry(o.name)
                .or_default()
                .extend(flat.into_iter().cloned());
        }
    }
    let numbers: Vec<(String, Vec<f64>)> = outputs
        .iter()
        .filter(|(n, _)| n.as_str() != "label")
        .map(|(n, v)| {
            (
                n.clone(),
                v.iter().map(|x| x.as_f64().unwrap_or(f64::NAN)).collect(),
            )
        })
        .collect();
    let labels: Vec<(String, Vec<Option<String>>)> = outputs
        .iter()
        .filter(|(n, _)| n.as_str() == "label")
        .map(|(n, v)| {
            (
                n.clone(),
                v.iter().map(|x| x.as_str().map(str::to_string)).collect(),
            )
        })
        .collect();
    let mut columns: Vec<(String, qanat_model::profile::Values<'_>)> = numbers
        .iter()
        .map(|(n, v)| (n.clone(), qanat_model::profile::Values::Numeric(v)))
        .collect();
    columns.extend(
        labels
            .iter()
            .map(|(n, v)| (n.clone(), qanat_model::profile::Values::Text(v))),
    );
    Ok(qanat_model::profile::reference_of(&columns).columns)
}

/// The profile of the training rows of the numeric and text columns in `keep`.
fn reference_profile(
    table: &qanat_model::table::Table,
    rows: &[usize],
    keep: &[&str],
) -> qanat_model::profile::TableProfile {
    use qanat_model::profile::{reference_of, Values};
    use qanat_model::table::Values as V;
    enum Picked {
        Numeric(Vec<f64>),
        Text(Vec<Option<String>>),
    }
    let picked: Vec<(String, Picked)> = table
        .columns
        .iter()
        .filter(|c| keep.contains(&c.name.as_str()))
        .filter_map(|c| {
            let p = match &c.values {
                V::Numeric(v) => {
                    Picked::Numeric(rows.iter().filter_map(|&r| v.get(r).copied()).collect())
                }
                V::Text(v) => {
                    Picked::Text(rows.iter().filter_map(|&r| v.get(r).cloned()).collect())
                }
                V::Unsupported(..) => return None,
            };
            Some((c.name.clone(), p))
        })
        .collect();
    let columns: Vec<(String, Values<'_>)> = picked
        .iter()
        .map(|(name, p)| {
            let values = match p {
                Picked::Numeric(v) => Values::Numeric(v),
                Picked::Text(v) => Values::Text(v),
            };
            (name.clone(), values)
        })
        .collect();
    reference_of(&columns)
}
