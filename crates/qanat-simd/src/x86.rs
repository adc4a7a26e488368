//! The reviewed module: x86-64 kernels compiled for AVX-512 (F, BW, VNNI) or written
//! for AMX tiles, entered only after run-time detection.
//!
//! Review rules (docs/contributing.md):
//! - kernels are safe `#[target_feature]` functions: they may call intrinsics, and read
//!   and write memory only through slices (bounds-checked) and `bytemuck` casts;
//! - `unsafe` appears only at an entry point, around the call into a kernel, right
//!   after the features that kernel was compiled for were detected, with a SAFETY
//!   comment saying so;
//! - AMX, which has no stable intrinsics, is the exception: each tile instruction
//!   sequence is one `asm!` block whose pointers come from slices sliced (and so
//!   bounds-checked) right before it, to exactly the bytes the block reads or writes;
//!   the tile configuration is loaded and released by a guard, and the two
//!   `arch_prctl` system calls that ask Linux for the tile state pass only a local;
//! - every kernel has a portable twin in `lib.rs` that the tests compare it with.
#![allow(unsafe_code)]

use std::arch::asm;
use std::sync::OnceLock;

use std::arch::x86_64::{
    __m512, __m512i, _mm512_add_ps, _mm512_cvtepi32_ps, _mm512_dpbusd_epi32, _mm512_fmadd_ps,
    _mm512_max_ps, _mm512_mul_ps, _mm512_set1_epi32, _mm512_set1_ps, _mm512_setzero_ps,
    _mm512_setzero_si512, _mm512_sub_epi32,
};

use pulp::bytemuck::cast;

use crate::{PackedF32, PackedI8, PANEL, TILE_QUADS};

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
        *wc = &w.blocks[(p0 + c) * w.n4p..][..n4];
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
    for (a, acc_a) in acc.iter().enumerate() {
        let r = r0 + a;
        for (c, acc_ac) in acc_a.iter().enumerate() {
            let p = p0 + c;
            store(y, r * outs, p, outs, i8_finish(*acc_ac, xs[r], w, p, relu));
        }
    }
}

/// One row's sums for panel `p` to outputs: the `+ 128` taken out, scaled, biased, and
/// ReLU'd when asked.
#[target_feature(enable = "avx512f")]
fn i8_finish(acc: __m512i, sx: f32, w: &PackedI8, p: usize, relu: bool) -> __m512 {
    let exact = _mm512_sub_epi32(acc, cast::<[i32; PANEL], __m512i>(w.offset[p]));
    let scale = _mm512_mul_ps(_mm512_set1_ps(sx), cast::<[f32; PANEL], __m512>(w.scale[p]));
    let v = _mm512_add_ps(
        _mm512_mul_ps(_mm512_cvtepi32_ps(exact), scale),
        cast::<[f32; PANEL], __m512>(w.bias[p]),
    );
    if relu {
        // `max(0, v)` answers `v` when either is NaN or both are zero, as the portable
        // `if v < 0 { 0 } else { v }` does.
        _mm512_max_ps(_mm512_setzero_ps(), v)
    } else {
        v
    }
}

/// `arch_prctl` requests (Linux's `asm/prctl.h`) and the tile data's state component.
const ARCH_GET_XCOMP_SUPP: libc::c_long = 0x1021;
const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
const XFEATURE_XTILEDATA: libc::c_long = 18;

/// Whether the AMX kernel can run: the CPU has AMX-TILE and AMX-INT8 (CPUID leaf 7),
/// the VNNI kernel's features (the epilogue is AVX-512), and Linux supports the tile
/// data state and granted it to this process (asked once; the grant is per process).
pub(crate) fn has_amx() -> bool {
    static AMX: OnceLock<bool> = OnceLock::new();
    *AMX.get_or_init(|| {
        let leaf7 = std::arch::x86_64::__cpuid_count(7, 0);
        let (tile, int8) = ((leaf7.edx >> 24) & 1 == 1, (leaf7.edx >> 25) & 1 == 1);
        tile && int8 && has_vnni() && tile_data_granted()
    })
}

