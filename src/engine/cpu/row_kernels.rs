//! The per-row kernels of the grouped ALS normal equations and loss
//! ([`super::row_groups::RowGroups`]): one row's nonzeros (the other modes' indices and the
//! values) in, its system or its squared error out.
//!
//! A row's Khatri-Rao rows are formed a chunk at a time in a small buffer, then `G` is
//! accumulated over the chunk a few of its rows at a time in register accumulators
//! (64 floats, e.g. 4 rows of 16), so each update costs loads and FMAs and no stores;
//! the right-hand sides sum over the chunk in accumulators of their own. Factor rows
//! are zero-padded to a blocked width (8 to 64) so that the loops have constant
//! lengths.

use crate::matrix::Matrix;
use std::borrow::Cow;
use std::mem::MaybeUninit;

/// Khatri-Rao rows formed per chunk (a chunk of rank-32 rows is 4 KiB: L1-resident).
pub(super) const CHUNK: usize = 32;

/// A chunk's Khatri-Rao rows, each written before it is read. Not zeroed: a row's
/// kernel starts a chunk buffer per row, and for the short rows of most modes zeroing
/// it was a third of the stores the rows themselves take.
pub(super) struct ChunkRows<const P: usize> {
    rows: [MaybeUninit<[f32; P]>; CHUNK],
}

impl<const P: usize> ChunkRows<P> {
    pub(super) fn new() -> Self {
        ChunkRows {
            rows: [const { MaybeUninit::uninit() }; CHUNK],
        }
    }

    /// Writes rows `0..n` as `row(j)` and returns them (`n ≤ CHUNK`).
    #[inline(always)]
    pub(super) fn fill(&mut self, n: usize, mut row: impl FnMut(usize) -> [f32; P]) -> &[[f32; P]] {
        let rows = &mut self.rows[..n];
        for (j, slot) in rows.iter_mut().enumerate() {
            slot.write(row(j));
        }
        // SAFETY: the `n` rows were all written above, and `MaybeUninit<T>` has `T`'s
        // layout.
        unsafe { std::slice::from_raw_parts(rows.as_ptr().cast::<[f32; P]>(), n) }
    }
}

/// The register-blocked width a rank runs at: the smallest of 8, 16, 24, 32, 40, 48
/// and 64 that holds it (0 above 64: the unblocked kernels).
pub(super) fn padded_width(rank: usize) -> usize {
    match rank {
        0..=8 => 8,
        9..=48 => rank.div_ceil(8) * 8,
        49..=64 => 64,
        _ => 0,
    }
}

/// `m`'s rows padded with zeros to `p` columns (`m` itself when it has `p` columns,
/// or when `p` is 0: the unblocked kernels), so that the blocked kernels' loops over a
/// row have a constant length.
pub(super) fn pad_rows(m: &Matrix, p: usize) -> Cow<'_, [f32]> {
    let c = m.cols();
    if p == 0 || p == c {
        return Cow::Borrowed(m.data());
    }
    let mut out = vec![0f32; m.rows() * p];
    for (o, row) in out.chunks_exact_mut(p).zip(m.data().chunks_exact(c.max(1))) {
        o[..c].copy_from_slice(row);
    }
    Cow::Owned(out)
}

/// One row's `Σ (x − a·k)²` for a rank `r = a.len() ≤ P`, run `P` wide on factors
/// padded to `P` columns ([`pad_rows`]). Each model value is summed as 8 lanes, then the lanes (not one chain of
/// `P` dependent additions per nonzero).
#[inline(always)]
pub(super) fn row_loss<const P: usize>(
    a: &[f32],
    others: &[u32],
    values: &[f32],
    facs: &[&[f32]],
) -> f64 {
    let (d, r) = (facs.len(), a.len());
    let mut own = [0f32; P];
    own[..r].copy_from_slice(a);
    match d {
        1 => row_loss_of::<P>(&own, others, values, d, khatri_rao::<P, 1>, facs),
        2 => row_loss_of::<P>(&own, others, values, d, khatri_rao::<P, 2>, facs),
        3 => row_loss_of::<P>(&own, others, values, d, khatri_rao::<P, 3>, facs),
        _ => row_loss_of::<P>(&own, others, values, d, khatri_rao_any::<P>, facs),
    }
}

