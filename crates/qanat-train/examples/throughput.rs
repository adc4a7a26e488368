//! Training throughput of the native MLP (samples/s): `cargo run --release -p
//! qanat-train --example throughput -- ROWS INPUTS HIDDEN BATCH EPOCHS`, e.g.
//! `65536 100 256,256 256 3`. Times only the minibatch steps (forward, backward, Adam)
//! over standard-normal inputs and a binary target, as scripts/bench/train_pytorch.py
//! does for PyTorch; the first epoch is a warm-up and not counted.

// The allocator of the `qanat` binary, whose train jobs this measures.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use qanat_train::fit::CpuTrain;
use qanat_train::mixed::Mixed;
use qanat_train::synthetic::{timed_epochs, Workload};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |i: usize, d: usize| args.get(i).and_then(|a| a.parse().ok()).unwrap_or(d);
    let hidden: Vec<usize> = args
        .get(3)
        .map_or("256,256", String::as_str)
        .split(',')
        .filter_map(|h| h.parse().ok())
        .collect();
    let w = Workload {
        rows: num(1, 65_536),
        inputs: num(2, 100),
        hidden: &hidden,
        batch: num(4, 256),
        epochs: num(5, 3).max(2),
    };
    let timed = timed_epochs::<CpuTrain>(&w, &mut Mixed::default(), &Default::default())
        .expect("a CPU run");
    let (rows, inputs, batch, epochs) = (w.rows, w.inputs, w.batch, w.epochs);
    let samples = (rows * (epochs - 1)) as f64;
    println!(
        "{{\"impl\": \"qanat (burn-ndarray)\", \"rows\": {rows}, \"inputs\": {inputs}, \"hidden\": {hidden:?}, \"batch\": {batch}, \"epochs_timed\": {}, \"seconds\": {timed:.3}, \"samples_per_s\": {:.0}}}",
        epochs - 1,
        samples / timed
    );
}
