//! Qanat's native trainer: tabular models trained in Rust, with no Python stack.
//!
//! A table (the CSV and Parquet files of a dataset version, `qanat_model::table`) is
//! split into training and validation rows (stratified for classification, seeded,
//! [`prep::split`]); preprocessing is learned on the training rows only and kept with
//! the model ([`prep`], in `qanat-model` with the rest of the model package); a linear, logistic or MLP model is fitted with Adam, minibatches in a
//! seeded order, a learning-rate schedule, class weights and early stopping
//! ([`fit`]), on burn's CPU backend; per-epoch metrics come from [`metrics`]. After
//! every epoch the fit's whole state can be taken as a checkpoint it resumes from
//! bit-exactly ([`checkpoint`]). The `train` job kind ([`kind`]) runs it through the
//! scheduler; the model's files come from [`export`].

pub mod adam;
pub mod checkpoint;
pub mod export;
pub mod finetune;
pub mod fit;
#[cfg(feature = "cuda")]
pub mod gpu;
pub mod inputs;
pub mod job;
pub mod kind;
pub mod metrics;
pub mod mixed;
pub mod onnx;
pub mod space;
pub mod sweep;
pub mod synthetic;

pub use kind::config_of;
use qanat_model::{prep, Table, TrainConfig};

/// What training can refuse or fail at: what the model package refuses (bad config or
/// data, a fault), or a checkpoint that cannot be resumed from.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Bad input (config or data; the message says what to fix), a fault of the
    /// trainer, a file not read or written.
    #[error(transparent)]
    Model(#[from] qanat_model::Error),
    /// A checkpoint that cannot be resumed from (another fit's, damaged, cut short).
    #[error("{0}")]
    Checkpoint(String),
}

impl Error {
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::Model(qanat_model::Error::invalid(message))
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Error::Model(qanat_model::Error::internal(message))
    }

    pub(crate) fn checkpoint(message: impl Into<String>) -> Self {
        Error::Checkpoint(message.into())
    }

    /// Whether the input was at fault (a 4xx).
    pub fn is_invalid(&self) -> bool {
        matches!(self, Error::Model(e) if e.is_invalid())
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A model trained on a table, with what it was trained from.
#[derive(Debug)]
pub struct Trained {
    pub prep: prep::Preprocessing,
    pub fitted: fit::Fitted<fit::Cpu>,
    /// The rows (0-based, in the table's order) fitted on and held out.
    pub train_rows: Vec<usize>,
    pub valid_rows: Vec<usize>,
}

/// Splits `table`, learns the preprocessing, fits the model; `on_epoch` sees every
/// epoch's metrics and may take a checkpoint; `resume` is one to go on from.
pub fn train_table(
    table: &Table,
    config: &TrainConfig,
    resume: Option<&[u8]>,
    on_epoch: impl FnMut(fit::EpochEnd<'_>) -> Result<()>,
) -> Result<Trained> {
    config.check()?;
    let (rows, task) = prep::usable_rows(table, config)?;
    let mut rng = prep::Rng::new(config.seed);
    let (train, valid) = prep::split(table, config, task, &rows, &mut rng)?;
    let prep = prep::Preprocessing::fit(table, config, task, &train)?;
    let weights = prep.class_weights(config, table, &train)?;
    let train_enc = prep.encode(table, &train, &weights)?;
    let valid_enc = prep.encode(table, &valid, &weights)?;
    let fitted = fit::fit(config, &prep, &train_enc, &valid_enc, resume, on_epoch)?;
    Ok(Trained {
        prep,
        fitted,
        train_rows: train,
        valid_rows: valid,
    })
}