/// [`row_loss`] with the other modes' Khatri-Rao rows formed by `kr`.
#[inline(always)]
fn row_loss_of<const P: usize>(
    own: &[f32; P],
    others: &[u32],
    values: &[f32],
    d: usize,
    kr: impl Fn(&[&[f32]], &[u32]) -> [f32; P],
    facs: &[&[f32]],
) -> f64 {
    let mut sum = 0f64;
    for (ix, &x) in others.chunks_exact(d).zip(values) {
        let mut k = kr(facs, ix);
        for (v, &a) in k.iter_mut().zip(own) {
            *v *= a;
        }
        let mut lanes = [0f32; 8];
        for c in k.chunks_exact(8) {
            for (l, &v) in lanes.iter_mut().zip(c) {
                *l += v;
            }
        }
        let m = ((lanes[0] + lanes[4]) + (lanes[1] + lanes[5]))
            + ((lanes[2] + lanes[6]) + (lanes[3] + lanes[7]));
        let e = f64::from(x - m);
        sum += e * e;
    }
    sum
}

/// [`row_loss`] for any rank and order.
pub(super) fn row_loss_any(a: &[f32], others: &[u32], values: &[f32], facs: &[&[f32]]) -> f64 {
    let (d, r) = (facs.len(), a.len());
    let mut k = vec![0f32; r];
    let mut sum = 0f64;
    for (j, &x) in values.iter().enumerate() {
        k.copy_from_slice(a);
        for (f, &i) in facs.iter().zip(&others[j * d..(j + 1) * d]) {
            for (kr, &v) in k.iter_mut().zip(&f[i as usize * r..][..r]) {
                *kr *= v;
            }
        }
        let e = f64::from(x - k.iter().sum::<f32>());
        sum += e * e;
    }
    sum
}

/// One row's system for a rank `r ≤ P`, run `P` wide on factors padded to `P` columns
/// ([`pad_rows`]; the padding's entries of `G` and `b` are never written out), `G`
/// accumulated a block of its rows at a time ([`gram`]). `others` holds
/// `d = facs.len()` indices per nonzero.
#[inline(always)]
pub(super) fn row_system<const P: usize>(
    r: usize,
    others: &[u32],
    values: &[f32],
    facs: &[&[f32]],
    dst: &mut [f32],
) {
    let d = facs.len();
    let mut g = [[0f32; P]; P];
    let mut b = [0f32; P];
    let mut chunk = ChunkRows::<P>::new();
    for (idx, vals) in others.chunks(CHUNK * d).zip(values.chunks(CHUNK)) {
        let n = vals.len();
        // Each row formed in a local (registers) and stored once: multiplying in place
        // in the chunk buffer sends every factor's product through a store and a
        // reload.
        let k = match d {
            1 => chunk.fill(n, |j| khatri_rao::<P, 1>(facs, &idx[j..j + 1])),
            2 => chunk.fill(n, |j| khatri_rao::<P, 2>(facs, &idx[2 * j..2 * j + 2])),
            3 => chunk.fill(n, |j| khatri_rao::<P, 3>(facs, &idx[3 * j..3 * j + 3])),
            _ => chunk.fill(n, |j| khatri_rao_any::<P>(facs, &idx[j * d..(j + 1) * d])),
        };
        // The chunk's right-hand side in a local accumulator (kept in registers;
        // accumulating into `b` inside the loop above chains every nonzero's update
        // through memory).
        let mut cb = [0f32; P];
        for (kj, &x) in k.iter().zip(vals) {
            for (br, &kr) in cb.iter_mut().zip(kj) {
                *br = x.mul_add(kr, *br);
            }
        }
        for (br, &v) in b.iter_mut().zip(&cb) {
            *br += v;
        }
        gram::<P>(k, r, &mut g);
    }
    mirror::<P, 1, 8>(&mut g, r);
    for (o, gp) in dst.chunks_exact_mut(r).take(r).zip(&g) {
        o.copy_from_slice(&gp[..r]);
    }
    dst[r * r..].copy_from_slice(&b[..r]);
}

/// Fills the entries of the first `r` rows of `G` that [`gram_rows`] left out (row `p`
/// has the columns from its block's `C0` on) from their mirror images, so that rows
/// can be copied out whole (an element-wise choice per entry costs as much as a short
/// row's accumulation).
/// `W`: the width of the column blocks (8 here, 16 in [`super::avx512`]).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // reads g[q][p] while writing g[p][q]
pub(super) fn mirror<const P: usize, const B: usize, const W: usize>(
    g: &mut [[f32; P]; P],
    r: usize,
) {
    for p in 0..r.min(P) {
        for q in 0..(p / B * B) / W * W {
            g[p][q] = g[q][p];
        }
    }
}

