//! `qanat runs`: the tracking store, read through the project's MLflow API.

use std::collections::BTreeSet;

use anyhow::{bail, Result};
use qanat_client::Client;
use qanat_tracking::wire::mlflow::{ArtifactFile, SearchExperiments, SearchRuns};
use qanat_tracking::{MetricValue, Run};

use super::Ctx;
use crate::cli::{ArtifactsCmd, Format, RunsCmd};
use crate::output::{self, millis};

pub async fn run(ctx: &Ctx, project: &str, cmd: RunsCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
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
            let search = SearchRuns {
                experiment_ids: ids,
                filter,
                order_by,
                max_results: Some(max),
                ..SearchRuns::default()
            };
            let runs = c.search_runs(project, &search).await?.runs;
            if format == Format::Json {
                return output::json(&runs);
            }
            let mut t =
                output::table(["run", "name", "experiment", "status", "started", "metrics"]);
            for r in &runs {
                let metrics: Vec<String> = r
                    .data
                    .metrics
                    .iter()
                    .map(|m| format!("{}={}", m.key, metric(m.value)))
                    .collect();
                // A unique prefix names a run (as in git): in a table fitted to the
                // terminal, 12 characters leave the metrics room; `-o wide`, a pipe
                // and JSON give the whole id.
                let id = &r.info.run_id;
                let id = match id.get(..12) {
                    Some(short) if output::width().is_some() => short,
                    _ => id,
                };
                t.add_row(vec![
                    id.to_string(),
                    r.info.run_name.clone(),
                    r.info.experiment_id.clone(),
                    r.info.status.clone(),
                    millis(r.info.start_time),
                    metrics.join(" "),
                ]);
            }
            output::print(t);
            Ok(())
        }
        RunsCmd::Show { run_id } => {
            let run_id = full_run_id(c, project, &run_id).await?;
            let r = c.run(project, &run_id).await?;
            if format == Format::Json {
                return output::json(&r);
            }
            let mut t = output::table(["field", "value"]);
            for (k, v) in run_fields(&r) {
                t.add_row(vec![k, v]);
            }
            output::print_record(t);
            Ok(())
        }
        RunsCmd::Compare { run_ids } => {
            let mut runs = Vec::with_capacity(run_ids.len());
            for id in &run_ids {
                let id = full_run_id(c, project, id).await?;
                runs.push(c.run(project, &id).await?);
            }
            if format == Format::Json {
                return output::json(&runs);
            }
            compare(&runs);
            Ok(())
        }
        RunsCmd::Artifacts { cmd } => artifacts(ctx, project, cmd).await,
    }
}

