//! int8 against f32 on the native runtime, in one run (scripts/bench/native_int8.sh):
//!
//! 1. throughput of an MLP 256 → 1024 → 1024 → 2 (He-initialized weights, normal
//!    inputs) at batch 1 and batch 64, one thread, f32 and dynamic int8;
//! 2. holdout accuracy of the same shape (30 → 1024 → 1024 → 1) trained by Qanat's
//!    trainer on examples/data/breast_cancer.csv, f32 and int8.
//!
//! `cargo run --release -p qanat-runtime --example native_bench [SECONDS [DIR]]`:
//! SECONDS per case (default 2); with DIR, the f32 model is also written there as
//! `weights.safetensors` and one JSON line per case is printed, for
//! scripts/bench/native_vs_onnxruntime.sh to run the same model in onnxruntime. With
//! `QANAT_BENCH_CASE=int8:64` (PRECISION:BATCH) only that case runs, for a profiler.

use std::hint::black_box;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use qanat_model::{Table, TrainConfig};
use qanat_runtime::evaluate::quality;
use qanat_runtime::native::{Layer, NativeMlp, Scratch};
use qanat_runtime::package::NativeModel;
use qanat_train::train_table;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let secs: f64 = std::env::args()
        .nth(1)
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(2.0);
    let dir = std::env::args().nth(2).map(PathBuf::from);
    let f32_model = random_mlp(&[256, 1024, 1024, 2]);
    let int8_model = f32_model.quantize_dynamic();
    if let Some(dir) = &dir {
        std::fs::write(dir.join("weights.safetensors"), f32_model.to_safetensors()?)?;
    }
    // QANAT_BENCH_CASE=int8:64 (or f32:1, …): that case alone, for a profiler.
    if let Ok(case) = std::env::var("QANAT_BENCH_CASE") {
        let (precision, batch) = case
            .split_once(':')
            .ok_or("QANAT_BENCH_CASE is PRECISION:BATCH, e.g. int8:64")?;
        let model = if precision == "int8" {
            &int8_model
        } else {
            &f32_model
        };
        let m = measure(model, batch.parse()?, secs)?;
        println!("{case}: {:.0} rows/s, p50 {:.1} µs", m.rows_per_s, m.p50_us);
        return Ok(());
    }
    println!("model 256-1024-1024-2, one thread, {secs} s a case");
    println!(
        "kernels: f32 model on {}; int8 model on {}",
        f32_model.kernels(),
        int8_model.kernels()
    );
    println!(
        "weights: f32 {:.1} MiB, int8 {:.1} MiB",
        f32_model.weight_bytes() as f64 / 1048576.0,
        int8_model.weight_bytes() as f64 / 1048576.0
    );
    println!("| batch | f32 rows/s | int8 rows/s | int8 / f32 | f32 p50 µs | int8 p50 µs |");
    println!("|---|---|---|---|---|---|");
    for batch in [1usize, 64] {
        let f = measure(&f32_model, batch, secs)?;
        let q = measure(&int8_model, batch, secs)?;
        println!(
            "| {batch} | {:.0} | {:.0} | {:.2}x | {:.1} | {:.1} |",
            f.rows_per_s,
            q.rows_per_s,
            q.rows_per_s / f.rows_per_s,
            f.p50_us,
            q.p50_us
        );
        if dir.is_some() {
            for (precision, m) in [("f32", &f), ("int8", &q)] {
                println!(
                    "{{\"impl\": \"qanat native\", \"precision\": \"{precision}\", \"batch\": {batch}, \"rows_per_s\": {:.0}, \"p50_us\": {:.1}}}",
                    m.rows_per_s, m.p50_us
                );
            }
        }
    }
    if dir.is_some() {
        // The accuracy half trains a large model; the onnxruntime comparison skips it.
        return Ok(());
    }

    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../examples/data/breast_cancer.csv");
    let table = Table::read_file(&path)?;
    let config = TrainConfig::from_value(serde_json::json!({
        "target": "diagnosis", "model": "mlp", "hidden": [1024, 1024],
        "epochs": 30, "seed": 11,
    }))?;
    let trained = train_table(&table, &config, None, |_| Ok(()))?;
    let bytes = qanat_train::export::safetensors(&trained.fitted.model)?;
    let spec = qanat_train::export::spec(&trained.fitted.model, &trained.prep);
    let m = NativeModel::new(spec, NativeMlp::from_safetensors(&bytes)?)?;
    let q = m.quantize_dynamic()?;
    let a32 = quality(&m, &trained.prep, &table, &trained.valid_rows)?;
    let a8 = quality(&q, &trained.prep, &table, &trained.valid_rows)?;
    println!(
        "breast_cancer holdout ({} rows), 30-1024-1024-1: accuracy f32 {:.4}, int8 {:.4} ({:+.2} points)",
        trained.valid_rows.len(),
        a32.value,
        a8.value,
        (a8.value - a32.value) * 100.0
    );
    Ok(())
}

struct Measured {
    rows_per_s: f64,
    p50_us: f64,
}

fn measure(m: &NativeMlp, batch: usize, secs: f64) -> Result<Measured, Box<dyn std::error::Error>> {
    let x: Vec<f32> = normals(batch * m.inputs(), 99);
    let mut scratch = Scratch::default();
    // Warm up: grows the scratch, fills the caches.
    for _ in 0..20 {
        black_box(m.forward(black_box(&x), batch, &mut scratch)?);
    }
    let mut times = Vec::new();
    let start = Instant::now();
    let budget = Duration::from_secs_f64(secs);
    while start.elapsed() < budget {
        let t = Instant::now();
        black_box(m.forward(black_box(&x), batch, &mut scratch)?);
        times.push(t.elapsed());
    }
    let total: Duration = times.iter().sum();
    times.sort();
    Ok(Measured {
        rows_per_s: (times.len() * batch) as f64 / total.as_secs_f64(),
        p50_us: times[times.len() / 2].as_secs_f64() * 1e6,
    })
}

fn normals(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed;
    let mut next = move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    (0..n)
        .map(|_| {
            let u: f64 = next().max(1e-12);
            let v: f64 = next();
            ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        })
        .collect()
}

fn random_mlp(widths: &[usize]) -> NativeMlp {
    let layers = widths
        .windows(2)
        .enumerate()
        .map(|(i, w)| {
            let std = (2.0 / w[0] as f32).sqrt();
            let weight = normals(w[0] * w[1], i as u64)
                .iter()
                .map(|v| v * std)
                .collect();
            Layer::f32(w[0], weight, vec![0.01; w[1]]).expect("shapes agree")
        })
        .collect();
    NativeMlp::new(layers).expect("layers chain")
}
