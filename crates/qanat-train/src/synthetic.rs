//! A synthetic binary task for benchmarks and device checks: inputs uniform in
//! [-1, 1), the label `x0 > 0`. Seeded: the same arguments, the same rows. And the
//! training loop the throughput benchmarks time over it.

use std::time::Instant;

use burn::tensor::backend::AutodiffBackend;
use qanat_model::prep::{Encoded, Rng, Target};

use crate::adam::Adam;
use crate::fit::{epoch_steps, Mlp};
use crate::mixed::Mixed;

/// `rows × inputs` encoded rows and the target they are labelled for.
pub fn binary(rows: usize, inputs: usize, seed: u64) -> (Encoded, Target) {
    let mut rng = Rng::new(seed);
    let x: Vec<f32> = (0..rows * inputs)
        .map(|_| (rng.next_u64() >> 40) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0)
        .collect();
    let y: Vec<f32> = (0..rows).map(|r| f32::from(x[r * inputs] > 0.0)).collect();
    let data = Encoded {
        x,
        width: inputs,
        y,
        weight: vec![1.0; rows],
    };
    let target = Target::Classification {
        name: "label".into(),
        classes: vec!["0".into(), "1".into()],
    };
    (data, target)
}

/// The shape of a throughput run: `rows` synthetic rows through an MLP `inputs →
/// hidden → 1` in minibatches of `batch`, for `epochs` epochs.
pub struct Workload<'a> {
    pub rows: usize,
    pub inputs: usize,
    pub hidden: &'a [usize],
    pub batch: usize,
    pub epochs: usize,
}

/// Seconds spent in minibatch steps (forward, backward, Adam) over the workload,
/// computed as `mixed` says; the first epoch is a warm-up and not counted, and the
/// device is synchronized before the clock stops. Samples per second are
/// `rows * (epochs - 1)` over the result. What scripts/bench/train_pytorch.py times
/// for PyTorch.
pub fn timed_epochs<B: AutodiffBackend>(
    w: &Workload<'_>,
    mixed: &mut Mixed,
    device: &B::Device,
) -> Result<f64, String> {
    let (data, target) = binary(w.rows, w.inputs, 1);
    let mut rng = Rng::new(1);
    let mut model: Mlp<B> = Mlp::seeded(1, w.inputs, w.hidden, 1, device);
    let mut optim = Adam::default().init::<B, Mlp<B>>();
    let mut order: Vec<usize> = (0..w.rows).collect();
    let mut timed = 0.0;
    for epoch in 0..w.epochs {
        rng.shuffle(&mut order);
        let t = Instant::now();
        model = epoch_steps(
            model, &mut optim, &target, &data, &order, w.batch, 1e-3, mixed, device,
        );
        B::sync(device).map_err(|e| format!("{e:?}"))?;
        if epoch > 0 {
            timed += t.elapsed().as_secs_f64();
        }
    }
    Ok(timed)
}
