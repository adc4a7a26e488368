//! ONNX models made elsewhere — exported from PyTorch or scikit-learn and logged with
//! `mlflow.onnx.log_model` — measured, quantized and used as distillation teachers like
//! Qanat's own.
//!
//! Such a model has no `spec.json`: what it is fed and what its outputs mean come from
//! the graph and the job.
//! - **Inputs**: one per column, named as the columns; or one `[N, F]` float matrix
//!   filled with F numeric columns — those the job names, else the model's MLflow
//!   signature's, else the table's columns other than the target, in the table's order
//!   (how MLflow's pyfunc feeds a DataFrame to a model with one input).
//! - **Output**: `output`, else the first float output (see [`crate::onnx`]).
//! - **Meaning**: the job names the target column; the task is read from it as the
//!   trainer reads it (or given). A classifier gives one score per class, classes in
//!   sorted label order (numbers in numeric order), as scikit-learn and PyTorch models
//!   with class-index labels do; a binary one may give a single score for the second
//!   class. Scores are logits, or probabilities — told apart on the job's rows (every
//!   value in [0, 1], and a row's scores summing to 1 when there are several). A
//!   regressor gives the target in its own units.
//!
//! [`Imported::on`] runs the model on tract or onnxruntime and gives its outputs as the
//! trainer defines them (logits; the standardized target), so the gate, fidelity and
//! distillation treat it as any other model.

use qanat_model::config::Task;
use qanat_model::prep::{Preprocessing, Target};
use qanat_model::{Table, TrainConfig};

use crate::onnx::onnxruntime::OrtModel;
use crate::onnx::tract::TractModel;
use crate::onnx::{Feed, OnnxGraph};
use crate::{Error, Result, Runtime, RuntimeKind};

/// What the job says about a model made elsewhere.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Described {
    /// The target column (required).
    pub target: String,
    /// Classification or regression; read from the target when absent.
    pub task: Option<Task>,
    /// The columns that fill a matrix input, in order.
    pub features: Option<Vec<String>>,
}

/// What a model's scores are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Scores {
    Logits,
    Probabilities,
    /// A regressor's prediction.
    Values,
}

/// An ONNX model made elsewhere, with what it is fed and what its outputs mean.
#[derive(Debug, Clone)]
pub struct Imported {
    bytes: Vec<u8>,
    graph: OnnxGraph,
    feed: Feed,
    prep: Preprocessing,
    scores: Scores,
}

impl Imported {
    /// Reads the model in `bytes` as `described`, with `signature` (the column names of
    /// its MLflow signature, when it has one), fitting the target's encoding (and,
    /// for a student, the features') on `rows` of `table`, and telling its scores
    /// apart by running it on `kind`.
    pub fn new(
        bytes: Vec<u8>,
        described: &Described,
        signature: Option<&[String]>,
        table: &Table,
        rows: &[usize],
        kind: RuntimeKind,
    ) -> Result<Imported> {
        let graph = OnnxGraph::read(&bytes)?;
        if described.target.is_empty() {
            return Err(Error::invalid(
                "the model has no Qanat signature: name its target column (--target)",
            ));
        }
        let matrix = matches!(&graph.inputs[..], [p] if p.dims.len() == 2 && p.width() != Some(1));
        let features: Option<Vec<String>> = if matrix {
            Some(match described.features.clone() {
                Some(f) => f,
                None => match signature {
                    Some(s) if !s.is_empty() => s.to_vec(),
                    _ => table
                        .names()
                        .into_iter()
                        .filter(|n| *n != described.target)
                        .map(str::to_string)
                        .collect(),
                },
            })
        } else {
            None
        };
        let feed = graph.feed(features.as_deref())?;
        let columns: Vec<String> = feed.columns(&graph).iter().map(|s| s.to_string()).collect();
        if columns.contains(&described.target) {
            return Err(Error::invalid(format!(
                "the target '{}' is also one of the model's inputs",
                described.target
            )));
        }
        let config = TrainConfig::from_value(serde_json::json!({
            "target": described.target,
            "task": described.task.map(|t| match t {
                Task::Classification => "classification",
                Task::Regression => "regression",
            }),
            "features": columns,
        }))?;
        let (usable, task) = qanat_model::prep::usable_rows(table, &config)?;
        let fit: Vec<usize> = rows
            .iter()
            .copied()
            .filter(|r| usable.binary_search(r).is_ok())
            .collect();
        if fit.is_empty() {
            return Err(Error::invalid(format!(
                "no rows with the target '{}' to fit on",
                described.target
            )));
        }
        let prep = Preprocessing::fit(table, &config, task, &fit)?;
        let width = graph.result().width().unwrap_or(1);
        check_width(&prep.target, width)?;
        let mut imported = Imported {
            bytes,
            graph,
            feed,
            prep,
            scores: Scores::Values,
        };
        if matches!(imported.prep.target, Target::Classification { .. }) {
            let sample: Vec<usize> = fit.iter().copied().take(512).collect();
            let raw = imported
                .load(kind)?
                .predict(&crate::evaluate::table_rows(table, &sample))?;
            imported.scores = scores_of(&raw, width);
        }
        Ok(imported)
    }

