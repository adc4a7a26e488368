//! Qanat's model package, at the bottom of the crate graph so that every crate that
//! trains, runs, serves or watches a model shares one description of it:
//!
//! - [`table`]: a training table in memory (CSV and Parquet read into named columns);
//! - [`config`]: what a `train` job asks for;
//! - [`prep`]: the preprocessing learned on the training rows and saved with a model;
//! - [`package`]: the package's file names, its signature (`spec.json`), its `MLmodel`
//!   file, and writing a file whole;
//! - [`profile`]: column and table profiles, the reference profile a model carries for
//!   monitoring to compare live traffic with.
//!
//! Nothing here trains, runs a network or reaches storage: those are `qanat-train`,
//! `qanat-runtime` and the crates above them.

pub mod config;
pub mod package;
pub mod prep;
pub mod profile;
pub mod table;

pub use config::{Task, TrainConfig};
pub use table::Table;

/// What reading, checking or writing a model package can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input (config, data or package); the message says what to fix.
    #[error("{0}")]
    Invalid(String),
    /// A fault of the code itself.
    #[error("{0}")]
    Internal(String),
    /// A file of the package could not be read or written.
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// The constructors the crates above use too (the trainer and the runtimes report
/// their own bad input and faults as these).
impl Error {
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::Invalid(message.into())
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Error::Internal(message.into())
    }

    pub fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Error::Io {
            path: path.display().to_string(),
            source,
        }
    }

    /// Whether the input was at fault (a 4xx), not the code or the disk.
    pub fn is_invalid(&self) -> bool {
        matches!(self, Error::Invalid(_))
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
