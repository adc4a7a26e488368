//! `qanat features`: plan and apply a feature repo, list and show the registry.

use anyhow::{Context, Result};
use qanat_features::definitions::FeatureViewDef;
use qanat_features::wire::{
    Action, Freshness, MaterializationRun, MaterializeRequest, Materialized, Plan,
    RegisteredObject, StreamStatus, TrainingSetRequest, ViewProgress,
};
use qanat_features::RepoFiles as _;
use qanat_features::{FeatureRef, FeatureRepo, ObjectKind};

use super::Ctx;
use crate::cli::{FeaturesCmd, Format};
use crate::output;

pub async fn run(ctx: &Ctx, project: &str, cmd: FeaturesCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        FeaturesCmd::Plan { repo } => {
            let repo = FeatureRepo::read_dir(&repo)?;
            let plan = c.plan_features(project, &repo).await?;
            print_plan(format, &plan)
        }
        FeaturesCmd::Apply { repo } => {
            let repo = FeatureRepo::read_dir(&repo)?;
            // Apply exactly what the plan shows: refused if the registry moves between.
            let plan = c.plan_features(project, &repo).await?;
            let applied = if plan.has_changes() {
                c.apply_features(project, &repo, Some(plan.revision))
                    .await?
            } else {
                plan
            };
            print_plan(format, &applied)
        }
        FeaturesCmd::Materialize {
            views,
            start,
            end,
            run_id,
            progress,
        } => {
            use std::io::IsTerminal;
            let run_id = run_id.unwrap_or_else(|| {
                let t = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap_or_default();
                format!("cli-{}-{:x}", std::process::id(), t.as_micros())
            });
            let req = MaterializeRequest {
                feature_views: views,
                start,
                end,
                run_id: Some(run_id.clone()),
            };
            let work = c.materialize(project, &req);
            let done = if progress || std::io::stderr().is_terminal() {
                tokio::pin!(work);
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(2));
                tick.tick().await;
                loop {
                    tokio::select! {
                        done = &mut work => break done?,
                        _ = tick.tick() => {
                            if let Ok(run) = c.materialization(project, &run_id).await {
                                eprintln!("{}", progress_line(&run));
                            }
                        }
                    }
                }
            } else {
                work.await?
            };
            output::list(format, &done)
        }
        FeaturesCmd::Materializations { run_id: None } => {
            let runs = c.materializations(project).await?.runs;
            output::list(format, &runs)
        }
        FeaturesCmd::Materializations {
            run_id: Some(run_id),
        } => {
            let run = c.materialization(project, &run_id).await?;
            if format == Format::Json {
                return output::list(format, &[run]);
            }
            println!("{}", progress_line(&run));
            if let Some(e) = &run.error {
                println!("error: {e}");
            }
            output::list(format, &run.views)
        }
        FeaturesCmd::Streams => {
            let streams = c.feature_streams(project).await?.streams;
            output::list(format, &streams)
        }
        FeaturesCmd::Ls { kind } => {
            let kind: ObjectKind = kind.parse()?;
            let registry = c.feature_registry(project).await?;
            let objects: Vec<RegisteredObject> = registry
                .objects
                .into_iter()
                .filter(|o| o.kind == kind)
                .collect();
            if kind == ObjectKind::FeatureView {
                let fresh = c.freshness(project).await?.feature_views;
                let views: Vec<ViewRow> = objects
                    .iter()
                    .filter_map(|o| ViewRow::of(o, fresh.iter().find(|f| f.feature_view == o.name)))
                    .collect();
                return output::list(format, &views);
            }
            output::list(format, &objects)
        }
        FeaturesCmd::Show {
            name,
            kind,
            versions,
        } => {
            let kind: ObjectKind = kind.parse()?;
            // NAME or NAME@VERSION, as in feature references.
            let r: FeatureRef = name.parse().map_err(anyhow::Error::msg)?;
            if versions {
                let h = c.feature_history(project, kind, r.view.as_str()).await?;
                return output::list(format, &h.versions);
            }
            let o = c
                .feature_object(project, kind, r.view.as_str(), r.version)
                .await?;
            if format == Format::Json {
                return output::json(&o);
            }
            let state = match (&o.deleted_at, o.version == o.latest_version) {
                (Some(at), _) => format!("removed {at}"),
                (None, true) => "newest".to_string(),
                (None, false) => format!("newest is {}", o.latest_version),
            };
            println!(
                "# {} {}@{} ({state}), made {} by {}",
                o.kind, o.name, o.version, o.created_at, o.created_by
            );
            for d in &o.depends_on {
                println!("# depends on {} {}@{}", d.kind, d.name, d.version);
            }
            print!(
                "{}",
                serde_yaml_ng::to_string(&o.definition).context("showing the definition")?
            );
            Ok(())
        }
        FeaturesCmd::TrainingSet {
            entities,
            timestamp_column,
            features,
            feature_service,
            full_feature_names,
            to,
            message,
        } => {
            let output: qanat_core::Name = to.parse().map_err(|e| anyhow::anyhow!("--to: {e}"))?;
            let entities = entity_rows(c, project, &entities, output.as_str()).await?;
            let features = features
                .iter()
                .map(|f| f.parse::<FeatureRef>().map_err(anyhow::Error::msg))
                .collect::<Result<Vec<_>>>()?;
            let req = TrainingSetRequest {
                entities,
                timestamp_column,
                features,
                feature_service,
                full_feature_names,
                output,
                message,
            };
            let set = c.training_set(project, &req).await?;
            if format == Format::Json {
                return output::json(&set);
            }
            println!(
                "{}: {} rows, columns {}",
                set.reference,
                set.rows,
                set.columns.join(", ")
            );
            let views: Vec<String> = set
                .feature_views
                .iter()
                .map(|v| {
                    qanat_core::ObjectRef::feature_view(v.name.as_str(), v.version).to_string()
                })
                .collect();
            let sources: Vec<String> = set.sources.iter().map(ToString::to_string).collect();
            println!("from {} and {}", views.join(", "), sources.join(", "));
            if !set.pseudonymized.is_empty() {
                println!(
                    "pseudonymized (PII; holders of the project's PII permission see them in clear): {}",
                    set.pseudonymized.join(", ")
                );
            }
            Ok(())
        }
    }
}

