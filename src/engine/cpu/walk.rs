//! One pass over a stream of nonzeros in (mostly) lexicographic coordinate order that
//! computes MTTKRP or TTMc for one mode, reusing work along shared coordinate prefixes
//! the way a CSF tree does, without building one.
//!
//! The walk's *levels* are the order in which coordinates are pushed: for MTTKRP the
//! key order of the sparse part (shortest mode first, so the stream is sorted level by
//! level and the sharing is greatest), for TTMc the mode order (its output columns
//! are the Kronecker product in mode order). Below, "mode `l`" is the mode at level `l`.
//!
//! For target mode `n` and a nonzero at `c = (c_0, …, c_{N-1})`:
//! - the *top* product `T = F_0[c_0] ⊛ … ⊛ F_{n-1}[c_{n-1}]` changes only when one of
//!   the modes before `n` changes, so it is rebuilt from the first changed level;
//! - the *subtree sums* `A_l = Σ v · F_{l+1}[c_{l+1}] ⊛ … ⊛ F_{N-1}[c_{N-1}]` for
//!   `l ≥ n` are accumulated leaf-first and folded one level up (`A_{l-1} += F_l ⊛ A_l`)
//!   when the coordinate of level `l` changes; folding level `n` adds `T ⊛ A_n` to the
//!   output row `c_n`.
//!
//! `⊛` is the Hadamard product for MTTKRP and the Kronecker product for TTMc (later mode
//! fastest), so TTMc of mode 0 costs `R_2` per nonzero plus `R_1·R_2` per fiber instead
//! of `R_1·R_2` per nonzero. Any order of the stream is correct (a change of prefix just
//! folds more often); sorted streams reuse the most.

use crate::matrix::Matrix;
use crate::ops::Op;

/// Walks one stream for one op and mode into a private output buffer.
pub(super) struct Walker<'a> {
    op: Op,
    mode: usize,
    order: usize,
    /// One factor per level, in walking order.
    factors: Vec<&'a Matrix>,
    out: &'a mut [f32],
    cols: usize,
    /// `top[l]` = product over modes `0..=l` (only `l < mode` used).
    top: Vec<Vec<f32>>,
    /// `acc[l]` for `mode ≤ l ≤ N-2`: subtree sums.
    acc: Vec<Vec<f32>>,
    /// `empty[l]`: `acc[l]` holds nothing yet (its contents are stale, not zero), so
    /// the next contribution overwrites instead of adding: no clearing passes.
    empty: Vec<bool>,
    prev: Vec<u32>,
    started: bool,
    one: Vec<f32>,
}

impl<'a> Walker<'a> {
    /// A walker writing `op` of the target at level `mode` into `out` (`rows × cols`,
    /// row-major). `factors` holds one factor per level, in the order the coordinates
    /// are pushed (the mode order for TTMc, whose output columns follow it).
    pub(super) fn new(
        op: Op,
        mode: usize,
        factors: Vec<&'a Matrix>,
        out: &'a mut [f32],
        cols: usize,
    ) -> Self {
        let order = factors.len();
        let rank = |m: usize| factors[m].cols();
        let mut top = Vec::with_capacity(mode);
        let mut len = 1;
        for m in 0..mode {
            len = match op {
                Op::Mttkrp => rank(m),
                Op::Ttmc => len * rank(m),
            };
            top.push(vec![0f32; len]);
        }
        let mut acc = vec![Vec::new(); order.saturating_sub(1)];
        let mut len = 1;
        for l in (mode..order.saturating_sub(1)).rev() {
            len = match op {
                Op::Mttkrp => rank(l + 1),
                Op::Ttmc => len * rank(l + 1),
            };
            acc[l] = vec![0f32; len];
        }
        Walker {
            op,
            mode,
            order,
            factors,
            out,
            cols,
            top,
            acc,
            prev: vec![0; order],
            started: false,
            empty: vec![true; order.saturating_sub(1)],
            one: vec![1.0],
        }
    }
}

/// Something that consumes a stream of nonzeros.
pub(super) trait Sink {
    /// Whether prefetching rows ahead pays: only when they do not all sit in cache.
    fn wants_prefetch(&self) -> bool {
        false
    }
    /// A nonzero at `c` will be pushed soon: start loading the rows it will touch.
    fn prefetch(&self, _c: &[u32]) {}
    /// Adds the nonzero `v` at coordinates `c`.
    fn push(&mut self, c: &[u32], v: f32);
    /// Ends the stream.
    fn finish(&mut self);
}

