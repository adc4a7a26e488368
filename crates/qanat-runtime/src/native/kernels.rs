//! The matrix kernels of the native runtime: `y = x·Wᵀ + b`, then ReLU where asked, for
//! f32 weights and for int8 weights with int8 activations.
//!
//! Weights are kept as the trainer writes them, `[out, in]`, so every output is the dot
//! product of two contiguous rows: one of `x`, one of `W`. A kernel computes a block of
//! rows × outputs at once (4 × 2: eight accumulators, six loads per step, which fits the
//! sixteen vector registers of AVX2) so each loaded vector is used several times.
//!
//! The int8 path stores each weight and each quantized activation sign-extended to i16
//! and padded with zeros to a multiple of 16, so that one AVX2 `vpmaddwd` multiplies 16
//! pairs and adds them pairwise into eight i32 lanes, exactly: no saturation is
//! possible (|q| ≤ 127, so a pair sums to at most 2·127² and a row of up to 2^17 inputs
//! stays far inside i32). f32 FMA does 8 multiply-adds an instruction; this does 16,
//! and loads half the bytes.
//!
//! Dispatch is at run time through `pulp`: AVX2 + FMA on x86-64 when the CPU has them;
//! elsewhere the portable loops are compiled for the baseline of the target (NEON on
//! arm64), where the compiler vectorizes them. Every kernel has a plain scalar reference
//! in the tests, which it must match (exactly for int8, within rounding for f32).

use pulp::{Simd, WithSimd};

/// Inputs are padded to a multiple of this on the int8 path.
pub(crate) const INT_LANES: usize = 16;

/// Rows and outputs computed together.
const BLOCK_ROWS: usize = 4;
const BLOCK_COLS: usize = 2;

/// `y[r, o] = act(Σ_k x[r, k] · w[o, k] + bias[o])`, `x` being `rows × k` and `w`
/// `bias.len() × k`, both row-major; `y` is `rows × bias.len()`.
pub(crate) fn gemm_f32(x: &[f32], k: usize, w: &[f32], bias: &[f32], relu: bool, y: &mut [f32]) {
    debug_assert_eq!(w.len(), bias.len() * k);
    debug_assert_eq!(x.len() / k.max(1), y.len() / bias.len().max(1));
    pulp::Arch::new().dispatch(GemmF32 {
        x,
        k,
        w,
        bias,
        relu,
        y,
    });
}

struct GemmF32<'a> {
    x: &'a [f32],
    k: usize,
    w: &'a [f32],
    bias: &'a [f32],
    relu: bool,
    y: &'a mut [f32],
}

impl WithSimd for GemmF32<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, s: S) {
        let GemmF32 {
            x,
            k,
            w,
            bias,
            relu,
            y,
        } = self;
        let outs = bias.len();
        if outs == 0 || k == 0 {
            y.fill(0.0);
            return;
        }
        let rows = y.len() / outs;
        let xrow = |r: usize| &x[r * k..(r + 1) * k];
        let wrow = |o: usize| &w[o * k..(o + 1) * k];
        let mut store = |r: usize, o: usize, v: f32| {
            let v = v + bias[o];
            y[r * outs + o] = if relu && v < 0.0 { 0.0 } else { v };
        };
        let mut r = 0;
        while r + BLOCK_ROWS <= rows {
            let xs: [&[f32]; BLOCK_ROWS] = std::array::from_fn(|a| xrow(r + a));
            let mut o = 0;
            while o + BLOCK_COLS <= outs {
                let ws: [&[f32]; BLOCK_COLS] = std::array::from_fn(|c| wrow(o + c));
                let d = dots_f32(s, xs, ws);
                for (a, da) in d.iter().enumerate() {
                    for (c, v) in da.iter().enumerate() {
                        store(r + a, o + c, *v);
                    }
                }
                o += BLOCK_COLS;
            }
            for o in o..outs {
                let d = dots_f32(s, xs, [wrow(o)]);
                for (a, da) in d.iter().enumerate() {
                    store(r + a, o, da[0]);
                }
            }
            r += BLOCK_ROWS;
        }
        // The rows left over (all of them at batch 1): one row against four outputs.
        for r in r..rows {
            let xs = [xrow(r)];
            let mut o = 0;
            while o + 4 <= outs {
                let ws: [&[f32]; 4] = std::array::from_fn(|c| wrow(o + c));
                let d = dots_f32(s, xs, ws);
                for (c, v) in d[0].iter().enumerate() {
                    store(r, o + c, *v);
                }
                o += 4;
            }
            for o in o..outs {
                store(r, o, dots_f32(s, xs, [wrow(o)])[0][0]);
            }
        }
    }
}

