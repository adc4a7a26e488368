//! The reviewed module: x86-64 kernels compiled for AVX-512 (F, BW, VNNI) and entered
//! only after run-time detection.
//!
//! Review rules (docs/contributing.md):
//! - kernels are safe `#[target_feature]` functions: they may call intrinsics, and read
//!   and write memory only through slices (bounds-checked) and `bytemuck` casts;
//! - `unsafe` appears only at an entry point, around the call into a kernel, right
//!   after the features that kernel was compiled for were detected, with a SAFETY
//!   comment saying so;
//! - every kernel has a portable twin in `lib.rs` that the tests compare it with.
#![allow(unsafe_code)]

use std::arch::x86_64::{
    __m512, __m512i, _mm512_add_ps, _mm512_cvtepi32_ps, _mm512_dpbusd_epi32, _mm512_fmadd_ps,
    _mm512_max_ps, _mm512_mul_ps, _mm512_set1_epi32, _mm512_set1_ps, _mm512_setzero_ps,
    _mm512_setzero_si512, _mm512_sub_epi32,
};

use pulp::bytemuck::cast;

use crate::{PackedF32, PackedI8, PANEL};

/// Rows and panels computed together: 6 × 4 = 24 accumulators, 4 weight vectors and a
/// broadcast input in the 32 registers.
const ROWS: usize = 6;
const PANELS: usize = 4;
/// With at most [`FEW_ROWS`] rows (batch 1 above all) no weight is used twice, and four
/// accumulators per row would leave the multiply-adds waiting on each other's latency:
/// eight panels at a time keep eight independent chains in flight.
const FEW_ROWS: usize = 3;
const WIDE_PANELS: usize = 8;

pub(crate) fn has_vnni() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vnni")
}

pub(crate) fn has_avx512f() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx2")
        && std::arch::is_x86_feature_detected!("fma")
}

/// Runs the VNNI kernel when the CPU has it; the lengths were checked by the caller.
pub(crate) fn gemm_u8i8(xu: &[u8], xs: &[f32], w: &PackedI8, relu: bool, y: &mut [f32]) -> bool {
    if !has_vnni() {
        return false;
    }
    // SAFETY: `i8_vnni` is compiled for avx512f, avx512bw and avx512vnni, and `has_vnni`
    // just found all three on this CPU; the function is otherwise safe.
    unsafe { i8_vnni(xu, xs, w, relu, y) };
    true
}

/// Runs the AVX-512 f32 kernel when the CPU has it; the lengths were checked by the
/// caller.
pub(crate) fn gemm_f32(x: &[f32], rows: usize, w: &PackedF32, relu: bool, y: &mut [f32]) -> bool {
    if !has_avx512f() {
        return false;
    }
    // SAFETY: `f32_avx512` is compiled for avx512f, avx2 and fma, and `has_avx512f` just
    // found all three on this CPU; the function is otherwise safe.
    unsafe { f32_avx512(x, rows, w, relu, y) };
    true
}

#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn i8_vnni(xu: &[u8], xs: &[f32], w: &PackedI8, relu: bool, y: &mut [f32]) {
    let x4: &[[u8; 4]] = pulp::bytemuck::cast_slice(xu);
    let panels = w.panels();
    let mut p = 0;
    if xs.len() <= FEW_ROWS {
        while p + WIDE_PANELS <= panels {
            i8_rows::<WIDE_PANELS>(x4, xs, w, p, relu, y);
            p += WIDE_PANELS;
        }
    }
    while p + PANELS <= panels {
        i8_rows::<PANELS>(x4, xs, w, p, relu, y);
        p += PANELS;
    }
    while p < panels {
        i8_rows::<1>(x4, xs, w, p, relu, y);
        p += 1;
    }
}

/// Every row against panels `p0..p0 + C`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn i8_rows<const C: usize>(
    x4: &[[u8; 4]],
    xs: &[f32],
    w: &PackedI8,
    p0: usize,
    relu: bool,
    y: &mut [f32],
) {
    let rows = xs.len();
    let mut r = 0;
    while r + ROWS <= rows {
        i8_block::<ROWS, C>(x4, xs, w, r, p0, relu, y);
        r += ROWS;
    }
    match rows - r {
        1 => i8_block::<1, C>(x4, xs, w, r, p0, relu, y),
        2 => i8_block::<2, C>(x4, xs, w, r, p0, relu, y),
        3 => i8_block::<3, C>(x4, xs, w, r, p0, relu, y),
        4 => i8_block::<4, C>(x4, xs, w, r, p0, relu, y),
        5 => i8_block::<5, C>(x4, xs, w, r, p0, relu, y),
        _ => {}
    }
}

