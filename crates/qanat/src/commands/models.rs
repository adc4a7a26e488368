//! `qanat models`: the registry; alias moves go through the native API (maintainers,
//! audited).

use anyhow::{bail, Result};
use reqwest::Method;
use serde_json::{json, Value};

use crate::cli::models::ModelsCmd;
use crate::cli::Format;
use crate::client::{seg, Client};
use crate::output;

use super::runs::time;

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

pub(crate) async fn models(c: &Client, fmt: Format, project: &str, cmd: ModelsCmd) -> Result<()> {
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
                    ("name", "name"),
                    ("latest", "latest"),
                    ("aliases", "aliases"),
                    ("updated", "updated"),
                    ("description", "description"),
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
                    ("version", "version"),
                    ("aliases", "aliases"),
                    ("stage", "current_stage"),
                    ("run", "run_id"),
                    ("source", "source"),
                    ("by", "user_id"),
                    ("created", "created"),
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
                        ("alias", "alias"),
                        ("from", "previous_version"),
                        ("to", "version"),
                        ("how", "reason"),
                        ("by", "changed_by"),
                        ("when", "when"),
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
