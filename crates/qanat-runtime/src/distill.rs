//! Distillation: a small native MLP (the student) trained on a teacher's outputs —
//! softened by a temperature for classification — and on the labels, with the
//! teacher's preprocessing; and fidelity, how closely one model follows another.
//!
//! The teacher is any model the runtimes run on a table: a native model, its
//! `model.onnx` on tract or onnxruntime, or an ONNX model made elsewhere
//! ([`crate::imported`]).

use qanat_model::package::Spec;
use qanat_model::prep::{Preprocessing, Target};
use qanat_model::{Table, TrainConfig};
use qanat_train::finetune::Teacher;

use crate::evaluate::table_rows;
use crate::native::NativeMlp;

use crate::package::NativeModel;
use crate::prune::FineTune;
use crate::{Error, Result, Runtime};

/// The default temperature and weight of the teacher.
pub const TEMPERATURE: f64 = 2.0;
pub const ALPHA: f64 = 0.7;

/// Trains a student with `hidden` layers from `teacher` on `train` rows of `table`
/// (`how.epochs`, `how.learning_rate`, `how.seed`), choosing its best epoch on `valid`.
/// `prep` is the preprocessing the student takes (the teacher's own, or one fitted on
/// the training rows for a teacher made elsewhere); the teacher may run on any
/// runtime, and gives its outputs as the trainer defines them (logits, or the
/// standardized target).
#[allow(clippy::too_many_arguments)]
pub fn distill(
    teacher: &dyn Runtime,
    prep: &Preprocessing,
    hidden: &[usize],
    temperature: f64,
    alpha: f64,
    table: &Table,
    train: &[usize],
    valid: &[usize],
    how: FineTune,
) -> Result<NativeModel> {
    if hidden.is_empty() || hidden.iter().any(|w| *w == 0 || *w > 4096) {
        return Err(Error::invalid(format!(
            "hidden = {hidden:?}: give the student's hidden layer widths, each 1 to 4096"
        )));
    }
    if teacher.outputs() != prep.target.outputs() {
        return Err(Error::invalid(format!(
            "the teacher gives {} outputs a row; the signature's target needs {}",
            teacher.outputs(),
            prep.target.outputs()
        )));
    }
    let soft = teacher.predict(&table_rows(table, train))?;
    let config = TrainConfig::from_value(serde_json::json!({
        "target": prep.target_name(),
        "model": "mlp",
        "hidden": hidden,
        "epochs": how.epochs,
        "learning_rate": how.learning_rate,
        "seed": how.seed,
    }))?;
    let fitted = qanat_train::finetune::distill(
        &config,
        prep,
        &prep.encode(table, train, &[])?,
        &prep.encode(table, valid, &[])?,
        &Teacher {
            outputs: &soft,
            temperature,
            alpha,
        },
        |m| {
            println!(
                "distillation epoch {}: val_loss {:.4}",
                m.epoch,
                m.get("val_loss").unwrap_or(f64::NAN)
            )
        },
    )?;
    let mlp = NativeMlp::from_dense(prep.width(), qanat_train::export::dense(&fitted.model)?)?;
    let layers = std::iter::once(mlp.inputs())
        .chain(mlp.layers().iter().map(|l| l.outputs()))
        .collect();
    NativeModel::new(Spec::for_layers(prep, layers), mlp)
}

/// How closely `model` follows `reference` on `rows` of `table`: for classification
/// the share of rows where both predict the same class; for regression R² of
/// `model`'s outputs against `reference`'s (1 is identical).
pub fn fidelity(
    reference: &dyn Runtime,
    model: &dyn Runtime,
    target: &Target,
    table: &Table,
    rows: &[usize],
) -> Result<f64> {
    if reference.outputs() != model.outputs() {
        return Err(Error::invalid(format!(
            "the models give {} and {} outputs a row",
            reference.outputs(),
            model.outputs()
        )));
    }
    let sub = table_rows(table, rows);
    let (a, b) = (reference.predict(&sub)?, model.predict(&sub)?);
    let k = reference.outputs();
    let n = a.len() / k.max(1);
    if n == 0 {
        return Ok(f64::NAN);
    }
    let class = |v: &[f32]| -> usize {
        if k == 1 {
            usize::from(v[0] > 0.0)
        } else {
            crate::evaluate::argmax(v)
        }
    };
    if matches!(target, Target::Classification { .. }) {
        let same = a
            .chunks(k)
            .zip(b.chunks(k))
            .filter(|(x, y)| class(x) == class(y))
            .count();
        return Ok(same as f64 / n as f64);
    }
    let mean = a.iter().map(|v| f64::from(*v)).sum::<f64>() / n as f64;
    let total: f64 = a.iter().map(|v| (f64::from(*v) - mean).powi(2)).sum();
    let resid: f64 = a
        .iter()
        .zip(&b)
        .map(|(x, y)| (f64::from(*x) - f64::from(*y)).powi(2))
        .sum();
    Ok(if total > 0.0 {
        1.0 - resid / total
    } else {
        f64::from(u8::from(resid == 0.0))
    })
}
