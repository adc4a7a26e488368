//! Experiments, runs and the model registry as MLflow's API and Qanat's show them
//! (`qanat-tracking` stores, searches and moves them).

pub mod model;
pub mod wire;

pub use model::*;

/// One move of an alias.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct AliasMove {
    pub alias: String,
    pub version: Option<String>,
    pub previous_version: Option<String>,
    pub changed_by: String,
    /// Epoch milliseconds.
    pub changed_time: i64,
    /// `set`, `promote`, `rollback` or `delete`.
    pub reason: String,
}
