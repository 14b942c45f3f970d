//! The walk of [`super::walk`] specialized for MTTKRP at a compile-time order `N`, rank
//! `R` and target level `M` (levels are the key order's, shortest mode first; the
//! caller hands the factors over in that order): fixed-size arrays, so every row operation unrolls into SIMD and the
//! per-nonzero bookkeeping has no loops of unknown length. Used for the common ranks
//! (8, 16, 32, 64) of tensors of orders 3 to 6; the generic walker handles the rest.
//! Accumulations use `mul_add`, which is one FMA instruction with the crate's x86-64-v3
//! target (LLVM does not fuse a separate multiply and add on its own).

/// Row operations on `[f32; R]`, eight lanes at a time (`R` is a multiple of 8 for
/// every specialized rank). Written with `wide::f32x8` because LLVM left these loops
/// partly scalar (a scalar times a row), which the instruction profile showed.
mod rowops {
    use wide::f32x8;

    #[inline(always)]
    fn load(s: &[f32]) -> f32x8 {
        f32x8::from(<[f32; 8]>::try_from(s).expect("8 lanes"))
    }

    #[inline(always)]
    fn store(d: &mut [f32], v: f32x8) {
        d.copy_from_slice(&v.to_array());
    }

    /// `d = a · x`.
    #[inline(always)]
    pub fn scale<const R: usize>(d: &mut [f32; R], a: f32, x: &[f32; R]) {
        let a = f32x8::splat(a);
        for c in (0..R).step_by(8) {
            store(&mut d[c..c + 8], a * load(&x[c..c + 8]));
        }
    }

    /// `d += a · x`.
    #[inline(always)]
    pub fn axpy<const R: usize>(d: &mut [f32], a: f32, x: &[f32; R]) {
        let a = f32x8::splat(a);
        for c in (0..R).step_by(8) {
            let y = load(&d[c..c + 8]);
            store(&mut d[c..c + 8], a.mul_add(load(&x[c..c + 8]), y));
        }
    }

    /// `d = x ∘ y`.
    #[inline(always)]
    pub fn mul<const R: usize>(d: &mut [f32; R], x: &[f32; R], y: &[f32; R]) {
        for c in (0..R).step_by(8) {
            store(&mut d[c..c + 8], load(&x[c..c + 8]) * load(&y[c..c + 8]));
        }
    }

    /// `d += x ∘ y`.
    #[inline(always)]
    pub fn fma<const R: usize>(d: &mut [f32], x: &[f32; R], y: &[f32; R]) {
        for c in (0..R).step_by(8) {
            let z = load(&d[c..c + 8]);
            store(
                &mut d[c..c + 8],
                load(&x[c..c + 8]).mul_add(load(&y[c..c + 8]), z),
            );
        }
    }

    /// `d += x`.
    #[inline(always)]
    pub fn add<const R: usize>(d: &mut [f32], x: &[f32; R]) {
        for c in (0..R).step_by(8) {
            let z = load(&d[c..c + 8]);
            store(&mut d[c..c + 8], z + load(&x[c..c + 8]));
        }
    }
}

/// MTTKRP walker for order `N ≥ 2`, rank `R` (a multiple of 8) and target level `M`.
/// With all three known at compile time every level loop unrolls and every row of
/// `top`/`acc` is addressed by a constant, so the accumulators can live in registers
/// instead of round-tripping through memory on each nonzero.
pub(super) struct Fixed<'a, const N: usize, const R: usize, const M: usize> {
    factors: [&'a [f32]; N],
    out: &'a mut [f32],
    top: [[f32; R]; N],
    acc: [[f32; R]; N],
    empty: [bool; N],
    prev: [u32; N],
    started: bool,
}

#[inline(always)]
fn row<const R: usize>(f: &[f32], i: u32) -> &[f32; R] {
    let s = i as usize * R;
    f[s..s + R].try_into().expect("slice of length R")
}

