//! `qanat runs` and `qanat models`: the tracking store and the model registry from the
//! command line. Runs are read through the project's MLflow API; alias moves go through
//! the native registry API (maintainers, audited).

use std::collections::BTreeSet;

use anyhow::{bail, Result};
use clap::Subcommand;
use reqwest::Method;
use serde_json::{json, Value};

use crate::client::{seg, Client};
use crate::output;
use crate::Format;

#[derive(Subcommand)]
pub enum RunsCmd {
    /// Runs of some experiments (all active ones when none is named), newest first.
    Ls {
        /// Experiment name or id (repeatable).
        #[arg(long, short = 'e')]
        experiment: Vec<String>,
        /// MLflow filter, e.g. "metrics.rmse < 0.5 and params.model = 'tree'".
        #[arg(long, short = 'f')]
        filter: Option<String>,
        /// Order, e.g. "metrics.rmse ASC" (repeatable).
        #[arg(long)]
        order_by: Vec<String>,
        #[arg(long, default_value_t = 50)]
        max: i64,
    },
    /// One run: attributes, params, latest metrics, tags, inputs and outputs.
    Show { run_id: String },
    /// Runs side by side: every param and latest metric, one column per run.
    Compare {
        #[arg(required = true, num_args = 2..)]
        run_ids: Vec<String>,
    },
}

#[derive(Subcommand)]
pub enum ModelsCmd {
    /// Registered models with their aliases and latest version.
    Ls {
        /// MLflow filter, e.g. "name LIKE 'fraud%'".
        #[arg(long, short = 'f')]
        filter: Option<String>,
    },
    /// A model's versions, aliases and alias history.
    Show { name: String },
    /// Points an alias at a version (or removes it with --delete).
    Alias {
        name: String,
        alias: String,
        /// The version (not needed with --delete).
        #[arg(value_name = "VERSION")]
        to: Option<String>,
        #[arg(long)]
        delete: bool,
    },
    /// Moves an alias (default `production`) to a version, atomically and audited.
    Promote {
        name: String,
        #[arg(value_name = "VERSION")]
        to: String,
        #[arg(long, default_value = "production")]
        alias: String,
    },
    /// Moves an alias back to where it pointed before its last move.
    Rollback {
        name: String,
        #[arg(long, default_value = "production")]
        alias: String,
    },
}

fn mlflow_path(project: &str, path: &str) -> String {
    format!("/mlflow/{}/api/2.0/mlflow/{path}", seg(project))
}

