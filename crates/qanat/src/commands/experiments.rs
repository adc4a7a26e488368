//! `qanat experiments`: a project's MLflow experiments.

use anyhow::Result;
use qanat_tracking::wire::mlflow::SearchExperiments;
use qanat_tracking::Experiment;

use super::Ctx;
use crate::cli::ExperimentsCmd;
use crate::output::{self, millis};

pub async fn run(ctx: &Ctx, project: &str, cmd: ExperimentsCmd) -> Result<()> {
    let (c, format) = (&ctx.client, ctx.format);
    match cmd {
        ExperimentsCmd::Ls { all } => {
            let search = SearchExperiments {
                max_results: Some(1000),
                view_type: all.then(|| "ALL".to_string()),
                ..SearchExperiments::default()
            };
            let page = c.search_experiments(project, &search).await?;
            output::list(format, &page.experiments)
        }
        ExperimentsCmd::Show { experiment } => {
            output::record(format, &find(c, project, &experiment).await?)
        }
        ExperimentsCmd::Rm { experiment } => {
            let e = find(c, project, &experiment).await?;
            c.delete_experiment(project, &e.experiment_id).await?;
            if format == crate::cli::Format::Json {
                return output::json(&find(c, project, &e.experiment_id).await?);
            }
            eprintln!(
                "deleted experiment '{}' (id {}) and its runs: `qanat experiments restore {}` until gc purges them after the retention period",
                e.name, e.experiment_id, e.experiment_id
            );
            Ok(())
        }
        ExperimentsCmd::Restore { experiment } => {
            let e = find(c, project, &experiment).await?;
            c.restore_experiment(project, &e.experiment_id).await?;
            output::record(format, &find(c, project, &e.experiment_id).await?)
        }
    }
}

/// An experiment by id (all digits) or name.
async fn find(c: &qanat_client::Client, project: &str, experiment: &str) -> Result<Experiment> {
    Ok(if experiment.bytes().all(|b| b.is_ascii_digit()) {
        c.experiment(project, experiment).await?
    } else {
        c.experiment_by_name(project, experiment).await?
    })
}

output::columns!(Experiment, |x| {
    "id" => x.experiment_id.clone(),
    "name" => x.name.clone(),
    "stage" => x.lifecycle_stage.clone(),
    "created" => millis(Some(x.creation_time)),
    "updated" => millis(Some(x.last_update_time)),
});

output::fields!(Experiment, |x| {
} + Row + {
    "artifacts" => x.artifact_location.clone(),
    "tags" => output::joined(&x.tags.iter().map(|t| format!("{}={}", t.key, t.value)).collect::<Vec<_>>()),
});
