//! One pass over a stream of nonzeros in (mostly) lexicographic coordinate order that
//! computes MTTKRP for one mode, reusing work along shared coordinate prefixes the way
//! a CSF tree does, without building one. (TTMc has its own walk, [`super::ttmc`].)
//!
//! The walk's *levels* are the key order of the sparse part (shortest mode first, so
//! the stream is sorted level by level and the sharing is greatest). Below, "mode `l`"
//! is the mode at level `l`.
//!
//! For target level `n` and a nonzero at `c = (c_0, …, c_{N-1})`:
//! - the *top* product `T = F_0[c_0] ∘ … ∘ F_{n-1}[c_{n-1}]` changes only when one of
//!   the levels before `n` changes, so it is rebuilt from the first changed level;
//! - the *subtree sums* `A_l = Σ v · F_{l+1}[c_{l+1}] ∘ … ∘ F_{N-1}[c_{N-1}]` for
//!   `l ≥ n` are accumulated leaf-first and folded one level up (`A_{l-1} += F_l ∘ A_l`)
//!   when the coordinate of level `l` changes; folding level `n` adds `T ∘ A_n` to the
//!   output row `c_n`.
//!
//! Any order of the stream is correct (a change of prefix just folds more often);
//! sorted streams reuse the most. [`super::fixed`] is the same walk at compile-time
//! order, rank and target level.

use crate::matrix::Matrix;

/// Walks one stream for MTTKRP of one mode into a private output buffer.
pub(super) struct Walker<'a> {
    mode: usize,
    order: usize,
    /// One factor per level, in walking order.
    factors: Vec<&'a Matrix>,
    out: &'a mut [f32],
    cols: usize,
    /// `top[l]` = product over levels `0..=l` (only `l < mode` used).
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
    /// A walker writing MTTKRP of the target at level `mode` into `out` (`rows × cols`,
    /// row-major, `cols` the rank). `factors` holds one factor per level, in the order
    /// the coordinates are pushed.
    pub(super) fn new(
        mode: usize,
        factors: Vec<&'a Matrix>,
        out: &'a mut [f32],
        cols: usize,
    ) -> Self {
        let order = factors.len();
        let top = vec![vec![0f32; cols]; mode];
        let mut acc = vec![Vec::new(); order.saturating_sub(1)];
        for a in acc.iter_mut().skip(mode) {
            *a = vec![0f32; cols];
        }
        Walker {
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
            for ((d, &a), &b) in dst.iter_mut().zip(src).zip(f) {
                *d = a * b;
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
            if overwrite {
                for ((d, s), &b) in dst.iter_mut().zip(src.iter()).zip(f) {
                    *d = s * b;
                }
            } else {
                for ((d, s), &b) in dst.iter_mut().zip(src.iter()).zip(f) {
                    *d = s.mul_add(b, *d);
                }
            }
        } else {
            let t: &[f32] = if n == 0 { &self.one } else { &self.top[n - 1] };
            let row = self.prev[n] as usize * self.cols;
            let out = &mut self.out[row..row + self.cols];
            let a = &self.acc[n];
            self.empty[n] = true;
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
    }
}

/// Asks the CPU to start loading the cache line that holds `x` (a hint: no effect on
/// results, never faults).
#[inline(always)]
pub(crate) fn prefetch_line<T>(x: &T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint; the pointer comes from a live reference.
    unsafe {
        std::arch::x86_64::_mm_prefetch((x as *const T).cast(), std::arch::x86_64::_MM_HINT_T0)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = x;
}

/// Asks the CPU to start loading the cache lines of `row` ([`prefetch_line`] of each).
#[inline(always)]
pub(crate) fn prefetch_row(row: &[f32]) {
    for line in row.chunks(16) {
        prefetch_line(&line[0]);
    }
}

/// `y += a · x`.
#[inline(always)]
fn axpy(y: &mut [f32], a: f32, x: &[f32]) {
    for (y, &x) in y.iter_mut().zip(x) {
        *y = a.mul_add(x, *y);
    }
}
