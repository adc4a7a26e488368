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
    /// Builds a training set: entity rows joined point in time with features, written
    /// as a new version of a dataset that jobs take as input.
    ///
    /// `qanat features training-set --entities dataset:rides@1 --features
    /// driver_stats:conv_rate,driver_stats:trips --to rides-train`
    TrainingSet {
        /// The entity rows: a dataset version (dataset:NAME@N), or a local Parquet/CSV
        /// file, pushed first as a version of DATASET-entities.
        #[arg(long)]
        entities: String,
        /// The entity rows' time column.
        #[arg(long, default_value = "event_timestamp")]
        timestamp_column: String,
        /// Features: view:feature, view@3:feature, or view (all of them), comma-separated.
        #[arg(long, value_delimiter = ',')]
        features: Vec<String>,
        /// A feature service instead of --features.
        #[arg(long)]
        feature_service: Option<String>,
        /// Name columns view__feature.
        #[arg(long)]
        full_feature_names: bool,
        /// The dataset the training set becomes a new version of (created when absent).
        #[arg(long, value_name = "DATASET")]
        to: String,
        #[arg(long, short = 'm', default_value = "")]
        message: String,
    },
    /// Writes each view's newest rows per entity into the online store. Without
    /// --start, each view continues from where its last run ended (incremental).
    Materialize {
        /// The views (default: every online view), comma-separated.
        #[arg(long, value_delimiter = ',')]
        views: Vec<String>,
        /// The window's start (RFC 3339).
        #[arg(long)]
        start: Option<String>,
        /// The window's end (RFC 3339; default now).
        #[arg(long)]
        end: Option<String>,
        /// The run's id (default: a new one), to follow it from elsewhere with
        /// `qanat features materializations ID`.
        #[arg(long)]
        run_id: Option<String>,
        /// Print each view's progress to stderr while the run goes (the default when
        /// stderr is a terminal).
        #[arg(long)]
        progress: bool,
    },
    /// This server's recent materialization runs, newest first; with a run id, that
    /// run's progress view by view.
    Materializations {
        /// A run id.
        run_id: Option<String>,
    },
    /// The consumers of the stream sources: connected, messages pending (lag), rows
    /// written and refused since the server started, the last refusal or error.
    Streams,
}
