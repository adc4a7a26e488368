//! `qanat data`: push directories and files as dataset versions, pull them back.

use anyhow::{Context, Result};
use reqwest::Method;
use serde_json::{json, Value};

use crate::cli::data::DataCmd;
use crate::cli::Format;
use crate::client::{seg, Client};
use crate::output;
use qanat_core::{Kind, ObjectRef};

mod pull;
mod push;

/// `tx@3`, `tx@prod`, `tx` (latest) or `dataset:tx@3`, parsed by the one reference
/// parser: the dataset's name and the version or tag.
fn split_ref(r: &str) -> Result<(String, String)> {
    let r = ObjectRef::parse_of(Kind::Dataset, r)?;
    let selector = r.selector_or_latest().to_string();
    Ok((r.name, selector))
}

pub(crate) async fn run(c: &Client, fmt: Format, project: &str, cmd: DataCmd) -> Result<()> {
    let base = format!("/api/v1/projects/{}/datasets", seg(project));
    match cmd {
        DataCmd::Create {
            name,
            description,
            classification,
            regions,
            location,
            tags,
            schema,
        } => {
            let mut body = json!({
                "name": name, "description": description, "classification": classification,
                "tags": tags.into_iter().collect::<std::collections::BTreeMap<_, _>>(),
            });
            if let Some(r) = regions {
                body["allowed_regions"] = json!(r);
            }
            if let Some(l) = location {
                body["location"] = json!(l);
            }
            if let Some(path) = schema {
                let text = std::fs::read_to_string(&path)
                    .with_context(|| format!("reading schema {}", path.display()))?;
                body["schema"] = serde_json::from_str(&text)
                    .with_context(|| format!("{} is not JSON", path.display()))?;
            }
            let d: Value = c.json(c.request(Method::POST, &base).json(&body)).await?;
            output::object(fmt, &d);
        }
        DataCmd::Ls => {
            let ds = c.datasets(project).await?;
            output::table(
                fmt,
                &ds,
                &[
                    "name",
                    "latest",
                    "classification",
                    "location",
                    "owner",
                    "description",
                ],
                |d| {
                    vec![
                        d.name.clone(),
                        output::opt(&d.latest_version),
                        d.classification.as_str().to_string(),
                        d.location.clone(),
                        d.owner.clone(),
                        d.description.clone(),
                    ]
                },
            );
        }
        DataCmd::Push {
            dataset,
            paths,
            message,
            tag,
            derived_from,
        } => {
            let v = push::push(
                c,
                &c.dataset(project, &dataset),
                &paths,
                &message,
                &derived_from,
            )
            .await?;
            if let Some(t) = tag {
                c.send(
                    c.request(
                        Method::PUT,
                        &format!("{base}/{}/tags/{}", seg(&dataset), seg(&t)),
                    )
                    .json(&json!({"version": v.version.to_string()})),
                )
                .await?;
            }
            output::object(fmt, &serde_json::to_value(&v)?);
        }
        DataCmd::Pull { reference, dir } => {
            let (dataset, version) = split_ref(&reference)?;
            pull::pull(c, &c.dataset(project, &dataset), &version, &dir).await?;
        }
        DataCmd::Log { dataset } => {
            let vs = c.dataset(project, &dataset).versions().await?;
            output::table(
                fmt,
                &vs,
                &[
                    "version",
                    "tags",
                    "files",
                    "size",
                    "new bytes",
                    "parent",
                    "author",
                    "time",
                    "message",
                ],
                |v| {
                    vec![
                        v.version.to_string(),
                        v.tags.join(","),
                        v.file_count.to_string(),
                        v.total_size.to_string(),
                        v.new_bytes.to_string(),
                        output::opt(&v.parent),
                        v.author.clone(),
                        v.created_at.clone(),
                        v.message.clone(),
                    ]
                },
            );
        }
        DataCmd::Show { reference } => {
            let r = ObjectRef::parse_of(Kind::Dataset, &reference)?;
            let dataset = r.name.as_str();
            let version = r.selector.as_ref().map(ToString::to_string);
            match version.as_deref() {
                None => {
                    let d: Value = c.get(&format!("{base}/{}", seg(dataset))).await?;
                    output::object(fmt, &d);
                }
                Some(v) => {
                    let v: Value = c
                        .get(&format!("{base}/{}/versions/{}", seg(dataset), seg(v)))
                        .await?;
                    if fmt == Format::Json {
                        println!("{}", serde_json::to_string_pretty(&v)?);
                    } else {
                        println!(
                            "version {} of {} ({} files, {} bytes): {}",
                            v["version"],
                            dataset,
                            v["file_count"],
                            v["total_size"],
                            v["message"].as_str().unwrap_or("")
                        );
                        for p in v["profiles"]
                            .as_array()
                            .map(Vec::as_slice)
                            .unwrap_or_default()
                        {
                            match p["profile"].as_object() {
                                Some(prof) => {
                                    println!(
                                        "{} ({}, {} rows):",
                                        p["path"].as_str().unwrap_or(""),
                                        prof["format"].as_str().unwrap_or(""),
                                        prof["rows"]
                                    );
                                    output::list(
                                        fmt,
                                        &prof["columns"],
                                        &[
                                            ("column", "name"),
                                            ("type", "data_type"),
                                            ("nulls", "null_fraction"),
                                            ("min", "min"),
                                            ("max", "max"),
                                            ("mean", "mean"),
                                            ("std", "std"),
                                            ("distinct", "distinct_estimate"),
                                        ],
                                    );
                                }
                                None => println!(
                                    "{}: not profiled ({})",
                                    p["path"].as_str().unwrap_or(""),
                                    p["error"].as_str().unwrap_or("")
                                ),
                            }
                        }
                        output::list(
                            fmt,
                            &v["manifest"]["files"],
                            &[("path", "path"), ("size", "size"), ("blake3", "blake3")],
                        );
                    }
                }
            }
        }
        DataCmd::Diff { dataset, from, to } => {
            let d: Value = c
                .get(&format!(
                    "{base}/{}/diff?from={}&to={}",
                    seg(&dataset),
                    seg(&from),
                    seg(&to)
                ))
                .await?;
            if fmt == Format::Json {
                println!("{}", serde_json::to_string_pretty(&d)?);
            } else {
                println!("{dataset}: version {} -> {}", d["from"], d["to"]);
                for f in d["added"].as_array().map(Vec::as_slice).unwrap_or_default() {
                    println!(
                        "  + {} ({})",
                        f["path"].as_str().unwrap_or(""),
                        human(f["size"].as_u64().unwrap_or(0))
                    );
                }
                for f in d["removed"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    println!(
                        "  - {} ({})",
                        f["path"].as_str().unwrap_or(""),
                        human(f["size"].as_u64().unwrap_or(0))
                    );
                }
                for f in d["changed"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                {
                    let what = match (f["content_changed"].as_bool(), f["mode_changed"].as_bool()) {
                        (Some(true), Some(true)) => "content and mode",
                        (Some(true), _) => "content",
                        _ => "mode",
                    };
                    println!(
                        "  ~ {} ({} -> {}, {} new, {what})",
                        f["path"].as_str().unwrap_or(""),
                        human(f["old_size"].as_u64().unwrap_or(0)),
                        human(f["new_size"].as_u64().unwrap_or(0)),
                        human(f["new_chunk_bytes"].as_u64().unwrap_or(0))
                    );
                }
                println!("  {} unchanged", d["unchanged"]);
            }
        }
        DataCmd::Copy {
            reference,
            to,
            message,
        } => {
            let (dataset, version) = split_ref(&reference)?;
            let v: Value = c
                .json(
                    c.request(Method::POST, &format!("{base}/{}/copy", seg(&dataset)))
                        .json(&json!({"to": to, "version": version, "message": message})),
                )
                .await?;
            output::object(fmt, &v);
        }
        DataCmd::Gc { grace } => {
            let r: Value = c
                .json(
                    c.request(
                        Method::POST,
                        &format!("/api/v1/projects/{}/gc", seg(project)),
                    )
                    .json(&json!({"grace_seconds": std::time::Duration::from(grace).as_secs()})),
                )
                .await?;
            if fmt == Format::Json {
                println!("{}", serde_json::to_string_pretty(&r)?);
            } else {
                println!(
                    "gc: {} versions scanned, {} chunks referenced, {} chunks deleted, {} freed",
                    r["versions_scanned"],
                    r["chunks_referenced"],
                    r["chunks_deleted"],
                    human(r["bytes_freed"].as_u64().unwrap_or(0))
                );
            }
        }
        DataCmd::Tag { reference, tag } => {
            let (dataset, version) = split_ref(&reference)?;
            let v: Value = c
                .json(
                    c.request(
                        Method::PUT,
                        &format!("{base}/{}/tags/{}", seg(&dataset), seg(&tag)),
                    )
                    .json(&json!({"version": version})),
                )
                .await?;
            output::object(fmt, &v);
        }
    }
    Ok(())
}

/// A byte progress bar with throughput on stderr (drawn only on a terminal).
pub(super) fn progress(total: u64, verb: &str) -> indicatif::ProgressBar {
    let bar = indicatif::ProgressBar::new(total);
    let style = indicatif::ProgressStyle::with_template(&format!(
        "{verb} [{{bar:30}}] {{bytes}}/{{total_bytes}} {{bytes_per_sec}} {{msg}}"
    ))
    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
    .progress_chars("=> ");
    bar.set_style(style);
    bar
}

pub(super) fn human(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
