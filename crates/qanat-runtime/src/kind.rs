//! `kind: optimize`'s fields: optimization as a job (the kind itself is wired in the
//! binary, `crates/qanat/src/kinds.rs`). The scheduler runs it like any job (queue,
//! resources, retries, logs, the job's token and run); the process is this binary's
//! `optimize-worker`, which fetches the source version's package, applies the method,
//! measures both on the job's input (the holdout), logs the report to the job's run and
//! registers the result when it passes the gate (or when forced).

use qanat_core::{Kind, ObjectRef};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::optimize::{Budget, Method};

/// The variable the worker reads its fields from (JSON).
pub const CONFIG_VAR: &str = "QANAT_OPTIMIZE_CONFIG";

/// The fields of an optimize job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OptimizeParams {
    /// The version to optimize: `fraud@3`, `fraud@champion` or `model:fraud@3`.
    pub model: String,
    /// `int8`: post-training dynamic quantization; `int8-static`: calibrated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantize: Option<String>,
    /// `magnitude` (weights) or `structured` (hidden units), with `sparsity`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prune: Option<String>,
    /// The share pruning removes: of each hidden layer's weights (magnitude) or units
    /// (structured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sparsity: Option<f64>,
    /// Distillation: the student's hidden layer widths, e.g. `[16]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub distill: Option<Vec<usize>>,
    /// Distillation: softens the teacher's and the student's logits (default 2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Distillation: the weight of matching the teacher, the rest going to the labels
    /// (default 0.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alpha: Option<f64>,
    /// Epochs of fine-tuning after pruning (default 5), or of training the student
    /// (default 30).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finetune_epochs: Option<u32>,
    /// Fine-tuning's learning rate (default 0.001; 0.01 for a student).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub learning_rate: Option<f64>,
    /// Seeds the split of the input and the fine-tuning (default 0).
    #[serde(default)]
    pub seed: u64,
    /// Most holdout accuracy points the result may lose (classification; default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_accuracy_drop: Option<f64>,
    /// Most relative growth of the holdout RMSE (regression; default 0.01, i.e. 1%).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_error_increase: Option<f64>,
    /// Register the result even if it exceeds the budget.
    #[serde(default)]
    pub force: bool,
    /// The registered model to add the result to (default: the source's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub register: Option<String>,
    /// Seconds spent timing each model at each batch size (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timing_seconds: Option<f64>,
    /// The runtime both models are measured on, and the result is made for: `native`
    /// (default), `tract` or `onnxruntime` (their `model.onnx`); for an ONNX model
    /// made elsewhere, `tract` (default) or `onnxruntime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<String>,
    /// An ONNX model made elsewhere (no Qanat signature): the holdout's target column.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// An ONNX model made elsewhere: `classification` or `regression` (default: read
    /// from the target column, as the trainer does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<qanat_model::config::Task>,
    /// An ONNX model made elsewhere with one `[N, F]` input: the F columns that fill it,
    /// in order (default: its MLflow signature's, else the holdout's other columns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<Vec<String>>,
}

impl OptimizeParams {
    /// Parses and checks a job's kind-specific fields.
    pub fn from_params(params: &Map<String, Value>) -> Result<Self, String> {
        let p: OptimizeParams =
            serde_json::from_value(Value::Object(params.clone())).map_err(|e| e.to_string())?;
        p.source()?;
        p.method()?;
        p.budget()?;
        p.runtime()?;
        p.fine_tune()?;
        if p.target.as_deref().is_some_and(|t| t.trim().is_empty()) {
            return Err("target = '': name the holdout's target column".into());
        }
        if p.features.as_ref().is_some_and(Vec::is_empty) {
            return Err("features = []: name the columns that fill the model's input".into());
        }
        if let Some(s) = p.timing_seconds {
            if !(s.is_finite() && (0.0..=60.0).contains(&s)) {
                return Err(format!(
                    "timing_seconds = {s}: give a number of seconds from 0 to 60"
                ));
            }
        }
        Ok(p)
    }

    /// The source version's reference.
    pub fn source(&self) -> Result<ObjectRef, String> {
        ObjectRef::parse_of(Kind::Model, &self.model)
            .map_err(|e| format!("model = '{}': {e}", self.model))
    }

    pub fn runtime(&self) -> Result<crate::RuntimeKind, String> {
        self.runtime
            .as_deref()
            .map_or(Ok(crate::RuntimeKind::Native), crate::RuntimeKind::parse)
            .map_err(|e| e.to_string())
    }

    pub fn method(&self) -> Result<Method, String> {
        let chosen = [
            self.quantize.is_some(),
            self.prune.is_some(),
            self.distill.is_some(),
        ];
        match chosen.iter().filter(|c| **c).count() {
            0 => {
                return Err(
                    "say what to do: quantize: int8, prune: magnitude|structured with sparsity, or distill: [hidden widths]"
                        .into(),
                )
            }
            1 => {}
            _ => {
                return Err(
                    "one method a job: quantize, prune or distill (chain jobs to combine them: each result is a version)"
                        .into(),
                )
            }
        }
        if let Some(q) = &self.quantize {
            return Method::parse_quantize(q).map_err(|e| e.to_string());
        }
        if let Some(kind) = &self.prune {
            let share = self.sparsity.ok_or(
                "prune needs sparsity: the share to remove, e.g. sparsity: 0.5".to_string(),
            )?;
            return Method::parse_prune(kind, share).map_err(|e| e.to_string());
        }
        let hidden = self.distill.clone().unwrap_or_default();
        if hidden.is_empty() || hidden.iter().any(|w| *w == 0 || *w > 4096) {
            return Err(format!(
                "distill = {hidden:?}: give the student's hidden layer widths, each 1 to 4096, e.g. distill: [16]"
            ));
        }
        let temperature = self.temperature.unwrap_or(crate::distill::TEMPERATURE);
        if !(temperature.is_finite() && temperature > 0.0 && temperature <= 100.0) {
            return Err(format!(
                "temperature = {temperature}: give a number above 0, at most 100"
            ));
        }
        let alpha = self.alpha.unwrap_or(crate::distill::ALPHA);
        if !(0.0..=1.0).contains(&alpha) {
            return Err(format!("alpha = {alpha}: give a weight from 0 to 1"));
        }
        Ok(Method::Distill {
            hidden,
            temperature,
            alpha,
        })
    }

