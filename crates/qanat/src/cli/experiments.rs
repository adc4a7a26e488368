//! `qanat experiments`.

use clap::Subcommand;

#[derive(Subcommand)]
pub enum ExperimentsCmd {
    /// A project's experiments (deleted ones too with --all).
    Ls {
        #[arg(long)]
        all: bool,
    },
    /// One experiment, by name or id, with its tags.
    Show { experiment: String },
    /// Delete an experiment and its runs (project admins; restorable until gc purges it).
    ///
    /// Its name is kept until gc purges it with its artifacts after the retention
    /// period (retention.deleted_days).
    Rm { experiment: String },
    /// Bring back a deleted experiment and its runs (project admins).
    Restore { experiment: String },
}