async fn artifacts(ctx: &Ctx, project: &str, cmd: ArtifactsCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        ArtifactsCmd::Ls {
            run_id,
            path,
            recursive,
        } => {
            let run_id = full_run_id(c, project, &run_id).await?;
            let path = path.as_deref().map(|p| p.trim_matches('/'));
            let files = if recursive {
                artifact_tree(c, project, &run_id, path).await?
            } else {
                c.run_artifacts(project, &run_id, path).await?.files
            };
            if format == Format::Json {
                return output::json(&files);
            }
            let mut t = output::table(["path", "size"]);
            for f in &files {
                let size = match f.file_size {
                    _ if f.is_dir => "dir".to_string(),
                    Some(n) => output::human(n),
                    None => String::new(),
                };
                t.add_row(vec![f.path.clone(), size]);
            }
            output::print(t);
            Ok(())
        }
        ArtifactsCmd::Get { run_id, path, dest } => {
            let run_id = full_run_id(c, project, &run_id).await?;
            let run = c.run(project, &run_id).await?;
            let root = run.info.artifact_root().to_string();
            let path = path.trim_matches('/').to_string();
            let name = path.rsplit('/').next().unwrap_or_default().to_string();
            if path.is_empty() || !safe_relative(&path) {
                bail!("'{path}': give an artifact path relative to the run's root, e.g. model/weights.bin");
            }
            let under = artifact_tree(c, project, &run_id, Some(&path)).await?;
            let mut got: Vec<(String, u64)> = Vec::new();
            if under.is_empty() {
                // A file.
                let bytes = c.artifact(project, &format!("{root}/{path}")).await?;
                if dest.as_os_str() == "-" {
                    return super::objects::to_stdout(bytes).await;
                }
                tokio::fs::create_dir_all(&dest).await?;
                super::objects::to_file(bytes, &dest.join(&name)).await?;
                got.push((name, 0));
            } else {
                if dest.as_os_str() == "-" {
                    bail!("'{path}' is a directory; give a destination directory instead of -");
                }
                for f in under.iter().filter(|f| !f.is_dir) {
                    let rel = f.path.strip_prefix(&format!("{path}/")).unwrap_or(&f.path);
                    if !safe_relative(rel) {
                        bail!("the server named an artifact '{}' outside '{path}'", f.path);
                    }
                    let target = dest.join(&name).join(rel);
                    if let Some(parent) = target.parent() {
                        tokio::fs::create_dir_all(parent).await?;
                    }
                    let bytes = c.artifact(project, &format!("{root}/{}", f.path)).await?;
                    super::objects::to_file(bytes, &target).await?;
                    got.push((format!("{name}/{rel}"), f.file_size.unwrap_or(0)));
                }
            }
            if format == Format::Json {
                let files: Vec<_> = got.iter().map(|(p, _)| dest.join(p)).collect();
                return output::json(&serde_json::json!({ "downloaded": files }));
            }
            eprintln!("downloaded {} file(s) into {}", got.len(), dest.display());
            Ok(())
        }
    }
}

