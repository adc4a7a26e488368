//! The training loop: an MLP (no hidden layer: a linear or logistic model) fitted with
//! Adam on minibatches in a seeded order, metrics on the training and validation rows
//! after every epoch, the learning rate from the schedule, early stopping on the
//! validation loss keeping the best epoch's weights.
//!
//! The backend is burn's `ndarray` CPU backend under `autodiff` — or CUDA in a build
//! with the `cuda` feature when a GPU answers. On the CPU a seed fixes the initial
//! weights, the split and the batch order, so two runs with one seed give the same
//! bits (on a GPU, kernels may sum in another order: close, not bit-identical).

use burn::backend::{Autodiff, NdArray};
use burn::module::{AutodiffModule, Module};
use burn::nn::{Linear, LinearConfig};
use burn::optim::{GradientsParams, Optimizer};
use burn::tensor::activation::log_softmax;
use burn::tensor::backend::{AutodiffBackend, Backend};
use burn::tensor::{FloatDType, Int, Tensor, TensorData};
use qanat_model::config::{Precision, TrainConfig};
use qanat_model::prep::{Encoded, Preprocessing, Rng, Target};

use crate::adam::Adam;
use crate::checkpoint;
use crate::metrics;
use crate::mixed::{self, Mixed};
use crate::{Error, Result};

/// The CPU backend.
pub type Cpu = NdArray<f32>;
/// The CPU backend with gradients.
pub type CpuTrain = Autodiff<Cpu>;

/// A stack of dense layers with ReLU between them.
#[derive(Module, Debug)]
pub struct Mlp<B: Backend> {
    pub layers: Vec<Linear<B>>,
}

/// Held around every draw from burn's process-wide random generator (initial weights),
/// and around seeding it together with the draws that follow: fits side by side in a
/// process (tests, a sweep's trials, a resumed fit rebuilding its best model) then
/// cannot take each other's draws and break a seed's promise.
static INIT_DRAWS: std::sync::Mutex<()> = std::sync::Mutex::new(());

impl<B: Backend> Mlp<B> {
    /// A network with freshly drawn initial weights.
    pub fn new(inputs: usize, hidden: &[usize], outputs: usize, device: &B::Device) -> Self {
        let _draws = INIT_DRAWS.lock().unwrap_or_else(|p| p.into_inner());
        Self::draw(inputs, hidden, outputs, device)
    }

    /// A network whose initial weights are fixed by `seed`: burn's generator is seeded
    /// and the weights drawn as one step no other draw in the process comes between.
    pub fn seeded(
        seed: u64,
        inputs: usize,
        hidden: &[usize],
        outputs: usize,
        device: &B::Device,
    ) -> Self {
        let _draws = INIT_DRAWS.lock().unwrap_or_else(|p| p.into_inner());
        B::seed(device, seed);
        Self::draw(inputs, hidden, outputs, device)
    }

    fn draw(inputs: usize, hidden: &[usize], outputs: usize, device: &B::Device) -> Self {
        let mut widths = vec![inputs];
        widths.extend_from_slice(hidden);
        widths.push(outputs);
        let layers: Vec<Linear<B>> = widths
            .windows(2)
            .map(|w| LinearConfig::new(w[0], w[1]).init(device))
            .collect();
        // burn draws a parameter's initial values lazily, on its first use: drawn here,
        // inside the caller's lock, not during the first step, when another fit in the
        // process may be drawing from the same generator.
        for layer in &layers {
            let _ = layer.weight.val();
            if let Some(b) = &layer.bias {
                let _ = b.val();
            }
        }
        Mlp { layers }
    }

