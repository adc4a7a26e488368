//! Native tree prediction, in-process and on one thread, for
//! scripts/bench/trees_vs_onnxruntime.sh: reads an XGBoost or LightGBM model file and
//! rows (`rows.f32`: little-endian f32, FEATURES a row), then times `Forest::predict`
//! at batch 1 and 256 and prints one JSON line per case (rows/s, p50 µs a call), and
//! the predictions of the first rows (`ours.f32`) for the script to compare.
//!
//! `cargo run --release -p qanat-runtime --example trees_bench DIR MODEL SECONDS`

use std::hint::black_box;
use std::path::Path;
use std::time::{Duration, Instant};

use qanat_runtime::trees::{lightgbm, xgboost, Forest};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or("usage: trees_bench DIR MODEL SECONDS")?;
    let model = args.next().ok_or("usage: trees_bench DIR MODEL SECONDS")?;
    let secs: f64 = args.next().map(|s| s.parse()).transpose()?.unwrap_or(2.0);
    let dir = Path::new(&dir);
    let bytes = std::fs::read(dir.join(&model))?;
    let forest: Forest = if model.ends_with(".txt") {
        lightgbm::read(std::str::from_utf8(&bytes)?)?.forest
    } else {
        xgboost::read(&bytes)?.forest
    };
    let raw = std::fs::read(dir.join("rows.f32"))?;
    let x: Vec<f32> = raw
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    let f = forest.features();
    let rows = x.len() / f;
    let out = forest.predict(&x, rows)?;
    let bytes: Vec<u8> = out.iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(dir.join("ours.f32"), bytes)?;
    for batch in [1usize, 256] {
        let mut times = Vec::new();
        let mut done = 0usize;
        let start = Instant::now();
        let mut at = 0usize;
        while start.elapsed() < Duration::from_secs_f64(secs) {
            if at + batch > rows {
                at = 0;
            }
            let t = Instant::now();
            black_box(forest.predict(black_box(&x[at * f..(at + batch) * f]), batch)?);
            times.push(t.elapsed());
            done += batch;
            at += batch;
        }
        let elapsed = start.elapsed().as_secs_f64();
        times.sort();
        let p50 = times[times.len() / 2].as_secs_f64() * 1e6;
        println!(
            "{{\"model\": \"{model}\", \"batch\": {batch}, \"rows_per_s\": {:.0}, \"p50_us\": {p50:.1}}}",
            done as f64 / elapsed
        );
    }
    Ok(())
}