/// Every artifact below `path` (the run's root when `None`), files and directories,
/// depth first.
async fn artifact_tree(
    c: &Client,
    project: &str,
    run_id: &str,
    path: Option<&str>,
) -> Result<Vec<ArtifactFile>> {
    let mut out = Vec::new();
    let mut pending = vec![path.map(str::to_string)];
    while let Some(dir) = pending.pop() {
        let listed = c
            .run_artifacts(project, run_id, dir.as_deref())
            .await?
            .files;
        for f in listed.into_iter().rev() {
            if f.is_dir {
                pending.push(Some(f.path.clone()));
            }
            out.push(f);
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// A relative path with no `.`, `..` or empty segment (nothing the server names can
/// land outside the destination).
fn safe_relative(p: &str) -> bool {
    !p.starts_with('/') && p.split('/').all(|s| !s.is_empty() && s != "." && s != "..")
}

/// Experiment ids for names or ids; all active experiments when none is given.
/// A run id, or a unique prefix of one (at least 4 hex characters), as git takes
/// commit ids.
async fn full_run_id(c: &Client, project: &str, id: &str) -> Result<String> {
    let hex = !id.is_empty() && id.bytes().all(|b| b.is_ascii_hexdigit());
    if id.len() == 32 || !hex {
        return Ok(id.to_string());
    }
    if id.len() < 4 {
        bail!("'{id}': give a run id or a unique prefix of at least 4 characters");
    }
    let search = SearchRuns {
        experiment_ids: experiment_ids(c, project, &[]).await?,
        filter: Some(format!(
            "attributes.run_id LIKE '{}%'",
            id.to_ascii_lowercase()
        )),
        run_view_type: Some("ALL".into()),
        max_results: Some(10),
        ..SearchRuns::default()
    };
    let found: Vec<String> = c
        .search_runs(project, &search)
        .await?
        .runs
        .into_iter()
        .map(|r| r.info.run_id)
        .collect();
    match found.as_slice() {
        [one] => Ok(one.clone()),
        [] => bail!("no run of project '{project}' has an id starting with '{id}'"),
        many => bail!(
            "'{id}' is the start of {} run ids ({}); give more characters",
            many.len(),
            many.join(", ")
        ),
    }
}

async fn experiment_ids(c: &Client, project: &str, wanted: &[String]) -> Result<Vec<String>> {
    if wanted.is_empty() {
        let search = SearchExperiments {
            max_results: Some(1000),
            ..SearchExperiments::default()
        };
        let page = c.search_experiments(project, &search).await?;
        return Ok(page
            .experiments
            .into_iter()
            .map(|e| e.experiment_id)
            .collect());
    }
    let mut ids = Vec::with_capacity(wanted.len());
    for w in wanted {
        if w.bytes().all(|b| b.is_ascii_digit()) {
            ids.push(w.clone());
        } else {
            ids.push(c.experiment_by_name(project, w).await?.experiment_id);
        }
    }
    Ok(ids)
}

/// A metric as MLflow writes it: a number, or NaN and the infinities by name.
fn metric(v: MetricValue) -> String {
    let x = v.0;
    if x.is_nan() {
        "NaN".into()
    } else if x.is_infinite() {
        if x > 0.0 { "Infinity" } else { "-Infinity" }.into()
    } else {
        x.to_string()
    }
}

/// A run's attributes, then `param.*`, `metric.*`, `tag.*`, `input.*`, `output.*`.
fn run_fields(r: &Run) -> Vec<(String, String)> {
    let i = &r.info;
    let mut out: Vec<(String, String)> = [
        ("run_id", i.run_id.clone()),
        ("run_name", i.run_name.clone()),
        ("experiment_id", i.experiment_id.clone()),
        ("user_id", i.user_id.clone()),
        ("status", i.status.clone()),
        ("lifecycle_stage", i.lifecycle_stage.clone()),
        ("artifact_uri", i.artifact_uri.clone()),
        ("started", millis(i.start_time)),
        ("ended", millis(i.end_time)),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    out.extend(
        r.data
            .params
            .iter()
            .map(|p| (format!("param.{}", p.key), p.value.clone())),
    );
    out.extend(
        r.data
            .metrics
            .iter()
            .map(|m| (format!("metric.{}", m.key), metric(m.value))),
    );
    out.extend(
        r.data
            .tags
            .iter()
            .map(|t| (format!("tag.{}", t.key), t.value.clone())),
    );
    out.extend(r.inputs.dataset_inputs.iter().map(|d| {
        (
            format!("input.{}", d.dataset.name),
            format!("{} (digest {})", d.dataset.source, d.dataset.digest),
        )
    }));
    out.extend(
        r.outputs
            .model_outputs
            .iter()
            .map(|m| (format!("output.{}", m.model_id), format!("step {}", m.step))),
    );
    out
}

/// Every param and latest metric of `runs`, one column per run.
fn compare(runs: &[Run]) {
    let params = |r: &Run| -> Vec<(String, String)> {
        r.data
            .params
            .iter()
            .map(|p| (format!("param.{}", p.key), p.value.clone()))
            .collect()
    };
    let metrics = |r: &Run| -> Vec<(String, String)> {
        r.data
            .metrics
            .iter()
            .map(|m| (format!("metric.{}", m.key), metric(m.value)))
            .collect()
    };
    let values: Vec<Vec<(String, String)>> = runs
        .iter()
        .map(|r| {
            let mut v = params(r);
            v.extend(metrics(r));
            v
        })
        .collect();
    let keys: BTreeSet<&String> = values.iter().flatten().map(|(k, _)| k).collect();
    let mut headers = vec!["key".to_string()];
    headers.extend(runs.iter().map(|r| {
        let id = &r.info.run_id;
        format!("{} ({})", r.info.run_name, id.get(..8).unwrap_or(id))
    }));
    let mut t = output::table(headers);
    for key in keys {
        let mut row = vec![key.clone()];
        row.extend(
            values
                .iter()
                .map(|v| output::opt(v.iter().find(|(k, _)| k == key).map(|(_, value)| value))),
        );
        t.add_row(row);
    }
    output::print(t);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_print_as_mlflow_writes_them() {
        assert_eq!(metric(MetricValue(0.5)), "0.5");
        assert_eq!(metric(MetricValue(f64::NAN)), "NaN");
        assert_eq!(metric(MetricValue(f64::NEG_INFINITY)), "-Infinity");
    }
}