    /// The forward pass with the layers computed in `half` (mixed precision, see
    /// [`crate::mixed`]), or in the input's type when `None`. The output is in the
    /// input's type.
    pub fn forward_as(&self, x: Tensor<B, 2>, half: Option<FloatDType>) -> Tensor<B, 2> {
        let full = FloatDType::from(x.dtype());
        let mut x = match half {
            Some(h) => x.cast(h),
            None => x,
        };
        let last = self.layers.len().saturating_sub(1);
        for (i, layer) in self.layers.iter().enumerate() {
            x = match half {
                None => layer.forward(x),
                Some(h) => {
                    let y = x.matmul(layer.weight.val().cast(h));
                    match &layer.bias {
                        Some(b) => y + b.val().cast(h).unsqueeze(),
                        None => y,
                    }
                }
            };
            if i < last {
                x = relu(x);
            }
        }
        if half.is_some() {
            x.cast(full)
        } else {
            x
        }
    }

    pub fn forward(&self, x: Tensor<B, 2>) -> Tensor<B, 2> {
        self.forward_as(x, None)
    }
}

/// max(x, 0), computed as x · [x > 0]: the values of burn's `relu` (but -0 for a
/// negative x, which no sum tells from 0), with a backward pass that is one product.
/// burn-ndarray's `relu` backward is a masked fill over dynamic-rank arrays, which took
/// 14% of a CPU training step of the benchmark's MLP (perf, 2026-11).
pub fn relu<B: Backend, const D: usize>(x: Tensor<B, D>) -> Tensor<B, D> {
    let on = x
        .clone()
        .greater_elem(0.0)
        .float()
        .cast(FloatDType::from(x.dtype()));
    x * on
}

/// The metrics of one epoch (names as logged: `train_loss`, `val_accuracy`, …).
#[derive(Debug, Clone, PartialEq)]
pub struct EpochMetrics {
    pub epoch: u32,
    pub learning_rate: f64,
    pub values: Vec<(String, f64)>,
}

impl EpochMetrics {
    pub fn get(&self, name: &str) -> Option<f64> {
        self.values.iter().find(|(n, _)| n == name).map(|(_, v)| *v)
    }
}

/// What a finished fit returns.
#[derive(Debug)]
pub struct Fitted<B: Backend> {
    pub model: Mlp<B>,
    /// The epoch whose weights the model has (the best validation loss).
    pub best_epoch: u32,
    /// Epochs run (fewer than asked when stopped early).
    pub epochs_run: u32,
    pub history: Vec<EpochMetrics>,
    /// The backend it was trained on, e.g. `autodiff<ndarray>`.
    pub backend: String,
    /// The arithmetic of its training steps (fp32 on the CPU).
    pub precision: Precision,
}

/// The loss of `out` against `y` with row weights `w`, on any backend.
pub(crate) fn loss<B: Backend>(
    target: &Target,
    out: Tensor<B, 2>,
    y: &[f32],
    w: &[f32],
    device: &B::Device,
) -> Tensor<B, 1> {
    let n = y.len();
    let wt = Tensor::<B, 1>::from_data(TensorData::new(w.to_vec(), [n]), device);
    let wsum = w.iter().map(|x| f64::from(*x)).sum::<f64>().max(1e-12);
    match target {
        Target::Classification { classes, .. } if classes.len() == 2 => {
            // Binary cross-entropy on the logit z, stably: max(z,0) - z·y + log(1 + e^-|z|).
            let z = out.reshape([n]);
            let yt = Tensor::<B, 1>::from_data(
                TensorData::new(y.iter().map(|v| v.max(0.0)).collect::<Vec<f32>>(), [n]),
                device,
            );
            let l = relu(z.clone()) - z.clone() * yt + (z.abs().neg().exp() + 1.0).log();
            (l * wt).sum() / wsum
        }
        Target::Classification { .. } => {
            let logp = log_softmax(out, 1);
            let idx: Vec<i64> = y.iter().map(|v| (*v).max(0.0) as i64).collect();
            let it = Tensor::<B, 2, Int>::from_data(TensorData::new(idx, [n, 1]), device);
            let picked = logp.gather(1, it).reshape([n]);
            (picked * wt).sum().neg() / wsum
        }
        Target::Regression { .. } => {
            let p = out.reshape([n]);
            let yt = Tensor::<B, 1>::from_data(TensorData::new(y.to_vec(), [n]), device);
            let d = p - yt;
            (d.clone() * d * wt).sum() / wsum
        }
    }
}