/// A factor row zero-padded to `P` columns, starting on a cache line (a 16-byte
/// aligned row of 64 bytes would straddle two lines on every gather).
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub(super) struct Row<const P: usize>(pub(super) [f32; P]);

/// The other modes' factors in the bias layout, split for [`row_system_bias`]: per
/// other mode (in mode order) its `rank` CP columns, zero-padded to `P`, and its own
/// bias column (the fixed columns, all 1, are not kept).
pub(super) struct BiasFactors<const P: usize> {
    /// Per other mode, its CP rows.
    pub(super) cp: Vec<Vec<Row<P>>>,
    /// Per other mode, its own bias per row.
    pub(super) bias: Vec<Vec<f32>>,
}

impl<const P: usize> BiasFactors<P> {
    /// From `others`, the factors of every mode but `mode` in mode order, each of
    /// `rank` CP columns and one bias column per mode (`rank ≤ P`).
    pub(super) fn new(others: &[&Matrix], rank: usize, mode: usize) -> Self {
        let own_bias = (0..=others.len()).filter(|&m| m != mode).map(|m| rank + m);
        let (cp, bias) = others
            .iter()
            .zip(own_bias)
            .map(|(f, c)| {
                let rows = f.data().chunks_exact(f.cols().max(1));
                let cp = rows
                    .clone()
                    .map(|row| Row(std::array::from_fn(|q| if q < rank { row[q] } else { 0.0 })))
                    .collect();
                (cp, rows.map(|row| row[c]).collect())
            })
            .unzip();
        BiasFactors { cp, bias }
    }

    /// The Khatri-Rao row's CP part of a nonzero at `ix` (its `D` other modes'
    /// indices) and, in `y`, its target: `x` less the other modes' biases. `D` a
    /// constant, so the modes' loop unrolls and its factors' slices stay in registers.
    #[inline(always)]
    fn row<const D: usize>(&self, ix: &[u32], x: f32, y: &mut f32) -> [f32; P] {
        let ix: &[u32; D] = ix.try_into().expect("D indices per nonzero");
        let cp: [&[Row<P>]; D] = std::array::from_fn(|m| &self.cp[m][..]);
        let bias: [&[f32]; D] = std::array::from_fn(|m| &self.bias[m][..]);
        let mut kr = cp[0][ix[0] as usize].0;
        let mut fixed = bias[0][ix[0] as usize];
        for m in 1..D {
            let row = &cp[m][ix[m] as usize].0;
            for (v, &a) in kr.iter_mut().zip(row) {
                *v *= a;
            }
            fixed += bias[m][ix[m] as usize];
        }
        *y = x - fixed;
        kr
    }

    /// [`BiasFactors::row`] for any number of other modes.
    #[inline(always)]
    fn row_any(&self, ix: &[u32], x: f32, y: &mut f32) -> [f32; P] {
        let mut kr = self.cp[0][ix[0] as usize].0;
        let mut fixed = self.bias[0][ix[0] as usize];
        for ((cp, bias), &i) in self.cp.iter().zip(&self.bias).zip(ix).skip(1) {
            for (v, &a) in kr.iter_mut().zip(&cp[i as usize].0) {
                *v *= a;
            }
            fixed += bias[i as usize];
        }
        *y = x - fixed;
        kr
    }
}

/// The Khatri-Rao row `Π_m facs[m][ix[m]]` of factors padded to `P` columns, for
/// `D` other modes (a constant, so the loop over them unrolls).
#[inline(always)]
fn khatri_rao<const P: usize, const D: usize>(facs: &[&[f32]], ix: &[u32]) -> [f32; P] {
    let ix: &[u32; D] = ix.try_into().expect("D indices per nonzero");
    let facs: &[&[f32]; D] = facs.try_into().expect("D factors");
    let mut kr = [0f32; P];
    kr.copy_from_slice(&facs[0][ix[0] as usize * P..][..P]);
    for m in 1..D {
        let row = &facs[m][ix[m] as usize * P..][..P];
        for (v, &a) in kr.iter_mut().zip(row) {
            *v *= a;
        }
    }
    kr
}

/// [`khatri_rao`] for any number of other modes.
#[inline(always)]
fn khatri_rao_any<const P: usize>(facs: &[&[f32]], ix: &[u32]) -> [f32; P] {
    let mut kr = [0f32; P];
    kr.copy_from_slice(&facs[0][ix[0] as usize * P..][..P]);
    for (f, &i) in facs.iter().zip(ix).skip(1) {
        for (v, &a) in kr.iter_mut().zip(&f[i as usize * P..][..P]) {
            *v *= a;
        }
    }
    kr
}