/// The R × C dot products of `xs` with `ws` (all of one length).
#[inline(always)]
fn dots_f32<S: Simd, const R: usize, const C: usize>(
    s: S,
    xs: [&[f32]; R],
    ws: [&[f32]; C],
) -> [[f32; C]; R] {
    let xh = xs.map(S::as_simd_f32s);
    let wh = ws.map(S::as_simd_f32s);
    let n = xh[0].0.len();
    // Slicing to `n` lets the compiler drop the bounds checks in the loop.
    let xv: [&[S::f32s]; R] = std::array::from_fn(|a| &xh[a].0[..n]);
    let wv: [&[S::f32s]; C] = std::array::from_fn(|c| &wh[c].0[..n]);
    let mut acc = [[s.splat_f32s(0.0); C]; R];
    for i in 0..n {
        let wi: [S::f32s; C] = std::array::from_fn(|c| wv[c][i]);
        for a in 0..R {
            let xi = xv[a][i];
            for c in 0..C {
                acc[a][c] = s.mul_add_e_f32s(xi, wi[c], acc[a][c]);
            }
        }
    }
    let mut out = [[0f32; C]; R];
    for a in 0..R {
        for c in 0..C {
            let mut v = s.reduce_sum_f32s(acc[a][c]);
            for (p, q) in xh[a].1.iter().zip(wh[c].1) {
                v += p * q;
            }
            out[a][c] = v;
        }
    }
    out
}

/// `acc[r, o] = Σ_k xq[r, k] · wq[o, k]` in exact integer arithmetic, then
/// `y[r, o] = act(acc · x_scale[r] · w_scale[o] + bias[o])`. `xq` is `rows × kp` and
/// `wq` `bias.len() × kp`, with `kp` a multiple of [`INT_LANES`] (zero padding).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_i8(
    xq: &[i16],
    x_scale: &[f32],
    kp: usize,
    wq: &[i16],
    w_scale: &[f32],
    bias: &[f32],
    relu: bool,
    y: &mut [f32],
) {
    debug_assert_eq!(kp % INT_LANES, 0);
    debug_assert_eq!(wq.len(), bias.len() * kp);
    let job = GemmI8 {
        xq,
        x_scale,
        kp,
        wq,
        w_scale,
        bias,
        relu,
        y,
    };
    #[cfg(target_arch = "x86_64")]
    if let Some(v3) = pulp::x86::V3::try_new() {
        return v3.vectorize(move || job.run(|xs, ws| x86::dots_i16(v3, xs, ws)));
    }
    pulp::Arch::new().dispatch(PortableI8(job));
}

struct GemmI8<'a> {
    xq: &'a [i16],
    x_scale: &'a [f32],
    kp: usize,
    wq: &'a [i16],
    w_scale: &'a [f32],
    bias: &'a [f32],
    relu: bool,
    y: &'a mut [f32],
}

type Lanes = [i16; INT_LANES];

