//! Training from a starting point, on the CPU: fine-tuning given weights (what pruning
//! in qanat-runtime runs after it removes weights or hidden units) and distilling a
//! teacher into a fresh student ([`distill`]).
//!
//! Fine-tuning: the network's shape comes from the weights; a mask per layer (1 keeps
//! a weight, 0 holds it at zero) is applied after every step, so pruned weights stay
//! pruned. The best epoch by validation loss is returned, as
//! [`crate::fit::fit`] does.

use burn::module::{AutodiffModule, Param};
use burn::nn::Linear;
use burn::tensor::{Tensor, TensorData};
use qanat_model::config::{Precision, TrainConfig};
use qanat_model::prep::{Encoded, Preprocessing, Rng};

use crate::adam::Adam;
use crate::fit::{epoch_metrics, epoch_steps, Cpu, CpuTrain, EpochMetrics, Fitted, Mlp};
use crate::mixed::Mixed;
use crate::{Error, Result};

/// The weights to start from: per layer, the `[out, in]` weight and the bias, and
/// optionally a mask of the weight's shape.
#[derive(Debug, Clone, Default)]
pub struct Start {
    pub layers: Vec<(Vec<f32>, Vec<f32>)>,
    pub masks: Option<Vec<Vec<f32>>>,
}

/// The epochs so far and the best by validation loss.
struct Best {
    what: &'static str,
    best: Option<(f64, u32, Mlp<Cpu>)>,
    history: Vec<EpochMetrics>,
}

impl Best {
    fn new(what: &'static str) -> Best {
        Best {
            what,
            best: None,
            history: Vec::new(),
        }
    }

    /// Evaluates the epoch's model, reports it, and keeps it if it is the best.
    #[allow(clippy::too_many_arguments)]
    fn epoch_end(
        &mut self,
        eval: Mlp<Cpu>,
        epoch: u32,
        lr: f64,
        prep: &Preprocessing,
        train: &Encoded,
        valid: &Encoded,
        on_epoch: &mut impl FnMut(&EpochMetrics),
    ) -> Result<()> {
        let what = format!("{} ", self.what);
        let (m, loss) = epoch_metrics(
            &eval,
            prep,
            train,
            valid,
            &Default::default(),
            epoch,
            lr,
            &what,
        )?;
        on_epoch(&m);
        if self.best.as_ref().is_none_or(|(b, _, _)| loss < *b) {
            self.best = Some((loss, epoch, eval));
        }
        self.history.push(m);
        Ok(())
    }

    fn finish(self, config: &TrainConfig) -> Result<Fitted<Cpu>> {
        let (_, best_epoch, model) = self.best.ok_or_else(|| {
            Error::invalid(format!(
                "{} needs at least one epoch: give epochs of 1 or more",
                self.what
            ))
        })?;
        Ok(Fitted {
            model,
            best_epoch,
            epochs_run: config.epochs,
            history: self.history,
            backend: "cpu".to_string(),
            precision: Precision::Fp32,
        })
    }
}

/// `[out, in]` → burn's `[in, out]`.
fn transpose(w: &[f32], out: usize) -> Vec<f32> {
    let inp = w.len() / out.max(1);
    let mut t = vec![0f32; w.len()];
    for o in 0..out {
        for k in 0..inp {
            t[k * out + o] = w[o * inp + k];
        }
    }
    t
}

/// Trains `config.epochs` epochs (learning rate, batch size and seed from `config`;
/// its `hidden` is ignored) from `start` on `train`, validating on `valid`.
pub fn fine_tune(
    config: &TrainConfig,
    prep: &Preprocessing,
    train: &Encoded,
    valid: &Encoded,
    start: &Start,
    mut on_epoch: impl FnMut(&EpochMetrics),
) -> Result<Fitted<Cpu>> {
    let device = Default::default();
    let mut width = prep.width();
    let mut masks: Vec<Option<Tensor<Cpu, 2>>> = Vec::new();
    let mut layers = Vec::new();
    for (i, (w, b)) in start.layers.iter().enumerate() {
        let out = b.len();
        if out == 0 || w.len() != width * out {
            return Err(Error::invalid(format!(
                "layer {i}: a [{out}, {width}] weight needs {} values, not {}",
                width * out,
                w.len()
            )));
        }
        let mask = match start.masks.as_ref().map(|m| m.get(i)) {
            None => None,
            Some(Some(m)) if m.len() == w.len() => Some(Tensor::<Cpu, 2>::from_data(
                TensorData::new(transpose(m, out), [width, out]),
                &device,
            )),
            Some(_) => {
                return Err(Error::invalid(format!(
                    "layer {i}: the mask must have the weight's {} values",
                    w.len()
                )))
            }
        };
        masks.push(mask);
        layers.push(Linear {
            weight: Param::from_tensor(Tensor::from_data(
                TensorData::new(transpose(w, out), [width, out]),
                &device,
            )),
            bias: Some(Param::from_tensor(Tensor::from_data(
                TensorData::new(b.clone(), [out]),
                &device,
            ))),
        });
        width = out;
    }
    if layers.is_empty() || width != prep.target.outputs() {
        return Err(Error::invalid(format!(
            "the layers end with {width} outputs; the target needs {}",
            prep.target.outputs()
        )));
    }
    let mut model: Mlp<CpuTrain> = Mlp { layers };
    let apply = |mut m: Mlp<CpuTrain>| {
        for (layer, mask) in m.layers.iter_mut().zip(&masks) {
            if let Some(mask) = mask {
                let w = std::mem::replace(
                    &mut layer.weight,
                    Param::from_tensor(Tensor::zeros([1, 1], &Default::default())),
                );
                layer.weight =
                    w.map(|t| Tensor::from_inner(t.inner() * mask.clone()).require_grad());
            }
        }
        m
    };
    model = apply(model);
    let mut optim = Adam {
        weight_decay: config.weight_decay as f32,
        ..Adam::default()
    }
    .init::<CpuTrain, Mlp<CpuTrain>>();
    let mut rng = Rng::new(config.seed ^ 0x0f1e_7a9e);
    let mut order: Vec<usize> = (0..train.rows()).collect();
    let mut mixed = Mixed::new(Precision::Fp32);
    let mut best = Best::new("fine-tuning");
    for epoch in 0..config.epochs {
        let lr = config.rate_at(epoch);
        rng.shuffle(&mut order);
        for rows in order.chunks(config.batch_size.max(1)) {
            model = epoch_steps(
                model,
                &mut optim,
                &prep.target,
                train,
                rows,
                rows.len(),
                lr,
                &mut mixed,
                &device,
            );
            model = apply(model);
        }
        best.epoch_end(model.valid(), epoch, lr, prep, train, valid, &mut on_epoch)?;
    }
    best.finish(config)
}

