//! The matrix kernels of the native runtime: `y = x·Wᵀ + b`, then ReLU where asked, for
//! f32 weights and for int8 weights with int8 activations.
//!
//! Weights are kept as the trainer writes them, `[out, in]`, so every output is the dot
//! product of two contiguous rows: one of `x`, one of `W`. One driver ([`drive`]) walks
//! both kinds of kernel over the output:
//! - outputs in tiles of [`TILE_OUT`], so a tile's weights stay in the L2 cache while
//!   every block of rows passes over them (otherwise a batch re-reads every weight from
//!   memory once per block of rows);
//! - within a tile, blocks of 4 rows × 2 outputs (eight accumulators and six loads a
//!   step, which fits the sixteen vector registers of AVX2), so each loaded vector is
//!   used several times; rows left over (all of them at batch 1) go 1 × 4. With
//!   AVX-512's 32 registers, f32 takes 4 × 4 blocks (16 accumulators in flight) and
//!   int8 8 × 2.
//!
//! The int8 path keeps weights as i8 (a quarter of f32's bytes, which is what batch-1
//! latency is made of) and quantized activations sign-extended to i16, both padded
//! with zeros to a multiple of 16. On AVX2 a step widens 16 weights to i16
//! (`vpmovsxbw`), and one `vpmaddwd` multiplies 16 pairs and adds neighbours into
//! eight i32 lanes — exactly: |q| ≤ 127, so a pair sums to at most 2·127², and a row of
//! up to 2^17 inputs stays far inside i32. f32 FMA does 8 multiply-adds an
//! instruction; this does 16. Where the CPU has AVX-512 (BW), the same step runs on
//! 32 lanes. (A 4 × 4 AVX-512 variant measured slower than AVX2 on the AMD EPYC this
//! was first written on, which runs 512-bit operations as two 256-bit halves; on a Zen 5
//! EPYC, which runs them whole, the 8 × 2 AVX-512 kernel gave batch 1 18% more rows a
//! second than AVX2 — docs/benchmarks.md.) Each accumulator's lanes are summed by
//! adding halves in registers: summed as an array, LLVM compiled them into gathers
//! from the stack, which took 60% of the time at batch 64.
//!
//! Dispatch is at run time through `pulp`: for f32 AVX-512 or else AVX2 + FMA, for
//! int8 AVX-512 (BW) or else AVX2, on x86-64 when the CPU has them; elsewhere the portable loops are
//! compiled for the baseline of the target (NEON on arm64), where the compiler
//! vectorizes them. Every kernel has a plain scalar
//! reference in the tests, which it must match (exactly for int8, within rounding for
//! f32). Everything from the dispatch down to the intrinsics is `inline(always)` or
//! generic over the instruction set, so all of it is compiled inside the function
//! `pulp` enables the instruction set for.

use pulp::{Simd, WithSimd};

/// Activations in one AVX2 register of i16: the int8 kernels' step.
pub(crate) const INT_LANES: usize = 16;

/// Inputs are padded to a multiple of this on the int8 path: one AVX-512 register of
/// i16 (two steps of the AVX2 and portable kernels).
pub(crate) const INT_PAD: usize = 32;

/// The AVX-512 int8 kernel's step.
const WIDE_LANES: usize = 32;

/// Outputs whose weights are kept hot while every row block passes: 64 rows of 1,024
/// int8 weights (64 KiB) or f32 weights of 512 inputs (128 KiB) fit in L2.
const TILE_OUT: usize = 64;

/// Rows and outputs computed together.
const BLOCK_ROWS: usize = 4;
const BLOCK_COLS: usize = 2;
/// f32 blocks on AVX-512 (32 registers: 16 accumulators, 4 weight vectors, 1 input).
const WIDE_ROWS: usize = 4;
const WIDE_COLS: usize = 4;
/// int8 blocks on AVX-512: 8 rows share each widened weight vector.
const I8_WIDE_ROWS: usize = 8;
const I8_WIDE_COLS: usize = 2;

/// One block of dot products for one element type and instruction set.
trait Kernel {
    type X;
    type W;
    type Acc: Copy;
    fn dots<const R: usize, const C: usize>(
        &self,
        xs: [&[Self::X]; R],
        ws: [&[Self::W]; C],
    ) -> [[Self::Acc; C]; R];
}