pub(crate) fn batch<B: Backend>(
    data: &Encoded,
    rows: &[usize],
    device: &B::Device,
) -> (Tensor<B, 2>, Vec<f32>, Vec<f32>) {
    let w = data.width;
    let mut x = Vec::with_capacity(rows.len() * w);
    let mut y = Vec::with_capacity(rows.len());
    let mut wt = Vec::with_capacity(rows.len());
    for r in rows {
        x.extend_from_slice(&data.x[r * w..(r + 1) * w]);
        y.push(data.y[*r]);
        wt.push(data.weight[*r]);
    }
    (
        Tensor::from_data(TensorData::new(x, [rows.len(), w]), device),
        y,
        wt,
    )
}

/// Raw model outputs for every row of `data` (row-major, `rows × outputs`).
pub fn outputs<B: Backend>(model: &Mlp<B>, data: &Encoded, device: &B::Device) -> Result<Vec<f32>> {
    let mut out = Vec::new();
    let rows: Vec<usize> = (0..data.rows()).collect();
    for chunk in rows.chunks(4096) {
        let (x, _, _) = batch::<B>(data, chunk, device);
        let o = model.forward(x).into_data();
        out.extend(
            o.to_vec::<f32>()
                .map_err(|e| Error::internal(format!("reading the model's outputs: {e:?}")))?,
        );
    }
    Ok(out)
}

/// The metrics of epoch `epoch` (trained at rate `lr`) on the training and validation
/// rows, with the validation loss; refused when that loss is not finite (`what` names
/// the training in the message, e.g. "fine-tuning").
#[allow(clippy::too_many_arguments)]
pub(crate) fn epoch_metrics<B: Backend>(
    model: &Mlp<B>,
    prep: &Preprocessing,
    train: &Encoded,
    valid: &Encoded,
    device: &B::Device,
    epoch: u32,
    lr: f64,
    what: &str,
) -> Result<(EpochMetrics, f64)> {
    let mut values = evaluate(model, prep, train, "train_", device)?;
    values.extend(evaluate(model, prep, valid, "val_", device)?);
    let m = EpochMetrics {
        epoch,
        learning_rate: lr,
        values,
    };
    let loss = m.get("val_loss").unwrap_or(f64::INFINITY);
    if !loss.is_finite() {
        return Err(Error::invalid(format!(
            "the validation loss is {loss} at {what}epoch {epoch}: lower the learning_rate (now {lr})"
        )));
    }
    Ok((m, loss))
}

/// Loss and task metrics of `model` on `data`, names prefixed with `prefix`.
pub fn evaluate<B: Backend>(
    model: &Mlp<B>,
    prep: &Preprocessing,
    data: &Encoded,
    prefix: &str,
    device: &B::Device,
) -> Result<Vec<(String, f64)>> {
    let out = outputs(model, data, device)?;
    let n = data.rows();
    let k = prep.target.outputs();
    let t = Tensor::<B, 2>::from_data(TensorData::new(out.clone(), [n, k]), device);
    let l = loss(&prep.target, t, &data.y, &data.weight, device)
        .into_data()
        .to_vec::<f32>()
        .map_err(|e| Error::internal(format!("reading the loss: {e:?}")))?;
    let mut m = vec![(
        format!("{prefix}loss"),
        f64::from(l.first().copied().unwrap_or(f32::NAN)),
    )];
    m.extend(metrics::of_outputs(&prep.target, &out, &data.y, prefix));
    Ok(m)
}