/// Rows `r0..r0 + R` against panels `p0..p0 + C`: per four inputs, C weight loads, R
/// broadcasts and R × C `vpdpbusd`.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
fn i8_block<const R: usize, const C: usize>(
    x4: &[[u8; 4]],
    xs: &[f32],
    w: &PackedI8,
    r0: usize,
    p0: usize,
    relu: bool,
    y: &mut [f32],
) {
    let n4 = w.kp / 4;
    let outs = w.outs;
    let mut xr: [&[[u8; 4]]; R] = [&[]; R];
    for (a, x) in xr.iter_mut().enumerate() {
        *x = &x4[(r0 + a) * n4..][..n4];
    }
    let mut wr: [&[[i8; 64]]; C] = [&[]; C];
    for (c, wc) in wr.iter_mut().enumerate() {
        *wc = &w.blocks[(p0 + c) * n4..][..n4];
    }
    let mut acc = [[_mm512_setzero_si512(); C]; R];
    for i in 0..n4 {
        let mut wv = [_mm512_setzero_si512(); C];
        for c in 0..C {
            wv[c] = cast::<[i8; 64], __m512i>(wr[c][i]);
        }
        for a in 0..R {
            let xb = _mm512_set1_epi32(i32::from_ne_bytes(xr[a][i]));
            for c in 0..C {
                acc[a][c] = _mm512_dpbusd_epi32(acc[a][c], xb, wv[c]);
            }
        }
    }
    let zero = _mm512_setzero_ps();
    for (a, acc_a) in acc.iter().enumerate() {
        let r = r0 + a;
        let sx = _mm512_set1_ps(xs[r]);
        for (c, acc_ac) in acc_a.iter().enumerate() {
            let p = p0 + c;
            let exact = _mm512_sub_epi32(*acc_ac, cast::<[i32; PANEL], __m512i>(w.offset[p]));
            let scale = _mm512_mul_ps(sx, cast::<[f32; PANEL], __m512>(w.scale[p]));
            let mut v = _mm512_add_ps(
                _mm512_mul_ps(_mm512_cvtepi32_ps(exact), scale),
                cast::<[f32; PANEL], __m512>(w.bias[p]),
            );
            if relu {
                // `max(0, v)` answers `v` when either is NaN or both are zero, as the
                // portable `if v < 0 { 0 } else { v }` does.
                v = _mm512_max_ps(zero, v);
            }
            store(y, r * outs, p, outs, v);
        }
    }
}

/// Writes panel `p` of one output row (starting at `row`), only its outputs below
/// `outs`.
#[target_feature(enable = "avx512f")]
fn store(y: &mut [f32], row: usize, p: usize, outs: usize, v: __m512) {
    let o0 = p * PANEL;
    let n = PANEL.min(outs - o0);
    let vals = cast::<__m512, [f32; PANEL]>(v);
    y[row + o0..][..n].copy_from_slice(&vals[..n]);
}

#[target_feature(enable = "avx512f,avx2,fma")]
fn f32_avx512(x: &[f32], rows: usize, w: &PackedF32, relu: bool, y: &mut [f32]) {
    let panels = w.panels();
    let mut p = 0;
    if rows <= FEW_ROWS {
        while p + WIDE_PANELS <= panels {
            f32_rows::<WIDE_PANELS>(x, rows, w, p, relu, y);
            p += WIDE_PANELS;
        }
    }
    while p + PANELS <= panels {
        f32_rows::<PANELS>(x, rows, w, p, relu, y);
        p += PANELS;
    }
    while p < panels {
        f32_rows::<1>(x, rows, w, p, relu, y);
        p += 1;
    }
}

#[target_feature(enable = "avx512f,avx2,fma")]
fn f32_rows<const C: usize>(
    x: &[f32],
    rows: usize,
    w: &PackedF32,
    p0: usize,
    relu: bool,
    y: &mut [f32],
) {
    let mut r = 0;
    while r + ROWS <= rows {
        f32_block::<ROWS, C>(x, w, r, p0, relu, y);
        r += ROWS;
    }
    match rows - r {
        1 => f32_block::<1, C>(x, w, r, p0, relu, y),
        2 => f32_block::<2, C>(x, w, r, p0, relu, y),
        3 => f32_block::<3, C>(x, w, r, p0, relu, y),
        4 => f32_block::<4, C>(x, w, r, p0, relu, y),
        5 => f32_block::<5, C>(x, w, r, p0, relu, y),
        _ => {}
    }
}

/// Rows `r0..r0 + R` against panels `p0..p0 + C`: per input, C weight loads, R
/// broadcasts and R × C FMAs.
#[target_feature(enable = "avx512f,avx2,fma")]
fn f32_block<const R: usize, const C: usize>(
    x: &[f32],
    w: &PackedF32,
    r0: usize,
    p0: usize,
    relu: bool,
    y: &mut [f32],
) {
    let (k, outs) = (w.k, w.outs);
    let mut xr: [&[f32]; R] = [&[]; R];
    for (a, xa) in xr.iter_mut().enumerate() {
        *xa = &x[(r0 + a) * k..][..k];
    }
    let mut wr: [&[[f32; PANEL]]; C] = [&[]; C];
    for (c, wc) in wr.iter_mut().enumerate() {
        *wc = &w.rows[(p0 + c) * k..][..k];
    }
    let mut acc = [[_mm512_setzero_ps(); C]; R];
    for i in 0..k {
        let mut wv = [_mm512_setzero_ps(); C];
        for c in 0..C {
            wv[c] = cast::<[f32; PANEL], __m512>(wr[c][i]);
        }
        for a in 0..R {
            let xb = _mm512_set1_ps(xr[a][i]);
            for c in 0..C {
                acc[a][c] = _mm512_fmadd_ps(xb, wv[c], acc[a][c]);
            }
        }
    }
    let zero = _mm512_setzero_ps();
    for (a, acc_a) in acc.iter().enumerate() {
        let r = r0 + a;
        for (c, acc_ac) in acc_a.iter().enumerate() {
            let p = p0 + c;
            let mut v = _mm512_add_ps(*acc_ac, cast::<[f32; PANEL], __m512>(w.bias[p]));
            if relu {
                v = _mm512_max_ps(zero, v);
            }
            store(y, r * outs, p, outs, v);
        }
    }
}