/// One row's bias-layout system ([`super::row_groups::RowGroups::bias_normal_equations`])
/// for a CP rank `r ≤ P`, `G` accumulated as in [`row_system`].
/// Per nonzero: the Khatri-Rao row's CP part `k` and the target `y = x −` the other
/// modes' biases. The bias unknown's Khatri-Rao entry is the product of the other
/// modes' fixed 1s, so its row of `G` is `Σ k` and the count, its right-hand side
/// `Σ y`. Returns `Σ y²` (with `G` and `b` it gives the row's loss at any solution:
/// `Σ y² − 2aᵀb + aᵀGa`).
#[inline(always)]
pub(super) fn row_system_bias<const P: usize>(
    f: &BiasFactors<P>,
    r: usize,
    others: &[u32],
    values: &[f32],
    dst: &mut [f32],
) -> f64 {
    let d = f.cp.len();
    let mut g = [[0f32; P]; P];
    let (mut b, mut cross) = ([0f32; P], [0f32; P]);
    let mut be = 0f32;
    let mut squares = 0f64;
    let mut chunk = ChunkRows::<P>::new();
    let mut y = [0f32; CHUNK];
    for (idx, vals) in others.chunks(CHUNK * d).zip(values.chunks(CHUNK)) {
        let n = vals.len();
        // In a local, stored once (as in `row_system`); the target beside it.
        let k = match d {
            1 => chunk.fill(n, |j| f.row::<1>(&idx[j..j + 1], vals[j], &mut y[j])),
            2 => chunk.fill(n, |j| {
                f.row::<2>(&idx[2 * j..2 * j + 2], vals[j], &mut y[j])
            }),
            3 => chunk.fill(n, |j| {
                f.row::<3>(&idx[3 * j..3 * j + 3], vals[j], &mut y[j])
            }),
            _ => chunk.fill(n, |j| {
                f.row_any(&idx[j * d..(j + 1) * d], vals[j], &mut y[j])
            }),
        };
        // The chunk's right-hand sides and `Σ k` in local accumulators (kept in
        // registers; accumulating into the row's arrays inside the loop above chains
        // every nonzero's update through memory).
        // `Σ y²` in f64: in f32 a target of 2e19 squared overflowed, and one of 1e-20
        // flushed to zero (a loss below zero, an RMSE of NaN).
        let (mut cb, mut ck, mut cy, mut cy2) = ([0f32; P], [0f32; P], 0f32, 0f64);
        for (kj, &yj) in k.iter().zip(&y[..n]) {
            for ((br, cr), &kr) in cb.iter_mut().zip(ck.iter_mut()).zip(kj) {
                *br = yj.mul_add(kr, *br);
                *cr += kr;
            }
            cy += yj;
            cy2 = f64::from(yj).mul_add(f64::from(yj), cy2);
        }
        squares += cy2;
        for ((br, cr), (&vb, &vk)) in b.iter_mut().zip(cross.iter_mut()).zip(cb.iter().zip(&ck)) {
            *br += vb;
            *cr += vk;
        }
        be += cy;
        gram::<P>(k, r, &mut g);
    }
    mirror::<P, 1, 8>(&mut g, r);
    write_bias_system(&g, &cross, &b, be, values.len(), r, dst);
    squares
}

/// Writes a row's bias-layout system (`w = r + 1`: `G` with the bias row and column
/// `Σ k` and the count, then `b` and `Σ y`) into `dst` from its parts.
#[inline(always)]
pub(super) fn write_bias_system<const P: usize>(
    g: &[[f32; P]; P],
    cross: &[f32; P],
    b: &[f32; P],
    be: f32,
    count: usize,
    r: usize,
    dst: &mut [f32],
) {
    let w = r + 1;
    for (p, o) in dst.chunks_exact_mut(w).take(r).enumerate() {
        o[..r].copy_from_slice(&g[p][..r]);
        o[r] = cross[p];
    }
    dst[r * w..r * w + r].copy_from_slice(&cross[..r]);
    dst[r * w + r] = count as f32;
    dst[w * w..w * w + r].copy_from_slice(&b[..r]);
    dst[w * w + r] = be;
}