/// The entity rows' dataset reference: given, or a local file pushed first as a new
/// version of `<output>-entities` (created when absent).
async fn entity_rows(
    c: &qanat_client::Client,
    project: &str,
    given: &str,
    output: &str,
) -> Result<String> {
    let path = std::path::Path::new(given);
    if given.starts_with("dataset:") || !path.is_file() {
        return Ok(given.to_string());
    }
    let name = format!("{output}-entities");
    if c.dataset(project, &name).await.is_err() {
        let new: qanat_data::NewDataset = serde_json::from_value(serde_json::json!({
            "name": name,
            "description": format!("entity rows of the training set {output}"),
        }))?;
        c.create_dataset(project, &new).await?;
    }
    let v = super::data::push::push(
        c,
        project,
        &name,
        &[path.to_path_buf()],
        &super::data::push::Options {
            message: &format!("entity rows from {given}"),
            derived_from: &[],
            allow_empty: false,
        },
    )
    .await?;
    Ok(qanat_core::ObjectRef::dataset(name, v.version).to_string())
}

fn print_plan(format: Format, plan: &Plan) -> Result<()> {
    if format == Format::Json {
        return output::json(plan);
    }
    let mut counts = [0usize; 5];
    for c in &plan.changes {
        let (mark, what) = match c.action {
            Action::Create => ("+", format!("version {}", output::opt(c.to_version))),
            Action::NewVersion => (
                "~",
                format!(
                    "version {} → {}",
                    output::opt(c.from_version),
                    output::opt(c.to_version)
                ),
            ),
            Action::Metadata => ("~", "metadata only, same version".to_string()),
            Action::Remove => (
                "-",
                format!(
                    "removed (version {} kept for lineage)",
                    output::opt(c.from_version)
                ),
            ),
            Action::Unchanged => ("=", String::new()),
        };
        counts[Action::ALL.iter().position(|a| *a == c.action).unwrap_or(0)] += 1;
        if c.action == Action::Unchanged {
            continue;
        }
        println!("{mark} {} {}: {what}", c.kind, c.name);
        for d in &c.details {
            println!("    {d}");
        }
    }
    let [create, new_version, metadata, unchanged, remove] = counts;
    let summary = format!(
        "{create} to create, {new_version} new version{}, {metadata} metadata, {remove} to remove, {unchanged} unchanged",
        if new_version == 1 { "" } else { "s" }
    );
    for w in &plan.warnings {
        eprintln!("warning: {w}");
    }
    if plan.applied {
        println!(
            "applied: registry at revision {} ({summary})",
            plan.revision
        );
    } else if plan.has_changes() {
        println!(
            "plan against registry revision {}: {summary}",
            plan.revision
        );
    } else {
        println!(
            "no changes: the registry (revision {}) matches the repo",
            plan.revision
        );
    }
    Ok(())
}

