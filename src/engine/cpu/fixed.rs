//! The walk of [`super::walk`] specialized for MTTKRP at a compile-time order `N` and
//! rank `R`: fixed-size arrays, so every row operation unrolls into SIMD and the
//! per-nonzero bookkeeping has no loops of unknown length. Used for the common ranks
//! (8, 16, 32, 64) of 3rd- and 4th-order tensors; the generic walker handles the rest.
//! Accumulations use `mul_add`, which is one FMA instruction with the crate's x86-64-v3
//! target (LLVM does not fuse a separate multiply and add on its own).

/// MTTKRP walker for order `N ≥ 2`, rank `R`.
pub(super) struct Fixed<'a, const N: usize, const R: usize> {
    mode: usize,
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

impl<'a, const N: usize, const R: usize> Fixed<'a, N, R> {
    /// A walker for `mode` over row-major factor data (`factors[m]` is `I_m × R`, the
    /// target's unused) into `out` (`I_mode × R`).
    pub(super) fn new(mode: usize, factors: [&'a [f32]; N], out: &'a mut [f32]) -> Self {
        Fixed {
            mode,
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
        let n = self.mode;
        let d = if self.started {
            let d = (0..N).find(|&m| c[m] != self.prev[m]).unwrap_or(N);
            if n + 1 < N && d + 1 < N {
                let mut l = N - 2;
                loop {
                    self.fold(l);
                    if l == d.max(n) {
                        break;
                    }
                    l -= 1;
                }
            }
            d
        } else {
            self.started = true;
            0
        };
        if d < n {
            for (l, &cl) in c.iter().enumerate().take(n).skip(d) {
                let f = row::<R>(self.factors[l], cl);
                if l == 0 {
                    self.top[0] = *f;
                } else {
                    let prev = self.top[l - 1];
                    let t = &mut self.top[l];
                    for r in 0..R {
                        t[r] = prev[r] * f[r];
                    }
                }
            }
        }
        if n + 1 == N {
            let s = c[n] as usize * R;
            let o: &mut [f32; R] = (&mut self.out[s..s + R]).try_into().expect("R");
            // N ≥ 2, so the last mode has a mode before it and `top[n - 1]` exists.
            let t = &self.top[n - 1];
            for r in 0..R {
                o[r] = v.mul_add(t[r], o[r]);
            }
        } else {
            let f = row::<R>(self.factors[N - 1], c[N - 1]);
            let a = &mut self.acc[N - 2];
            if self.empty[N - 2] {
                self.empty[N - 2] = false;
                for r in 0..R {
                    a[r] = v * f[r];
                }
            } else {
                for r in 0..R {
                    a[r] = v.mul_add(f[r], a[r]);
                }
            }
        }
        self.prev = c;
    }

    #[inline(always)]
    fn fold(&mut self, l: usize) {
        let n = self.mode;
        self.empty[l] = true;
        let src = self.acc[l];
        if l > n {
            let f = row::<R>(self.factors[l], self.prev[l]);
            let dst = &mut self.acc[l - 1];
            if self.empty[l - 1] {
                self.empty[l - 1] = false;
                for r in 0..R {
                    dst[r] = src[r] * f[r];
                }
            } else {
                for r in 0..R {
                    dst[r] = src[r].mul_add(f[r], dst[r]);
                }
            }
        } else {
            let s = self.prev[n] as usize * R;
            let o: &mut [f32; R] = (&mut self.out[s..s + R]).try_into().expect("R");
            if n == 0 {
                for r in 0..R {
                    o[r] += src[r];
                }
            } else {
                let t = &self.top[n - 1];
                for r in 0..R {
                    o[r] = src[r].mul_add(t[r], o[r]);
                }
            }
        }
    }
}

impl<const N: usize, const R: usize> super::walk::Sink for Fixed<'_, N, R> {
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
            if m == self.mode {
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
        if self.started && self.mode + 1 < N {
            for l in (self.mode..=N - 2).rev() {
                self.fold(l);
            }
        }
        self.started = false;
    }
}