#[cfg(target_os = "linux")]
fn tile_data_granted() -> bool {
    let mut supported: u64 = 0;
    let out: *mut u64 = &mut supported;
    // SAFETY: `ARCH_GET_XCOMP_SUPP` writes one u64 of feature bits through its
    // argument, which points at the local above, alive and writable for the call.
    let r = unsafe { libc::syscall(libc::SYS_arch_prctl, ARCH_GET_XCOMP_SUPP, out) };
    if r != 0 || supported & (1 << XFEATURE_XTILEDATA) == 0 {
        return false;
    }
    // SAFETY: `ARCH_REQ_XCOMP_PERM` takes a feature number, touches no memory of ours,
    // and only lets this process's threads use the tile registers.
    let r = unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        )
    };
    r == 0
}

#[cfg(not(target_os = "linux"))]
fn tile_data_granted() -> bool {
    false
}

/// Rows of a tile, and bytes in a tile row.
const TILE_ROWS: usize = 16;
const TILE_BYTES: usize = 64;

/// A loaded tile configuration, released when dropped (also on a panic): palette 1,
/// all eight tiles 16 rows × 64 bytes. tmm0–3 accumulate (16 rows × 16 i32 outputs),
/// tmm4–5 hold activations (16 rows × 64 u8 inputs), tmm6–7 weights (16 quads × 16
/// outputs × 4 i8). Not `Send`: the configuration belongs to the thread that loaded
/// it, and the tile functions take a `&Tiles` to show it is loaded on theirs.
struct Tiles(std::marker::PhantomData<*const ()>);

impl Tiles {
    fn configure() -> Tiles {
        let mut cfg = [0u8; 64];
        cfg[0] = 1;
        for t in 0..8 {
            cfg[16 + 2 * t..18 + 2 * t].copy_from_slice(&(TILE_BYTES as u16).to_le_bytes());
            cfg[48 + t] = TILE_ROWS as u8;
        }
        // SAFETY: `ldtilecfg` reads the 64 bytes of `cfg`, a valid configuration
        // (palette 1, rows ≤ 16, bytes a row ≤ 64, reserved bytes zero); it is only
        // reached after `has_amx` found the CPU and the kernel ready for tiles.
        unsafe {
            asm!(
                "ldtilecfg [{cfg}]",
                cfg = in(reg) cfg.as_ptr(),
            out("tmm0") _,
            out("tmm1") _,
            out("tmm2") _,
            out("tmm3") _,
            out("tmm4") _,
            out("tmm5") _,
            out("tmm6") _,
            out("tmm7") _,
                options(nostack, readonly),
            )
        };
        Tiles(std::marker::PhantomData)
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: `tilerelease` returns the tiles to their initial state and touches no
        // memory; a configuration was loaded by `configure`.
        unsafe {
            asm!(
                "tilerelease",
                out("tmm0") _,
                out("tmm1") _,
                out("tmm2") _,
                out("tmm3") _,
                out("tmm4") _,
                out("tmm5") _,
                out("tmm6") _,
                out("tmm7") _,
                options(nostack, nomem),
            )
        };
    }
}

/// Runs the AMX kernel when the CPU has it; the lengths were checked by the caller and
/// `kp > 0`.
pub(crate) fn gemm_u8i8_amx(
    xu: &[u8],
    xs: &[f32],
    w: &PackedI8,
    relu: bool,
    y: &mut [f32],
) -> bool {
    if !has_amx() {
        return false;
    }
    // SAFETY: `i8_amx` is compiled for avx512f, avx512bw and avx512vnni, which
    // `has_amx` checked (with AMX-INT8 and the tile state) on this CPU.
    unsafe { i8_amx(xu, xs, w, relu, y) };
    true
}

/// `y` on the tiles: the activations copied into whole tiles (rows to a multiple of
/// 16, inputs of 64, padding 128, i.e. zero), then per pair of panels (32 outputs)
/// blocks of 32 rows (or a last 16) through the K tiles, each block's sums stored and
/// finished as in the VNNI kernel.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn i8_amx(xu: &[u8], xs: &[f32], w: &PackedI8, relu: bool, y: &mut [f32]) {
    // Tile by tile: [16-row block][K tile][16 rows × 64 bytes], each tile contiguous.
    // The buffer is this thread's and kept between calls, so a warm forward pass
    // allocates nothing (as the runtime's own scratch promises).
    let mut a = TILE_SCRATCH.take();
    a.clear();
    a.resize(
        xs.len().div_ceil(TILE_ROWS) * TILE_ROWS * (w.n4p / TILE_QUADS) * TILE_BYTES,
        128,
    );
    i8_amx_on(&mut a, xu, xs, w, relu, y);
    TILE_SCRATCH.set(a);
}

