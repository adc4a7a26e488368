//! `qanat data`: datasets and their versions. Push and pull move bytes (`push.rs`,
//! `pull.rs`); `show.rs` and `diff.rs` render a version and a comparison; the small
//! commands are here.

mod diff;
mod pull;
pub(crate) mod push;
mod show;

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use qanat_data::wire::{CopyBody, GcBody};
use qanat_data::{Dataset, DatasetSchema, DatasetVersion, NewDataset, VersionRef};

use super::Ctx;
use crate::cli::{DataCmd, Format};
use crate::output;

pub async fn run(ctx: &Ctx, project: &str, cmd: DataCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        DataCmd::Create {
            name,
            description,
            classification,
            regions,
            location,
            tags,
            schema,
            pii,
        } => {
            let new = NewDataset {
                name,
                description,
                owner: None,
                classification: Some(classification),
                allowed_regions: regions,
                tags: tags.into_iter().collect::<BTreeMap<_, _>>(),
                location,
                schema: schema.as_deref().map(read_schema).transpose()?,
                pii_columns: pii,
            };
            output::record(format, &c.create_dataset(project, &new).await?)
        }
        DataCmd::DeclarePii {
            dataset,
            columns,
            replace,
        } => {
            if columns.is_empty() && !replace {
                anyhow::bail!(
                    "name the columns to declare, e.g. `qanat data declare-pii {dataset} email phone` (or --replace with none to clear the declaration)"
                );
            }
            let mut all = if replace {
                Vec::new()
            } else {
                c.dataset(project, &dataset).await?.pii_columns
            };
            for col in columns {
                if !all.contains(&col) {
                    all.push(col);
                }
            }
            let change = qanat_data::UpdateDataset {
                pii_columns: Some(all),
            };
            output::record(format, &c.update_dataset(project, &dataset, &change).await?)
        }
        DataCmd::Ls { deleted: false } => output::list(format, &c.datasets(project).await?),
        DataCmd::Ls { deleted: true } => output::list(format, &c.deleted_datasets(project).await?),
        DataCmd::Rm { dataset } => {
            let d = c.delete_dataset(project, &dataset).await?;
            if format == Format::Json {
                return output::json(&d);
            }
            eprintln!(
                "deleted dataset '{dataset}': restorable with `qanat data restore {dataset}` until gc purges it after the retention period"
            );
            Ok(())
        }
        DataCmd::Erase {
            dataset,
            request_id,
            matches,
            reason,
        } => {
            let mut by_column: Vec<qanat_data::ErasureMatch> = Vec::new();
            for m in matches {
                let (column, value) = m.split_once('=').with_context(|| {
                    format!("--match '{m}' is not COLUMN=VALUE (e.g. --match email=a@example.ae)")
                })?;
                match by_column.iter_mut().find(|x| x.column == column) {
                    Some(x) => x.values.push(value.to_string()),
                    None => by_column.push(qanat_data::ErasureMatch {
                        column: column.to_string(),
                        values: vec![value.to_string()],
                    }),
                }
            }
            let req = qanat_data::ErasureRequest {
                request_id,
                matches: by_column,
                reason,
            };
            let e = c.erase(project, &dataset, &req).await?;
            if format == Format::Json {
                return output::json(&e);
            }
            output::record(format, &e)?;
            if !e.files.is_empty() {
                eprintln!();
                output::list(format, &e.files)?;
            }
            for a in &e.also_unreadable {
                eprintln!(
                    "warning: {}@{} {} shared the destroyed chunks and cannot be read any more either",
                    a.dataset, a.version, a.path
                );
            }
            Ok(())
        }
        DataCmd::Erasures { dataset } => {
            output::list(format, &c.erasures(project, &dataset).await?)
        }
        DataCmd::Restore { dataset } => {
            output::record(format, &c.restore_dataset(project, &dataset).await?)
        }
        DataCmd::Push {
            dataset,
            paths,
            message,
            tag,
            allow_empty,
            derived_from,
        } => {
            let opts = push::Options {
                message: &message,
                derived_from: &derived_from,
                allow_empty,
            };
            let v = push::push(c, project, &dataset, &paths, &opts).await?;
            if !v.undeclared_pii.is_empty() {
                eprintln!(
                    "warning: this version holds personal data that dataset '{dataset}' does not declare (readers without the PII permission get it pseudonymized all the same):"
                );
                for u in &v.undeclared_pii {
                    eprintln!("  {}", u.describe());
                }
                let mut cols: Vec<&str> =
                    v.undeclared_pii.iter().map(|u| u.column.as_str()).collect();
                cols.sort_unstable();
                cols.dedup();
                eprintln!(
                    "declare it: qanat data declare-pii {dataset} {}",
                    cols.join(" ")
                );
            }
            let v = match tag {
                Some(t) => {
                    c.tag_version(project, &dataset, &t, &VersionRef::Version(v.version))
                        .await?
                }
                None => v,
            };
            output::record(format, &v)
        }
        DataCmd::Pull {
            reference,
            dir,
            force,
            delete,
        } => {
            let opts = pull::Options { force, delete };
            let pulled = pull::pull(c, project, &reference, &dir, &opts).await?;
            output::record(format, &pulled)
        }
        DataCmd::Log { dataset } => output::list(format, &c.versions(project, &dataset).await?),
        DataCmd::Show { reference } => show::show(ctx, project, &reference).await,
        DataCmd::Diff { dataset, from, to } => {
            let d = c.diff(project, &dataset, &from, &to).await?;
            diff::print(format, &dataset, &d)
        }
        DataCmd::Copy {
            reference,
            to,
            message,
        } => {
            let copy = CopyBody {
                to,
                version: Some(reference.selector_or_latest().to_string()),
                message,
            };
            let v = c.copy_version(project, &reference.name, &copy).await?;
            output::record(format, &v)
        }
        DataCmd::Tag { reference, tag } => {
            let version = reference.selector_or_latest();
            let v = c
                .tag_version(project, &reference.name, &tag, &version)
                .await?;
            output::record(format, &v)
        }
        DataCmd::Gc { grace } => gc(ctx, Some(project), grace).await,
    }
}