impl GemmI8<'_> {
    /// The blocking, shared by the instruction sets; `dots` computes one block (it is
    /// called with R × C of 4 × 2, 4 × 1, 1 × 4 and 1 × 1; see `dots_any`).
    #[inline(always)]
    fn run(self, dots: impl Fn(&[&[Lanes]], &[&[Lanes]]) -> [[i32; 4]; 4]) {
        let GemmI8 {
            xq,
            x_scale,
            kp,
            wq,
            w_scale,
            bias,
            relu,
            y,
        } = self;
        let outs = bias.len();
        if outs == 0 {
            return;
        }
        let rows = y.len() / outs;
        let (xl, _) = pulp::as_arrays::<INT_LANES, i16>(xq);
        let (wl, _) = pulp::as_arrays::<INT_LANES, i16>(wq);
        let n = kp / INT_LANES;
        let xrow = |r: usize| &xl[r * n..(r + 1) * n];
        let wrow = |o: usize| &wl[o * n..(o + 1) * n];
        let mut store = |r: usize, o: usize, acc: i32| {
            let v = acc as f32 * (x_scale[r] * w_scale[o]) + bias[o];
            y[r * outs + o] = if relu && v < 0.0 { 0.0 } else { v };
        };
        let mut r = 0;
        while r + BLOCK_ROWS <= rows {
            let xs: [&[Lanes]; BLOCK_ROWS] = std::array::from_fn(|a| xrow(r + a));
            let mut o = 0;
            while o + BLOCK_COLS <= outs {
                let d = dots(&xs, &[wrow(o), wrow(o + 1)]);
                for (a, da) in d.iter().enumerate() {
                    store(r + a, o, da[0]);
                    store(r + a, o + 1, da[1]);
                }
                o += BLOCK_COLS;
            }
            for o in o..outs {
                let d = dots(&xs, &[wrow(o)]);
                for (a, da) in d.iter().enumerate() {
                    store(r + a, o, da[0]);
                }
            }
            r += BLOCK_ROWS;
        }
        for r in r..rows {
            let xs = [xrow(r)];
            let mut o = 0;
            while o + 4 <= outs {
                let d = dots(&xs, &[wrow(o), wrow(o + 1), wrow(o + 2), wrow(o + 3)]);
                for c in 0..4 {
                    store(r, o + c, d[0][c]);
                }
                o += 4;
            }
            for o in o..outs {
                store(r, o, dots(&xs, &[wrow(o)])[0][0]);
            }
        }
    }
}

/// Calls the const-generic block `f::<R, C>` for the shapes `GemmI8::run` uses, so the
/// block's loops are fully unrolled for each.
macro_rules! dots_any {
    ($f:ident ($($pre:expr),*), $xs:expr, $ws:expr) => {{
        let (xs, ws) = ($xs, $ws);
        let mut out = [[0i32; 4]; 4];
        match (xs.len(), ws.len()) {
            (4, 2) => copy_block(
                &mut out,
                $f($($pre,)* [xs[0], xs[1], xs[2], xs[3]], [ws[0], ws[1]]),
            ),
            (4, 1) => copy_block(&mut out, $f($($pre,)* [xs[0], xs[1], xs[2], xs[3]], [ws[0]])),
            (1, 4) => copy_block(&mut out, $f($($pre,)* [xs[0]], [ws[0], ws[1], ws[2], ws[3]])),
            _ => {
                for (a, x) in xs.iter().enumerate() {
                    for (c, w) in ws.iter().enumerate() {
                        out[a][c] = copy_block_one($f($($pre,)* [*x], [*w]));
                    }
                }
            }
        }
        out
    }};
}

#[inline(always)]
fn copy_block<const R: usize, const C: usize>(out: &mut [[i32; 4]; 4], d: [[i32; C]; R]) {
    for a in 0..R {
        out[a][..C].copy_from_slice(&d[a]);
    }
}

#[inline(always)]
fn copy_block_one(d: [[i32; 1]; 1]) -> i32 {
    d[0][0]
}

/// The portable int8 path: plain loops over 16-lane arrays, which the compiler turns
/// into the target's multiply-add instructions.
struct PortableI8<'a>(GemmI8<'a>);

impl WithSimd for PortableI8<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _s: S) {
        self.0.run(|xs, ws| dots_any!(dots_i16_portable(), xs, ws));
    }
}

