//! TTMc of one mode in one pass over a stream of nonzeros, with the sums below each
//! node *keyed by the target coordinate* so that the target's place in the key order
//! does not decide the cost.
//!
//! The output row of target mode `n` is the Kronecker product, in mode order, of the
//! other modes' factor rows: `Y[c_n] += v · F_{l_0}[c_{l_0}] ⊗ … ⊗ F_{l_{N-2}}[c_{l_{N-2}}]`
//! where `l_0 < … < l_{N-2}` are the modes other than `n`. The walk treats those modes
//! as the levels of a CSF-like tree (the stream is sorted in mode order, so it is
//! sorted along them up to the target's interleaving) and carries `c_n` as a key:
//!
//! - a nonzero adds `v · F_{l_{N-2}}[c]` (width `R_{l_{N-2}}`) to its parent's sum for
//!   key `c_n`;
//! - when the coordinate of level `l_{j-1}` changes, that node closes: every keyed sum
//!   `S[k]` of it is folded up as `F_{l_{j-1}}[c] ⊗ S[k]` into its parent's sum for the
//!   same key, or, at the top level, into the output row `k`.
//!
//! So the widest product (`Π R`, the output width) is formed once per distinct
//! `(c_{l_0}, c_n)` pair, the next one once per `(c_{l_0}, c_{l_1}, c_n)`, and a nonzero
//! costs one row of its last mode's rank. A walk that instead kept the target as a
//! tree level formed the full product once per nonzero when the target was the last
//! mode (2–8× slower modes on 4th-order tensors). Keys of a node are found through a
//! table over the target's extent (one per level), reset after each fold, so the cost
//! is per touched key. Any stream order is correct; a sorted one shares the most.

use super::walk::Sink;
use crate::matrix::Matrix;
use wide::f32x8;

/// No slot for this key yet.
const NONE: u32 = u32::MAX;

/// The keyed sums of one open node: for each target coordinate touched under it, one
/// row of `width` floats.
struct Keyed {
    width: usize,
    /// `slot[k]`: where key `k`'s row is in `data`, or [`NONE`].
    slot: Vec<u32>,
    /// Keys in the order they were first touched.
    keys: Vec<u32>,
    data: Vec<f32>,
}

impl Keyed {
    fn new(extent: usize, width: usize) -> Self {
        Keyed {
            width,
            slot: vec![NONE; extent],
            keys: Vec::new(),
            data: Vec::new(),
        }
    }

    /// The row of `key`, and whether it is new (its contents are then stale and must
    /// be overwritten, not added to).
    #[inline(always)]
    fn row(&mut self, key: u32) -> (&mut [f32], bool) {
        let w = self.width;
        let s = self.slot[key as usize];
        if s != NONE {
            let at = s as usize * w;
            return (&mut self.data[at..at + w], false);
        }
        let s = self.keys.len();
        self.slot[key as usize] = s as u32;
        self.keys.push(key);
        if self.data.len() < (s + 1) * w {
            self.data.resize((s + 1) * w, 0.0);
        }
        (&mut self.data[s * w..(s + 1) * w], true)
    }

    /// Forgets every key (the rows' contents become stale).
    fn clear(&mut self) {
        for &k in &self.keys {
            self.slot[k as usize] = NONE;
        }
        self.keys.clear();
    }
}

/// Walks one stream for TTMc of one mode into a private output buffer.
pub(super) struct TtmcWalker<'a> {
    target: usize,
    /// The modes other than the target, in mode order: the tree's levels.
    levels: Vec<usize>,
    /// One factor per mode (the target's unused).
    factors: Vec<&'a Matrix>,
    out: &'a mut [f32],
    cols: usize,
    /// The target coordinate of `out`'s first row; nonzeros whose target coordinate
    /// falls outside `first..first + rows` are skipped (a worker that owns a range of
    /// output rows walks the whole stream).
    first: u32,
    rows: u32,
    /// `sums[j]` (`1 ≤ j ≤ N-2`, index `j - 1`): the keyed sums of the open node at
    /// depth `j - 1`, width `Π_{i ≥ j} R_{levels[i]}`.
    sums: Vec<Keyed>,
    prev: Vec<u32>,
    started: bool,
}

impl<'a> TtmcWalker<'a> {
    /// A walker writing TTMc of mode `target` into `out` (`rows × cols`, row-major,
    /// `cols` the product of the other factors' ranks), whose row `i` is the target
    /// coordinate `first + i`. `factors` holds one factor per mode, in mode order;
    /// coordinates are pushed in mode order.
    pub(super) fn new(
        target: usize,
        factors: Vec<&'a Matrix>,
        out: &'a mut [f32],
        cols: usize,
        first: u32,
    ) -> Self {
        let order = factors.len();
        let levels: Vec<usize> = (0..order).filter(|&m| m != target).collect();
        let extent = out.len().checked_div(cols).unwrap_or(0);
        let rows = u32::try_from(extent).expect("rows of a mode fit its u32 coordinates");
        let mut sums = Vec::new();
        for j in 1..levels.len() {
            let width = levels[j..].iter().map(|&m| factors[m].cols()).product();
            sums.push(Keyed::new(extent, width));
        }
        TtmcWalker {
            target,
            levels,
            factors,
            out,
            cols,
            first,
            rows,
            sums,
            prev: vec![0; order],
            started: false,
        }
    }

