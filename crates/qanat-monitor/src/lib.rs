//! Monitoring: whether live traffic still looks like what a model was trained on, and
//! what to do when it does not.
//!
//! [`stats`] holds the drift statistics Evidently, Alibi Detect and whylogs use —
//! Kolmogorov–Smirnov, chi-squared, Population Stability Index, Jensen–Shannon and
//! Wasserstein distances — each computed exactly on two samples, with the p-values of
//! the tests that have one. They are checked against SciPy in
//! `tests/compat/drift_stats.py`.
//!
//! [`profile`] keeps what a column looked like in memory that does not grow with its
//! rows, and merges; [`drift`] compares a current profile with a reference, column by
//! column with the method Evidently would choose, and the dataset as a whole; [`table`]
//! profiles CSV and Parquet files (or Arrow batches) and compares two of them;
//! [`report`] writes the result as one self-contained HTML page.
//!
//! The live loop: a [`Monitors`] service keeps one monitor per deployment
//! ([`spec::MonitorSpec`]). Its [watcher](Monitors::spawn) cuts the deployment's
//! inference log into tumbling windows, compares each version's traffic with the
//! reference profile stored with that version's model, matches the ground truth posted
//! for past requests ([`quality`]), stores every check with its HTML report, and runs
//! the alert rules: a signed webhook or NATS event, a retraining job, a canary of the
//! retrained version judged on live quality, an automatic rollback. Each action is
//! audited under the `monitor` service actor and recorded in lineage.

pub mod drift;
pub mod quality;
pub mod report;
pub mod spec;
pub mod stats;
pub mod table;
pub mod wire;

mod actions;
mod monitors;
mod references;
mod watch;
mod window;

pub use monitors::Monitors;
pub use qanat_model::profile;

/// The monitors, checks, labels and alerts tables (0014), applied after serving's.
pub static MIGRATIONS: qanat_store::migrations::DomainMigrations =
    qanat_store::domain_migrations!("monitor", ["0014_monitors.sql", "0015_monitor_leases.sql",]);

/// What monitoring can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller's request is wrong; the message says what to fix.
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Refused(#[from] qanat_core::Refusal),
    #[error(transparent)]
    Serving(#[from] qanat_serving::Error),
    #[error(transparent)]
    Tracking(#[from] qanat_tracking::Error),
    #[error(transparent)]
    Data(#[from] qanat_data::Error),
    #[error(transparent)]
    Jobs(#[from] qanat_jobs::Error),
    #[error(transparent)]
    Events(#[from] qanat_events::Error),
    #[error(transparent)]
    Governance(#[from] qanat_governance::Error),
    #[error(transparent)]
    Store(#[from] qanat_store::Error),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error("{0}")]
    Internal(String),
}

impl qanat_core::DomainError for Error {
    fn kind(&self) -> qanat_core::ErrorKind {
        use qanat_core::ErrorKind as K;
        match self {
            Error::Invalid(_) => K::Invalid,
            Error::Db(_) | Error::Internal(_) => K::Internal,
            _ => self.wrapped_kind(),
        }
    }

    fn wrapped(&self) -> Option<&dyn qanat_core::DomainError> {
        match self {
            Error::Refused(e) => Some(e),
            Error::Serving(e) => Some(e),
            Error::Tracking(e) => Some(e),
            Error::Data(e) => Some(e),
            Error::Jobs(e) => Some(e),
            Error::Events(e) => Some(e),
            Error::Governance(e) => Some(e),
            Error::Store(e) => Some(e),
            _ => None,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
