//! The monitor API's shapes (`qanat_types::monitor::wire`) and the monitors' state as
//! metrics read it.

pub use qanat_types::monitor::wire::*;

/// The monitors' state as metrics show it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Each monitor's newest check, with its project.
    pub latest: Vec<(String, Check)>,
    /// (project, deployment, status, checks).
    pub checks: Vec<(String, String, String, i64)>,
    /// (project, deployment, state, alerts).
    pub alerts: Vec<(String, String, String, i64)>,
}