#[inline(always)]
fn dots_i16_portable<const R: usize, const C: usize>(
    xs: [&[Lanes]; R],
    ws: [&[Lanes]; C],
) -> [[i32; C]; R] {
    let n = xs[0].len();
    let xv: [&[Lanes]; R] = std::array::from_fn(|a| &xs[a][..n]);
    let wv: [&[Lanes]; C] = std::array::from_fn(|c| &ws[c][..n]);
    let mut acc = [[[0i32; INT_LANES]; C]; R];
    for i in 0..n {
        for a in 0..R {
            for c in 0..C {
                for l in 0..INT_LANES {
                    acc[a][c][l] += i32::from(xv[a][i][l]) * i32::from(wv[c][i][l]);
                }
            }
        }
    }
    acc.map(|row| row.map(|lanes| lanes.iter().sum()))
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use pulp::x86::V3;
    use std::arch::x86_64::__m256i;

    use super::{copy_block, copy_block_one, Lanes};

    #[inline(always)]
    pub(super) fn dots_i16(v3: V3, xs: &[&[Lanes]], ws: &[&[Lanes]]) -> [[i32; 4]; 4] {
        dots_any!(block(v3), xs, ws)
    }

    /// `vpmaddwd` multiplies 16 i16 pairs and adds neighbours into 8 i32 lanes.
    #[inline(always)]
    fn block<const R: usize, const C: usize>(
        v3: V3,
        xs: [&[Lanes]; R],
        ws: [&[Lanes]; C],
    ) -> [[i32; C]; R] {
        let n = xs[0].len();
        let xv: [&[Lanes]; R] = std::array::from_fn(|a| &xs[a][..n]);
        let wv: [&[Lanes]; C] = std::array::from_fn(|c| &ws[c][..n]);
        let mut acc = [[v3.avx._mm256_setzero_si256(); C]; R];
        for i in 0..n {
            let wi: [__m256i; C] = std::array::from_fn(|c| pulp::bytemuck::cast(wv[c][i]));
            for a in 0..R {
                let xi: __m256i = pulp::bytemuck::cast(xv[a][i]);
                for c in 0..C {
                    acc[a][c] = v3
                        .avx2
                        ._mm256_add_epi32(acc[a][c], v3.avx2._mm256_madd_epi16(xi, wi[c]));
                }
            }
        }
        acc.map(|row| {
            row.map(|v| {
                let lanes: [i32; 8] = pulp::bytemuck::cast(v);
                lanes.iter().sum()
            })
        })
    }
}

