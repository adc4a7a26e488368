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
    /// The job's name (default: train-<target>).
    #[arg(long)]
    pub name: Option<String>,
    /// Cores for the trainer, e.g. 2.
    #[arg(long)]
    pub cpus: Option<f64>,
    /// Memory for the trainer, e.g. 4GiB (enforced).
    #[arg(long)]
    pub memory: Option<String>,
    /// The MLflow experiment of its run.
    #[arg(long)]
    pub experiment: Option<String>,
    /// Wait until it ends; exit non-zero unless it succeeded.
    #[arg(long)]
    pub wait: bool,
}