    /// The model's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub fn graph(&self) -> &OnnxGraph {
        &self.graph
    }

    /// The columns the model reads, in order.
    pub fn features(&self) -> Vec<String> {
        self.feed
            .columns(&self.graph)
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    /// The target's encoding, and the features' as fitted for a student.
    pub fn preprocessing(&self) -> &Preprocessing {
        &self.prep
    }

    pub fn scores(&self) -> Scores {
        self.scores
    }

    /// The same model with its bytes replaced (a rewrite of this graph with the same
    /// inputs and outputs).
    pub fn with_bytes(&self, bytes: Vec<u8>) -> Result<Imported> {
        let graph = OnnxGraph::read(&bytes)?;
        let features = match &self.feed {
            Feed::Matrix { features } => Some(features.as_slice()),
            Feed::Columns => None,
        };
        let feed = graph.feed(features)?;
        Ok(Imported {
            bytes,
            graph,
            feed,
            ..self.clone()
        })
    }

    /// The largest absolute value of each product's input over `rows` of `table`:
    /// static quantization's calibration ([`crate::onnx::quantize::product_inputs`]).
    pub fn calibrate(
        &self,
        table: &Table,
        rows: &[usize],
    ) -> Result<std::collections::HashMap<String, f32>> {
        let names = crate::onnx::quantize::product_inputs(&self.graph)?;
        let features = match &self.feed {
            Feed::Matrix { features } => Some(features.as_slice()),
            Feed::Columns => None,
        };
        crate::onnx::tract::largest_values(
            &self.bytes,
            features,
            &crate::evaluate::table_rows(table, rows),
            &names,
        )
    }

    fn load(&self, kind: RuntimeKind) -> Result<Box<dyn Runtime>> {
        let features = match &self.feed {
            Feed::Matrix { features } => Some(features.as_slice()),
            Feed::Columns => None,
        };
        Ok(match kind {
            RuntimeKind::Tract => Box::new(TractModel::load_fed(&self.bytes, features)?),
            RuntimeKind::Onnxruntime => Box::new(OrtModel::load_fed(&self.bytes, features, 1)?),
            RuntimeKind::Native => {
                return Err(Error::invalid(
                    "an ONNX model made elsewhere runs on tract or onnxruntime; the native \
                     runtime runs models trained by qanat train",
                ))
            }
        })
    }

    /// The model on `kind`, its outputs as the trainer defines them.
    pub fn on(&self, kind: RuntimeKind) -> Result<Adapted> {
        Ok(Adapted {
            inner: self.load(kind)?,
            target: self.prep.target.clone(),
            scores: self.scores,
        })
    }
}

/// The output widths a target allows.
fn check_width(target: &Target, width: usize) -> Result<()> {
    let ok = match target {
        Target::Classification { classes, .. } => {
            width == classes.len() || (classes.len() == 2 && width == 1)
        }
        Target::Regression { .. } => width == 1,
    };
    if ok {
        return Ok(());
    }
    Err(Error::invalid(match target {
        Target::Classification { name, classes } => format!(
            "the model gives {width} scores a row but target '{name}' has {} classes ({}): a \
             classifier gives one score per class, in sorted label order (or one for a binary \
             target)",
            classes.len(),
            classes.join(", ")
        ),
        Target::Regression { name, .. } => {
            format!("the model gives {width} values a row; a regressor of '{name}' gives one")
        }
    }))
}

/// Probabilities when every value is in [0, 1] and, with several scores, each row sums
/// to 1; logits otherwise.
fn scores_of(raw: &[f32], width: usize) -> Scores {
    let bounded = raw.iter().all(|v| (0.0..=1.0).contains(v));
    let sums = width == 1
        || raw
            .chunks(width.max(1))
            .all(|r| (r.iter().sum::<f32>() - 1.0).abs() < 1e-3);
    if bounded && sums {
        Scores::Probabilities
    } else {
        Scores::Logits
    }
}

/// An imported model on a runtime, its outputs as the trainer's: logits (binary: one,
/// the second class's log-odds) or the standardized target.
pub struct Adapted {
    inner: Box<dyn Runtime>,
    target: Target,
    scores: Scores,
}

impl Runtime for Adapted {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn outputs(&self) -> usize {
        self.target.outputs()
    }

    fn predict(&self, table: &Table) -> Result<Vec<f32>> {
        let raw = self.inner.predict(table)?;
        let width = self.inner.outputs().max(1);
        let ln = |p: f32| p.clamp(1e-7, 1.0).ln();
        let probs = self.scores == Scores::Probabilities;
        Ok(match &self.target {
            Target::Regression { mean, std, .. } => raw
                .iter()
                .map(|v| ((f64::from(*v) - mean) / std) as f32)
                .collect(),
            Target::Classification { classes, .. } if classes.len() == 2 => raw
                .chunks(width)
                .map(|r| match (r, probs) {
                    ([p], true) => ln(*p) - ln(1.0 - p),
                    ([z], false) => *z,
                    ([p0, p1], true) => ln(*p1) - ln(*p0),
                    ([z0, z1], false) => z1 - z0,
                    _ => f32::NAN,
                })
                .collect(),
            Target::Classification { .. } if probs => raw.iter().map(|p| ln(*p)).collect(),
            Target::Classification { .. } => raw,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probabilities_and_logits_are_told_apart() {
        assert_eq!(scores_of(&[0.2, 0.8, 1.0, 0.0], 2), Scores::Probabilities);
        assert_eq!(scores_of(&[0.2, 0.7], 2), Scores::Logits);
        assert_eq!(scores_of(&[0.2, 0.9], 1), Scores::Probabilities);
        assert_eq!(scores_of(&[-0.2, 3.0], 1), Scores::Logits);
    }

    #[test]
    fn widths_must_fit_the_target() {
        let t = Target::Classification {
            name: "y".into(),
            classes: vec!["a".into(), "b".into(), "c".into()],
        };
        assert!(check_width(&t, 3).is_ok());
        let e = check_width(&t, 2).expect_err("2 of 3");
        assert!(e.to_string().contains("sorted label order"), "{e}");
    }
}
