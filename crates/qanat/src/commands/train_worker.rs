//! `qanat train-worker`: the process a `train` job runs (started by the scheduler,
//! never by hand). It reads the job's inputs, trains, logs params and per-epoch
//! metrics to the job's run, stores the model files as the run's `model/` artifacts and
//! registers a version when the job names a model — all through the API with the
//! job's own short-lived token.

use anyhow::{anyhow, Context, Result};
use qanat_train::{kind, Table};

fn var(name: &str) -> Result<String> {
    std::env::var(name).with_context(|| {
        format!("{name} is not set: train-worker runs inside a train job, started by the scheduler")
    })
}

pub async fn run() -> Result<()> {
    let params: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&var(kind::CONFIG_VAR)?).context("reading the train config")?;
    let (config, register) = kind::config_of(&params).map_err(|e| anyhow!(e))?;
    let project = var("QANAT_PROJECT")?;
    let run_id = var("MLFLOW_RUN_ID")?;
    let inputs = std::path::PathBuf::from(var("QANAT_INPUTS")?);
    let client = qanat_client::Client::builder(var("QANAT_URL")?)
        .token(var("QANAT_TOKEN")?)
        .build()?;

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
    let tags = vec![
        ("qanat.trainer".to_string(), "native".to_string()),
        (
            "qanat.backend".to_string(),
            "burn-ndarray (CPU)".to_string(),
        ),
        (
            "qanat.version".to_string(),
            env!("CARGO_PKG_VERSION").to_string(),
        ),
    ];
    client
        .log_batch(&project, &run_id, &[], &params, &tags)
        .await
        .context("logging the params")?;

    let handle = tokio::runtime::Handle::current();
    let (c, p, r) = (client.clone(), project.clone(), run_id.clone());
    let cfg = config.clone();
    let trained = tokio::task::spawn_blocking(move || {
        qanat_train::train_table(&table, &cfg, |m| {
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
            handle
                .block_on(c.log_batch(&p, &r, &metrics, &[], &[]))
                .map_err(|e| qanat_train::Error::Internal(format!("logging metrics: {e}")))
        })
        .map(|t| (t, table))
    })
    .await?;
    let (trained, _table) = trained?;
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
    let spec = serde_json::to_vec_pretty(&qanat_train::export::spec(
        &trained.fitted.model,
        &trained.prep,
    ))?;
    let run = client.run(&project, &run_id).await?;
    let root = run.info.artifact_uri.clone();
    client
        .upload_artifact(&project, &root, "model/weights.safetensors", weights)
        .await
        .context("storing the model's weights")?;
    client
        .upload_artifact(&project, &root, "model/spec.json", spec)
        .await
        .context("storing the model's spec")?;
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
    client
        .log_batch(&project, &run_id, &summary, &[], &[])
        .await?;
    if let Some(name) = register {
        let v = client
            .register_version(&project, &name, &format!("runs:/{run_id}/model"), &run_id)
            .await
            .with_context(|| format!("registering the model as '{name}'"))?;
        println!("registered model '{name}' version {v}");
    }
    Ok(())
}