/// Walks `k` over `rows × outs` (see the module doc); `store(r, o, acc)` receives each
/// dot product once.
#[inline(always)]
fn drive<'a, K: Kernel, const ROWS: usize, const COLS: usize>(
    k: &K,
    rows: usize,
    outs: usize,
    xrow: impl Fn(usize) -> &'a [K::X],
    wrow: impl Fn(usize) -> &'a [K::W],
    mut store: impl FnMut(usize, usize, K::Acc),
) where
    K::X: 'a,
    K::W: 'a,
{
    let mut o0 = 0;
    while o0 < outs {
        let o1 = (o0 + TILE_OUT).min(outs);
        let mut r = 0;
        while r + ROWS <= rows {
            let xs: [&[K::X]; ROWS] = std::array::from_fn(|a| xrow(r + a));
            let mut o = o0;
            while o + COLS <= o1 {
                let ws: [&[K::W]; COLS] = std::array::from_fn(|c| wrow(o + c));
                let d = k.dots(xs, ws);
                for (a, da) in d.iter().enumerate() {
                    for (c, v) in da.iter().enumerate() {
                        store(r + a, o + c, *v);
                    }
                }
                o += COLS;
            }
            for o in o..o1 {
                let d = k.dots(xs, [wrow(o)]);
                for (a, da) in d.iter().enumerate() {
                    store(r + a, o, da[0]);
                }
            }
            r += ROWS;
        }
        for r in r..rows {
            let xs = [xrow(r)];
            let mut o = o0;
            while o + 4 <= o1 {
                let ws: [&[K::W]; 4] = std::array::from_fn(|c| wrow(o + c));
                for (c, v) in k.dots(xs, ws)[0].iter().enumerate() {
                    store(r, o + c, *v);
                }
                o += 4;
            }
            for o in o..o1 {
                store(r, o, k.dots(xs, [wrow(o)])[0][0]);
            }
        }
        o0 = o1;
    }
}

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
        if outs == 0 {
            return;
        }
        if k == 0 {
            // No inputs: every output is its bias.
            for (i, v) in y.iter_mut().enumerate() {
                let b = bias[i % outs];
                *v = if relu && b < 0.0 { 0.0 } else { b };
            }
            return;
        }
        let rows = y.len() / outs;
        // 512-bit registers come 32 to a core: a wider block keeps more FMAs in flight.
        if std::mem::size_of::<S::f32s>() >= 64 {
            return drive::<_, WIDE_ROWS, WIDE_COLS>(
                &F32Dots(s),
                rows,
                outs,
                |r| &x[r * k..(r + 1) * k],
                |o| &w[o * k..(o + 1) * k],
                |r, o, v| {
                    let v = v + bias[o];
                    y[r * outs + o] = if relu && v < 0.0 { 0.0 } else { v };
                },
            );
        }
        drive::<_, BLOCK_ROWS, BLOCK_COLS>(
            &F32Dots(s),
            rows,
            outs,
            |r| &x[r * k..(r + 1) * k],
            |o| &w[o * k..(o + 1) * k],
            |r, o, v| {
                let v = v + bias[o];
                y[r * outs + o] = if relu && v < 0.0 { 0.0 } else { v };
            },
        );
    }
}

struct F32Dots<S>(S);

impl<S: Simd> Kernel for F32Dots<S> {
    type X = f32;
    type W = f32;
    type Acc = f32;

    /// The R × C dot products of `xs` with `ws` (all of one length).
    #[inline(always)]
    fn dots<const R: usize, const C: usize>(
        &self,
        xs: [&[f32]; R],
        ws: [&[f32]; C],
    ) -> [[f32; C]; R] {
        let s = self.0;
        // Loops, not array `map`: `map` is not always inlined, and out of line it runs
        // without the instruction set (8% of the time in a profile).
        let mut xh: [(&[S::f32s], &[f32]); R] = [(&[], &[]); R];
        for (h, x) in xh.iter_mut().zip(xs) {
            *h = S::as_simd_f32s(x);
        }
        let mut wh: [(&[S::f32s], &[f32]); C] = [(&[], &[]); C];
        for (h, w) in wh.iter_mut().zip(ws) {
            *h = S::as_simd_f32s(w);
        }
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
}

/// `acc[r, o] = Σ_k xq[r, k] · wq[o, k]` in exact integer arithmetic, then
/// `y[r, o] = act(acc · x_scale[r] · w_scale[o] + bias[o])`. `xq` is `rows × kp` and
/// `wq` `bias.len() × kp`, with `kp` a multiple of [`INT_PAD`] (zero padding).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm_i8(
    xq: &[i16],
    x_scale: &[f32],
    kp: usize,
    wq: &[i8],
    w_scale: &[f32],
    bias: &[f32],
    relu: bool,
    y: &mut [f32],
) {
    debug_assert_eq!(kp % INT_PAD, 0);
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
    job.dispatch();
}

