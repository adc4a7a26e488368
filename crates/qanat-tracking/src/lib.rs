//! Qanat experiment tracking and model registry: experiments, runs, parameters, tags,
//! metric history, logged models and registered model versions with aliases, per
//! project, in the metadata store (SQLite or PostgreSQL, same SQL).
//!
//! The objects follow MLflow's model so that the MLflow REST API (in `qanat-api`) is a
//! thin translation: experiment ids are per-project integers (experiment `0` is each
//! project's "Default"), run ids are 32 hex characters, times are epoch milliseconds.
//! Metric points are appended to a history table and folded into `latest_metrics` in the
//! same transaction, so reading a run or filtering on a metric never scans the history.

mod cursor;
mod error;
pub mod model;
mod models;
mod purge;
mod registry;
mod search;
mod store;
pub use qanat_types::tracking::wire;

pub use error::Error;
pub use model::{
    Dataset, DatasetInput, DatasetSummary, Experiment, LoggedModel, Metric, MetricValue,
    ModelAlias, ModelInput, ModelOutput, ModelVersion, Param, RegisteredModel, Run, RunData,
    RunInfo, Tag, ViewType, RUN_STATUSES,
};
pub use models::{ModelOrder, NewLoggedModel, ResolvedInput};
pub use purge::Purged;
pub use qanat_types::tracking::AliasMove;
pub use registry::{NewModelVersion, DERIVED_FROM_TAG};
pub use store::{Batch, NewRun, Page, RunLimits, RunUpdate, Tracking};

/// This domain's tables: experiments, runs, metrics (0003); logged models, the model registry, aliases and their history (0004).
/// A schema that lists it applies them (see `qanat_store::migrations`).
pub static MIGRATIONS: qanat_store::migrations::DomainMigrations = qanat_store::domain_migrations!(
    "tracking",
    [
        "0003_tracking.sql",
        "0004_models.sql",
        "0016_metric_order.sql",
        "0025_metric_order_nan.sql",
    ]
);

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
