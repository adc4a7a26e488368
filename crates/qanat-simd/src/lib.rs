//! Dense-layer kernels on instructions the safe SIMD layer (`pulp`) does not reach:
//! `y = act(x·Wᵀ + b)` for int8 weights with AMX tiles (`tdpbusd`: 16 × 16 × 64 u8 × i8
//! multiply-adds an instruction) for batches and AVX-512 VNNI (`vpdpbusd`: 64 an
//! instruction) for single rows, and for f32 weights with AVX-512 FMA, all over weights
//! packed in panels of [`PANEL`] outputs.
//!
//! This crate is the workspace's one exception to `forbid(unsafe_code)`, and only its
//! `x86` module uses it: every VNNI and FMA kernel there is a *safe* function compiled
//! with `#[target_feature]` (inside one, the intrinsics are safe to call), and the only
//! `unsafe` is the call into such a function after the CPU was checked, at run time, to
//! have every feature it was compiled for. Loads and stores go through slices and safe
//! casts (`bytemuck`), never raw pointers, so an index out of bounds panics instead of
//! reading past a buffer. AMX has no stable intrinsics: its tile instructions are
//! `asm!` blocks, each reading and writing only the slices it was handed (taken, and so
//! bounds-checked, before the block), and two `arch_prctl` calls ask Linux for the tile
//! state.
//!
//! Each kernel has a portable equivalent here ([`gemm_u8i8_portable`],
//! [`gemm_f32_portable`]): the same packed layout, plain loops. The tests check the
//! accelerated kernels against them on random shapes, tails included, and find them
//! equal bit for bit (the f32 twin fuses its multiply-adds in the same order).
//!
//! Layouts:
//! - int8: activations are quantized to `q ∈ [-127, 127]` and stored as `q + 128` (u8,
//!   what `vpdpbusd` multiplies), rows of `kp` (a multiple of 4; padding holds 128, i.e.
//!   zero). Weights are i8, packed as panels of 16 outputs × 4 inputs, so one 64-byte
//!   load feeds 16 outputs' dot products four inputs at a time (and 16 consecutive
//!   blocks are one AMX tile of 64 inputs × 16 outputs); the `+ 128` is taken
//!   back out with each output's `128 · Σₖ w` at the end. Sums wrap modulo 2³² in the
//!   register, and the corrected result is exact while `127² · kp < 2³¹`
//!   (`kp` < 133,000).
//! - f32: weights packed as panels of 16 outputs, one 16-float row per input, so one
//!   load and one broadcast input make 16 multiply-adds; blocks of rows × panels keep
//!   24 accumulators in the 32 vector registers.

#[cfg(target_arch = "x86_64")]
mod x86;

/// Outputs a packed panel holds: one 512-bit register of i32 or f32.
pub const PANEL: usize = 16;

/// Quads (4 inputs) in one AMX tile's K extent: 64 bytes a tile row.
const TILE_QUADS: usize = 16;

/// Batches of at least this many rows go to the AMX tiles when the CPU has them; fewer
/// rows would leave most of a 16-row tile padding, and the VNNI kernel is as fast there.
pub const AMX_MIN_ROWS: usize = 8;

/// The int8 kernels this CPU runs, if any: `"amx-int8+avx512-vnni"` (AMX tiles for
/// batches of [`AMX_MIN_ROWS`] rows or more, VNNI below) or `"avx512-vnni"`.
pub fn int8_kernel() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    if x86::has_amx() {
        return Some("amx-int8+avx512-vnni");
    }
    #[cfg(target_arch = "x86_64")]
    if x86::has_vnni() {
        return Some("avx512-vnni");
    }
    None
}

/// The packed f32 kernel this CPU runs, if any: `"avx512-fma"`.
pub fn f32_kernel() -> Option<&'static str> {
    #[cfg(target_arch = "x86_64")]
    if x86::has_avx512f() {
        return Some("avx512-fma");
    }
    None
}

fn pad_panels<T: Copy + Default>(v: &[T], panels: usize) -> Vec<[T; PANEL]> {
    let mut out = vec![[T::default(); PANEL]; panels];
    for (i, x) in v.iter().enumerate() {
        out[i / PANEL][i % PANEL] = *x;
    }
    out
}

/// An int8 layer's weights packed for [`gemm_u8i8`], with its per-output scales and bias.
#[derive(Debug, Clone, PartialEq)]
pub struct PackedI8 {
    outs: usize,
    kp: usize,
    /// Quads each panel holds: `kp / 4` rounded up to whole tiles ([`TILE_QUADS`]).
    n4p: usize,
    /// `[panel][n4p]`: 16 outputs × 4 consecutive inputs, panels padded to an even
    /// count; the padding is zero.
    blocks: Vec<[i8; 64]>,
    /// `128 · Σₖ w[o, k]` (wrapping), per output, padded to whole panels.
    offset: Vec<[i32; PANEL]>,
    scale: Vec<[f32; PANEL]>,
    bias: Vec<[f32; PANEL]>,
}