impl Sink for Walker<'_> {
    #[inline]
    fn push(&mut self, c: &[u32], v: f32) {
        let (n, order) = (self.mode, self.order);
        if !self.started {
            self.started = true;
            self.rebuild_top(c, 0);
        } else {
            let d = (0..order).find(|&m| c[m] != self.prev[m]).unwrap_or(order);
            if n + 1 < order && d < order - 1 {
                for l in (d.max(n)..=order - 2).rev() {
                    self.fold(l);
                }
            }
            if d < n {
                self.rebuild_top(c, d);
            }
        }
        if n + 1 == order {
            // Target is the last mode: each nonzero goes straight to its output row.
            let t: &[f32] = if n == 0 { &self.one } else { &self.top[n - 1] };
            let row = c[n] as usize * self.cols;
            axpy(&mut self.out[row..row + self.cols], v, t);
        } else {
            let leaf = self.factors[order - 1].row(c[order - 1] as usize);
            let acc = &mut self.acc[order - 2];
            if std::mem::replace(&mut self.empty[order - 2], false) {
                for (a, &f) in acc.iter_mut().zip(leaf) {
                    *a = v * f;
                }
            } else {
                axpy(acc, v, leaf);
            }
        }
        self.prev.copy_from_slice(c);
    }

    fn finish(&mut self) {
        if self.started && self.mode + 1 < self.order {
            for l in (self.mode..=self.order - 2).rev() {
                self.fold(l);
            }
        }
        self.started = false;
    }
}

impl Walker<'_> {
    fn rebuild_top(&mut self, c: &[u32], from: usize) {
        for l in from..self.mode {
            let f = self.factors[l].row(c[l] as usize);
            let (before, rest) = self.top.split_at_mut(l);
            let dst = &mut rest[0];
            if l == 0 {
                dst.copy_from_slice(f);
                continue;
            }
            let src = &before[l - 1];
            match self.op {
                Op::Mttkrp => {
                    for ((d, &a), &b) in dst.iter_mut().zip(src).zip(f) {
                        *d = a * b;
                    }
                }
                Op::Ttmc => kron_into(dst, src, f),
            }
        }
    }

    /// Closes the node at level `l` (its coordinate is `prev[l]`).
    fn fold(&mut self, l: usize) {
        let n = self.mode;
        if l > n {
            let f = self.factors[l].row(self.prev[l] as usize);
            let (lo, hi) = self.acc.split_at_mut(l);
            let (dst, src) = (&mut lo[l - 1], &hi[0]);
            self.empty[l] = true;
            let overwrite = std::mem::replace(&mut self.empty[l - 1], false);
            match (self.op, overwrite) {
                (Op::Mttkrp, true) => {
                    for ((d, s), &b) in dst.iter_mut().zip(src.iter()).zip(f) {
                        *d = s * b;
                    }
                }
                (Op::Mttkrp, false) => {
                    for ((d, s), &b) in dst.iter_mut().zip(src.iter()).zip(f) {
                        *d = s.mul_add(b, *d);
                    }
                }
                (Op::Ttmc, true) => kron_into(dst, f, src),
                (Op::Ttmc, false) => {
                    // dst[(r_l, rest)] += f[r_l] * src[rest]
                    let w = src.len();
                    for (r, &fr) in f.iter().enumerate() {
                        axpy(&mut dst[r * w..(r + 1) * w], fr, src);
                    }
                }
            }
        } else {
            let t: &[f32] = if n == 0 { &self.one } else { &self.top[n - 1] };
            let row = self.prev[n] as usize * self.cols;
            let out = &mut self.out[row..row + self.cols];
            let a = &self.acc[n];
            self.empty[n] = true;
            match self.op {
                Op::Mttkrp => {
                    if n == 0 {
                        for (o, &s) in out.iter_mut().zip(a.iter()) {
                            *o += s;
                        }
                    } else {
                        for ((o, &s), &b) in out.iter_mut().zip(a.iter()).zip(t) {
                            *o = s.mul_add(b, *o);
                        }
                    }
                }
                Op::Ttmc => {
                    let w = a.len();
                    for (r, &tr) in t.iter().enumerate() {
                        axpy(&mut out[r * w..(r + 1) * w], tr, a);
                    }
                }
            }
        }
    }
}

/// Asks the CPU to start loading the cache lines of `row` (a hint: no effect on
/// results, never faults).
#[inline(always)]
pub(super) fn prefetch_row(row: &[f32]) {
    #[cfg(target_arch = "x86_64")]
    for line in row.chunks(16) {
        // SAFETY: prefetching is a hint; the pointer comes from a live slice.
        unsafe {
            std::arch::x86_64::_mm_prefetch(line.as_ptr().cast(), std::arch::x86_64::_MM_HINT_T0)
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// `y += a · x`.
#[inline(always)]
fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = a.mul_add(x, *y);
    }
}

/// `dst = a ⊗ b` (b fastest).
#[inline]
fn kron_into(dst: &mut [f32], a: &[f32], b: &[f32]) {
    let w = b.len();
    for (r, &ar) in a.iter().enumerate() {
        for (d, &bb) in dst[r * w..(r + 1) * w].iter_mut().zip(b) {
            *d = ar * bb;
        }
    }
}
