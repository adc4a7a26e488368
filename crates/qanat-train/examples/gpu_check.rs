//! The trainer on a real GPU (a `--features cuda` build), for the machines that have
//! one: `cargo run --release -p qanat-train --features cuda --example gpu_check --
//! examples/data/breast_cancer.csv [ROWS] [EPOCHS]`.
//!
//! 1. Quality: the breast-cancer MLP trained with `device: cuda` in fp32, bf16 and
//!    fp16 (mixed precision, loss scaling for fp16), and on the CPU in fp32, seed fixed:
//!    the validation accuracy and loss of each, which must agree.
//! 2. Throughput: minibatch steps (forward, backward, Adam) of an MLP 100 → 1024 →
//!    1024 → 1 at batch 1024 over ROWS synthetic rows, in each precision, the first
//!    epoch a warm-up, the device synchronized before the clock stops. Printed as JSON
//!    lines, as scripts/bench/train_pytorch.py prints PyTorch's.

use std::path::PathBuf;
use std::time::Instant;

use burn::backend::{Autodiff, Cuda};
use qanat_model::config::Precision;
use qanat_model::{Table, TrainConfig};
use qanat_train::mixed::Mixed;
use qanat_train::synthetic::{timed_epochs, Workload};
use qanat_train::train_table;

type Gpu = Autodiff<Cuda>;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let csv = PathBuf::from(args.get(1).ok_or("usage: gpu_check CSV [ROWS] [EPOCHS]")?);
    let rows: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(262_144);
    let epochs: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(4).max(2);

    let table = Table::read_file(&csv)?;
    for (device, precision) in [
        ("cpu", "fp32"),
        ("cuda", "fp32"),
        ("cuda", "bf16"),
        ("cuda", "fp16"),
    ] {
        let config = TrainConfig::from_value(serde_json::json!({
            "target": "diagnosis", "model": "mlp", "hidden": [64, 64], "epochs": 40,
            "seed": 7, "device": device, "precision": precision,
        }))?;
        let t = Instant::now();
        let r = train_table(&table, &config, None, |_| Ok(()))?;
        let best = &r.fitted.history[r.fitted.best_epoch as usize];
        println!(
            "{{\"check\": \"quality\", \"device\": \"{device}\", \"precision\": \"{}\", \"backend\": \"{}\", \"val_accuracy\": {:.4}, \"val_loss\": {:.4}, \"epochs\": {}, \"seconds\": {:.2}}}",
            r.fitted.precision.as_str(),
            r.fitted.backend,
            best.get("val_accuracy").unwrap_or(f64::NAN),
            best.get("val_loss").unwrap_or(f64::NAN),
            r.fitted.epochs_run,
            t.elapsed().as_secs_f64()
        );
    }

    let (inputs, hidden, batch) = (100, [1024, 1024], 1024);
    let workload = Workload {
        rows,
        inputs,
        hidden: &hidden,
        batch,
        epochs,
    };
    for precision in [Precision::Fp32, Precision::Bf16, Precision::Fp16] {
        let mut mixed = Mixed::new(precision);
        let timed = timed_epochs::<Gpu>(&workload, &mut mixed, &Default::default())?;
        println!(
            "{{\"check\": \"throughput\", \"impl\": \"qanat (burn cuda)\", \"precision\": \"{}\", \"rows\": {rows}, \"inputs\": {inputs}, \"hidden\": {hidden:?}, \"batch\": {batch}, \"epochs_timed\": {}, \"seconds\": {timed:.3}, \"samples_per_s\": {:.0}}}",
            precision.as_str(),
            epochs - 1,
            (rows * (epochs - 1)) as f64 / timed
        );
    }
    Ok(())
}