struct GemmI8<'a> {
    xq: &'a [i16],
    x_scale: &'a [f32],
    kp: usize,
    wq: &'a [i8],
    w_scale: &'a [f32],
    bias: &'a [f32],
    relu: bool,
    y: &'a mut [f32],
}

type XLanes = [i16; INT_LANES];
type WLanes = [i8; INT_LANES];

impl GemmI8<'_> {
    /// Runs on the widest int8 kernel the CPU has.
    fn dispatch(self) {
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(v4) = pulp::x86::V4::try_new() {
                return Simd::vectorize(v4, x86::Avx512I8(self, v4));
            }
            if let Some(v3) = pulp::x86::V3::try_new() {
                return Simd::vectorize(v3, x86::Avx2I8(self, v3));
            }
        }
        pulp::Arch::new().dispatch(PortableI8(self));
    }

    #[inline(always)]
    fn run<
        const N: usize,
        K: Kernel<X = [i16; N], W = [i8; N], Acc = i32>,
        const ROWS: usize,
        const COLS: usize,
    >(
        self,
        k: K,
    ) {
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
        let (xl, _) = pulp::as_arrays::<N, i16>(xq);
        let (wl, _) = pulp::as_arrays::<N, i8>(wq);
        let n = kp / N;
        drive::<_, ROWS, COLS>(
            &k,
            rows,
            outs,
            |r| &xl[r * n..(r + 1) * n],
            |o| &wl[o * n..(o + 1) * n],
            |r, o, acc| {
                let v = acc as f32 * (x_scale[r] * w_scale[o]) + bias[o];
                y[r * outs + o] = if relu && v < 0.0 { 0.0 } else { v };
            },
        );
    }
}

/// The portable int8 path: plain loops over 16-lane arrays, which the compiler turns
/// into the target's multiply-add instructions.
struct PortableI8<'a>(GemmI8<'a>);

impl WithSimd for PortableI8<'_> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _s: S) {
        self.0
            .run::<INT_LANES, _, BLOCK_ROWS, BLOCK_COLS>(PortableDots);
    }
}

struct PortableDots;

impl Kernel for PortableDots {
    type X = XLanes;
    type W = WLanes;
    type Acc = i32;

    #[inline(always)]
    fn dots<const R: usize, const C: usize>(
        &self,
        xs: [&[XLanes]; R],
        ws: [&[WLanes]; C],
    ) -> [[i32; C]; R] {
        let n = xs[0].len();
        let xv: [&[XLanes]; R] = std::array::from_fn(|a| &xs[a][..n]);
        let wv: [&[WLanes]; C] = std::array::from_fn(|c| &ws[c][..n]);
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
        let mut out = [[0i32; C]; R];
        for a in 0..R {
            for c in 0..C {
                out[a][c] = acc[a][c].iter().sum();
            }
        }
        out
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use pulp::x86::{V3, V4};
    use pulp::{Simd, WithSimd};
    use std::arch::x86_64::{__m128i, __m256i, __m512i};

    use super::{GemmI8, Kernel, WLanes, XLanes, WIDE_LANES};

    /// The int8 product on AVX-512 (BW): 32 activations a step, in blocks of
    /// `I8_WIDE_ROWS × I8_WIDE_COLS`.
    pub(super) struct Avx512I8<'a>(pub(super) GemmI8<'a>, pub(super) V4);

    impl WithSimd for Avx512I8<'_> {
        type Output = ();

