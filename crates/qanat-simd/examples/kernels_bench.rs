//! One dense layer (1024 → 1024) through each kernel this CPU has, at batches 1 to 64:
//! multiply-adds a second. `cargo run --release -p qanat-simd --example kernels_bench`.

use std::hint::black_box;
use std::time::Instant;

use qanat_simd::{gemm_f32, gemm_u8i8_amx, gemm_u8i8_vnni, PackedF32, PackedI8};

fn time(mut f: impl FnMut()) -> f64 {
    for _ in 0..10 {
        f();
    }
    let mut n = 0u32;
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < 1.0 {
        f();
        n += 1;
    }
    start.elapsed().as_secs_f64() / f64::from(n)
}

fn main() {
    let (k, outs) = (1024usize, 1024usize);
    let q: Vec<i8> = (0..outs * k).map(|i| ((i * 7919) % 255) as i8).collect();
    let wf: Vec<f32> = q.iter().map(|v| f32::from(*v) / 127.0).collect();
    let bias = vec![0.1f32; outs];
    let pi = PackedI8::new(&q, k, &vec![0.01; outs], &bias);
    let pf = PackedF32::new(&wf, k, &bias);
    println!(
        "kernels: int8 {:?}, f32 {:?}",
        qanat_simd::int8_kernel(),
        qanat_simd::f32_kernel()
    );
    for rows in [1usize, 4, 8, 16, 64] {
        let xu: Vec<u8> = (0..rows * k).map(|i| (i % 251) as u8).collect();
        let xs = vec![0.02f32; rows];
        let xf: Vec<f32> = xu.iter().map(|v| f32::from(*v) / 255.0).collect();
        let mut y = vec![0f32; rows * outs];
        let macs = (rows * k * outs) as f64;
        let t = time(|| {
            black_box(gemm_u8i8_vnni(black_box(&xu), &xs, &pi, true, &mut y));
        });
        println!(
            "int8 vnni batch {rows}: {:.1} GMAC/s ({:.1} µs)",
            macs / t / 1e9,
            t * 1e6
        );
        if gemm_u8i8_amx(&xu, &xs, &pi, true, &mut y) {
            let t = time(|| {
                black_box(gemm_u8i8_amx(black_box(&xu), &xs, &pi, true, &mut y));
            });
            println!(
                "int8 amx  batch {rows}: {:.1} GMAC/s ({:.1} µs)",
                macs / t / 1e9,
                t * 1e6
            );
        }
        let t = time(|| {
            black_box(gemm_f32(black_box(&xf), &pf, true, &mut y));
        });
        println!(
            "f32  batch {rows}: {:.1} GMAC/s ({:.1} µs)",
            macs / t / 1e9,
            t * 1e6
        );
    }
}