/// Adds `Σ_j k_j k_jᵀ` to `g`'s first `r` rows. `G` is symmetric: the rows of each
/// 8-row group `8c..8c + 8` need only the columns from `8c` on (the rest is
/// [`mirror`]ed), `P/8 − c` vectors. Each group runs in blocks of rows sized so that a
/// block has 8 to 12 accumulators ([`group`]): enough independent FMA chains to cover
/// the FMA latency at full throughput, few enough to stay in AVX2's 16 registers. (A
/// fixed number of rows per block left the last groups, one vector wide, with a
/// quarter of the chains: latency-bound.) The column start is a constant of
/// `gram_rows`, so its accumulators stay in registers.
#[inline(always)]
fn gram<const P: usize>(k: &[[f32; P]], r: usize, g: &mut [[f32; P]; P]) {
    for c in 0..r.div_ceil(8) {
        match c {
            0 => group::<P, 0>(k, r, g),
            1 => group::<P, 8>(k, r, g),
            2 => group::<P, 16>(k, r, g),
            3 => group::<P, 24>(k, r, g),
            4 => group::<P, 32>(k, r, g),
            5 => group::<P, 40>(k, r, g),
            6 => group::<P, 48>(k, r, g),
            _ => group::<P, 56>(k, r, g),
        }
    }
}

/// [`gram`]'s rows `C0..min(C0 + 8, r)`, in blocks of `B` rows with `B · (P − C0)/8`
/// accumulators of 8 floats.
#[inline(always)]
fn group<const P: usize, const C0: usize>(k: &[[f32; P]], r: usize, g: &mut [[f32; P]; P]) {
    let end = (C0 + 8).min(r);
    match (P.saturating_sub(C0)) / 8 {
        0 => {}
        // At width 8 an 8 × 8 block of accumulators is vectorized across its rows by
        // the compiler, with a transpose through the stack per nonzero (2.5× slower
        // than two blocks of 4, measured).
        1 if P == 8 => blocks::<P, 4, C0>(k, end, g),
        1 => blocks::<P, 8, C0>(k, end, g),
        2 | 3 => blocks::<P, 4, C0>(k, end, g),
        4..=6 => blocks::<P, 2, C0>(k, end, g),
        _ => blocks::<P, 1, C0>(k, end, g),
    }
}

/// Rows `C0..end` of [`gram`], `B` at a time (`B` divides 8, so blocks stay within
/// the group).
#[inline(always)]
fn blocks<const P: usize, const B: usize, const C0: usize>(
    k: &[[f32; P]],
    end: usize,
    g: &mut [[f32; P]; P],
) {
    for a0 in (C0..end).step_by(B) {
        gram_rows::<P, B, C0>(k, a0, g);
    }
}

/// Adds `Σ_j k_j[a0 + t] · k_j[c]` for `t < B` and columns `c ≥ C0` to `g`'s rows
/// `a0..a0 + B` (`C0 ≤ a0`, so that with the mirror this covers the rows' upper part).
#[inline(always)]
fn gram_rows<const P: usize, const B: usize, const C0: usize>(
    k: &[[f32; P]],
    a0: usize,
    g: &mut [[f32; P]; P],
) {
    if C0 >= P {
        return;
    }
    let mut acc = [[0f32; P]; B];
    for kj in k {
        for (t, acc_t) in acc.iter_mut().enumerate() {
            let s = kj[a0 + t];
            for (c, &kc) in acc_t[C0..].iter_mut().zip(&kj[C0..]) {
                *c = s.mul_add(kc, *c);
            }
        }
    }
    for (gt, acc_t) in g[a0..a0 + B].iter_mut().zip(&acc) {
        for (x, &y) in gt[C0..].iter_mut().zip(&acc_t[C0..]) {
            *x += y;
        }
    }
}

/// [`row_system`] for any rank and order (no register blocking).
pub(super) fn row_system_any(
    r: usize,
    others: &[u32],
    values: &[f32],
    facs: &[&[f32]],
    dst: &mut [f32],
) {
    let d = facs.len();
    dst.fill(0.0);
    let (g, b) = dst.split_at_mut(r * r);
    let mut k = vec![0f32; r];
    for (j, &x) in values.iter().enumerate() {
        let ix = &others[j * d..(j + 1) * d];
        k.fill(1.0);
        for (f, &i) in facs.iter().zip(ix) {
            for (kr, &a) in k.iter_mut().zip(&f[i as usize * r..][..r]) {
                *kr *= a;
            }
        }
        for (gr, &ka) in g.chunks_exact_mut(r).zip(&k) {
            for (x, &kb) in gr.iter_mut().zip(&k) {
                *x = ka.mul_add(kb, *x);
            }
        }
        for (br, &kr) in b.iter_mut().zip(&k) {
            *br = x.mul_add(kr, *br);
        }
    }
}
