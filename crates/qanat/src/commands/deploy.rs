//! `qanat deploy`: deployments of registered models — create, change, promote, roll
//! back, delete, and how the server serves them.

use anyhow::{bail, Context, Result};
use qanat_serving::{ArmStatus, Deployment, DeploymentSpec, Revision, Routing, Target};

use super::Ctx;
use crate::cli::{DeployCmd, Format, SpecArgs};
use crate::output::{self, columns, fields};

fn when(micros: i64) -> String {
    qanat_store::format_micros(micros)
}

/// `2=90, 3=10, @challenger(shadow)`.
fn targets(spec: &DeploymentSpec) -> String {
    spec.targets
        .iter()
        .map(|t| {
            if t.shadow {
                format!("{}(shadow)", t.label())
            } else {
                format!("{}={}", t.label(), t.weight)
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

columns!(Deployment, |d| {
    "name" => d.name.clone(),
    "model" => d.spec.model.clone(),
    "targets" => targets(&d.spec),
    "routing" => d.spec.routing.to_string(),
    "revision" => d.revision.to_string(),
    "updated" => when(d.updated_at),
    "by" => d.updated_by.clone(),
});
fields!(Deployment = Row);

columns!(Revision, |r| {
    "revision" => r.revision.to_string(),
    "action" => r.action.clone(),
    "targets" => targets(&r.spec),
    "note" => r.note.clone(),
    "when" => when(r.created_at),
    "by" => r.created_by.clone(),
});

columns!(ArmStatus, |a| {
    "target" => a.target.clone(),
    "role" => a.role.clone(),
    "weight" => a.weight.to_string(),
    "version" => a.version.clone().unwrap_or_else(|| "-".into()),
    "healthy" => if a.healthy { "yes".into() } else { format!("no: {}", a.reason.clone().unwrap_or_default()) },
    "runtime" => a.runtime.clone().unwrap_or_else(|| "-".into()),
    "requests" => a.requests.to_string(),
    "failures" => a.failures.to_string(),
    "batches" => a.batching.as_ref().map_or("-".into(), |b| {
        let n: u64 = b.batch_sizes.values().sum();
        let rows: u64 = b.batch_sizes.iter().map(|(s, c)| *s as u64 * c).sum();
        format!("{n} (mean {:.1} rows, {} refused)", rows as f64 / n.max(1) as f64, b.rejected)
    }),
    "shadow" => a.shadow.as_ref().map_or("-".into(), |s| {
        let agreed = if s.rows > 0 { format!(", {:.1}% agree", 100.0 * s.agreed as f64 / s.rows as f64) } else { String::new() };
        format!("{} compared, mean |Δ| {:.4}{agreed}, {} dropped", s.compared, s.mean_abs_diff, s.dropped)
    }),
});

columns!(qanat_serving::log::LogRecord, |r| {
    "time" => when(r.time),
    "version" => r.version.clone(),
    "role" => r.role.clone(),
    "actor" => r.actor.clone(),
    "rows" => r.rows.to_string(),
    "latency µs" => r.latency_us.to_string(),
    "outputs" => r.outputs.chars().take(60).collect(),
});

/// A target from the command line: `4` is a version, `@name` an alias.
fn target(s: &str, weight: u32) -> Result<Target> {
    Ok(match s.strip_prefix('@') {
        Some(alias) => Target::alias(alias, weight),
        None if s.parse::<u64>().is_ok() => Target::version(s, weight),
        None => bail!("target '{s}': give a version number (4) or an alias (@challenger)"),
    })
}

/// The spec: `base` (the current one, or the file's), with the flags on top.
fn spec_of(base: Option<DeploymentSpec>, a: SpecArgs) -> Result<DeploymentSpec> {
    let base = match (&a.file, base) {
        (Some(path), _) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Some(
                serde_yaml_ng::from_str::<DeploymentSpec>(&text)
                    .with_context(|| format!("{} is not a deployment spec", path.display()))?,
            )
        }
        (None, b) => b,
    };
    let model = match (a.model, &base) {
        (Some(m), _) => m,
        (None, Some(b)) => b.model.clone(),
        (None, None) => bail!("--model: which registered model to deploy"),
    };
    let old = base.as_ref().map(|b| b.targets.clone()).unwrap_or_default();
    let mut weighted = old.iter().filter(|t| !t.shadow);
    let primary = match a.primary {
        Some(p) => target(&p, 100)?,
        None => weighted
            .next()
            .cloned()
            .context("--primary: the version (3) or alias (@champion) to serve")?,
    };
    let mut canaries: Vec<Target> = if a.no_canary {
        Vec::new()
    } else if let Some(c) = &a.canary {
        vec![target(c, a.canary_weight.unwrap_or(10))?]
    } else {
        old.iter().filter(|t| !t.shadow).skip(1).cloned().collect()
    };
    if let (Some(w), None, [one]) = (a.canary_weight, &a.canary, &mut canaries[..]) {
        one.weight = w;
    }
    let shadows: Vec<Target> = if a.no_shadow {
        Vec::new()
    } else if let Some(s) = &a.shadow {
        vec![Target {
            shadow: true,
            ..target(s, 0)?
        }]
    } else {
        old.iter().filter(|t| t.shadow).cloned().collect()
    };
    let canary_share: u32 = canaries.iter().map(|t| t.weight).sum();
    if canary_share >= 100 {
        bail!("the canaries take {canary_share}% of the traffic: leave some to the primary");
    }
    let mut all = vec![Target {
        weight: 100 - canary_share,
        shadow: false,
        ..primary
    }];
    all.extend(canaries);
    all.extend(shadows);
    let routing = if a.sticky {
        Routing::Sticky
    } else if a.weighted {
        Routing::Weighted
    } else {
        base.as_ref().map(|b| b.routing).unwrap_or_default()
    };
    let mut log = base.as_ref().map(|b| b.log.clone()).unwrap_or_default();
    if let Some(v) = a.log_sample {
        log.sample = v;
    }
    if !a.pii.is_empty() {
        log.pii = a.pii;
    }
    let mut features = base.as_ref().and_then(|b| b.features.clone());
    if a.no_features {
        features = None;
    }
    if let Some(service) = a.features {
        features = Some(qanat_serving::enrich::Enrichment {
            service,
            ..features.unwrap_or_else(|| qanat_serving::enrich::Enrichment {
                service: String::new(),
                missing: Default::default(),
                defaults: Default::default(),
            })
        });
    }
    if a.on_missing.is_some() || !a.feature_defaults.is_empty() {
        let f = features
            .as_mut()
            .context("--on-missing and --feature-default need --features SERVICE")?;
        if let Some(m) = &a.on_missing {
            f.missing = m.parse()?;
        }
        for d in &a.feature_defaults {
            let (name, value) = d
                .split_once('=')
                .with_context(|| format!("--feature-default '{d}': write NAME=VALUE"))?;
            let value = serde_json::from_str::<serde_json::Value>(value)
                .ok()
                .filter(|v| v.is_number() || v.is_boolean())
                .unwrap_or_else(|| serde_json::Value::from(value));
            f.defaults.insert(name.to_string(), value);
        }
    }
    let mut batching = base.map(|b| b.batching).unwrap_or_default();
    let b = &mut batching;
    if let Some(v) = a.max_batch_size {
        b.max_batch_size = v;
    }
    if let Some(v) = a.max_queue_delay_us {
        b.max_queue_delay_us = v;
    }
    if !a.preferred_batch_sizes.is_empty() {
        b.preferred_batch_sizes = a.preferred_batch_sizes;
    }
    if let Some(v) = a.max_queue_size {
        b.max_queue_size = v;
    }
    if let Some(v) = a.priority_levels {
        b.priority_levels = v;
    }
    if let Some(v) = a.default_priority {
        b.default_priority = v;
    }
    if let Some(v) = a.default_timeout_us {
        b.default_timeout_us = v;
    }
    if let Some(v) = a.instances {
        b.instances = v;
    }
    Ok(DeploymentSpec {
        model,
        targets: all,
        routing,
        batching,
        log,
        features,
    })
}

pub async fn run(ctx: &Ctx, project: &str, cmd: DeployCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        DeployCmd::Create { name, spec } => {
            let spec = spec_of(None, spec)?;
            let d = c.create_deployment(project, &name, &spec).await?;
            output::record(format, &d)?;
            if format != Format::Json {
                // Any project's URL; the default project's also answers at /v2/….
                println!(
                    "\nanswers at {}/oip/{project}/v2/models/{}/infer",
                    c.base(),
                    d.name
                );
            }
            Ok(())
        }
        DeployCmd::Update { name, spec } => {
            if spec.model.is_some() {
                bail!("--model: a deployment keeps its model (create another deployment)");
            }
            let current = c.deployment(project, &name).await?.deployment.spec;
            let spec = spec_of(Some(current), spec)?;
            output::record(format, &c.update_deployment(project, &name, &spec).await?)
        }
        DeployCmd::Promote { name, to } => output::record(
            format,
            &c.promote_deployment(project, &name, to.as_deref()).await?,
        ),
        DeployCmd::Rollback { name, to } => {
            output::record(format, &c.rollback_deployment(project, &name, to).await?)
        }
        DeployCmd::Status { name } => {
            let s = c.deployment(project, &name).await?;
            if format == Format::Json {
                return output::json(&s);
            }
            output::record(format, &s.deployment)?;
            println!();
            output::list(format, &s.targets)
        }
        DeployCmd::Ls => output::list(format, &c.deployments(project).await?.deployments),
        DeployCmd::History { name } => output::list(
            format,
            &c.deployment_revisions(project, &name).await?.revisions,
        ),
        DeployCmd::Log { name, limit } => {
            let l = c.deployment_log(project, &name, limit).await?;
            if format == Format::Json {
                return output::json(&l);
            }
            output::list(format, &l.records)
        }
        DeployCmd::Delete { name } => {
            c.delete_deployment(project, &name).await?;
            if format != Format::Json {
                println!("deleted deployment {name}");
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_change_only_what_they_name() {
        let created = spec_of(
            None,
            SpecArgs {
                model: Some("m".into()),
                primary: Some("1".into()),
                canary: Some("2".into()),
                ..SpecArgs::default()
            },
        )
        .expect("spec");
        assert_eq!(
            created.targets,
            vec![Target::version("1", 90), Target::version("2", 10)]
        );
        let reweighted = spec_of(
            Some(created.clone()),
            SpecArgs {
                canary_weight: Some(50),
                shadow: Some("@next".into()),
                sticky: true,
                ..SpecArgs::default()
            },
        )
        .expect("spec");
        assert_eq!(reweighted.targets[0], Target::version("1", 50));
        assert_eq!(reweighted.targets[1], Target::version("2", 50));
        assert!(reweighted.targets[2].shadow);
        assert_eq!(reweighted.routing, Routing::Sticky);
        let plain = spec_of(
            Some(reweighted),
            SpecArgs {
                no_canary: true,
                no_shadow: true,
                ..SpecArgs::default()
            },
        )
        .expect("spec");
        assert_eq!(plain.targets, vec![Target::version("1", 100)]);
        assert!(target("latest", 1).is_err());
    }
}