/// What a student learns from besides the labels: the teacher's raw outputs for each
/// training row (`rows × outputs`, as the trainer defines outputs).
#[derive(Debug, Clone, Copy)]
pub struct Teacher<'a> {
    pub outputs: &'a [f32],
    /// Softens both sides' logits (classification); 1 leaves them as they are.
    pub temperature: f64,
    /// The weight of matching the teacher; the rest goes to the labels.
    pub alpha: f64,
}

/// The distillation loss of `out` (the student's outputs for `rows`): the
/// temperature-softened cross-entropy against the teacher's softened outputs, scaled by
/// T² (classification), or the squared distance to the teacher's output (regression).
fn soft_loss(
    target: &qanat_model::prep::Target,
    out: Tensor<CpuTrain, 2>,
    teacher: &Teacher<'_>,
    rows: &[usize],
    device: &<CpuTrain as burn::tensor::backend::Backend>::Device,
) -> Tensor<CpuTrain, 1> {
    use burn::tensor::activation::{log_softmax, sigmoid, softmax};
    let [n, k] = out.dims();
    let t: Vec<f32> = rows
        .iter()
        .flat_map(|r| teacher.outputs[r * k..(r + 1) * k].iter().copied())
        .collect();
    let t = Tensor::<CpuTrain, 2>::from_data(TensorData::new(t, [n, k]), device);
    let temp = teacher.temperature as f32;
    match target {
        qanat_model::prep::Target::Regression { .. } => {
            let d = out - t;
            (d.clone() * d).sum() / n as f32
        }
        qanat_model::prep::Target::Classification { .. } if k == 1 => {
            // Binary: cross-entropy of the softened student logit against the softened
            // teacher probability, stably.
            let p = sigmoid(t / temp);
            let z = out / temp;
            let l = crate::fit::relu(z.clone()) - z.clone() * p + (z.abs().neg().exp() + 1.0).log();
            l.sum() * (temp * temp) / n as f32
        }
        qanat_model::prep::Target::Classification { .. } => {
            let p = softmax(t / temp, 1);
            let logq = log_softmax(out / temp, 1);
            (p * logq).sum().neg() * (temp * temp) / n as f32
        }
    }
}

/// Trains a fresh student (`config.hidden`, seeded by `config.seed`) on `train` from
/// the teacher's outputs for the same rows and the labels, choosing the best epoch by
/// validation loss on `valid`.
pub fn distill(
    config: &TrainConfig,
    prep: &Preprocessing,
    train: &Encoded,
    valid: &Encoded,
    teacher: &Teacher<'_>,
    mut on_epoch: impl FnMut(&EpochMetrics),
) -> Result<Fitted<Cpu>> {
    use burn::optim::{GradientsParams, Optimizer};
    let k = prep.target.outputs();
    if teacher.outputs.len() != train.rows() * k {
        return Err(Error::invalid(format!(
            "the teacher gave {} outputs for {} rows of {k}",
            teacher.outputs.len(),
            train.rows()
        )));
    }
    let usable = teacher.temperature.is_finite()
        && teacher.temperature > 0.0
        && (0.0..=1.0).contains(&teacher.alpha);
    if !usable {
        return Err(Error::invalid(format!(
            "temperature {} and alpha {}: give a temperature above 0 and alpha from 0 to 1",
            teacher.temperature, teacher.alpha
        )));
    }
    let device = Default::default();
    let mut model: Mlp<CpuTrain> = Mlp::seeded(
        config.seed,
        prep.width(),
        &config.hidden_layers(),
        k,
        &device,
    );
    let mut optim = Adam {
        weight_decay: config.weight_decay as f32,
        ..Adam::default()
    }
    .init::<CpuTrain, Mlp<CpuTrain>>();
    let mut rng = Rng::new(config.seed ^ 0x0d15_7111);
    let mut order: Vec<usize> = (0..train.rows()).collect();
    let mut best = Best::new("distillation");
    let alpha = teacher.alpha as f32;
    for epoch in 0..config.epochs {
        let lr = config.rate_at(epoch);
        rng.shuffle(&mut order);
        for rows in order.chunks(config.batch_size.max(1)) {
            let (x, y, w) = crate::fit::batch::<CpuTrain>(train, rows, &device);
            let out = model.forward(x);
            let hard = crate::fit::loss(&prep.target, out.clone(), &y, &w, &device);
            let soft = soft_loss(&prep.target, out, teacher, rows, &device);
            let l = soft * alpha + hard * (1.0 - alpha);
            let grads = GradientsParams::from_grads(l.backward(), &model);
            model = optim.step(lr, model, grads);
        }
        best.epoch_end(model.valid(), epoch, lr, prep, train, valid, &mut on_epoch)?;
    }
    best.finish(config)
}
