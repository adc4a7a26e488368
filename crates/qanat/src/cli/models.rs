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
    /// Moves an alias back to where it pointed before its last move.
    Rollback {
        name: String,
        #[arg(long, default_value = "production")]
        alias: String,
    },
}