/// `qanat gc [-p P]` and `qanat data gc`: one project's gc, or the installation's.
pub async fn gc(ctx: &Ctx, project: Option<&str>, grace: humantime::Duration) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    let options = GcBody {
        grace_seconds: Some(std::time::Duration::from(grace).as_secs()),
    };
    let Some(project) = project else {
        let r = c.gc_all(&options).await?;
        if format == Format::Json {
            return output::json(&r);
        }
        for p in &r.projects_purged {
            println!("project {p}: purged");
        }
        for (p, report) in &r.projects {
            println!("project {p}: {}", gc_line(report));
        }
        return Ok(());
    };
    let r = c.gc(project, &options).await?;
    if format == Format::Json {
        return output::json(&r);
    }
    println!("gc: {}", gc_line(&r));
    Ok(())
}

fn gc_line(r: &qanat_data::GcReport) -> String {
    let mut line = format!(
        "{} versions scanned, {} chunks referenced, {} chunks deleted, {} freed",
        r.versions_scanned,
        r.chunks_referenced,
        r.chunks_deleted,
        output::human(r.bytes_freed)
    );
    if r.datasets_purged + r.experiments_purged + r.runs_purged > 0 {
        line.push_str(&format!(
            "; purged {} datasets, {} experiments, {} runs ({} artifacts)",
            r.datasets_purged, r.experiments_purged, r.runs_purged, r.artifacts_deleted
        ));
    }
    if r.dataset_versions_expired > 0 {
        line.push_str(&format!(
            "; {} dataset versions past the project's retention removed",
            r.dataset_versions_expired
        ));
    }
    if r.inference_log_files_deleted > 0 {
        line.push_str(&format!(
            "; {} inference log files past retention deleted ({})",
            r.inference_log_files_deleted,
            output::human(r.inference_log_bytes_deleted)
        ));
    }
    if r.kept_for_registry > 0 {
        line.push_str(&format!(
            "; {} kept past retention for registered model versions",
            r.kept_for_registry
        ));
    }
    if r.deliveries_purged > 0 {
        line.push_str(&format!(
            "; {} finished event deliveries forgotten",
            r.deliveries_purged
        ));
    }
    line
}