impl<'a, const N: usize, const R: usize, const M: usize> Fixed<'a, N, R, M> {
    /// A walker for level `M` over row-major factor data, one per level (`factors[l]`
    /// is `I × R` for the mode at level `l`, the target's unused) into `out` (the
    /// target mode's rows × `R`).
    pub(super) fn new(factors: [&'a [f32]; N], out: &'a mut [f32]) -> Self {
        Fixed {
            factors,
            out,
            top: [[0.0; R]; N],
            acc: [[0.0; R]; N],
            empty: [true; N],
            prev: [0; N],
            started: false,
        }
    }

    /// Adds the nonzero `v` at `c`.
    #[inline(always)]
    pub(super) fn push_array(&mut self, c: [u32; N], v: f32) {
        let n = M;
        let d = if self.started {
            let d = (0..N).find(|&m| c[m] != self.prev[m]).unwrap_or(N);
            // Levels N-2 down to max(d, M) close; the loop bounds are constants so it
            // unrolls, and each level is a constant index.
            for l in (M..N.saturating_sub(1)).rev() {
                if l >= d {
                    self.fold(l);
                }
            }
            d
        } else {
            self.started = true;
            0
        };
        for l in 0..M {
            if l >= d {
                let f = row::<R>(self.factors[l], c[l]);
                if l == 0 {
                    self.top[0] = *f;
                } else {
                    let (before, rest) = self.top.split_at_mut(l);
                    rowops::mul(&mut rest[0], &before[l - 1], f);
                }
            }
        }
        if n + 1 == N {
            let s = c[n] as usize * R;
            // N ≥ 2, so the last mode has a mode before it and `top[n - 1]` exists.
            rowops::axpy(&mut self.out[s..s + R], v, &self.top[n - 1]);
        } else {
            let f = row::<R>(self.factors[N - 1], c[N - 1]);
            let a = &mut self.acc[N - 2];
            if self.empty[N - 2] {
                self.empty[N - 2] = false;
                rowops::scale(a, v, f);
            } else {
                rowops::axpy(a, v, f);
            }
        }
        self.prev = c;
    }

    /// Adds the nonzero `v` whose coordinates equal those of the nonzero pushed last
    /// at every level but the leaf (`N-1`), where it is `leaf`: the next nonzero of the
    /// same fiber. Nothing above the leaf changed, so nothing folds and the top product
    /// stands: one row operation. (The stale `prev[N-1]` is never read: no level folds
    /// on a change of the leaf alone.)
    #[inline(always)]
    pub(super) fn push_leaf(&mut self, leaf: u32, v: f32) {
        let s = leaf as usize * R;
        if M + 1 == N {
            rowops::axpy(&mut self.out[s..s + R], v, &self.top[M - 1]);
        } else {
            rowops::axpy(&mut self.acc[N - 2], v, row::<R>(self.factors[N - 1], leaf));
        }
    }

    #[inline(always)]
    fn fold(&mut self, l: usize) {
        let n = M;
        self.empty[l] = true;
        if l > n {
            let f = row::<R>(self.factors[l], self.prev[l]);
            let (lo, hi) = self.acc.split_at_mut(l);
            let (dst, src) = (&mut lo[l - 1], &hi[0]);
            if self.empty[l - 1] {
                self.empty[l - 1] = false;
                rowops::mul(dst, src, f);
            } else {
                rowops::fma(dst, src, f);
            }
        } else {
            let s = self.prev[n] as usize * R;
            let o = &mut self.out[s..s + R];
            let src = &self.acc[l];
            if n == 0 {
                rowops::add(o, src);
            } else {
                rowops::fma(o, src, &self.top[n - 1]);
            }
        }
    }
}

impl<const N: usize, const R: usize, const M: usize> super::walk::Sink for Fixed<'_, N, R, M> {
    fn wants_prefetch(&self) -> bool {
        // Rows that fit in a core's L2 together are cheap already; prefetching them only
        // adds instructions.
        const L2_BYTES: usize = 1 << 20;
        let floats: usize = self.factors.iter().map(|f| f.len()).sum::<usize>() + self.out.len();
        floats * 4 > L2_BYTES
    }

    #[inline(always)]
    fn prefetch(&self, c: &[u32]) {
        // The rows that miss cache: factor rows of every other mode and the output row.
        for (m, &i) in c.iter().enumerate() {
            let s = i as usize * R;
            if m == M {
                if let Some(r) = self.out.get(s..s + R) {
                    super::walk::prefetch_row(r);
                }
            } else if let Some(r) = self.factors[m].get(s..s + R) {
                super::walk::prefetch_row(r);
            }
        }
    }

    #[inline(always)]
    fn push(&mut self, c: &[u32], v: f32) {
        self.push_array(c.try_into().expect("coordinates of order N"), v);
    }

    fn finish(&mut self) {
        if self.started && M + 1 < N {
            for l in (M..=N - 2).rev() {
                self.fold(l);
            }
        }
        self.started = false;
    }
}