    /// Fine-tuning for the methods that train.
    pub fn fine_tune(&self) -> Result<crate::prune::FineTune, String> {
        let d = crate::prune::FineTune::default();
        let learning_rate = match self.learning_rate {
            // A student starts from scratch: the trainer's own default rate.
            None if self.distill.is_some() => 0.01,
            None => d.learning_rate,
            Some(r) if r.is_finite() && r > 0.0 && r <= 1.0 => r,
            Some(r) => {
                return Err(format!(
                    "learning_rate = {r}: give a rate above 0, at most 1"
                ))
            }
        };
        let default = if self.distill.is_some() { 30 } else { d.epochs };
        let epochs = self.finetune_epochs.unwrap_or(default);
        if epochs > 1000 {
            return Err(format!("finetune_epochs = {epochs}: give at most 1000"));
        }
        if epochs == 0 && self.distill.is_some() {
            return Err("finetune_epochs = 0: a student needs at least one epoch".into());
        }
        Ok(crate::prune::FineTune {
            epochs,
            learning_rate,
            seed: self.seed,
        })
    }

    pub fn budget(&self) -> Result<Budget, String> {
        let d = Budget::default();
        let check = |name: &str, v: Option<f64>, default: f64| match v {
            None => Ok(default),
            Some(x) if x.is_finite() && x >= 0.0 => Ok(x),
            Some(x) => Err(format!("{name} = {x}: give a number from 0 up")),
        };
        Ok(Budget {
            accuracy_points: check(
                "max_accuracy_drop",
                self.max_accuracy_drop,
                d.accuracy_points,
            )?,
            relative_error: check(
                "max_error_increase",
                self.max_error_increase,
                d.relative_error,
            )?,
        })
    }
}

/// The holdout is an optimize job's one input: refused at submit when missing or when
/// several are given (their files would be read as one table).
pub fn check_holdout(inputs: usize) -> Result<(), String> {
    match inputs {
        1 => Ok(()),
        0 => Err(
            "it needs its holdout as its one input: inputs: [dataset:NAME@VERSION] (qanat optimize --holdout)"
                .into(),
        ),
        n => Err(format!(
            "it takes one holdout dataset version, not {n}: name one in inputs"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn params(v: Value) -> Map<String, Value> {
        v.as_object().cloned().expect("an object")
    }

    #[test]
    fn bad_fields_are_refused_at_submit_with_what_to_fix() {
        let cases = [
            (json!({"quantize": "int8"}), "missing field `model`"),
            (json!({"model": "fraud@3"}), "say what to do"),
            (
                json!({"model": "fraud@3", "quantize": "int8", "prune": "magnitude", "sparsity": 0.5}),
                "one method a job",
            ),
            (
                json!({"model": "fraud@3", "distill": []}),
                "hidden layer widths",
            ),
            (
                json!({"model": "fraud@3", "distill": [16], "finetune_epochs": 0}),
                "finetune_epochs = 0",
            ),
            (
                json!({"model": "fraud@3", "distill": [16], "alpha": 2}),
                "alpha = 2",
            ),
            (
                json!({"model": "fraud@3", "prune": "magnitude"}),
                "prune needs sparsity",
            ),
            (
                json!({"model": "fraud@3", "prune": "magnitude", "sparsity": 1.5}),
                "above 0 and below 1",
            ),
            (
                json!({"model": "fraud@3", "prune": "random", "sparsity": 0.5}),
                "magnitude (weights) or structured",
            ),
            (
                json!({"model": "fraud@3", "prune": "structured", "sparsity": 0.5, "learning_rate": 0}),
                "learning_rate = 0",
            ),
            (json!({"model": "fraud@3", "quantize": "int4"}), "int8"),
            (
                json!({"model": "dataset:tx@3", "quantize": "int8"}),
                "needs a model",
            ),
            (
                json!({"model": "fraud@0", "quantize": "int8"}),
                "not a valid version",
            ),
            (
                json!({"model": "fraud@3", "quantize": "int8", "max_accuracy_drop": -1}),
                "from 0 up",
            ),
            (
                json!({"model": "fraud@3", "quantize": "int8", "student": 0.5}),
                "unknown field `student`",
            ),
            (
                json!({"model": "fraud@3", "quantize": "int8", "runtime": "tvm"}),
                "choose native, tract or onnxruntime",
            ),
        ];
        for (p, want) in cases {
            let err = OptimizeParams::from_params(&params(p.clone())).expect_err(&p.to_string());
            assert!(err.to_string().contains(want), "{p}: {err}");
        }
        let ok = params(json!({"model": "model:fraud@champion", "quantize": "int8"}));
        let err = check_holdout(0).expect_err("no holdout");
        assert!(err.starts_with("it needs its holdout"), "{err}");
        let err = check_holdout(2).expect_err("two holdouts");
        assert!(err.contains("not 2"), "{err}");
        check_holdout(1).expect("one holdout");
        let b = OptimizeParams::from_params(&ok)
            .and_then(|p| p.budget())
            .expect("budget");
        assert_eq!(b, Budget::default());
    }
}
