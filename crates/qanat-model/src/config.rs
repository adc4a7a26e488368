//! What a `train` job asks for: the target, the features, the model and how to fit it.
//! Every field has a default a user of scikit-learn or PyTorch would expect; every bad
//! value is refused with what to write instead.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// Classification or regression.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Task {
    Classification,
    Regression,
}

/// The model family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ModelKind {
    /// Linear regression (regression) or logistic regression (classification).
    Linear,
    /// Logistic regression; the same as `linear` for classification.
    Logistic,
    /// A multi-layer perceptron with ReLU hidden layers.
    Mlp,
}

/// How the learning rate changes over epochs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum Schedule {
    /// The same rate every epoch.
    Constant,
    /// Cosine decay from the rate to `min_factor` × the rate at the last epoch.
    Cosine {
        #[serde(default)]
        min_factor: f64,
    },
    /// × `gamma` every `every` epochs.
    Step { every: u32, gamma: f64 },
}

/// Where training runs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Device {
    /// A GPU when this build has CUDA and the job has a GPU, else the CPU.
    #[default]
    Auto,
    Cpu,
    /// A GPU, or the job fails (it needs `resources: {gpus: 1}` and a CUDA build).
    Cuda,
}

/// The arithmetic of training steps on a GPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// Everything in float32.
    #[default]
    Fp32,
    /// Mixed precision: float32 master weights and optimizer state, the layers'
    /// products and activations in bfloat16 (no loss scaling needed).
    Bf16,
    /// Mixed precision in float16, with dynamic loss scaling (steps whose gradients
    /// overflow are skipped and the scale halved, as PyTorch's GradScaler does).
    Fp16,
}

impl Precision {
    pub fn as_str(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Fp16 => "fp16",
        }
    }
}

/// Weights of the classes in the loss.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(untagged)]
pub enum ClassWeights {
    /// `balanced`: n / (classes × count of the class), as scikit-learn's.
    Named(String),
    /// A weight per class label.
    Given(BTreeMap<String, f64>),
}

/// A `train` job's fields.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// The column to predict.
    pub target: String,
    /// The feature columns (default: every column but the target and `exclude`).
    #[serde(default)]
    pub features: Option<Vec<String>>,
    /// Columns never used as features (ids, timestamps).
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Classification or regression (default: classification for a text or boolean
    /// target, or whole numbers with at most 10 distinct values; regression otherwise).
    #[serde(default)]
    pub task: Option<Task>,
    #[serde(default = "default_model")]
    pub model: ModelKind,
    /// Hidden layer widths of an MLP (default [64, 64]).
    #[serde(default)]
    pub hidden: Option<Vec<usize>>,
    #[serde(default = "default_epochs")]
    pub epochs: u32,
    #[serde(default = "default_batch")]
    pub batch_size: usize,
    /// Adam's learning rate (default 0.001 for an MLP, 0.01 for a linear model).
    #[serde(default)]
    pub learning_rate: Option<f64>,
    /// L2 penalty (Adam's weight decay).
    #[serde(default)]
    pub weight_decay: f64,
    #[serde(default = "default_schedule")]
    pub schedule: Schedule,
    /// Epochs without improvement of the validation loss before training stops (0:
    /// never stop early). The best epoch's weights are the model.
    #[serde(default = "default_patience")]
    pub patience: u32,
    /// The share of rows held out for validation (stratified for classification).
    #[serde(default = "default_validation")]
    pub validation_fraction: f64,
    #[serde(default)]
    pub class_weights: Option<ClassWeights>,
    /// Categories kept per text feature (the most frequent; others share one slot).
    #[serde(default = "default_categories")]
    pub max_categories: usize,
    /// Makes a CPU run bit-reproducible: the split, the initial weights, the batches.
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// auto (default), cpu or cuda.
    #[serde(default)]
    pub device: Device,
    /// fp32 (default), or bf16 / fp16 mixed precision on a GPU (a run that falls back
    /// to the CPU trains in fp32 and says so in its log).
    #[serde(default)]
    pub precision: Precision,
}

