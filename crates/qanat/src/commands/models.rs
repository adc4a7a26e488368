//! `qanat models`: the model registry. Alias moves go through the native registry API
//! (maintainers; atomic, audited, kept in the alias history).

use anyhow::{bail, Result};
use qanat_tracking::wire::{AliasMoved, ModelDetail, ModelListParams};
use qanat_tracking::{AliasMove, ModelVersion, RegisteredModel};

use super::Ctx;
use crate::cli::{Format, ModelsCmd};
use crate::output::{self, millis, Row};

pub async fn run(ctx: &Ctx, project: &str, cmd: ModelsCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        ModelsCmd::Ls { filter } => {
            let params = ModelListParams {
                filter,
                max_results: None,
            };
            let models = c.models(project, &params).await?.models;
            output::list(format, &models)
        }
        ModelsCmd::Show { name } => {
            let detail = c.model(project, &name).await?;
            if format == Format::Json {
                return output::json(&detail);
            }
            show(&detail)
        }
        ModelsCmd::Alias {
            name,
            alias,
            to,
            delete,
        } => {
            if delete {
                c.delete_alias(project, &name, &alias).await?;
                println!("removed {name}@{alias}");
                return Ok(());
            }
            let Some(version) = to else {
                bail!("give the version the alias should point at (or --delete)");
            };
            moved(
                format,
                &c.set_alias(project, &name, &alias, &version).await?,
            )
        }
        ModelsCmd::Promote { name, to, alias } => {
            moved(format, &c.promote(project, &name, &alias, &to).await?)
        }
        ModelsCmd::Rollback { name, alias } => {
            moved(format, &c.rollback(project, &name, &alias).await?)
        }
    }
}

fn show(d: &ModelDetail) -> Result<()> {
    if d.model.description.is_empty() {
        println!("{}", d.model.name);
    } else {
        println!("{}: {}", d.model.name, d.model.description);
    }
    output::list(Format::Table, &d.versions)?;
    if !d.alias_history.is_empty() {
        println!("alias history:");
        output::list(Format::Table, &d.alias_history)?;
    }
    Ok(())
}

/// `name@alias: version A → B`, the line scripts and people read after a move.
fn moved(format: Format, m: &AliasMoved) -> Result<()> {
    if format == Format::Json {
        return output::json(m);
    }
    let now = m.version.as_deref().unwrap_or("-");
    match &m.previous_version {
        Some(before) => println!("{}@{}: version {before} → {now}", m.name, m.alias),
        None => println!("{}@{}: → version {now}", m.name, m.alias),
    }
    Ok(())
}

impl Row for RegisteredModel {
    const HEADERS: &'static [&'static str] =
        &["name", "latest", "aliases", "updated", "description"];
    fn cells(&self) -> Vec<String> {
        let aliases: Vec<String> = self
            .aliases
            .iter()
            .map(|a| format!("{}→{}", a.alias, a.version))
            .collect();
        let latest = self
            .latest_versions
            .iter()
            .filter_map(|v| v.version.parse::<i64>().ok())
            .max();
        vec![
            self.name.clone(),
            output::opt(latest),
            aliases.join(" "),
            millis(Some(self.last_updated_timestamp)),
            self.description.clone(),
        ]
    }
}

impl Row for ModelVersion {
    const HEADERS: &'static [&'static str] = &[
        "version", "aliases", "stage", "run", "source", "by", "created",
    ];
    fn cells(&self) -> Vec<String> {
        vec![
            self.version.clone(),
            output::joined(&self.aliases),
            self.current_stage.clone(),
            output::opt(self.run_id.as_ref()),
            self.source.clone(),
            self.user_id.clone(),
            millis(Some(self.creation_timestamp)),
        ]
    }
}

impl Row for AliasMove {
    const HEADERS: &'static [&'static str] = &["alias", "from", "to", "how", "by", "when"];
    fn cells(&self) -> Vec<String> {
        vec![
            self.alias.clone(),
            output::opt(self.previous_version.as_ref()),
            output::opt(self.version.as_ref()),
            self.reason.clone(),
            self.changed_by.clone(),
            millis(Some(self.changed_time)),
        ]
    }
}
