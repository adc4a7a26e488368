//! tract's side of the tract-vs-onnxruntime benchmark (scripts/bench/native_vs_onnxruntime.sh):
//! the ONNX files scripts/bench/native_ort.py wrote to DIR — the MLP as MatMul + Add +
//! Relu (`mlp.onnx`) and onnxruntime's own dynamic int8 quantization of it
//! (`mlp-int8.onnx`) — loaded and optimized by tract, run in-process on one thread at
//! batch 1 and 64 on normal inputs. Prints one JSON line per case.
//!
//! `cargo run --release -p qanat-runtime --example tract_bench DIR [SECONDS]`

use std::hint::black_box;
use std::time::{Duration, Instant};

use tract_onnx::prelude::*;

fn main() -> TractResult<()> {
    let dir = std::env::args()
        .nth(1)
        .expect("usage: tract_bench DIR [SECONDS]");
    let secs: f64 = std::env::args()
        .nth(2)
        .map(|s| s.parse().expect("SECONDS is a number"))
        .unwrap_or(2.0);
    for batch in [1usize, 64] {
        for (precision, file) in [("f32", "mlp.onnx"), ("int8", "mlp-int8.onnx")] {
            let bytes = std::fs::read(format!("{dir}/{file}"))?;
            let width = qanat_runtime::onnx::OnnxGraph::read(&bytes)
                .ok()
                .and_then(|g| g.inputs[0].width())
                .expect("an input [N, width]");
            let model = tract_onnx::onnx().model_for_read(&mut bytes.as_slice())?;
            let plan = model.into_optimized()?.into_runnable()?;
            let mut s = 99u64;
            let x: Vec<f32> = (0..batch * width)
                .map(|_| {
                    s ^= s << 13;
                    s ^= s >> 7;
                    s ^= s << 17;
                    // Sum of uniforms: roughly normal.
                    ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 3.4
                })
                .collect();
            let input: TValue = Tensor::from_shape(&[batch, width], &x)?.into();
            for _ in 0..20 {
                black_box(plan.run(tvec!(input.clone()))?);
            }
            let mut times = Vec::new();
            let start = Instant::now();
            while start.elapsed() < Duration::from_secs_f64(secs) {
                let t = Instant::now();
                black_box(plan.run(tvec!(input.clone()))?);
                times.push(t.elapsed());
            }
            let total: Duration = times.iter().sum();
            times.sort();
            println!(
                "{{\"impl\": \"tract 0.23.9\", \"precision\": \"{precision}\", \"batch\": {batch}, \"rows_per_s\": {:.0}, \"p50_us\": {:.1}}}",
                (times.len() * batch) as f64 / total.as_secs_f64(),
                times[times.len() / 2].as_secs_f64() * 1e6
            );
        }
    }
    Ok(())
}