        #[inline(always)]
        fn with_simd<S: Simd>(self, _s: S) {
            let Avx512I8(job, v4) = self;
            job.run::<WIDE_LANES, _, { super::I8_WIDE_ROWS }, { super::I8_WIDE_COLS }>(Avx512Dots(
                v4,
            ));
        }
    }

    struct Avx512Dots(V4);

    impl Kernel for Avx512Dots {
        type X = [i16; WIDE_LANES];
        type W = [i8; WIDE_LANES];
        type Acc = i32;

        /// Per step: widen 32 weights to i16, then `vpmaddwd` with 32 activations.
        #[inline(always)]
        fn dots<const R: usize, const C: usize>(
            &self,
            xs: [&[Self::X]; R],
            ws: [&[Self::W]; C],
        ) -> [[i32; C]; R] {
            let v4 = self.0;
            let n = xs[0].len();
            let xv: [&[Self::X]; R] = std::array::from_fn(|a| &xs[a][..n]);
            let wv: [&[Self::W]; C] = std::array::from_fn(|c| &ws[c][..n]);
            let mut acc = [[v4.avx512f._mm512_setzero_si512(); C]; R];
            for i in 0..n {
                let wi: [__m512i; C] = std::array::from_fn(|c| {
                    let w: __m256i = pulp::bytemuck::cast(wv[c][i]);
                    v4.avx512bw._mm512_cvtepi8_epi16(w)
                });
                for a in 0..R {
                    let xi: __m512i = pulp::bytemuck::cast(xv[a][i]);
                    for c in 0..C {
                        acc[a][c] = v4
                            .avx512f
                            ._mm512_add_epi32(acc[a][c], v4.avx512bw._mm512_madd_epi16(xi, wi[c]));
                    }
                }
            }
            let mut out = [[0i32; C]; R];
            for a in 0..R {
                for c in 0..C {
                    // Halves added in registers: a plain sum of the 16 lanes was
                    // compiled into gathers, 60% of int8's time at batch 64.
                    let [lo, hi]: [__m256i; 2] = pulp::bytemuck::cast(acc[a][c]);
                    let v = v4.avx2._mm256_add_epi32(lo, hi);
                    let [lo, hi]: [__m128i; 2] = pulp::bytemuck::cast(v);
                    let lanes: [i32; 4] = pulp::bytemuck::cast(v4.sse2._mm_add_epi32(lo, hi));
                    out[a][c] = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
                }
            }
            out
        }
    }

    /// The int8 product on AVX2, run through `V3`'s `Simd::vectorize`.
    pub(super) struct Avx2I8<'a>(pub(super) GemmI8<'a>, pub(super) V3);

    impl WithSimd for Avx2I8<'_> {
        type Output = ();

        #[inline(always)]
        fn with_simd<S: Simd>(self, _s: S) {
            let Avx2I8(job, v3) = self;
            job.run::<{ super::INT_LANES }, _, { super::BLOCK_ROWS }, { super::BLOCK_COLS }>(
                Avx2Dots(v3),
            );
        }
    }

    struct Avx2Dots(V3);

    impl Kernel for Avx2Dots {
        type X = XLanes;
        type W = WLanes;
        type Acc = i32;

        /// Per step: widen 16 weights to i16, then `vpmaddwd` with 16 activations.
        #[inline(always)]
        fn dots<const R: usize, const C: usize>(
            &self,
            xs: [&[XLanes]; R],
            ws: [&[WLanes]; C],
        ) -> [[i32; C]; R] {
            let v3 = self.0;
            let n = xs[0].len();
            let xv: [&[XLanes]; R] = std::array::from_fn(|a| &xs[a][..n]);
            let wv: [&[WLanes]; C] = std::array::from_fn(|c| &ws[c][..n]);
            let mut acc = [[v3.avx._mm256_setzero_si256(); C]; R];
            for i in 0..n {
                let wi: [__m256i; C] = std::array::from_fn(|c| {
                    let w: __m128i = pulp::bytemuck::cast(wv[c][i]);
                    v3.avx2._mm256_cvtepi8_epi16(w)
                });
                for a in 0..R {
                    let xi: __m256i = pulp::bytemuck::cast(xv[a][i]);
                    for c in 0..C {
                        acc[a][c] = v3
                            .avx2
                            ._mm256_add_epi32(acc[a][c], v3.avx2._mm256_madd_epi16(xi, wi[c]));
                    }
                }
            }
            let mut out = [[0i32; C]; R];
            for a in 0..R {
                for c in 0..C {
                    let [lo, hi]: [__m128i; 2] = pulp::bytemuck::cast(acc[a][c]);
                    let lanes: [i32; 4] = pulp::bytemuck::cast(v3.sse2._mm_add_epi32(lo, hi));
                    out[a][c] = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
                }
            }
            out
        }
    }
}