/// The `--schema` file, checked here so a typo is reported with the file's name.
fn read_schema(path: &Path) -> Result<DatasetSchema> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading schema {}", path.display()))?;
    serde_json::from_str(&text)
        .with_context(|| format!("{} is not a dataset schema", path.display()))
}

/// A byte count as the tables show it: exact, with the binary size beside it.
fn size(bytes: i64) -> String {
    match u64::try_from(bytes) {
        Ok(b) if b >= 1024 => format!("{b} ({})", output::human(b)),
        _ => bytes.to_string(),
    }
}

output::columns!(Dataset, |x| {
    "name" => x.name.clone(),
    "latest" => output::opt(x.latest_version),
    "classification" => x.classification.to_string(),
    "location" => x.location.clone(),
    "owner" => x.owner.clone(),
    "description" => x.description.clone(),
});

output::fields!(Dataset, |x| {
    "name" => x.name.clone(),
    "id" => x.id.clone(),
    "description" => x.description.clone(),
    "owner" => x.owner.clone(),
    "classification" => x.classification.to_string(),
    "regions" => x.allowed_regions.as_deref().map_or_else(|| "(the project's)".into(), output::joined),
    "location" => x.location.clone(),
    "tags" => output::joined(&x.tags.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>()),
    "schema" => x.schema.as_ref().map_or_else(|| "-".into(), |s| format!("{} columns", s.columns.len())),
    "personal data" => {
        let declared = qanat_data::tabular::declared_pii(x.schema.as_ref(), &x.pii_columns);
        if declared.is_empty() { "-".into() } else { output::joined(&declared) }
    },
    "latest version" => output::opt(x.latest_version),
    "created" => x.created_at.clone(),
    "created by" => x.created_by.clone(),
});

output::columns!(DatasetVersion, |x| {
    "version" => x.version.to_string(),
    "tags" => output::joined(&x.tags),
    "files" => x.file_count.to_string(),
    "size" => size(x.total_size),
    "new bytes" => size(x.new_bytes),
    "parent" => output::opt(x.parent),
    "author" => x.author.clone(),
    "time" => x.created_at.clone(),
    "message" => x.message.clone(),
});

output::fields!(DatasetVersion, |x| {
    "dataset" => x.dataset.clone(),
} + Row + {
    "manifest" => x.manifest_id.clone(),
    "producer" => x.producer.clone(),
});

output::columns!(qanat_data::Erasure, |x| {
    "request" => x.request_id.clone(),
    "dataset" => x.dataset.clone(),
    "columns" => output::joined(&x.columns),
    "rows removed" => x.rows_removed.to_string(),
    "new version" => output::opt(x.new_version),
    "files" => x.files.len().to_string(),
    "chunks destroyed" => x.chunks_shredded.to_string(),
    "by" => x.requested_by.clone(),
    "time" => x.created_at.clone(),
    "finished" => x.completed_at.clone().unwrap_or_else(|| "NO (send the request again)".into()),
});

output::fields!(qanat_data::Erasure, |x| {
    "request" => x.request_id.clone(),
    "dataset" => x.dataset.clone(),
    "columns" => output::joined(&x.columns),
    "reason" => x.reason.clone(),
    "rows removed" => x.rows_removed.to_string(),
    "new version" => output::opt(x.new_version),
    "versions that held them" => output::joined(&x.files.iter().map(|f| f.version.to_string()).collect::<std::collections::BTreeSet<_>>().into_iter().collect::<Vec<_>>()),
    "chunks destroyed" => format!("{} ({})", x.chunks_shredded, output::human(x.bytes_shredded)),
    "requested by" => x.requested_by.clone(),
    "time" => x.created_at.clone(),
    "finished" => x.completed_at.clone().unwrap_or_else(|| "NO (send the request again)".into()),
});

output::columns!(qanat_data::ErasedFile, |x| {
    "version" => x.version.to_string(),
    "file" => x.path.clone(),
    "rows" => x.rows.to_string(),
    "chunks destroyed" => x.chunks_shredded.to_string(),
});
