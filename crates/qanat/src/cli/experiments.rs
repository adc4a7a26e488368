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
}