output::columns!(RegisteredObject, |x| {
    "kind" => x.kind.to_string(),
    "name" => x.name.clone(),
    "version" => x.version.to_string(),
    "created" => x.created_at.clone(),
    "by" => x.created_by.clone(),
    "fingerprint" => x.fingerprint.clone(),
});

/// A feature view as `qanat features ls` lists it.
#[derive(serde::Serialize)]
struct ViewRow {
    name: String,
    version: i64,
    entities: Vec<String>,
    features: usize,
    ttl: String,
    source: String,
    online: bool,
    owner: String,
    updated_at: String,
    last_event_at: Option<String>,
    lag_seconds: Option<f64>,
}

impl ViewRow {
    fn of(o: &RegisteredObject, fresh: Option<&Freshness>) -> Option<ViewRow> {
        let v: FeatureViewDef = o.as_view()?;
        Some(ViewRow {
            name: o.name.clone(),
            version: o.version,
            entities: v.entities.iter().map(|e| e.to_string()).collect(),
            features: v.schema.len(),
            ttl: v.ttl.to_string(),
            source: v.source.to_string(),
            online: v.online,
            owner: v.owner,
            updated_at: o.updated_at.clone(),
            last_event_at: fresh.and_then(|f| f.last_event_at.clone()),
            lag_seconds: fresh.and_then(|f| f.lag_seconds),
        })
    }
}

output::columns!(ViewRow, |x| {
    "view" => format!("{}@{}", x.name, x.version),
    "entities" => output::joined(&x.entities),
    "features" => x.features.to_string(),
    "ttl" => x.ttl.clone(),
    "source" => x.source.clone(),
    "online" => x.online.to_string(),
    "owner" => if x.owner.is_empty() { "-".into() } else { x.owner.clone() },
    "newest online" => output::opt(x.last_event_at.as_ref()),
    "lag" => x.lag_seconds.map_or("-".into(), |s| humantime::format_duration(std::time::Duration::from_secs(s as u64)).to_string()),
});

output::columns!(StreamStatus, |x| {
    "source" => x.source.clone(),
    "subject" => x.subject.clone(),
    "connected" => x.connected.to_string(),
    "pending" => x.pending.to_string(),
    "ingested" => x.ingested.to_string(),
    "rejected" => x.rejected.to_string(),
    "last problem" => output::opt(x.last_error.as_ref().or(x.last_rejection.as_ref())),
});

/// One line about a run: its state and, per view, where it is.
fn progress_line(run: &MaterializationRun) -> String {
    let views: Vec<String> = run
        .views
        .iter()
        .map(|v| match v.state.as_str() {
            "scanning" => format!(
                "{} scanning ({} rows read, {} in the window)",
                v.feature_view, v.rows_scanned, v.rows_in_window
            ),
            "writing" => format!(
                "{} writing ({}/{} entities)",
                v.feature_view,
                v.written + v.stale,
                v.entities
            ),
            s => format!("{} {s}", v.feature_view),
        })
        .collect();
    format!("{} {}: {}", run.id, run.state, views.join(", "))
}

output::columns!(MaterializationRun, |x| {
    "run" => x.id.clone(),
    "state" => x.state.to_string(),
    "by" => x.requested_by.clone(),
    "started" => x.started_at.clone(),
    "ended" => output::opt(x.ended_at.as_ref()),
    "views" => x.views.iter().map(|v| format!("{} {}", v.feature_view, v.state)).collect::<Vec<_>>().join(", "),
});

output::columns!(ViewProgress, |x| {
    "view" => x.feature_view.clone(),
    "state" => x.state.to_string(),
    "rows read" => x.rows_scanned.to_string(),
    "in window" => x.rows_in_window.to_string(),
    "entities" => x.entities.to_string(),
    "written" => x.written.to_string(),
    "already newer" => x.stale.to_string(),
    "materialized until" => output::opt(x.materialized_until.as_ref()),
});

output::columns!(Materialized, |x| {
    "view" => format!("{}@{}", x.feature_view, x.version),
    "window" => format!("{} → {}", x.start.as_deref().unwrap_or("start"), x.end),
    "rows in window" => x.rows_in_window.to_string(),
    "written" => x.written.to_string(),
    "already newer" => x.stale.to_string(),
    "newest event" => output::opt(x.last_event_at.as_ref()),
});
