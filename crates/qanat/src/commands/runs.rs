//! `qanat runs` and `qanat models`: the tracking store and the model registry from the
//! command line. Runs are read through the project's MLflow API; alias moves go through
//! the native registry API (maintainers, audited).

use std::collections::BTreeSet;

use anyhow::{bail, Result};
use reqwest::Method;
use serde_json::{json, Value};

use crate::cli::runs::RunsCmd;
use crate::cli::Format;
use crate::client::{seg, Client};
use crate::output;

pub(super) fn mlflow_path(project: &str, path: &str) -> String {
    format!("/mlflow/{}/api/2.0/mlflow/{path}", seg(project))
}

pub(super) async fn mlflow_post(
    c: &Client,
    project: &str,
    path: &str,
    body: Value,
) -> Result<Value> {
    Ok(c.json(
        c.request(Method::POST, &mlflow_path(project, path))
            .json(&body),
    )
    .await?)
}

/// Experiment ids for names or ids; all active experiments when none is given.
async fn experiment_ids(c: &Client, project: &str, wanted: &[String]) -> Result<Vec<String>> {
    if wanted.is_empty() {
        let v = mlflow_post(
            c,
            project,
            "experiments/search",
            json!({"max_results": 1000}),
        )
        .await?;
        return Ok(v["experiments"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|e| e["experiment_id"].as_str().map(str::to_string))
            .collect());
    }
    let mut ids = Vec::new();
    for w in wanted {
        if w.bytes().all(|b| b.is_ascii_digit()) {
            ids.push(w.clone());
            continue;
        }
        let v: Value = c
            .get(&format!(
                "{}?experiment_name={}",
                mlflow_path(project, "experiments/get-by-name"),
                seg(w)
            ))
            .await?;
        match v["experiment"]["experiment_id"].as_str() {
            Some(id) => ids.push(id.to_string()),
            None => bail!("no experiment '{w}' in project '{project}'"),
        }
    }
    Ok(ids)
}

/// `key=value` pairs of a run's `data.<field>` list.
fn pairs(run: &Value, field: &str) -> Vec<(String, String)> {
    run["data"][field]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .map(|m| {
            let v = match &m["value"] {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (m["key"].as_str().unwrap_or_default().to_string(), v)
        })
        .collect()
}

pub(super) fn time(ms: &Value) -> Value {
    ms.as_i64()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| json!(t.format("%Y-%m-%d %H:%M:%S").to_string()))
        .unwrap_or(Value::Null)
}

pub(super) async fn get_run(c: &Client, project: &str, id: &str) -> Result<Value> {
    let v: Value = c
        .get(&format!(
            "{}?run_id={}",
            mlflow_path(project, "runs/get"),
            seg(id)
        ))
        .await?;
    Ok(v["run"].clone())
}