fn default_model() -> ModelKind {
    ModelKind::Mlp
}
fn default_epochs() -> u32 {
    100
}
fn default_batch() -> usize {
    64
}
fn default_schedule() -> Schedule {
    Schedule::Constant
}
fn default_patience() -> u32 {
    10
}
fn default_validation() -> f64 {
    0.2
}
fn default_categories() -> usize {
    50
}
fn default_seed() -> u64 {
    42
}

impl TrainConfig {
    /// Parses and checks a config (from a job's params or a YAML/JSON file).
    pub fn from_value(v: serde_json::Value) -> Result<TrainConfig> {
        let c: TrainConfig =
            serde_json::from_value(v).map_err(|e| Error::invalid(format!("train config: {e}")))?;
        c.check()?;
        Ok(c)
    }

    /// The checks that need no data.
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Err(Error::invalid(m));
        if self.device == Device::Cuda && !cfg!(feature = "cuda") {
            return bad(
                "device = cuda: this qanat was built without CUDA (cargo build --features cuda); use device: auto or cpu".into(),
            );
        }
        if self.precision != Precision::Fp32 {
            let p = self.precision.as_str();
            if self.device == Device::Cpu {
                return bad(format!(
                    "precision = {p} is mixed precision on a GPU; the CPU trains in fp32: use device: auto or cuda, or precision: fp32"
                ));
            }
            if !cfg!(feature = "cuda") {
                return bad(format!(
                    "precision = {p} is mixed precision on a GPU, and this qanat was built without CUDA (cargo build --features cuda): use precision: fp32"
                ));
            }
        }
        if self.target.trim().is_empty() {
            return bad("target: name the column to predict".into());
        }
        if self.epochs == 0 || self.epochs > 100_000 {
            return bad(format!("epochs = {}: use 1 to 100000", self.epochs));
        }
        if self.batch_size == 0 || self.batch_size > 1 << 20 {
            return bad(format!(
                "batch_size = {}: use 1 to 1048576",
                self.batch_size
            ));
        }
        if let Some(lr) = self.learning_rate {
            if !(lr.is_finite() && lr > 0.0 && lr <= 10.0) {
                return bad(format!(
                    "learning_rate = {lr}: use a number in (0, 10], e.g. 0.001"
                ));
            }
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return bad(format!(
                "weight_decay = {}: use 0 or more",
                self.weight_decay
            ));
        }
        if !(self.validation_fraction > 0.0 && self.validation_fraction < 0.9) {
            return bad(format!(
                "validation_fraction = {}: use a share in (0, 0.9), e.g. 0.2",
                self.validation_fraction
            ));
        }
        if self.max_categories == 0 {
            return bad("max_categories must be at least 1".into());
        }
        if let Some(h) = &self.hidden {
            if self.model != ModelKind::Mlp {
                return bad("hidden: only an mlp has hidden layers (model: mlp)".into());
            }
            if h.len() > 16 || h.iter().any(|w| *w == 0 || *w > 65_536) {
                return bad(format!(
                    "hidden = {h:?}: up to 16 layers of 1 to 65536 units, e.g. [64, 64]"
                ));
            }
        }
        match &self.schedule {
            Schedule::Constant => {}
            Schedule::Cosine { min_factor } => {
                if !(0.0..=1.0).contains(min_factor) {
                    return bad(format!("schedule.min_factor = {min_factor}: use 0 to 1"));
                }
            }
            Schedule::Step { every, gamma } => {
                if *every == 0 || !(*gamma > 0.0 && *gamma <= 1.0) {
                    return bad(format!(
                        "schedule step every {every} gamma {gamma}: every at least 1, gamma in (0, 1]"
                    ));
                }
            }
        }
        match &self.class_weights {
            Some(ClassWeights::Named(n)) if n != "balanced" => {
                return bad(format!(
                    "class_weights = '{n}': use 'balanced' or a map of class to weight"
                ));
            }
            Some(ClassWeights::Given(m)) if m.values().any(|w| !(w.is_finite() && *w > 0.0)) => {
                return bad("class_weights: every weight must be a positive number".into());
            }
            Some(_) if self.task == Some(Task::Regression) => {
                return bad("class_weights are for classification; this task is regression".into());
            }
            _ => {}
        }
        if self.exclude.contains(&self.target)
            || self
                .features
                .as_ref()
                .is_some_and(|f| f.contains(&self.target))
        {
            return bad(format!(
                "'{}' is the target: it cannot also be a feature or excluded",
                self.target
            ));
        }
        if self.features.as_ref().is_some_and(Vec::is_empty) {
            return bad(
                "features is empty: name at least one column, or leave it out to use all".into(),
            );
        }
        Ok(())
    }

    /// The hidden layers: none for a linear model.
    pub fn hidden_layers(&self) -> Vec<usize> {
        match self.model {
            ModelKind::Mlp => self.hidden.clone().unwrap_or_else(|| vec![64, 64]),
            _ => Vec::new(),
        }
    }

    pub fn learning_rate(&self) -> f64 {
        self.learning_rate.unwrap_or(match self.model {
            ModelKind::Mlp => 1e-3,
            _ => 1e-2,
        })
    }

    /// The learning rate of epoch `epoch` (0-based).
    pub fn rate_at(&self, epoch: u32) -> f64 {
        let base = self.learning_rate();
        match &self.schedule {
            Schedule::Constant => base,
            Schedule::Cosine { min_factor } => {
                let t = if self.epochs <= 1 {
                    0.0
                } else {
                    f64::from(epoch) / f64::from(self.epochs - 1)
                };
                let f = min_factor
                    + (1.0 - min_factor) * 0.5 * (1.0 + (std::f64::consts::PI * t).cos());
                base * f
            }
            Schedule::Step { every, gamma } => base * gamma.powi((epoch / every) as i32),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_are_an_mlp_with_adam() {
        let c = TrainConfig::from_value(json!({"target": "y"})).expect("config");
        assert_eq!(c.model, ModelKind::Mlp);
        assert_eq!(c.hidden_layers(), vec![64, 64]);
        assert_eq!(c.learning_rate(), 1e-3);
        assert_eq!(c.rate_at(50), 1e-3);
        let l =
            TrainConfig::from_value(json!({"target": "y", "model": "logistic"})).expect("config");
        assert!(l.hidden_layers().is_empty());
    }

    #[test]
    fn schedules_decay_as_documented() {
        let c = TrainConfig::from_value(json!({"target": "y", "epochs": 11, "learning_rate": 0.1,
            "schedule": {"kind": "cosine", "min_factor": 0.1}}))
        .expect("config");
        assert!((c.rate_at(0) - 0.1).abs() < 1e-12);
        assert!((c.rate_at(10) - 0.01).abs() < 1e-12);
        assert!((c.rate_at(5) - 0.055).abs() < 1e-12);
        let s = TrainConfig::from_value(json!({"target": "y", "learning_rate": 1.0,
            "schedule": {"kind": "step", "every": 10, "gamma": 0.5}}))
        .expect("config");
        assert_eq!(
            (s.rate_at(9), s.rate_at(10), s.rate_at(25)),
            (1.0, 0.5, 0.25)
        );
    }

    #[test]
    fn bad_values_say_what_to_write() {
        for (v, says) in [
            (json!({"target": ""}), "target"),
            (json!({"target": "y", "epochs": 0}), "epochs"),
            (json!({"target": "y", "learning_rate": -1}), "learning_rate"),
            (
                json!({"target": "y", "validation_fraction": 1.5}),
                "validation_fraction",
            ),
            (json!({"target": "y", "hidden": [0]}), "hidden"),
            (
                json!({"target": "y", "model": "linear", "hidden": [8]}),
                "only an mlp",
            ),
            (json!({"target": "y", "class_weights": "heavy"}), "balanced"),
            (json!({"target": "y", "features": ["y"]}), "is the target"),
            (json!({"target": "y", "model": "forest"}), "unknown variant"),
            (json!({"target": "y", "epoch": 3}), "unknown field"),
            (
                json!({"target": "y", "device": "cpu", "precision": "bf16"}),
                "the CPU trains in fp32",
            ),
            (
                json!({"target": "y", "precision": "fp8"}),
                "unknown variant",
            ),
            (
                json!({"target": "y", "schedule": {"kind": "step", "every": 0, "gamma": 0.5}}),
                "every",
            ),
        ] {
            let e = TrainConfig::from_value(v.clone()).expect_err("refused");
            assert!(e.to_string().contains(says), "{v}: {e}");
        }
    }
}
