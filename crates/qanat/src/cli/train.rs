//! `qanat train`: submit Qanat's native trainer as a job.

use std::path::PathBuf;

use clap::Args;

#[derive(Args)]
pub struct TrainArgs {
    /// A train config, YAML or JSON (see docs/training.md); flags override it.
    #[arg(long, short = 'c', value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The dataset version to train on: dataset:NAME@VERSION (repeatable).
    #[arg(long = "data", value_name = "REF")]
    pub inputs: Vec<String>,
    /// The column to predict.
    #[arg(long)]
    pub target: Option<String>,
    /// linear, logistic or mlp.
    #[arg(long)]
    pub model: Option<String>,
    /// Most epochs (early stopping may end sooner).
    #[arg(long)]
    pub epochs: Option<u32>,
    /// Seed of the split, the initial weights and the batch order.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Add the trained model as a new version of this registered model.
    #[arg(long, value_name = "MODEL")]
    pub register: Option<String>,
    #[command(flatten)]
    pub job: super::JobFlags,
}
