//! Qanat's model runtimes: what turns a registered model version into predictions on a
//! plain CPU, and what makes it smaller and faster first.
//!
//! - [`package`]: a model version's directory — `weights.safetensors`, the signature and
//!   preprocessing in `spec.json`, optionally `model.onnx` — read and written whole.
//! - [`native`]: Qanat's own forward pass for its linear and MLP models, with f32 and
//!   int8 kernels chosen for the CPU at run time.
//! - [`onnx`]: any ONNX model on `tract` (pure Rust, the default for ONNX) or on
//!   `onnxruntime` (loaded at run time when a library is configured or found).
//! - [`Runtime`]: the one trait every runtime implements (a table in, the model's raw
//!   outputs out), and [`evaluate`]: the quality of those outputs against the target.
//! - [`trees`]: tree ensembles from XGBoost's and LightGBM's own model files,
//!   predicted here, equal to the libraries' own predictions.
//! - [`sklearn`]: scikit-learn models from the pickle `mlflow.sklearn` saves, read as
//!   data (never run) and predicted here: scalers, imputers, one-hot, trees,
//!   forests, gradient boosting and linear models, alone or in a pipeline.
//! - [`imported`]: ONNX models made elsewhere (PyTorch, scikit-learn), their outputs
//!   read as the trainer's, so they are measured, quantized and distilled like Qanat's.
//! - [`optimize`]: a method applied to a model, both measured on a holdout, and a gate
//!   on the quality drop; [`kind`]: the `optimize` job kind that runs it.
//!
//! ```
//! use qanat_runtime::native::{Layer, NativeMlp};
//!
//! // y = relu(x·W₀ᵀ + b₀)·W₁ᵀ + b₁ with 2 inputs, 3 hidden units, 1 output.
//! let m = NativeMlp::new(vec![
//!     Layer::f32(2, vec![1.0, 0.0, 0.0, 1.0, 1.0, 1.0], vec![0.0, 0.0, -1.0]).unwrap(),
//!     Layer::f32(3, vec![1.0, 1.0, 1.0], vec![0.5]).unwrap(),
//! ])
//! .unwrap();
//! assert_eq!(m.predict(&[1.0, 2.0], 1).unwrap(), vec![1.0 + 2.0 + 2.0 + 0.5]);
//! let q = m.quantize_dynamic();
//! assert!((q.predict(&[1.0, 2.0], 1).unwrap()[0] - 5.5).abs() < 0.1);
//! ```

pub mod distill;
pub mod evaluate;
pub mod imported;
pub mod job;
pub mod kind;
pub mod native;
pub mod onnx;
pub mod optimize;
pub mod package;
pub mod prune;
pub mod sklearn;
#[cfg(test)]
pub(crate) mod testing;
pub mod trees;

pub use package::ModelPackage;
use serde::{Deserialize, Serialize};

/// The stated error of dynamic int8 against f32 on the same inputs: the largest
/// absolute difference of an output, as a share of the largest absolute f32 output
/// over the batch (tested on random networks and inputs; docs/optimization.md).
pub const INT8_TOLERANCE: f32 = 0.03;

/// What a runtime can refuse or fail at.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A model or input that cannot be used (the message says what is wrong), a file
    /// of the package not read or written, a fault of the runtime itself.
    #[error(transparent)]
    Model(#[from] qanat_model::Error),
    /// The runtime cannot run here (no onnxruntime library); the message says how to
    /// make it available.
    #[error("{0}")]
    Unavailable(String),
    /// Fine-tuning (pruning, distillation) refused or failed.
    #[error(transparent)]
    Train(#[from] qanat_train::Error),
}

impl Error {
    pub(crate) fn invalid(message: impl Into<String>) -> Self {
        Error::Model(qanat_model::Error::invalid(message))
    }

    pub(crate) fn internal(message: impl Into<String>) -> Self {
        Error::Model(qanat_model::Error::internal(message))
    }

    pub(crate) fn io(path: &std::path::Path, source: std::io::Error) -> Self {
        Error::Model(qanat_model::Error::io(path, source))
    }
}

impl qanat_core::DomainError for Error {
    fn kind(&self) -> qanat_core::ErrorKind {
        use qanat_core::ErrorKind as K;
        match self {
            Error::Unavailable(_) => K::Unavailable,
            Error::Model(e) if e.is_invalid() => K::Invalid,
            Error::Train(e) if e.is_invalid() => K::Invalid,
            Error::Model(_) | Error::Train(_) => K::Internal,
        }
    }
}

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The runtimes a model can run on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    /// Qanat's kernels, from `weights.safetensors`.
    #[default]
    Native,
    /// tract, from `model.onnx`.
    Tract,
    /// onnxruntime, from `model.onnx`, when its library is found.
    Onnxruntime,
}

impl RuntimeKind {
    pub fn parse(s: &str) -> Result<RuntimeKind> {
        match s {
            "native" => Ok(RuntimeKind::Native),
            "tract" => Ok(RuntimeKind::Tract),
            "onnxruntime" | "ort" => Ok(RuntimeKind::Onnxruntime),
            other => Err(Error::invalid(format!(
                "runtime '{other}': choose native, tract or onnxruntime"
            ))),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            RuntimeKind::Native => "native",
            RuntimeKind::Tract => "tract",
            RuntimeKind::Onnxruntime => "onnxruntime",
        }
    }
}

/// A way of running a model: a table in (the raw feature columns the model was trained
/// on), the model's raw outputs out, `rows × outputs` row-major (as the trainer
/// defines them: logits for classification, the standardized target for regression).
pub trait Runtime: Send + Sync {
    /// `native`, `tract` or `onnxruntime`: what model metadata reports.
    fn name(&self) -> &'static str;

    /// Outputs a row.
    fn outputs(&self) -> usize;

    /// Runs every row of `table`.
    fn predict(&self, table: &qanat_model::Table) -> Result<Vec<f32>>;
}