/// One epoch of minibatch steps over `train` in `order` (what the benchmark times),
/// computed as `mixed` says (its loss scale carries over between epochs).
#[allow(clippy::too_many_arguments)]
pub fn epoch_steps<B: AutodiffBackend, O: Optimizer<Mlp<B>, B>>(
    mut model: Mlp<B>,
    optim: &mut O,
    target: &Target,
    train: &Encoded,
    order: &[usize],
    batch_size: usize,
    lr: f64,
    mixed: &mut Mixed,
    device: &B::Device,
) -> Mlp<B> {
    for rows in order.chunks(batch_size) {
        let (x, y, w) = batch::<B>(train, rows, device);
        let mut l = loss(target, model.forward_as(x, mixed.half), &y, &w, device);
        if let Some(s) = &mixed.scale {
            l = l.mul_scalar(s.scale);
        }
        let mut grads = GradientsParams::from_grads(l.backward(), &model);
        if let Some(s) = &mut mixed.scale {
            let finite = mixed::unscale(&model, &mut grads, 1.0 / s.scale);
            if !s.update(finite) {
                continue;
            }
        }
        model = optim.step(lr, model, grads);
    }
    model
}

/// What `fit` hands its caller after every epoch: the epoch's metrics, and the
/// training state as a checkpoint (encoded only when asked for).
pub struct EpochEnd<'a> {
    pub metrics: &'a EpochMetrics,
    checkpoint: &'a dyn Fn() -> Result<Vec<u8>>,
}

impl EpochEnd<'_> {
    /// The state after this epoch, as bytes `fit` resumes from ([`crate::checkpoint`]).
    pub fn checkpoint(&self) -> Result<Vec<u8>> {
        (self.checkpoint)()
    }
}

