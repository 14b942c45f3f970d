//! The row-grouped TTMc's tree of two levels (a 3rd-order tensor), with its widths
//! fixed at compile time and written in explicit 8-lane vectors ([`tree3`]).

use crate::matrix::Matrix;
use wide::f32x8;

/// [`super::ttmc_rows`]' tree of two levels, `a` over the leaf `b`, of ranks `ra` and `rb`; `b` is
/// `8 · V` columns wide (zero columns past `rb`), and so is `a` with `SWAP` (the levels
/// the reverse of the mode order), rounded up to whole vectors. Per fiber (a run of one
/// index of `a`'s mode) `s = Σ v · b[k]`, held in `V` vectors, then `dst += a[i] ⊗ s`,
/// or with `SWAP` `dst += s ⊗ a[i]`, so the row comes out in mode order either way.
/// Where the vectors' side (`b`, or `a` with `SWAP`) was padded, the row is summed in
/// `scratch` at the padded width and copied into `dst` once (chunks written as whole
/// vectors straight into `dst` overlapped their neighbours, and every load after
/// such a store waited for it). Written with explicit vectors: left to itself, LLVM
/// vectorized the fold across `a`'s rank with shuffles (a transpose per fiber).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(super) fn tree3<const V: usize, const SWAP: bool>(
    others: &[u32],
    values: &[f32],
    a: &Matrix,
    b: &Matrix,
    ra: usize,
    rb: usize,
    scratch: &mut Vec<f32>,
    dst: &mut [f32],
) {
    let wb = 8 * V;
    debug_assert!(rb <= wb && b.cols() == wb && ra <= a.cols());
    let (ad, bd, wa) = (a.data(), b.data(), a.cols());
    // Chunks of the row: `count` of `chunk` columns, summed at width `w`.
    let (chunk, w, count) = if SWAP { (ra, wa, rb) } else { (rb, wb, ra) };
    let padded = chunk != w;
    let out: &mut [f32] = if padded {
        scratch.clear();
        scratch.resize(count * w, 0.0);
        scratch
    } else {
        dst.fill(0.0);
        dst
    };
    let fold = |out: &mut [f32], i: u32, s: &[f32x8; V]| {
        let f = &ad[i as usize * wa..][..wa];
        if SWAP {
            // out[k · w + j] += s[k] · f[j]: the row of `a` in vectors, `s` broadcast.
            let lanes: [[f32; 8]; V] = std::array::from_fn(|v| s[v].to_array());
            add_rows(out, w, &lanes.as_flattened()[..rb], |v| load(&f[8 * v..]));
        } else {
            // out[j · w + k] += f[j] · s[k].
            add_rows(out, w, f, |v| s[v]);
        }
    };
    let mut s = [f32x8::ZERO; V];
    let mut open: Option<u32> = None;
    for (ix, &v) in others.chunks_exact(2).zip(values) {
        if open != Some(ix[0]) {
            if let Some(i) = open {
                fold(out, i, &s);
                s = [f32x8::ZERO; V];
            }
            open = Some(ix[0]);
        }
        let row = &bd[ix[1] as usize * wb..][..wb];
        let v = f32x8::splat(v);
        for (sv, r) in s.iter_mut().zip(row.chunks_exact(8)) {
            *sv = v.mul_add(load(r), *sv);
        }
    }
    if let Some(i) = open {
        fold(out, i, &s);
    }
    if padded {
        copy_chunks(dst, chunk, scratch, w);
    }
}

/// The first 8 floats of `s` as a vector.
#[inline(always)]
fn load(s: &[f32]) -> f32x8 {
    f32x8::from(<[f32; 8]>::try_from(&s[..8]).expect("8 lanes"))
}

/// `out[c · w ..][.. w] += xs[c] · u` for every `c`, `u` the `w / 8` vectors `vec(0),
/// vec(1), …`. Offsets rather than `chunks_exact_mut(w)`, whose count is a division.
#[inline(always)]
fn add_rows(out: &mut [f32], w: usize, xs: &[f32], vec: impl Fn(usize) -> f32x8) {
    for (c, &x) in xs.iter().enumerate() {
        let x = f32x8::splat(x);
        for (v, dd) in out[c * w..][..w].chunks_exact_mut(8).enumerate() {
            dd.copy_from_slice(&x.mul_add(vec(v), load(dd)).to_array());
        }
    }
}

/// `dst[c · chunk ..][.. chunk] = src[c · w ..][.. chunk]` for every chunk of `dst`
/// (`chunk ≤ w`, `w` a multiple of 8), 8 floats at a time: a chunk's last vector
/// spills onto the next chunk's first columns, which that chunk then overwrites; the
/// last chunk copies its columns alone. (`copy_from_slice` of a length known only at
/// run time is a call to `memmove`.)
#[inline(always)]
fn copy_chunks(dst: &mut [f32], chunk: usize, src: &[f32], w: usize) {
    let count = dst.len() / chunk.max(1);
    let whole = chunk.div_ceil(8) * 8;
    for c in 0..count {
        let from = &src[c * w..][..w];
        if c * chunk + whole <= dst.len() {
            let to = &mut dst[c * chunk..][..whole];
            for (t, f) in to.chunks_exact_mut(8).zip(from.chunks_exact(8)) {
                t.copy_from_slice(f);
            }
        } else {
            for (t, &f) in dst[c * chunk..][..chunk].iter_mut().zip(from) {
                *t = f;
            }
        }
    }
}
