//! `qanat runs`.

use clap::Subcommand;

#[derive(Subcommand)]
pub enum RunsCmd {
    /// Runs of some experiments (all active ones when none is named), newest first.
    Ls {
        /// Experiment name or id (repeatable).
        #[arg(long, short = 'e')]
        experiment: Vec<String>,
        /// MLflow filter, e.g. "metrics.rmse < 0.5 and params.model = 'tree'".
        #[arg(long, short = 'f')]
        filter: Option<String>,
        /// Order, e.g. "metrics.rmse ASC" (repeatable).
        #[arg(long)]
        order_by: Vec<String>,
        #[arg(long, default_value_t = 50)]
        max: i64,
    },
    /// One run: attributes, params, latest metrics, tags, inputs and outputs.
    Show { run_id: String },
    /// Runs side by side: every param and latest metric, one column per run.
    Compare {
        #[arg(required = true, num_args = 2..)]
        run_ids: Vec<String>,
    },
    /// A run's artifacts: list them, or download a file or a whole directory.
    Artifacts {
        #[command(subcommand)]
        cmd: ArtifactsCmd,
    },
}

#[derive(Subcommand)]
pub enum ArtifactsCmd {
    /// Files (with sizes) and directories under PATH, the run's root when none.
    Ls {
        run_id: String,
        path: Option<String>,
        /// Everything below, not only the first level.
        #[arg(long, short = 'r')]
        recursive: bool,
    },
    /// Downloads PATH, a file or a directory with everything under it, into DEST as
    /// DEST/<last part of PATH> (`-` writes a file to stdout).
    Get {
        run_id: String,
        path: String,
        #[arg(default_value = ".")]
        dest: std::path::PathBuf,
    },
}