pub(crate) async fn runs(c: &Client, fmt: Format, project: &str, cmd: RunsCmd) -> Result<()> {
    match cmd {
        RunsCmd::Ls {
            experiment,
            filter,
            order_by,
            max,
        } => {
            let ids = experiment_ids(c, project, &experiment).await?;
            if ids.is_empty() {
                bail!("project '{project}' has no experiments");
            }
            let v = mlflow_post(
                c,
                project,
                "runs/search",
                json!({"experiment_ids": ids, "filter": filter.unwrap_or_default(), "order_by": order_by, "max_results": max}),
            )
            .await?;
            let runs = v["runs"].as_array().cloned().unwrap_or_default();
            if fmt == Format::Json {
                output::list(fmt, &Value::Array(runs), &[]);
                return Ok(());
            }
            let rows: Vec<Value> = runs
                .iter()
                .map(|r| {
                    let metrics: Vec<String> = pairs(r, "metrics")
                        .into_iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    json!({
                        "run_id": r["info"]["run_id"],
                        "name": r["info"]["run_name"],
                        "experiment": r["info"]["experiment_id"],
                        "status": r["info"]["status"],
                        "started": time(&r["info"]["start_time"]),
                        "metrics": metrics.join(" "),
                    })
                })
                .collect();
            output::list(
                fmt,
                &Value::Array(rows),
                &[
                    ("run", "run_id"),
                    ("name", "name"),
                    ("experiment", "experiment"),
                    ("status", "status"),
                    ("started", "started"),
                    ("metrics", "metrics"),
                ],
            );
            Ok(())
        }
        RunsCmd::Show { run_id } => {
            let r = get_run(c, project, &run_id).await?;
            if fmt == Format::Json {
                output::object(fmt, &r);
                return Ok(());
            }
            let mut view = serde_json::Map::new();
            for k in [
                "run_id",
                "run_name",
                "experiment_id",
                "user_id",
                "status",
                "lifecycle_stage",
                "artifact_uri",
            ] {
                view.insert(k.into(), r["info"][k].clone());
            }
            view.insert("started".into(), time(&r["info"]["start_time"]));
            view.insert("ended".into(), time(&r["info"]["end_time"]));
            for (field, prefix) in [("params", "param"), ("metrics", "metric"), ("tags", "tag")] {
                for (k, v) in pairs(&r, field) {
                    view.insert(format!("{prefix}.{k}"), json!(v));
                }
            }
            for d in r["inputs"]["dataset_inputs"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                let ds = &d["dataset"];
                view.insert(
                    format!("input.{}", ds["name"].as_str().unwrap_or("?")),
                    json!(format!(
                        "{} (digest {})",
                        ds["source"].as_str().unwrap_or(""),
                        ds["digest"].as_str().unwrap_or("")
                    )),
                );
            }
            for m in r["outputs"]["model_outputs"]
                .as_array()
                .cloned()
                .unwrap_or_default()
            {
                view.insert(
                    format!("output.{}", m["model_id"].as_str().unwrap_or("?")),
                    json!(format!("step {}", m["step"])),
                );
            }
            output::object(fmt, &Value::Object(view));
            Ok(())
        }
        RunsCmd::Compare { run_ids } => {
            let mut runs = Vec::new();
            for id in &run_ids {
                runs.push(get_run(c, project, id).await?);
            }
            if fmt == Format::Json {
                output::list(fmt, &Value::Array(runs), &[]);
                return Ok(());
            }
            let mut keys = BTreeSet::new();
            for r in &runs {
                for (field, prefix) in [("params", "param"), ("metrics", "metric")] {
                    for (k, _) in pairs(r, field) {
                        keys.insert((prefix, field, k));
                    }
                }
            }
            let mut columns: Vec<(String, String)> = vec![("KEY".into(), "key".into())];
            for (i, r) in runs.iter().enumerate() {
                let name = r["info"]["run_name"].as_str().unwrap_or("?");
                let id = r["info"]["run_id"].as_str().unwrap_or("?");
                columns.push((
                    format!("{name} ({})", &id[..8.min(id.len())]),
                    format!("r{i}"),
                ));
            }
            let rows: Vec<Value> = keys
                .iter()
                .map(|(prefix, field, key)| {
                    let mut row = serde_json::Map::new();
                    row.insert("key".into(), json!(format!("{prefix}.{key}")));
                    for (i, r) in runs.iter().enumerate() {
                        let v = pairs(r, field)
                            .into_iter()
                            .find(|(k, _)| k == key)
                            .map(|(_, v)| json!(v))
                            .unwrap_or(Value::Null);
                        row.insert(format!("r{i}"), v);
                    }
                    Value::Object(row)
                })
                .collect();
            let cols: Vec<(&str, &str)> = columns
                .iter()
                .map(|(h, k)| (h.as_str(), k.as_str()))
                .collect();
            output::list(fmt, &Value::Array(rows), &cols);
            Ok(())
        }
    }
}