/// Quantizes each row of `x` (`rows × k`) to int8 symmetric with its own scale
/// (`max |x| / 127`), written into `xq` (`rows × kp`, padded with zeros): sign-extended
/// to i16 for the pulp kernels, or as `q + 128` (u8, padding 128) for the VNNI kernel.
pub(crate) fn quantize_rows<T: Quantized>(
    x: &[f32],
    k: usize,
    kp: usize,
    xq: &mut [T],
    scale: &mut [f32],
    fixed: Option<f32>,
) {
    pulp::Arch::new().dispatch(QuantizeRows {
        x,
        k,
        kp,
        xq,
        scale,
        fixed,
    });
}

/// How a quantized activation is stored.
pub(crate) trait Quantized: Copy {
    const ZERO: Self;
    fn from_q(q: i16) -> Self;
}

impl Quantized for i16 {
    const ZERO: Self = 0;
    #[inline(always)]
    fn from_q(q: i16) -> Self {
        q
    }
}

impl Quantized for u8 {
    const ZERO: Self = 128;
    #[inline(always)]
    fn from_q(q: i16) -> Self {
        // q ∈ [-127, 127], so q + 128 ∈ [1, 255].
        (q + 128) as u8
    }
}

struct QuantizeRows<'a, T> {
    x: &'a [f32],
    k: usize,
    kp: usize,
    xq: &'a mut [T],
    scale: &'a mut [f32],
    /// Static quantization: the calibrated largest magnitude, used for every row
    /// (values beyond it saturate); `None` takes each row's own.
    fixed: Option<f32>,
}

impl<T: Quantized> WithSimd for QuantizeRows<'_, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, _s: S) {
        let QuantizeRows {
            x,
            k,
            kp,
            xq,
            scale,
            fixed,
        } = self;
        for (r, s) in scale.iter_mut().enumerate() {
            let row = &x[r * k..(r + 1) * k];
            let q = &mut xq[r * kp..(r + 1) * kp];
            let amax = fixed.unwrap_or_else(|| abs_max(row));
            // NaN and infinity cannot be quantized; such a row comes out as zeros (the
            // encoder never produces one).
            let (inv, sc) = if amax > 0.0 && amax.is_finite() {
                (127.0 / amax, amax / 127.0)
            } else {
                (0.0, 1.0)
            };
            *s = sc;
            for (qv, v) in q.iter_mut().zip(row) {
                *qv = T::from_q(round_to_int(v * inv));
            }
            q[k..].fill(T::ZERO);
        }
    }
}

/// The instruction set the portable f32 kernel runs on here (through `pulp`).
pub(crate) fn f32_path() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if pulp::x86::V4::try_new().is_some() {
            return "avx512";
        }
        if pulp::x86::V3::try_new().is_some() {
            return "avx2-fma";
        }
    }
    "portable"
}

/// The instruction set [`gemm_i8`] runs on here.
pub(crate) fn int8_path() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if pulp::x86::V4::try_new().is_some() {
            return "avx512bw";
        }
        if pulp::x86::V3::try_new().is_some() {
            return "avx2";
        }
    }
    "portable"
}

/// The largest `|v|` of `row` (0 for an empty row; NaN ignored, as `f32::max` does),
/// kept in 64 lanes so the loop vectorizes (one running maximum is a chain of scalar
/// `maxss`); the maximum does not depend on the order it is taken in.
#[inline(always)]
fn abs_max(row: &[f32]) -> f32 {
    // Four registers of 16 lanes: four independent chains of `max`.
    let mut lanes = [0f32; 64];
    let chunks = row.chunks_exact(64);
    let tail = chunks.remainder();
    for chunk in chunks {
        for (m, v) in lanes.iter_mut().zip(chunk) {
            *m = m.max(v.abs());
        }
    }
    let m = tail.iter().fold(0f32, |m, v| m.max(v.abs()));
    lanes.iter().fold(m, |a, b| a.max(*b))
}