thread_local! {
    /// The activations in tile order, reused by [`i8_amx`] on each thread.
    static TILE_SCRATCH: std::cell::Cell<Vec<u8>> = const { std::cell::Cell::new(Vec::new()) };
}

/// [`i8_amx`] with `a` (rows rounded up to 16 × whole K tiles, all 128) to fill.
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
fn i8_amx_on(a: &mut [u8], xu: &[u8], xs: &[f32], w: &PackedI8, relu: bool, y: &mut [f32]) {
    let rows = xs.len();
    let (kp, outs) = (w.kp, w.outs);
    let kt = w.n4p / TILE_QUADS;
    let stride = kt * TILE_BYTES;
    let rows16 = rows.div_ceil(TILE_ROWS) * TILE_ROWS;
    for (r, src) in xu.chunks_exact(kp).enumerate() {
        let block = &mut a[(r / TILE_ROWS) * TILE_ROWS * stride..][..TILE_ROWS * stride];
        let row_at = (r % TILE_ROWS) * TILE_BYTES;
        // Whole 64-byte pieces as arrays (moved in registers, not a `memcpy` call each).
        let (whole, tail) = src.as_chunks::<TILE_BYTES>();
        for (t, part) in whole.iter().enumerate() {
            let at = t * TILE_ROWS * TILE_BYTES + row_at;
            let dst: &mut [u8; TILE_BYTES] = (&mut block[at..at + TILE_BYTES])
                .try_into()
                .expect("a 64-byte piece");
            *dst = *part;
        }
        if !tail.is_empty() {
            let at = whole.len() * TILE_ROWS * TILE_BYTES + row_at;
            block[at..at + tail.len()].copy_from_slice(tail);
        }
    }
    let panels = w.panels();
    let mut c = [[[0i32; PANEL]; TILE_ROWS]; 4];
    let tiles = Tiles::configure();
    for p0 in (0..panels).step_by(2) {
        let b = &w.blocks[p0 * w.n4p..(p0 + 2) * w.n4p];
        let mut r0 = 0;
        while r0 < rows16 {
            let two = r0 + 2 * TILE_ROWS <= rows16;
            if two {
                tiles_2x2(&tiles, &a[r0 * stride..(r0 + 32) * stride], b, kt, &mut c);
            } else {
                let c01: &mut [[[i32; PANEL]; TILE_ROWS]; 2] =
                    (&mut c[..2]).try_into().expect("two tiles");
                tiles_1x2(&tiles, &a[r0 * stride..(r0 + 16) * stride], b, kt, c01);
            }
            // Tile t holds rows r0 + 16·(t / 2) of panel p0 + t % 2.
            for (t, tile) in c.iter().enumerate().take(if two { 4 } else { 2 }) {
                let p = p0 + t % 2;
                if p >= panels {
                    continue;
                }
                for (m, sums) in tile.iter().enumerate() {
                    let r = r0 + TILE_ROWS * (t / 2) + m;
                    if r >= rows {
                        break;
                    }
                    let acc = cast::<[i32; PANEL], __m512i>(*sums);
                    store(y, r * outs, p, outs, i8_finish(acc, xs[r], w, p, relu));
                }
            }
            r0 += if two { 2 * TILE_ROWS } else { TILE_ROWS };
        }
    }
}