/// Quantizes each row of `x` (`rows × k`) to int8 symmetric with its own scale
/// (`max |x| / 127`), written sign-extended into `xq` (`rows × kp`, zero padded).
pub(crate) fn quantize_rows(x: &[f32], k: usize, kp: usize, xq: &mut [i16], scale: &mut [f32]) {
    for (r, s) in scale.iter_mut().enumerate() {
        let row = &x[r * k..(r + 1) * k];
        let q = &mut xq[r * kp..(r + 1) * kp];
        let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        // NaN and infinity cannot be quantized; they come out as 0 and saturate, as a
        // NaN input would poison any f32 sum too (the encoder never produces one).
        let (inv, sc) = if amax > 0.0 && amax.is_finite() {
            (127.0 / amax, amax / 127.0)
        } else {
            (0.0, 1.0)
        };
        *s = sc;
        for (qv, v) in q.iter_mut().zip(row) {
            *qv = (v * inv).round().clamp(-127.0, 127.0) as i16;
        }
        q[k..].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn reference_f32(x: &[f32], k: usize, w: &[f32], b: &[f32], relu: bool) -> Vec<f32> {
        let rows = x.len() / k;
        let mut y = Vec::new();
        for r in 0..rows {
            for (o, bo) in b.iter().enumerate() {
                let mut s = 0f64;
                for i in 0..k {
                    s += f64::from(x[r * k + i]) * f64::from(w[o * k + i]);
                }
                let v = s as f32 + bo;
                y.push(if relu { v.max(0.0) } else { v });
            }
        }
        y
    }

    fn reference_i8(xq: &[i16], kp: usize, wq: &[i16], outs: usize) -> Vec<i32> {
        let rows = xq.len() / kp;
        let mut acc = Vec::new();
        for r in 0..rows {
            for o in 0..outs {
                acc.push(
                    (0..kp)
                        .map(|i| i32::from(xq[r * kp + i]) * i32::from(wq[o * kp + i]))
                        .sum(),
                );
            }
        }
        acc
    }

    fn shape() -> impl Strategy<Value = (usize, usize, usize)> {
        // rows, k, outs: across the block edges (4 rows, 2 and 4 outputs, 8 and 16 lanes).
        (1usize..11, 1usize..70, 1usize..11)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn f32_kernel_matches_the_reference((rows, k, outs) in shape(), seed in any::<u64>(), relu in any::<bool>()) {
            let mut g = crate::testing::Rng(seed);
            let x = g.normals(rows * k);
            let w = g.normals(outs * k);
            let b = g.normals(outs);
            let mut y = vec![f32::NAN; rows * outs];
            gemm_f32(&x, k, &w, &b, relu, &mut y);
            let want = reference_f32(&x, k, &w, &b, relu);
            for (got, want) in y.iter().zip(&want) {
                prop_assert!((got - want).abs() <= 1e-4 * (1.0 + want.abs()), "{got} vs {want}");
            }
        }

        #[test]
        fn int8_kernel_is_exact_integer_arithmetic((rows, k, outs) in shape(), seed in any::<u64>()) {
            let mut g = crate::testing::Rng(seed);
            let kp = k.div_ceil(INT_LANES) * INT_LANES;
            let mut xq = vec![0i16; rows * kp];
            let mut wq = vec![0i16; outs * kp];
            for r in 0..rows { for i in 0..k { xq[r * kp + i] = g.int8(); } }
            for o in 0..outs { for i in 0..k { wq[o * kp + i] = g.int8(); } }
            let ones = vec![1f32; rows.max(outs)];
            let zeros = vec![0f32; outs];
            let mut y = vec![f32::NAN; rows * outs];
            gemm_i8(&xq, &ones[..rows], kp, &wq, &ones[..outs], &zeros, false, &mut y);
            let want = reference_i8(&xq, kp, &wq, outs);
            // Exact: every sum here is below 2^24, where f32 holds integers exactly.
            for (got, want) in y.iter().zip(&want) {
                prop_assert_eq!(*got, *want as f32);
            }
            // The portable path (the one arm64 and old x86 take) agrees too.
            let mut p = vec![f32::NAN; rows * outs];
            let job = GemmI8 { xq: &xq, x_scale: &ones[..rows], kp, wq: &wq, w_scale: &ones[..outs], bias: &zeros, relu: false, y: &mut p };
            pulp::Arch::new().dispatch(PortableI8(job));
            prop_assert_eq!(&p, &y);
        }
    }

    #[test]
    fn the_extreme_int8_values_do_not_overflow() {
        let k = 4096;
        let xq = vec![-127i16; k];
        let wq = vec![-127i16; k];
        let mut y = [0f32];
        gemm_i8(&xq, &[1.0], k, &wq, &[1.0], &[0.0], false, &mut y);
        assert_eq!(y[0], (127 * 127 * k) as f32);
    }

    #[test]
    fn a_row_quantizes_to_its_own_scale_and_pads_with_zeros() {
        let x = [0.5f32, -1.0, 0.25, 0.0, 0.0, 0.0];
        let mut xq = vec![9i16; 2 * 16];
        let mut s = [0f32; 2];
        quantize_rows(&x, 3, 16, &mut xq, &mut s);
        assert_eq!(&xq[..3], &[64, -127, 32]);
        assert!(xq[3..16].iter().all(|v| *v == 0));
        assert_eq!(s[0], 1.0 / 127.0);
        // An all-zero row gets scale 1 and zeros, never a division by zero.
        assert_eq!(s[1], 1.0);
        assert!(xq[16..].iter().all(|v| *v == 0));
    }
}
