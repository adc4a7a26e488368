//! `qanat models`: the model registry. Alias moves go through the native registry API
//! (maintainers; atomic, audited, kept in the alias history).

use anyhow::{bail, Result};
use qanat_tracking::wire::{AliasMoved, ModelDetail, ModelListParams};
use qanat_tracking::{AliasMove, ModelVersion, RegisteredModel};

use super::Ctx;
use crate::cli::{Format, ModelsCmd};
use crate::output::{self, millis};

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
        ModelsCmd::History { name, alias } => {
            let mut moves = c.model(project, &name).await?.alias_history;
            moves.retain(|m| alias.as_ref().is_none_or(|a| &m.alias == a));
            output::list(format, &moves)
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
    for v in &d.versions {
        if let Some(t) = v
            .tags
            .iter()
            .find(|t| t.key == qanat_serving::UNSERVABLE_TAG)
        {
            println!("version {} is not served: {}", v.version, t.value);
        }
    }
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

output::columns!(RegisteredModel, |x| {
    "name" => x.name.clone(),
    "latest" => output::opt(x.latest_versions.iter().filter_map(|v| v.version.parse::<i64>().ok()).max()),
    "aliases" => x.aliases.iter().map(|a| format!("{}→{}", a.alias, a.version)).collect::<Vec<_>>().join(" "),
    "updated" => millis(Some(x.last_updated_timestamp)),
    "description" => x.description.clone(),
});

output::columns!(ModelVersion, |x| {
    "version" => x.version.clone(),
    "aliases" => output::joined(&x.aliases),
    "stage" => x.current_stage.clone(),
    "run" => output::opt(x.run_id.as_ref()),
    "source" => x.source.clone(),
    "by" => x.user_id.clone(),
    "created" => millis(Some(x.creation_timestamp)),
});

output::columns!(AliasMove, |x| {
    "alias" => x.alias.clone(),
    "from" => output::opt(x.previous_version.as_ref()),
    "to" => output::opt(x.version.as_ref()),
    "how" => x.reason.clone(),
    "by" => x.changed_by.clone(),
    "when" => millis(Some(x.changed_time)),
});