/// 32 activation rows against two panels, over `kt ≥ 1` K tiles: `a` holds two 16-row
/// blocks of `kt` tiles each, `b` two panels of `kt` tiles, every tile 1,024 contiguous
/// bytes (16 rows of 64); the four 16 × 16 sums go into `c`.
fn tiles_2x2(_on: &Tiles, a: &[u8], b: &[[i8; 64]], kt: usize, c: &mut [[[i32; 16]; 16]; 4]) {
    const TILE: usize = TILE_ROWS * TILE_BYTES;
    assert!(kt >= 1 && a.len() == 2 * kt * TILE);
    assert_eq!(b.len(), 2 * kt * TILE_QUADS);
    let (a0, a1) = a.split_at(kt * TILE);
    let (b0, b1) = b.split_at(kt * TILE_QUADS);
    // SAFETY: the configuration is loaded on this thread (`_on`, not `Send`). Each
    // tile load reads 16 rows of 64 bytes with a row stride of 64: one contiguous
    // 1,024-byte tile, at byte 1,024·i of `a0`, `a1`, `b0` or `b1` for i < kt, each of
    // which is kt·1,024 bytes long (asserted above), so every read is inside them. The
    // four stores write 16 rows of 64 bytes at offsets 0, 1,024, 2,048 and 3,072 of `c`:
    // all of `c` (4,096 bytes, borrowed mutably), nothing past it. Prefetches do not
    // fault. The pointer and count registers and the tile registers are declared
    // clobbered.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "2:",
            "tileloadd tmm4, [{a0} + {sb}*1]",
            "tileloadd tmm5, [{a1} + {sb}*1]",
            "tileloadd tmm6, [{b0} + {sb}*1]",
            "tileloadd tmm7, [{b1} + {sb}*1]",
            "tdpbusd tmm0, tmm4, tmm6",
            "prefetcht0 [{b0} + 2048]",
            "prefetcht0 [{b0} + 2112]",
            "prefetcht0 [{b0} + 2176]",
            "prefetcht0 [{b0} + 2240]",
            "prefetcht0 [{b0} + 2304]",
            "prefetcht0 [{b0} + 2368]",
            "prefetcht0 [{b0} + 2432]",
            "prefetcht0 [{b0} + 2496]",
            "prefetcht0 [{b0} + 2560]",
            "prefetcht0 [{b0} + 2624]",
            "prefetcht0 [{b0} + 2688]",
            "prefetcht0 [{b0} + 2752]",
            "prefetcht0 [{b0} + 2816]",
            "prefetcht0 [{b0} + 2880]",
            "prefetcht0 [{b0} + 2944]",
            "prefetcht0 [{b0} + 3008]",
            "tdpbusd tmm1, tmm4, tmm7",
            "prefetcht0 [{b1} + 2048]",
            "prefetcht0 [{b1} + 2112]",
            "prefetcht0 [{b1} + 2176]",
            "prefetcht0 [{b1} + 2240]",
            "prefetcht0 [{b1} + 2304]",
            "prefetcht0 [{b1} + 2368]",
            "prefetcht0 [{b1} + 2432]",
            "prefetcht0 [{b1} + 2496]",
            "prefetcht0 [{b1} + 2560]",
            "prefetcht0 [{b1} + 2624]",
            "prefetcht0 [{b1} + 2688]",
            "prefetcht0 [{b1} + 2752]",
            "prefetcht0 [{b1} + 2816]",
            "prefetcht0 [{b1} + 2880]",
            "prefetcht0 [{b1} + 2944]",
            "prefetcht0 [{b1} + 3008]",
            "tdpbusd tmm2, tmm5, tmm6",
            "tdpbusd tmm3, tmm5, tmm7",
            "add {a0}, 1024",
            "add {a1}, 1024",
            "add {b0}, 1024",
            "add {b1}, 1024",
            "dec {n}",
            "jnz 2b",
            "tilestored [{c} + {sb}*1], tmm0",
            "tilestored [{c} + {sb}*1 + 1024], tmm1",
            "tilestored [{c} + {sb}*1 + 2048], tmm2",
            "tilestored [{c} + {sb}*1 + 3072], tmm3",
            a0 = inout(reg) a0.as_ptr() => _,
            a1 = inout(reg) a1.as_ptr() => _,
            b0 = inout(reg) b0.as_ptr() => _,
            b1 = inout(reg) b1.as_ptr() => _,
            n = inout(reg) kt => _,
            sb = in(reg) TILE_BYTES,
            c = in(reg) c.as_mut_ptr(),
            out("tmm0") _,
            out("tmm1") _,
            out("tmm2") _,
            out("tmm3") _,
            out("tmm4") _,
            out("tmm5") _,
            out("tmm6") _,
            out("tmm7") _,
            options(nostack),
        );
    }
}