    /// Closes the node at depth `j - 1` (its coordinate is in `prev`): folds its keyed
    /// sums into its parent's, or into the output rows when it is a top-level node.
    fn fold(&mut self, j: usize) {
        let m = self.levels[j - 1];
        let factor: &Matrix = self.factors[m];
        let f = factor.row(self.prev[m] as usize);
        let (lo, hi) = self.sums.split_at_mut(j - 1);
        let src = &mut hi[0];
        let w = src.width;
        for (s, &key) in src.keys.iter().enumerate() {
            let row = &src.data[s * w..(s + 1) * w];
            if j == 1 {
                let at = key as usize * self.cols;
                kron_add(&mut self.out[at..at + self.cols], f, row);
            } else {
                let (dst, fresh) = lo[j - 2].row(key);
                if fresh {
                    kron_into(dst, f, row);
                } else {
                    kron_add(dst, f, row);
                }
            }
        }
        src.clear();
    }
}

impl Sink for TtmcWalker<'_> {
    #[inline]
    fn push(&mut self, c: &[u32], v: f32) {
        let depth = self.levels.len();
        // Below `first` wraps around to a large value: one test for both ends.
        let key = c[self.target].wrapping_sub(self.first);
        if key >= self.rows {
            return;
        }
        if depth == 0 {
            // Order 1: the output is the tensor itself.
            self.out[key as usize] += v;
            return;
        }
        if self.started {
            // The first level whose coordinate changed; nodes from there down close.
            let d = self
                .levels
                .iter()
                .position(|&m| c[m] != self.prev[m])
                .unwrap_or(depth);
            for j in (d + 1..depth).rev() {
                self.fold(j);
            }
        }
        self.started = true;
        let leaf = self.levels[depth - 1];
        let factor: &Matrix = self.factors[leaf];
        let f = factor.row(c[leaf] as usize);
        if depth == 1 {
            let at = key as usize * self.cols;
            axpy(&mut self.out[at..at + self.cols], v, f);
        } else {
            let (row, fresh) = self.sums[depth - 2].row(key);
            if fresh {
                scale_into(row, v, f);
            } else {
                axpy(row, v, f);
            }
        }
        self.prev.copy_from_slice(c);
    }

    fn finish(&mut self) {
        if self.started {
            for j in (1..self.levels.len()).rev() {
                self.fold(j);
            }
        }
        self.started = false;
    }
}

/// `y += a · x`: 32 floats per step as four independent 8-lane FMAs (a long row, such
/// as the output's `Π R` floats, is then bound by stores rather than by the loop), then
/// 8 at a time, then the rest (LLVM's own vectorization left 8-float rows scalar).
#[inline(always)]
pub(super) fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    #[inline(always)]
    fn lanes(s: &[f32]) -> f32x8 {
        f32x8::from(<[f32; 8]>::try_from(s).expect("8 lanes"))
    }
    let n = y.len().min(x.len());
    let (y, x) = (&mut y[..n], &x[..n]);
    let av = f32x8::splat(a);
    let mut y32 = y.chunks_exact_mut(32);
    let mut x32 = x.chunks_exact(32);
    for (yy, xx) in (&mut y32).zip(&mut x32) {
        let (y0, y1, y2, y3) = (
            lanes(&yy[..8]),
            lanes(&yy[8..16]),
            lanes(&yy[16..24]),
            lanes(&yy[24..]),
        );
        let (x0, x1, x2, x3) = (
            lanes(&xx[..8]),
            lanes(&xx[8..16]),
            lanes(&xx[16..24]),
            lanes(&xx[24..]),
        );
        yy[..8].copy_from_slice(&av.mul_add(x0, y0).to_array());
        yy[8..16].copy_from_slice(&av.mul_add(x1, y1).to_array());
        yy[16..24].copy_from_slice(&av.mul_add(x2, y2).to_array());
        yy[24..].copy_from_slice(&av.mul_add(x3, y3).to_array());
    }
    let (y, x) = (y32.into_remainder(), x32.remainder());
    let mut y8 = y.chunks_exact_mut(8);
    let mut x8 = x.chunks_exact(8);
    for (yy, xx) in (&mut y8).zip(&mut x8) {
        yy.copy_from_slice(&av.mul_add(lanes(xx), lanes(yy)).to_array());
    }
    for (yy, &xx) in y8.into_remainder().iter_mut().zip(x8.remainder()) {
        *yy = a.mul_add(xx, *yy);
    }
}

/// `y = a · x`.
#[inline(always)]
fn scale_into(y: &mut [f32], a: f32, x: &[f32]) {
    for (yy, &xx) in y.iter_mut().zip(x) {
        *yy = a * xx;
    }
}

/// `dst += f ⊗ src` (`src` fastest).
#[inline(always)]
pub(super) fn kron_add(dst: &mut [f32], f: &[f32], src: &[f32]) {
    let w = src.len();
    for (d, &fr) in dst.chunks_exact_mut(w).zip(f) {
        axpy(d, fr, src);
    }
}

/// `dst = f ⊗ src` (`src` fastest).
#[inline(always)]
fn kron_into(dst: &mut [f32], f: &[f32], src: &[f32]) {
    let w = src.len();
    for (d, &fr) in dst.chunks_exact_mut(w).zip(f) {
        scale_into(d, fr, src);
    }
}
