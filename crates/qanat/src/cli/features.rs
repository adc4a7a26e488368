//! `qanat features`.

use std::path::PathBuf;

use clap::Subcommand;

#[derive(Subcommand)]
pub enum FeaturesCmd {
    /// What `apply` would change in the registry, object by object (writes nothing).
    Plan {
        /// The feature repo: a folder of YAML definitions.
        #[arg(default_value = ".")]
        repo: PathBuf,
    },
    /// Records the repo in the registry: new objects, a new version of each object
    /// whose logic changed, metadata edited in place, objects no longer in the repo
    /// removed (their versions stay). All or nothing.
    Apply {
        /// The feature repo: a folder of YAML definitions.
        #[arg(default_value = ".")]
        repo: PathBuf,
    },
    /// The feature views (default), or the objects of another kind.
    Ls {
        /// entity, source, feature_view or feature_service.
        #[arg(long, default_value = "feature_view")]
        kind: String,
    },
    /// One object's definition (`driver_stats`, `driver_stats@2`), or with --versions
    /// every version of it.
    Show {
        /// NAME or NAME@VERSION.
        name: String,
        /// entity, source, feature_view or feature_service.
        #[arg(long, default_value = "feature_view")]
        kind: String,
        /// List every version.
        #[arg(long)]
        versions: bool,
    },
}