/// [`tiles_2x2`] for a last 16 rows: `a` is one block of `kt` tiles; sums into `c`.
fn tiles_1x2(_on: &Tiles, a: &[u8], b: &[[i8; 64]], kt: usize, c: &mut [[[i32; 16]; 16]; 2]) {
    assert!(kt >= 1 && a.len() == kt * TILE_ROWS * TILE_BYTES);
    assert_eq!(b.len(), 2 * kt * TILE_QUADS);
    let (b0, b1) = b.split_at(kt * TILE_QUADS);
    // SAFETY: as in `tiles_2x2`, with one activation block: the loads read tile i < kt
    // of `a`, `b0` and `b1` (each kt·1,024 bytes long); the two stores write offsets 0
    // and 1,024 of `c`: all of its 2,048 bytes.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "2:",
            "tileloadd tmm4, [{a0} + {sb}*1]",
            "tileloadd tmm6, [{b0} + {sb}*1]",
            "tileloadd tmm7, [{b1} + {sb}*1]",
            "tdpbusd tmm0, tmm4, tmm6",
            "tdpbusd tmm1, tmm4, tmm7",
            "add {a0}, 1024",
            "add {b0}, 1024",
            "add {b1}, 1024",
            "dec {n}",
            "jnz 2b",
            "tilestored [{c} + {sb}*1], tmm0",
            "tilestored [{c} + {sb}*1 + 1024], tmm1",
            a0 = inout(reg) a.as_ptr() => _,
            b0 = inout(reg) b0.as_ptr() => _,
            b1 = inout(reg) b1.as_ptr() => _,
            n = inout(reg) kt => _,
            sb = in(reg) TILE_BYTES,
            c = in(reg) c.as_mut_ptr(),
            out("tmm0") _,
            out("tmm1") _,
            out("tmm2") _,
            out("tmm3") _,
            out("tmm4") _,
            out("tmm5") _,
            out("tmm6") _,
            out("tmm7") _,
            options(nostack),
        );
    }
}

/// Writes panel `p` of one output row (starting at `row`), only its outputs below
/// `outs`.
#[target_feature(enable = "avx512f")]
fn store(y: &mut [f32], row: usize, p: usize, outs: usize, v: __m512) {
    let o0 = p * PANEL;
    let n = PANEL.min(outs - o0);
    let vals = cast::<__m512, [f32; PANEL]>(v);
    if n == PANEL {
        // A whole panel as an array: one vector store, not a `memcpy` call.
        let dst: &mut [f32; PANEL] = (&mut y[row + o0..row + o0 + PANEL])
            .try_into()
            .expect("a whole panel");
        *dst = vals;
    } else {
        y[row + o0..][..n].copy_from_slice(&vals[..n]);
    }
}

/// The f32 kernel's block for batches: 8 rows × 3 panels (24 accumulators, 3 weight
/// loads and 8 broadcasts an input), measured ~8% faster here than 6 × 4 (which loads
/// more weights per multiply-add) and far faster than 4 × 6.
const F32_ROWS: usize = 8;
const F32_PANELS: usize = 3;

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
    while p + F32_PANELS <= panels {
        f32_rows::<F32_PANELS>(x, rows, w, p, relu, y);
        p += F32_PANELS;
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
    while r + F32_ROWS <= rows {
        f32_block::<F32_ROWS, C>(x, w, r, p0, relu, y);
        r += F32_ROWS;
    }
    match rows - r {
        1 => f32_block::<1, C>(x, w, r, p0, relu, y),
        2 => f32_block::<2, C>(x, w, r, p0, relu, y),
        3 => f32_block::<3, C>(x, w, r, p0, relu, y),
        4 => f32_block::<4, C>(x, w, r, p0, relu, y),
        5 => f32_block::<5, C>(x, w, r, p0, relu, y),
        6 => f32_block::<6, C>(x, w, r, p0, relu, y),
        7 => f32_block::<7, C>(x, w, r, p0, relu, y),
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