/// Rounds half away from zero and saturates to ±127 (NaN to 0), without a libm
/// `roundf` call or a saturating `as` conversion, both of which LLVM does one value at
/// a time: `trunc` is one vector instruction, and an integer-valued float `r` with
/// `|r| ≤ 127` added to 1.5·2²³ holds `r` in the low bits of its mantissa, exactly.
#[inline(always)]
fn round_to_int(t: f32) -> i16 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2²³, bits 0x4B40_0000
    let t = if t.is_nan() {
        0.0
    } else {
        t.clamp(-127.0, 127.0)
    };
    let r = (t + 0.5f32.copysign(t)).trunc();
    ((r + MAGIC).to_bits() as i32 - MAGIC.to_bits() as i32) as i16
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rounding_equals_the_saturating_conversion_it_replaces() {
        let plain = |t: f32| {
            let t = t.clamp(-127.0, 127.0);
            (t + 0.5f32.copysign(t)) as i16
        };
        let mut cases = vec![
            0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 126.5, -126.5, 127.0, 127.49,
        ];
        cases.extend([
            1e9,
            -1e9,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            2.5,
            -2.5,
        ]);
        // Every quarter step across the range and past it.
        cases.extend((-600..=600).map(|i| i as f32 * 0.25));
        cases.extend((0..10_000).map(|i| (i as f32 * 0.0137).sin() * 140.0));
        for t in cases {
            assert_eq!(round_to_int(t), plain(t), "{t}");
        }
    }

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

    fn reference_i8(xq: &[i16], kp: usize, wq: &[i8], outs: usize) -> Vec<i32> {
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
        // rows, k, outs: across the block edges (4 and 8 rows, 2 and 4 outputs, 8, 16
        // and 32 lanes) and the output tiles (64).
        (
            1usize..11,
            1usize..70,
            prop_oneof![1usize..11, 60usize..70, 126usize..131],
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]

        #[test]
        fn f32_kernel_matches_the_reference((rows, k, outs) in shape(), seed in any::<u64>(), relu in any::<bool>()) {
            let mut g = crate::testing::Rng(seed);
            let x = g.normals(rows * k);
            let w = g.normals(outs * k);
            let b = g.normals(outs);
            let want = reference_f32(&x, k, &w, &b, relu);
            for (path, y) in f32_paths(&x, k, &w, &b, relu) {
                for (got, want) in y.iter().zip(&want) {
                    prop_assert!((got - want).abs() <= 1e-4 * (1.0 + want.abs()), "{path}: {got} vs {want}");
                }
            }
        }

        #[test]
        fn int8_kernel_is_exact_integer_arithmetic((rows, k, outs) in shape(), seed in any::<u64>()) {
            let mut g = crate::testing::Rng(seed);
            let kp = k.div_ceil(INT_PAD) * INT_PAD;
            let mut xq = vec![0i16; rows * kp];
            let mut wq = vec![0i8; outs * kp];
            for r in 0..rows { for i in 0..k { xq[r * kp + i] = g.int8(); } }
            for o in 0..outs { for i in 0..k { wq[o * kp + i] = g.int8() as i8; } }
            let want = reference_i8(&xq, kp, &wq, outs);
            // Exact: every sum here is below 2^24, where f32 holds integers exactly.
            for (path, y) in int8_paths(&xq, rows, kp, &wq, outs) {
                for (got, want) in y.iter().zip(&want) {
                    prop_assert_eq!(*got, *want as f32, "{}", path);
                }
            }
        }
    }

    /// `gemm_f32` on every instruction set this CPU has, and the plain fallback.
    fn f32_paths(
        x: &[f32],
        k: usize,
        w: &[f32],
        b: &[f32],
        relu: bool,
    ) -> Vec<(&'static str, Vec<f32>)> {
        let rows = x.len() / k;
        let mut out = Vec::new();
        let mut run = |name: &'static str, f: &dyn Fn(GemmF32<'_>)| {
            let mut y = vec![f32::NAN; rows * b.len()];
            f(GemmF32 {
                x,
                k,
                w,
                bias: b,
                relu,
                y: &mut y,
            });
            out.push((name, y));
        };
        run("scalar", &|j| pulp::Scalar::new().vectorize(j));
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(v3) = pulp::x86::V3::try_new() {
                run("avx2", &move |j| Simd::vectorize(v3, j));
            }
            if let Some(v4) = pulp::x86::V4::try_new() {
                run("avx512", &move |j| Simd::vectorize(v4, j));
            }
        }
        out
    }

    /// `gemm_i8` (unit scales, no bias) on every kernel this CPU has: the portable one
    /// (what arm64 and old x86 take), AVX2 and AVX-512.
    fn int8_paths(
        xq: &[i16],
        rows: usize,
        kp: usize,
        wq: &[i8],
        outs: usize,
    ) -> Vec<(&'static str, Vec<f32>)> {
        let ones = vec![1f32; rows.max(outs)];
        let zeros = vec![0f32; outs];
        let mut out = Vec::new();
        let mut run = |name: &'static str, f: &dyn Fn(GemmI8<'_>)| {
            let mut y = vec![f32::NAN; rows * outs];
            f(GemmI8 {
                xq,
                x_scale: &ones[..rows],
                kp,
                wq,
                w_scale: &ones[..outs],
                bias: &zeros,
                relu: false,
                y: &mut y,
            });
            out.push((name, y));
        };
        run("portable", &|j| pulp::Arch::new().dispatch(PortableI8(j)));
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(v3) = pulp::x86::V3::try_new() {
                run("avx2", &move |j| Simd::vectorize(v3, x86::Avx2I8(j, v3)));
            }
            if let Some(v4) = pulp::x86::V4::try_new() {
                run("avx512", &move |j| {
                    Simd::vectorize(v4, x86::Avx512I8(j, v4))
                });
            }
        }
        out
    }

    #[test]
    fn the_extreme_int8_values_do_not_overflow() {
        let k = 4096;
        let xq = vec![-127i16; k];
        let wq = vec![-127i8; k];
        let mut y = [0f32];
        gemm_i8(&xq, &[1.0], k, &wq, &[1.0], &[0.0], false, &mut y);
        assert_eq!(y[0], (127 * 127 * k) as f32);
    }

    #[test]
    fn a_row_quantizes_to_its_own_scale_and_pads_with_zeros() {
        let x = [0.5f32, -1.0, 0.25, 0.0, 0.0, 0.0];
        let mut xq = vec![9i16; 2 * 16];
        let mut s = [0f32; 2];
        quantize_rows(&x, 3, 16, &mut xq, &mut s, None);
        assert_eq!(&xq[..3], &[64, -127, 32]);
        assert!(xq[3..16].iter().all(|v| *v == 0));
        assert_eq!(s[0], 1.0 / 127.0);
        // An all-zero row gets scale 1 and zeros, never a division by zero.
        assert_eq!(s[1], 1.0);
        assert!(xq[16..].iter().all(|v| *v == 0));
    }

    #[test]
    fn the_vnni_layout_is_the_same_quantization_offset_by_128() {
        let mut g = crate::testing::Rng(31);
        let (rows, k, kp) = (5, 45, 64);
        let x = g.normals(rows * k);
        for fixed in [None, Some(1.5)] {
            let mut q = vec![0i16; rows * kp];
            let mut u = vec![0u8; rows * kp];
            let (mut s1, mut s2) = (vec![0f32; rows], vec![0f32; rows]);
            quantize_rows(&x, k, kp, &mut q, &mut s1, fixed);
            quantize_rows(&x, k, kp, &mut u, &mut s2, fixed);
            assert_eq!(s1, s2);
            let shifted: Vec<i16> = u.iter().map(|v| i16::from(*v) - 128).collect();
            assert_eq!(shifted, q);
        }
    }

    #[test]
    fn a_fixed_scale_is_used_for_every_row_and_saturates_beyond_it() {
        let x = [0.5f32, -1.0, 0.25, 0.05, 0.0, -0.5];
        let mut xq = vec![9i16; 2 * 16];
        let mut s = [0f32; 2];
        quantize_rows(&x, 3, 16, &mut xq, &mut s, Some(0.5));
        assert_eq!(s, [0.5 / 127.0; 2]);
        // -1.0 lies beyond the calibrated 0.5: it saturates at -127.
        assert_eq!(&xq[..3], &[127, -127, 64]);
        assert_eq!(&xq[16..19], &[13, 0, -127]);
    }
}