async fn mlflow_post(c: &Client, project: &str, path: &str, body: Value) -> Result<Value> {
    c.json(
        c.request(Method::POST, &mlflow_path(project, path))
            .json(&body),
    )
    .await
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

fn time(ms: &Value) -> Value {
    ms.as_i64()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map(|t| json!(t.format("%Y-%m-%d %H:%M:%S").to_string()))
        .unwrap_or(Value::Null)
}

async fn get_run(c: &Client, project: &str, id: &str) -> Result<Value> {
    let v: Value = c
        .get(&format!(
            "{}?run_id={}",
            mlflow_path(project, "runs/get"),
            seg(id)
        ))
        .await?;
    Ok(v["run"].clone())
}

pub async fn runs(c: &Client, fmt: Format, project: &str, cmd: RunsCmd) -> Result<()> {
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
                    ("RUN", "run_id"),
                    ("NAME", "name"),
                    ("EXPERIMENT", "experiment"),
                    ("STATUS", "status"),
                    ("STARTED", "started"),
                    ("METRICS", "metrics"),
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

fn models_path(project: &str) -> String {
    format!("/api/v1/projects/{}/models", seg(project))
}

fn alias_path(project: &str, name: &str, alias: &str) -> String {
    format!(
        "{}/{}/aliases/{}",
        models_path(project),
        seg(name),
        seg(alias)
    )
}

fn moved(fmt: Format, v: &Value) {
    if fmt == Format::Json {
        output::object(fmt, v);
        return;
    }
    let name = v["name"].as_str().unwrap_or("?");
    let alias = v["alias"].as_str().unwrap_or("?");
    let now = v["version"].as_str().unwrap_or("-");
    match v["previous_version"].as_str() {
        Some(before) => println!("{name}@{alias}: version {before} → {now}"),
        None => println!("{name}@{alias}: → version {now}"),
    }
}

pub async fn models(c: &Client, fmt: Format, project: &str, cmd: ModelsCmd) -> Result<()> {
    match cmd {
        ModelsCmd::Ls { filter } => {
            let mut path = models_path(project);
            if let Some(f) = filter {
                path.push_str(&format!("?filter={}", seg(&f)));
            }
            let v: Value = c.get(&path).await?;
            let models = v["models"].as_array().cloned().unwrap_or_default();
            if fmt == Format::Json {
                output::list(fmt, &Value::Array(models), &[]);
                return Ok(());
            }
            let rows: Vec<Value> = models
                .iter()
                .map(|m| {
                    let aliases: Vec<String> = m["aliases"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                        .iter()
                        .map(|a| {
                            format!(
                                "{}→{}",
                                a["alias"].as_str().unwrap_or("?"),
                                a["version"].as_str().unwrap_or("?")
                            )
                        })
                        .collect();
                    let latest = m["latest_versions"]
                        .as_array()
                        .map(Vec::as_slice)
                        .unwrap_or_default()
                        .iter()
                        .filter_map(|v| v["version"].as_str()?.parse::<i64>().ok())
                        .max();
                    json!({
                        "name": m["name"],
                        "latest": latest,
                        "aliases": aliases.join(" "),
                        "updated": time(&m["last_updated_timestamp"]),
                        "description": m["description"],
                    })
                })
                .collect();
            output::list(
                fmt,
                &Value::Array(rows),
                &[
                    ("NAME", "name"),
                    ("LATEST", "latest"),
                    ("ALIASES", "aliases"),
                    ("UPDATED", "updated"),
                    ("DESCRIPTION", "description"),
                ],
            );
            Ok(())
        }
        ModelsCmd::Show { name } => {
            let v: Value = c
                .get(&format!("{}/{}", models_path(project), seg(&name)))
                .await?;
            if fmt == Format::Json {
                output::object(fmt, &v);
                return Ok(());
            }
            let versions: Vec<Value> = v["versions"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|mut x| {
                    x["created"] = time(&x["creation_timestamp"]);
                    x
                })
                .collect();
            println!(
                "{name}: {}",
                v["model"]["description"].as_str().unwrap_or("")
            );
            output::list(
                fmt,
                &Value::Array(versions),
                &[
                    ("VERSION", "version"),
                    ("ALIASES", "aliases"),
                    ("STAGE", "current_stage"),
                    ("RUN", "run_id"),
                    ("SOURCE", "source"),
                    ("BY", "user_id"),
                    ("CREATED", "created"),
                ],
            );
            let history: Vec<Value> = v["alias_history"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .map(|mut h| {
                    h["when"] = time(&h["changed_time"]);
                    h
                })
                .collect();
            if !history.is_empty() {
                println!("alias history:");
                output::list(
                    fmt,
                    &Value::Array(history),
                    &[
                        ("ALIAS", "alias"),
                        ("FROM", "previous_version"),
                        ("TO", "version"),
                        ("HOW", "reason"),
                        ("BY", "changed_by"),
                        ("WHEN", "when"),
                    ],
                );
            }
            Ok(())
        }
        ModelsCmd::Alias {
            name,
            alias,
            to: version,
            delete,
        } => {
            let path = alias_path(project, &name, &alias);
            if delete {
                c.send(c.request(Method::DELETE, &path)).await?;
                println!("removed {name}@{alias}");
                return Ok(());
            }
            let Some(version) = version else {
                bail!("give the version the alias should point at (or --delete)");
            };
            let v: Value = c
                .json(
                    c.request(Method::PUT, &path)
                        .json(&json!({ "version": version })),
                )
                .await?;
            moved(fmt, &v);
            Ok(())
        }
        ModelsCmd::Promote {
            name,
            to: version,
            alias,
        } => {
            let path = format!("{}/promote", alias_path(project, &name, &alias));
            let v: Value = c
                .json(
                    c.request(Method::POST, &path)
                        .json(&json!({ "version": version })),
                )
                .await?;
            moved(fmt, &v);
            Ok(())
        }
        ModelsCmd::Rollback { name, alias } => {
            let path = format!("{}/rollback", alias_path(project, &name, &alias));
            let v: Value = c.json(c.request(Method::POST, &path)).await?;
            moved(fmt, &v);
            Ok(())
        }
    }
}
