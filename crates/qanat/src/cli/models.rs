//! `qanat models`.

use clap::Subcommand;

#[derive(Subcommand)]
pub enum ModelsCmd {
    /// Registered models with their aliases and latest version.
    Ls {
        /// MLflow filter, e.g. "name LIKE 'fraud%'".
        #[arg(long, short = 'f')]
        filter: Option<String>,
    },
    /// A model's versions, aliases and alias history.
    Show { name: String },
    /// Points an alias at a version (or removes it with --delete).
    Alias {
        name: String,
        alias: String,
        /// The version (not needed with --delete).
        #[arg(value_name = "VERSION")]
        to: Option<String>,
        #[arg(long)]
        delete: bool,
    },
    /// Moves an alias (default `production`) to a version, atomically and audited.
    Promote {
        name: String,
        #[arg(value_name = "VERSION")]
        to: String,
        #[arg(long, default_value = "production")]
        alias: String,
    },
    /// Moves an alias one step back along its history (each rollback goes one step
    /// further; `history` shows the chain).
    Rollback {
        name: String,
        #[arg(long, default_value = "production")]
        alias: String,
    },
    /// Every move of a model's aliases (or of one, with --alias), oldest first.
    History {
        name: String,
        #[arg(long)]
        alias: Option<String>,
    },
}
