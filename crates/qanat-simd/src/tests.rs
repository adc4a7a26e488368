//! The accelerated kernels against their portable twins, and the portable twins against
//! plain dot products over the unpacked weights.

use super::*;
use proptest::prelude::*;

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn int8(&mut self) -> i8 {
        ((self.next() % 255) as i16 - 127) as i8
    }

    fn unit(&mut self) -> f32 {
        ((self.next() >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

struct I8Case {
    xu: Vec<u8>,
    xs: Vec<f32>,
    q: Vec<i8>,
    kp: usize,
    scale: Vec<f32>,
    bias: Vec<f32>,
}

fn i8_case(rows: usize, k: usize, outs: usize, seed: u64) -> I8Case {
    let mut g = Rng(seed);
    let kp = k.div_ceil(4) * 4;
    let mut xu = vec![128u8; rows * kp];
    let mut q = vec![0i8; outs * kp];
    for r in 0..rows {
        for i in 0..k {
            xu[r * kp + i] = (i16::from(g.int8()) + 128) as u8;
        }
    }
    for o in 0..outs {
        for i in 0..k {
            q[o * kp + i] = g.int8();
        }
    }
    I8Case {
        xu,
        xs: (0..rows).map(|_| g.unit().abs() / 100.0 + 1e-3).collect(),
        q,
        kp,
        scale: (0..outs).map(|_| g.unit().abs() / 100.0 + 1e-3).collect(),
        bias: (0..outs).map(|_| g.unit()).collect(),
    }
}

/// Plain dot products over the row-major weights, the same epilogue.
fn i8_reference(c: &I8Case, relu: bool) -> Vec<f32> {
    let rows = c.xs.len();
    let outs = c.bias.len();
    let mut y = vec![0f32; rows * outs];
    for r in 0..rows {
        for o in 0..outs {
            let acc: i64 = (0..c.kp)
                .map(|i| (i64::from(c.xu[r * c.kp + i]) - 128) * i64::from(c.q[o * c.kp + i]))
                .sum();
            let v = acc as i32 as f32 * (c.xs[r] * c.scale[o]) + c.bias[o];
            y[r * outs + o] = if relu && v < 0.0 { 0.0 } else { v };
        }
    }
    y
}

fn shape() -> impl Strategy<Value = (usize, usize, usize)> {
    // rows, k, outs: across the row blocks (6), the panels (16) and panel groups (64),
    // with k not a multiple of anything.
    (
        1usize..15,
        1usize..90,
        prop_oneof![1usize..20, 60usize..70, 126usize..131],
    )
}

/// Set (by `.ci/run`, on a CPU that lists `amx_int8`) to fail when the AMX kernel does
/// not run, so its tests cannot pass by skipping it.
fn amx_required() -> bool {
    std::env::var("QANAT_REQUIRE_AMX").as_deref() == Ok("1")
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

fn tile_shape() -> impl Strategy<Value = (usize, usize, usize)> {
    // rows, k, outs for the AMX tiles: one and several 16-row tiles and 32-row blocks
    // with tails, K across one and several 64-input tiles, one and several panel pairs
    // with an odd panel and a short last panel.
    (
        prop_oneof![1usize..20, 28usize..36, 44usize..70],
        prop_oneof![1usize..70, 120usize..200],
        prop_oneof![1usize..40, 60usize..70, 90usize..100],
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn the_int8_kernel_equals_the_portable_one_and_plain_dot_products(
        (rows, k, outs) in shape(), seed in any::<u64>(), relu in any::<bool>()
    ) {
        let c = i8_case(rows, k, outs, seed);
        let w = PackedI8::new(&c.q, c.kp, &c.scale, &c.bias);
        let want = i8_reference(&c, relu);
        let mut portable = vec![f32::NAN; rows * outs];
        gemm_u8i8_portable(&c.xu, &c.xs, &w, relu, &mut portable);
        prop_assert_eq!(&portable, &want);
        let mut fast = vec![f32::NAN; rows * outs];
        if gemm_u8i8(&c.xu, &c.xs, &w, relu, &mut fast) {
            prop_assert_eq!(&fast, &want);
        }
        // Each kernel whatever the batch, so both are tested on every shape.
        let mut vnni = vec![f32::NAN; rows * outs];
        if gemm_u8i8_vnni(&c.xu, &c.xs, &w, relu, &mut vnni) {
            prop_assert_eq!(&vnni, &want);
        }
        let mut amx = vec![f32::NAN; rows * outs];
        if gemm_u8i8_amx(&c.xu, &c.xs, &w, relu, &mut amx) {
            prop_assert_eq!(&amx, &want);
        }
    }

    #[test]
    fn the_amx_kernel_equals_the_portable_one_across_tiles(
        (rows, k, outs) in tile_shape(), seed in any::<u64>(), relu in any::<bool>()
    ) {
        let c = i8_case(rows, k, outs, seed);
        let w = PackedI8::new(&c.q, c.kp, &c.scale, &c.bias);
        let mut portable = vec![f32::NAN; rows * outs];
        gemm_u8i8_portable(&c.xu, &c.xs, &w, relu, &mut portable);
        prop_assert_eq!(&portable, &i8_reference(&c, relu));
        let mut amx = vec![f32::NAN; rows * outs];
        if gemm_u8i8_amx(&c.xu, &c.xs, &w, relu, &mut amx) {
            prop_assert_eq!(bits(&amx), bits(&portable));
        } else {
            prop_assert!(!amx_required(), "QANAT_REQUIRE_AMX=1 but the AMX kernel did not run");
        }
        let mut fast = vec![f32::NAN; rows * outs];
        if gemm_u8i8(&c.xu, &c.xs, &w, relu, &mut fast) {
            prop_assert_eq!(bits(&fast), bits(&portable));
        }
    }

    #[test]
    fn the_f32_kernel_equals_the_portable_one(
        (rows, k, outs) in shape(), seed in any::<u64>(), relu in any::<bool>()
    ) {
        let mut g = Rng(seed);
        let x: Vec<f32> = (0..rows * k).map(|_| g.unit()).collect();
        let wt: Vec<f32> = (0..outs * k).map(|_| g.unit()).collect();
        let b: Vec<f32> = (0..outs).map(|_| g.unit()).collect();
        let w = PackedF32::new(&wt, k, &b);
        let mut portable = vec![f32::NAN; rows * outs];
        gemm_f32_portable(&x, &w, relu, &mut portable);
        // The portable twin against f64 dot products over the unpacked weights.
        for r in 0..rows {
            for o in 0..outs {
                let s: f64 = (0..k).map(|i| f64::from(x[r * k + i]) * f64::from(wt[o * k + i])).sum();
                let v = s as f32 + b[o];
                let v = if relu { v.max(0.0) } else { v };
                let got = portable[r * outs + o];
                prop_assert!((got - v).abs() <= 1e-4 * (1.0 + v.abs()), "{} vs {}", got, v);
            }
        }
        // The same additions in the same order: equal bit for bit.
        let mut fast = vec![f32::NAN; rows * outs];
        if gemm_f32(&x, &w, relu, &mut fast) {
            prop_assert_eq!(fast.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                portable.iter().map(|v| v.to_bits()).collect::<Vec<_>>());
        }
    }
}

#[test]
fn sums_that_wrap_in_the_register_still_come_out_exact() {
    // Σ (x + 128) · w overflows i32 here (255 · 127 · 70,000 > 2³¹); Σ x · w does not
    // (127² · 70,000 < 2³¹), and that is what comes out.
    let kp = 70_000;
    let xu = vec![255u8; kp];
    let q = vec![127i8; kp];
    let w = PackedI8::new(&q, kp, &[1.0], &[0.0]);
    let want = (127 * 127 * kp) as f32;
    let mut y = [0f32];
    gemm_u8i8_portable(&xu, &[1.0], &w, false, &mut y);
    assert_eq!(y[0], want);
    if gemm_u8i8(&xu, &[1.0], &w, false, &mut y) {
        assert_eq!(y[0], want);
    }
    if gemm_u8i8_amx(&xu, &[1.0], &w, false, &mut y) {
        assert_eq!(y[0], want);
    }
    let neg = vec![1u8; kp];
    if gemm_u8i8_amx(&neg, &[1.0], &w, false, &mut y) {
        assert_eq!(y[0], -want);
    }
    gemm_u8i8_portable(&neg, &[1.0], &w, false, &mut y);
    assert_eq!(y[0], -want);
    if gemm_u8i8(&neg, &[1.0], &w, false, &mut y) {
        assert_eq!(y[0], -want);
    }
}

#[test]
fn relu_keeps_negative_zero_and_nan_as_the_portable_path_does() {
    // One output whose bias is -0.0 with a zero sum, one whose bias is NaN.
    let w = PackedF32::new(&[0.0, 0.0], 1, &[-0.0, f32::NAN]);
    let mut a = [1f32; 2];
    let mut b = [1f32; 2];
    gemm_f32_portable(&[0.0], &w, true, &mut a);
    if gemm_f32(&[0.0], &w, true, &mut b) {
        assert_eq!(a[0].to_bits(), b[0].to_bits());
        assert!(a[1].is_nan() && b[1].is_nan());
    }
}

#[test]
fn no_inputs_no_outputs_and_no_rows_stay_off_the_tiles() {
    // kp = 0: the AMX kernel declines (the sums are the bias); no outputs or no rows:
    // nothing is written, whichever kernel takes it.
    let w = PackedI8::new(&[], 0, &[1.0; 3], &[0.5, -1.0, 2.0]);
    let xs = vec![1.0f32; 9];
    let mut y = vec![f32::NAN; 27];
    assert!(!gemm_u8i8_amx(&[], &xs, &w, true, &mut y));
    let mut want = vec![f32::NAN; 27];
    gemm_u8i8_portable(&[], &xs, &w, true, &mut want);
    if gemm_u8i8(&[], &xs, &w, true, &mut y) {
        assert_eq!(bits(&y), bits(&want));
    }
    let none = PackedI8::new(&[], 64, &[], &[]);
    let mut empty: [f32; 0] = [];
    gemm_u8i8_amx(&[128; 9 * 64], &xs, &none, false, &mut empty);
    let w = PackedI8::new(&[1; 64], 64, &[1.0], &[0.0]);
    gemm_u8i8_amx(&[], &[], &w, false, &mut empty);
}

#[test]
fn mismatched_lengths_are_refused_before_any_kernel_runs() {
    let w = PackedI8::new(&[1; 8], 4, &[1.0, 1.0], &[0.0, 0.0]);
    let r = std::panic::catch_unwind(|| {
        let mut y = [0f32; 2];
        gemm_u8i8(&[128; 3], &[1.0], &w, false, &mut y)
    });
    assert!(r.is_err());
}

#[test]
fn the_kernels_detected_are_named() {
    // On this machine's CPU each is either named or absent; when named, it runs.
    if amx_required() {
        assert_eq!(int8_kernel(), Some("amx-int8+avx512-vnni"));
    }
    if let Some(name) = int8_kernel() {
        assert!(
            name == "avx512-vnni" || name == "amx-int8+avx512-vnni",
            "{name}"
        );
        let w = PackedI8::new(&[1; 4], 4, &[1.0], &[0.0]);
        let mut y = [0f32];
        assert!(gemm_u8i8(&[129; 4], &[1.0], &w, false, &mut y));
        assert_eq!(y[0], 4.0);
    }
    if let Some(name) = f32_kernel() {
        assert_eq!(name, "avx512-fma");
    }
}

#[test]
fn the_amx_kernel_runs_on_many_threads_and_after_a_panic() {
    // The tile state is granted per process and configured per call: threads started
    // after the grant use it too, and a call refused for its lengths (a panic before
    // any tile is configured) leaves the next one working.
    let c = i8_case(40, 130, 70, 7);
    let w = PackedI8::new(&c.q, c.kp, &c.scale, &c.bias);
    let want = i8_reference(&c, true);
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (c_xu, c_xs, w, want) = (c.xu.clone(), c.xs.clone(), w.clone(), want.clone());
            std::thread::spawn(move || {
                for _ in 0..50 {
                    let mut y = vec![f32::NAN; 40 * 70];
                    if gemm_u8i8_amx(&c_xu, &c_xs, &w, true, &mut y) {
                        assert_eq!(bits(&y), bits(&want));
                    } else {
                        assert!(!amx_required(), "the AMX kernel did not run");
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().expect("a thread on the tiles");
    }
    let refused = std::panic::catch_unwind(|| {
        let mut y = vec![0f32; 70];
        gemm_u8i8_amx(&c.xu[..5], &c.xs[..1], &w, false, &mut y)
    });
    assert!(refused.is_err());
    let mut y = vec![f32::NAN; 40 * 70];
    if gemm_u8i8_amx(&c.xu, &c.xs, &w, true, &mut y) {
        assert_eq!(y, want);
    }
}