impl PackedI8 {
    /// Packs `q` (`outs × kp`, row-major, `outs = bias.len()`) with one scale per output.
    ///
    /// Panics unless `kp` is a multiple of 4 and the lengths agree.
    pub fn new(q: &[i8], kp: usize, scale: &[f32], bias: &[f32]) -> Self {
        let outs = bias.len();
        assert!(kp.is_multiple_of(4), "kp must be a multiple of 4");
        assert_eq!(q.len(), outs * kp, "weights must be outs × kp");
        assert_eq!(scale.len(), outs, "one scale per output");
        let panels = outs.div_ceil(PANEL);
        // Whole tiles for AMX: each panel's quads padded to a multiple of 16 (64 inputs)
        // and the panels to an even count, with zero weights (they add nothing).
        let n4p = (kp / 4).div_ceil(TILE_QUADS) * TILE_QUADS;
        let mut blocks = vec![[0i8; 64]; panels.next_multiple_of(2) * n4p];
        for (o, row) in q.chunks_exact(kp.max(1)).enumerate().take(outs) {
            let (p, lane) = (o / PANEL, o % PANEL);
            for (i, quad) in row.chunks_exact(4).enumerate() {
                blocks[p * n4p + i][lane * 4..lane * 4 + 4].copy_from_slice(quad);
            }
        }
        let sums: Vec<i32> = (0..outs)
            .map(|o| {
                q[o * kp..(o + 1) * kp]
                    .iter()
                    .fold(0i32, |s, v| s.wrapping_add(i32::from(*v)))
                    .wrapping_mul(128)
            })
            .collect();
        PackedI8 {
            outs,
            kp,
            n4p,
            blocks,
            offset: pad_panels(&sums, panels),
            scale: pad_panels(scale, panels),
            bias: pad_panels(bias, panels),
        }
    }

    pub fn outputs(&self) -> usize {
        self.outs
    }

    pub fn kp(&self) -> usize {
        self.kp
    }

    fn panels(&self) -> usize {
        self.offset.len()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.blocks.len() * 64 + self.panels() * PANEL * 12
    }
}

fn check_i8(xu: &[u8], xs: &[f32], w: &PackedI8, y: &[f32]) {
    assert_eq!(xu.len(), xs.len() * w.kp, "activations must be rows × kp");
    assert_eq!(y.len(), xs.len() * w.outs, "outputs must be rows × outs");
}

/// `y[r, o] = act((Σₖ (xu[r, k] − 128) · w[o, k]) · xs[r] · scale[o] + bias[o])`, `act`
/// being ReLU when `relu` (a negative value becomes 0; `-0.0` and NaN pass through).
/// Runs on the CPU's int8 kernel and returns `true`, or returns `false` (leaving `y`
/// alone) when [`int8_kernel`] is `None`.
///
/// Panics unless `xu` is `xs.len() × kp` and `y` is `xs.len() × outs`.
pub fn gemm_u8i8(xu: &[u8], xs: &[f32], w: &PackedI8, relu: bool, y: &mut [f32]) -> bool {
    if xs.len() >= AMX_MIN_ROWS && gemm_u8i8_amx(xu, xs, w, relu, y) {
        return true;
    }
    gemm_u8i8_vnni(xu, xs, w, relu, y)
}

/// [`gemm_u8i8`] on the AVX-512 VNNI kernel whatever the batch, returning `false` when
/// the CPU lacks it (for tests and benchmarks that compare the kernels).
pub fn gemm_u8i8_vnni(xu: &[u8], xs: &[f32], w: &PackedI8, relu: bool, y: &mut [f32]) -> bool {
    check_i8(xu, xs, w, y);
    #[cfg(target_arch = "x86_64")]
    if x86::gemm_u8i8(xu, xs, w, relu, y) {
        return true;
    }
    false
}

/// [`gemm_u8i8`] on the AMX tiles whatever the batch, returning `false` when the CPU or
/// the kernel does not offer them (AMX-INT8 and the tile data state are needed, and
/// Linux must grant this process the state) or there are no inputs.
pub fn gemm_u8i8_amx(xu: &[u8], xs: &[f32], w: &PackedI8, relu: bool, y: &mut [f32]) -> bool {
    check_i8(xu, xs, w, y);
    #[cfg(target_arch = "x86_64")]
    if w.kp > 0 && x86::gemm_u8i8_amx(xu, xs, w, relu, y) {
        return true;
    }
    false
}

