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
            let e = if experiment.bytes().all(|b| b.is_ascii_digit()) {
                c.experiment(project, &experiment).await?
            } else {
                c.experiment_by_name(project, &experiment).await?
            };
            output::record(format, &e)
        }
    }
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