/// Fits a model on `train`, validating on `valid` after every epoch; `on_epoch` sees
/// each epoch's metrics as they come (to log them) and may take a checkpoint. With
/// `resume` (a checkpoint of the same config and data) the fit goes on from the epoch
/// after it and ends with the bits an uninterrupted fit ends with (on the CPU).
///
/// The backend: CUDA when this build has the `cuda` feature, the config allows it
/// (`device: auto` or `cuda`) and a GPU answers ([`crate::gpu`]); the CPU otherwise.
/// The model comes back on the CPU either way.
pub fn fit(
    config: &TrainConfig,
    prep: &Preprocessing,
    train: &Encoded,
    valid: &Encoded,
    resume: Option<&[u8]>,
    mut on_epoch: impl FnMut(EpochEnd<'_>) -> Result<()>,
) -> Result<Fitted<Cpu>> {
    #[cfg(feature = "cuda")]
    if let Some(device) = crate::gpu::cuda_device(config)? {
        type Gpu = Autodiff<burn::backend::Cuda>;
        let f = fit_on::<Gpu>(
            config,
            config.precision,
            prep,
            train,
            valid,
            resume,
            &mut on_epoch,
            &device,
        )?;
        return Ok(Fitted {
            model: to_cpu(f.model, config, prep)?,
            best_epoch: f.best_epoch,
            epochs_run: f.epochs_run,
            history: f.history,
            backend: f.backend,
            precision: f.precision,
        });
    }
    if config.precision != Precision::Fp32 {
        println!(
            "training in fp32: mixed precision ({}) is for a GPU",
            config.precision.as_str()
        );
    }
    fit_on::<CpuTrain>(
        config,
        Precision::Fp32,
        prep,
        train,
        valid,
        resume,
        &mut on_epoch,
        &Default::default(),
    )
}

/// A model moved to the CPU (through its record: the values, bit for bit).
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
fn to_cpu<B: Backend>(
    model: Mlp<B>,
    config: &TrainConfig,
    prep: &Preprocessing,
) -> Result<Mlp<Cpu>> {
    use burn::record::{FullPrecisionSettings, NamedMpkBytesRecorder, Recorder};
    let recorder = NamedMpkBytesRecorder::<FullPrecisionSettings>::default();
    let bytes = Recorder::<B>::record(&recorder, model.into_record(), ())
        .map_err(|e| Error::internal(format!("moving the model to the CPU: {e}")))?;
    let device = Default::default();
    let record = Recorder::<Cpu>::load(&recorder, bytes, &device)
        .map_err(|e| Error::internal(format!("moving the model to the CPU: {e}")))?;
    Ok(Mlp::<Cpu>::new(
        prep.width(),
        &config.hidden_layers(),
        prep.target.outputs(),
        &device,
    )
    .load_record(record))
}

/// [`fit`] on backend `B` (with gradients) and `device`, its steps in `precision`.
#[allow(clippy::too_many_arguments)]
fn fit_on<B: AutodiffBackend>(
    config: &TrainConfig,
    precision: Precision,
    prep: &Preprocessing,
    train: &Encoded,
    valid: &Encoded,
    resume: Option<&[u8]>,
    mut on_epoch: impl FnMut(EpochEnd<'_>) -> Result<()>,
    device: &B::Device,
) -> Result<Fitted<B::InnerBackend>> {
    let device = device.clone();
    let mut rng = Rng::new(config.seed ^ 0x05ee_d0fb_a7c4);
    let mut model: Mlp<B> = Mlp::seeded(
        config.seed,
        prep.width(),
        &config.hidden_layers(),
        prep.target.outputs(),
        &device,
    );
    let mut optim = Adam {
        weight_decay: config.weight_decay as f32,
        ..Adam::default()
    }
    .init::<B, Mlp<B>>();
    let fingerprint = checkpoint::fingerprint(config, prep, train, valid);
    let mut state = checkpoint::Progress::default();
    let mut best: Option<Mlp<B::InnerBackend>> = None;
    let mut mixed = Mixed::new(precision);
    if let Some(bytes) = resume {
        let r = checkpoint::decode::<B, _, _, _>(bytes, &fingerprint, &device)?;
        model = model.load_record(r.model);
        optim = optim.load_record(r.optim);
        best = r.best.map(|b| {
            Mlp::<B::InnerBackend>::new(
                prep.width(),
                &config.hidden_layers(),
                prep.target.outputs(),
                &device,
            )
            .load_record(b)
        });
        state = r.progress;
        if mixed.scale.is_some() {
            mixed.scale = state.loss_scale.or(mixed.scale);
        }
    }
    let mut order: Vec<usize> = (0..train.rows()).collect();
    // The batch order of the epochs already run, replayed: the next one comes out as
    // it would have.
    for _ in 0..state.next_epoch {
        rng.shuffle(&mut order);
    }
    let stopped = |s: &checkpoint::Progress| config.patience > 0 && s.since_best >= config.patience;
    while state.next_epoch < config.epochs && !stopped(&state) {
        let epoch = state.next_epoch;
        let lr = config.rate_at(epoch);
        rng.shuffle(&mut order);
        model = epoch_steps(
            model,
            &mut optim,
            &prep.target,
            train,
            &order,
            config.batch_size,
            lr,
            &mut mixed,
            &device,
        );
        state.loss_scale = mixed.scale;
        let eval = model.valid();
        let (m, val_loss) = epoch_metrics(&eval, prep, train, valid, &device, epoch, lr, "")?;
        if state.best_epoch.is_none() || val_loss < state.best_loss {
            state.best_loss = val_loss;
            state.best_epoch = Some(epoch);
            state.since_best = 0;
            best = Some(eval);
        } else {
            state.since_best += 1;
        }
        state.next_epoch = epoch + 1;
        state.history.push(m);
        let encode = || {
            checkpoint::encode::<B, _, _, _>(
                &fingerprint,
                &state,
                model.clone().into_record(),
                optim.to_record(),
                best.clone().map(Module::into_record),
            )
        };
        let last = state
            .history
            .last()
            .ok_or_else(|| Error::internal("no epoch ran"))?;
        on_epoch(EpochEnd {
            metrics: last,
            checkpoint: &encode,
        })?;
    }
    let best_epoch = state
        .best_epoch
        .ok_or_else(|| Error::internal("no epoch ran"))?;
    let model = best.ok_or_else(|| Error::internal("no epoch ran"))?;
    Ok(Fitted {
        model,
        best_epoch,
        epochs_run: state.next_epoch,
        history: state.history,
        backend: B::name(&device),
        precision,
    })
}