/// [`gemm_u8i8`] in plain loops over the same layout, on any CPU; the reference the
/// accelerated kernel is tested against (the results are equal, bit for bit).
pub fn gemm_u8i8_portable(xu: &[u8], xs: &[f32], w: &PackedI8, relu: bool, y: &mut [f32]) {
    check_i8(xu, xs, w, y);
    let n4 = w.kp / 4;
    let outs = w.outs;
    for (r, sx) in xs.iter().enumerate() {
        let xr = &xu[r * w.kp..(r + 1) * w.kp];
        for p in 0..w.panels() {
            let mut acc = [0i32; PANEL];
            for (i, block) in w.blocks[p * w.n4p..][..n4].iter().enumerate() {
                for (lane, a) in acc.iter_mut().enumerate() {
                    for j in 0..4 {
                        let prod = i32::from(xr[4 * i + j]) * i32::from(block[lane * 4 + j]);
                        *a = a.wrapping_add(prod);
                    }
                }
            }
            for (lane, a) in acc.iter().enumerate() {
                let o = p * PANEL + lane;
                if o >= outs {
                    break;
                }
                let v = a.wrapping_sub(w.offset[p][lane]) as f32 * (sx * w.scale[p][lane])
                    + w.bias[p][lane];
                y[r * outs + o] = if relu && v < 0.0 { 0.0 } else { v };
            }
        }
    }
}

/// An f32 layer's weights packed for [`gemm_f32`], with its bias.
#[derive(Debug, Clone, PartialEq)]
pub struct PackedF32 {
    outs: usize,
    k: usize,
    /// `[panel][k]`: one input's weights for 16 outputs.
    rows: Vec<[f32; PANEL]>,
    bias: Vec<[f32; PANEL]>,
}

impl PackedF32 {
    /// Packs `w` (`outs × k`, row-major, `outs = bias.len()`).
    ///
    /// Panics unless the lengths agree.
    pub fn new(w: &[f32], k: usize, bias: &[f32]) -> Self {
        let outs = bias.len();
        assert_eq!(w.len(), outs * k, "weights must be outs × k");
        let panels = outs.div_ceil(PANEL);
        let mut rows = vec![[0f32; PANEL]; panels * k];
        for o in 0..outs {
            let (p, lane) = (o / PANEL, o % PANEL);
            for (i, v) in w[o * k..(o + 1) * k].iter().enumerate() {
                rows[p * k + i][lane] = *v;
            }
        }
        PackedF32 {
            outs,
            k,
            rows,
            bias: pad_panels(bias, panels),
        }
    }

    pub fn outputs(&self) -> usize {
        self.outs
    }

    pub fn inputs(&self) -> usize {
        self.k
    }

    fn panels(&self) -> usize {
        self.bias.len()
    }

    /// Bytes held.
    pub fn bytes(&self) -> usize {
        (self.rows.len() + self.bias.len()) * PANEL * 4
    }
}

fn check_f32(x: &[f32], w: &PackedF32, y: &[f32]) -> usize {
    assert!(w.k > 0, "a layer needs inputs");
    assert_eq!(x.len() % w.k, 0, "inputs must be rows × k");
    let rows = x.len() / w.k;
    assert_eq!(y.len(), rows * w.outs, "outputs must be rows × outs");
    rows
}

/// `y[r, o] = act(Σₖ x[r, k] · w[o, k] + bias[o])` on the CPU's packed f32 kernel,
/// returning `true`; or `false` (leaving `y` alone) when [`f32_kernel`] is `None`.
///
/// Panics unless `k > 0`, `x` is `rows × k` and `y` is `rows × outs`.
pub fn gemm_f32(x: &[f32], w: &PackedF32, relu: bool, y: &mut [f32]) -> bool {
    let rows = check_f32(x, w, y);
    #[cfg(target_arch = "x86_64")]
    if x86::gemm_f32(x, rows, w, relu, y) {
        return true;
    }
    let _ = rows;
    false
}

/// [`gemm_f32`] in plain loops over the same layout (the same order of additions per
/// output: input by input).
pub fn gemm_f32_portable(x: &[f32], w: &PackedF32, relu: bool, y: &mut [f32]) {
    let rows = check_f32(x, w, y);
    let (k, outs) = (w.k, w.outs);
    for r in 0..rows {
        let xr = &x[r * k..(r + 1) * k];
        for p in 0..w.panels() {
            let mut acc = [0f32; PANEL];
            for (xv, wrow) in xr.iter().zip(&w.rows[p * k..(p + 1) * k]) {
                for (a, wv) in acc.iter_mut().zip(wrow) {
                    *a = xv.mul_add(*wv, *a);
                }
            }
            for (lane, a) in acc.iter().enumerate() {
                let o = p * PANEL + lane;
                if o >= outs {
                    break;
                }
                let v = a + w.bias[p][lane];
                y[r * outs + o] = if relu && v < 0.0 { 0.0 } else { v };
            }
        }
    }
}

#[cfg(test)]
mod tests;
