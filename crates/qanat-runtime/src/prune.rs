//! Pruning, then fine-tuning with the native trainer:
//!
//! - **magnitude**: in every layer but the output layer, the smallest weights by
//!   absolute value are set to zero until the layer reaches the target sparsity; a mask
//!   holds them at zero while fine-tuning.
//! - **structured**: in every hidden layer, the units with the least weight in and out
//!   (`‖W_i[u, :]‖ · ‖W_{i+1}[:, u]‖`) are removed with their rows and columns, so the
//!   matmuls themselves shrink; fine-tuning then trains the smaller network.
//!
//! The output layer is never pruned: it is small and carries the decision.

use qanat_model::{Table, TrainConfig};
use qanat_train::finetune::{fine_tune, Start};

use qanat_model::package::Precision;

use crate::native::{Layer, NativeMlp};
use crate::package::NativeModel;
use crate::{Error, Result};

/// The layers as f32 `[out, in]` weights and biases; int8 models are refused.
fn f32_layers(mlp: &NativeMlp) -> Result<Vec<(Vec<f32>, Vec<f32>)>> {
    if mlp.precision() != Precision::F32 {
        return Err(Error::invalid(
            "pruning takes an f32 model: prune the original, then quantize the result",
        ));
    }
    if mlp.layers().len() < 2 {
        return Err(Error::invalid(
            "the model has no hidden layer to prune: its one (output) layer is never pruned",
        ));
    }
    Ok(mlp
        .layers()
        .iter()
        .map(|l| (l.weight_f32(), l.bias().to_vec()))
        .collect())
}

fn check_share(name: &str, v: f64) -> Result<()> {
    if v.is_finite() && v > 0.0 && v < 1.0 {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{name} = {v}: give a share above 0 and below 1 (0.5 removes half)"
        )))
    }
}

/// Magnitude pruning to `sparsity` in each layer but the output layer: the pruned
/// network and the masks (1 keeps a weight) for fine-tuning.
pub fn magnitude(mlp: &NativeMlp, sparsity: f64) -> Result<(NativeMlp, Vec<Vec<f32>>)> {
    check_share("sparsity", sparsity)?;
    let layers = f32_layers(mlp)?;
    let last = layers.len() - 1;
    let mut out = Vec::with_capacity(layers.len());
    let mut masks = Vec::with_capacity(layers.len());
    for (i, (mut w, b)) in layers.into_iter().enumerate() {
        let mut mask = vec![1f32; w.len()];
        if i < last {
            let k = (sparsity * w.len() as f64).round() as usize;
            let mut order: Vec<usize> = (0..w.len()).collect();
            // Smallest first; ties in index order, so the result is deterministic.
            order.sort_by(|&a, &b| w[a].abs().total_cmp(&w[b].abs()).then(a.cmp(&b)));
            for &j in &order[..k] {
                w[j] = 0.0;
                mask[j] = 0.0;
            }
        }
        let d_in = w.len() / b.len();
        out.push(Layer::f32(d_in, w, b)?);
        masks.push(mask);
    }
    Ok((NativeMlp::new(out)?, masks))
}

/// The share of zero weights in the layers pruning touches (all but the output layer).
pub fn sparsity(mlp: &NativeMlp) -> f64 {
    let layers = mlp.layers();
    let hidden = &layers[..layers.len().saturating_sub(1)];
    let (zeros, total) = hidden.iter().fold((0usize, 0usize), |(z, t), l| {
        let w = l.weight_f32();
        (z + w.iter().filter(|v| **v == 0.0).count(), t + w.len())
    });
    zeros as f64 / total.max(1) as f64
}

/// Structured pruning: removes `fraction` of the units of every hidden layer (at least
/// one stays), with their incoming rows, biases and outgoing columns.
pub fn structured(mlp: &NativeMlp, fraction: f64) -> Result<NativeMlp> {
    check_share("fraction", fraction)?;
    let mut layers = f32_layers(mlp)?;
    for i in 0..layers.len() - 1 {
        let units = layers[i].1.len();
        let d_in = layers[i].0.len() / units;
        let next_out = layers[i + 1].1.len();
        let norm = |v: &mut dyn Iterator<Item = f32>| v.map(|x| x * x).sum::<f32>().sqrt();
        let score: Vec<f32> = (0..units)
            .map(|u| {
                let w_in = norm(&mut layers[i].0[u * d_in..(u + 1) * d_in].iter().copied());
                let w_out = norm(&mut (0..next_out).map(|o| layers[i + 1].0[o * units + u]));
                w_in * w_out
            })
            .collect();
        let keep_n = (((1.0 - fraction) * units as f64).round() as usize).clamp(1, units);
        let mut order: Vec<usize> = (0..units).collect();
        order.sort_by(|&a, &b| score[b].total_cmp(&score[a]).then(a.cmp(&b)));
        let mut keep = order[..keep_n].to_vec();
        keep.sort_unstable();
        let (w, b) = &layers[i];
        let w2: Vec<f32> = keep
            .iter()
            .flat_map(|&u| w[u * d_in..(u + 1) * d_in].iter().copied())
            .collect();
        let b2: Vec<f32> = keep.iter().map(|&u| b[u]).collect();
        let nw: Vec<f32> = (0..next_out)
            .flat_map(|o| keep.iter().map(move |&u| (o, u)))
            .map(|(o, u)| layers[i + 1].0[o * units + u])
            .collect();
        layers[i] = (w2, b2);
        layers[i + 1].0 = nw;
    }
    NativeMlp::from_dense(mlp.inputs(), layers)
}

/// How fine-tuning runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FineTune {
    pub epochs: u32,
    pub learning_rate: f64,
    pub seed: u64,
}

impl Default for FineTune {
    fn default() -> Self {
        FineTune {
            epochs: 5,
            learning_rate: 1e-3,
            seed: 0,
        }
    }
}

/// Fine-tunes `mlp` (a pruned form of `model`'s network, `masks` holding pruned weights
/// at zero) with the native trainer on `train` rows, choosing the best epoch on `valid`
/// rows, and pairs the result with `model`'s preprocessing.
pub fn fine_tuned(
    model: &NativeModel,
    mlp: &NativeMlp,
    masks: Option<Vec<Vec<f32>>>,
    table: &Table,
    train: &[usize],
    valid: &[usize],
    how: FineTune,
) -> Result<NativeModel> {
    if how.epochs == 0 {
        return model.with_mlp(mlp.clone());
    }
    let prep = &model.spec().preprocessing;
    let config = TrainConfig::from_value(serde_json::json!({
        "target": prep.target_name(),
        "model": "mlp",
        "hidden": mlp.layers()[..mlp.layers().len() - 1].iter().map(|l| l.outputs()).collect::<Vec<_>>(),
        "epochs": how.epochs,
        "learning_rate": how.learning_rate,
        "seed": how.seed,
    }))?;
    let start = Start {
        layers: f32_layers(mlp)?,
        masks,
    };
    let fitted = fine_tune(
        &config,
        prep,
        &prep.encode(table, train, &[])?,
        &prep.encode(table, valid, &[])?,
        &start,
        |m| {
            println!(
                "fine-tuning epoch {}: val_loss {:.4}",
                m.epoch,
                m.get("val_loss").unwrap_or(f64::NAN)
            )
        },
    )?;
    model.with_mlp(NativeMlp::from_dense(
        mlp.inputs(),
        qanat_train::export::dense(&fitted.model)?,
    )?)
}
