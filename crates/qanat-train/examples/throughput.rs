//! Training throughput of the native MLP (samples/s): `cargo run --release -p
//! qanat-train --example throughput -- ROWS INPUTS HIDDEN BATCH EPOCHS`, e.g.
//! `65536 100 256,256 256 3`. Times only the minibatch steps (forward, backward, Adam)
//! over standard-normal inputs and a binary target, as scripts/bench/train_pytorch.py
//! does for PyTorch; the first epoch is a warm-up and not counted.

use std::time::Instant;

// The allocator of the `qanat` binary, whose train jobs this measures.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use qanat_model::prep::Rng;
use qanat_train::adam::Adam;
use qanat_train::fit::{epoch_steps, CpuTrain, Mlp};
use qanat_train::mixed::Mixed;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let (rows, inputs) = (num(1, 65_536), num(2, 100));
    let hidden: Vec<usize> = args
        .get(3)
        .map_or("256,256", String::as_str)
        .split(',')
        .filter_map(|h| h.parse().ok())
        .collect();
    let (batch, epochs) = (num(4, 256), num(5, 3).max(2));
    let (data, target) = qanat_train::synthetic::binary(rows, inputs, 1);
    let mut rng = Rng::new(1);
    let device = Default::default();
    let mut model: Mlp<CpuTrain> = Mlp::seeded(1, inputs, &hidden, 1, &device);
    let mut optim = Adam::default().init::<CpuTrain, Mlp<CpuTrain>>();
    let mut order: Vec<usize> = (0..rows).collect();
    let mut timed = 0.0;
    for epoch in 0..epochs {
        rng.shuffle(&mut order);
        let t = Instant::now();
        model = epoch_steps(
            model,
            &mut optim,
            &target,
            &data,
            &order,
            batch,
            1e-3,
            &mut Mixed::default(),
            &device,
        );
        if epoch > 0 {
            timed += t.elapsed().as_secs_f64();
        }
    }
    let samples = (rows * (epochs - 1)) as f64;
    println!(
        "{{\"impl\": \"qanat (burn-ndarray)\", \"rows\": {rows}, \"inputs\": {inputs}, \"hidden\": {hidden:?}, \"batch\": {batch}, \"epochs_timed\": {}, \"seconds\": {timed:.3}, \"samples_per_s\": {:.0}}}",
        epochs - 1,
        samples / timed
    );
}
