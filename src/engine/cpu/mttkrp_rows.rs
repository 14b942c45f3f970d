//! MTTKRP row by row.
//!
//! The key-order walk ([`super::fixed`]) shares each fiber's Khatri-Rao prefix between
//! its nonzeros, but pays for finding the fibers: a level change is a data-dependent
//! branch per nonzero, and it writes into a private copy of the output per worker that
//! is then summed. Here each mode's nonzeros are grouped by row once ([`RowGroups`],
//! the other modes' indices and the value, built at the first MTTKRP call), and every
//! row is one straight loop: per nonzero, `x` times the product of its other rows,
//! accumulated in registers; the row is written once. No branches on the data, no
//! private outputs and no reduction; rows longer than a piece
//! ([`super::rows::PIECE`]) are cut, each piece summed into its own partial row and a
//! row's pieces added in order, so results do not depend on the thread count.
//!
//! Measured against the walk on this project's CPU (2 threads, all modes, ranks 16 and
//! 32, the nine tensors of the CPU comparison, mean fibers of 1.7 to 75 nonzeros) it
//! was faster on every one, 1.2–2.4×, so it is the CPU's MTTKRP wherever the groups fit:
//! `N (N − 1) · 4 + N · 4` bytes per nonzero for all modes, built only where they fit
//! in a quarter of the available memory (else the walk runs). Building them costs
//! about 0.36 s per 10 M nonzeros of a 3rd-order tensor, paid once by the first call.

use super::kernel::shares;
use super::rows::{Plan, RowGroups};
use super::subnormal::FlushSubnormals;
use crate::error::Result;
use crate::hls::HlsTensor;
use crate::matrix::Matrix;
use rayon::prelude::*;

/// Every mode's nonzeros grouped by row, and how each mode's rows are cut.
pub(super) struct RowMttkrp {
    groups: Vec<RowGroups>,
    plans: Vec<Plan>,
}

impl RowMttkrp {
    /// The groups of `hls`, or `None` where they would not fit in a quarter of the
    /// available memory (or the tensor has one mode).
    pub(super) fn new(hls: &HlsTensor) -> Result<Option<Self>> {
        let (order, nnz) = (hls.order() as u64, hls.nnz() as u64);
        if order < 2 {
            return Ok(None);
        }
        let need = nnz * order * order * 4;
        let budget = crate::matrix::available_memory().map_or(u64::MAX, |a| a / 4);
        if need > budget {
            return Ok(None);
        }
        let workers = rayon::current_num_threads().max(1);
        let groups = RowGroups::build(hls, &shares(hls, workers), 0.0)?;
        let plans = groups.iter().map(|g| Plan::new(g.ptr())).collect();
        Ok(Some(RowMttkrp { groups, plans }))
    }

    /// Bytes of the groups MTTKRP of `mode` reads: the mode's row offsets, the other
    /// modes' indices and the values.
    pub(super) fn form_bytes(&self, mode: usize) -> usize {
        self.groups[mode].bytes()
    }

    /// MTTKRP of `mode` into `out` (`I_mode × R`, every entry overwritten), `factors`
    /// one per mode. The groups hold the values with the tensor's scale applied.
    pub(super) fn run(&self, mode: usize, factors: &[Matrix], out: &mut Matrix) {
        let (g, plan, r) = (&self.groups[mode], &self.plans[mode], out.cols());
        let facs: Vec<&[f32]> = (factors.iter().enumerate())
            .filter(|&(m, _)| m != mode)
            .map(|(_, f)| f.data())
            .collect();
        let (ptr, idx, x, d) = (g.ptr(), g.others(), g.values(), facs.len());
        let row = |s: usize, e: usize, dst: &mut [f32]| {
            let (ix, xs) = (&idx[s * d..e * d], &x[s..e]);
            match r {
                8 => row_sum::<8>(ix, xs, &facs, dst),
                16 => row_sum::<16>(ix, xs, &facs, dst),
                32 => row_sum::<32>(ix, xs, &facs, dst),
                64 => row_sum::<64>(ix, xs, &facs, dst),
                _ => row_sum_any(ix, xs, &facs, dst),
            }
        };
        if !plan.cut {
            // Whole rows per task, written straight into the output.
            let jobs = plan.row_jobs(out.data_mut(), r);
            jobs.into_par_iter().for_each(|(r0, r1, dst)| {
                let _flush = FlushSubnormals::new();
                for (i, o) in (r0..r1).zip(dst.chunks_exact_mut(r.max(1))) {
                    row(ptr[i], ptr[i + 1], o);
                }
            });
            return;
        }
        // Pieces into partial rows, then each row the sum of its pieces in order.
        let mut partial = vec![0f32; plan.pieces.len() * r];
        let jobs = plan.piece_jobs(&mut partial, r);
        jobs.into_par_iter().for_each(|(pieces, dst)| {
            let _flush = FlushSubnormals::new();
            for (&(_, s, e), o) in pieces.iter().zip(dst.chunks_exact_mut(r.max(1))) {
                row(s, e, o);
            }
        });
        plan.add_pieces(&partial, r, out.data_mut());
    }
}

/// One row (or piece) of MTTKRP at rank `R`: `Σ x · Π_m F_m[i_m]` over its nonzeros
/// (`others` holds `facs.len()` indices per nonzero), into `out`: per nonzero `x` times
/// the rows but the last, then one fused multiply-add with the last.
#[inline(always)]
fn row_sum<const R: usize>(others: &[u32], values: &[f32], facs: &[&[f32]], out: &mut [f32]) {
    let d = facs.len();
    let (last, mid) = facs.split_last().expect("order ≥ 2");
    let mut acc = [0f32; R];
    for (ix, &x) in others.chunks_exact(d).zip(values) {
        let mut k = [x; R];
        for (f, &i) in mid.iter().zip(ix) {
            let row: &[f32; R] = f[i as usize * R..][..R]
                .try_into()
                .expect("a row of rank R");
            for (a, &b) in k.iter_mut().zip(row) {
                *a *= b;
            }
        }
        let row: &[f32; R] = last[ix[d - 1] as usize * R..][..R]
            .try_into()
            .expect("a row of rank R");
        for ((a, &kc), &l) in acc.iter_mut().zip(&k).zip(row) {
            *a = kc.mul_add(l, *a);
        }
    }
    out.copy_from_slice(&acc);
}

/// [`row_sum`] at any rank.
fn row_sum_any(others: &[u32], values: &[f32], facs: &[&[f32]], out: &mut [f32]) {
    let (d, r) = (facs.len(), out.len());
    let (last, mid) = facs.split_last().expect("order ≥ 2");
    out.fill(0.0);
    let mut k = vec![0f32; r];
    for (ix, &x) in others.chunks_exact(d).zip(values) {
        k.fill(x);
        for (f, &i) in mid.iter().zip(ix) {
            for (kc, &a) in k.iter_mut().zip(&f[i as usize * r..][..r]) {
                *kc *= a;
            }
        }
        let row = &last[ix[d - 1] as usize * r..][..r];
        for ((o, &kc), &l) in out.iter_mut().zip(&k).zip(row) {
            *o = kc.mul_add(l, *o);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accuracy::compare;
    use crate::hls::HlsBuilder;
    use crate::tensor::generate::{GenSpec, Pattern, generate};

    /// The row-by-row MTTKRP, and the key-order walk beside it, against the FP64
    /// reference at every specialized rank and one other, orders 2 to 5, with and
    /// without dense tiles, on 1 and 3 workers; the last case has a mode of three rows,
    /// each longer than a piece (cut).
    #[test]
    fn rows_match_the_reference_at_every_rank_and_order() {
        let cases: Vec<(Vec<usize>, usize, Pattern, u32)> = vec![
            (vec![40, 30], 600, Pattern::Uniform, u32::MAX),
            (
                vec![37, 45, 29],
                4000,
                Pattern::PowerLaw { alpha: 1.0 },
                u32::MAX,
            ),
            (
                vec![60, 50, 40],
                9000,
                Pattern::BlockDense {
                    tile_nnz: 300,
                    dense_share: 0.6,
                },
                16,
            ),
            (vec![20, 13, 9, 7], 3000, Pattern::Uniform, u32::MAX),
            (vec![9, 8, 7, 6, 5], 2000, Pattern::Uniform, u32::MAX),
            (vec![500, 400, 3], 40_000, Pattern::Uniform, u32::MAX),
        ];
        for (k, (dims, nnz, pattern, threshold)) in cases.into_iter().enumerate() {
            let x = generate(&GenSpec {
                dims: dims.clone(),
                nnz,
                pattern,
                seed: 90 + k as u64,
            })
            .unwrap();
            let hls = HlsBuilder::new(threshold).build(&x).unwrap();
            for threads in [1, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                pool.install(|| {
                    let rows = RowMttkrp::new(&hls).unwrap().expect("small groups fit");
                    for rank in [8, 16, 32, 64, 5] {
                        let f = Matrix::random_factors(&dims, &vec![rank; dims.len()], 7);
                        for mode in 0..dims.len() {
                            let mut out = Matrix::from_fn(dims[mode], rank, |_, _| f32::NAN);
                            rows.run(mode, &f, &mut out);
                            let want = crate::reference::mttkrp(&x, mode, &f).unwrap();
                            let acc = compare(&want, &out).unwrap();
                            assert!(
                                acc.within_contract(),
                                "{dims:?} rank {rank} mode {mode} {threads} threads: {acc:?}"
                            );
                            // The walk it replaced stays the fallback (no room for the
                            // groups, or SPTMC_CPU_MTTKRP=walk): kept under test here.
                            let mut walk = Matrix::zeros(dims[mode], rank);
                            let pool = std::sync::Mutex::new(Vec::new());
                            super::super::kernel::run(
                                crate::ops::Op::Mttkrp,
                                &hls,
                                mode,
                                &f,
                                &mut walk,
                                &pool,
                            );
                            let walk = walk.map(|v| v * hls.scale());
                            let acc = compare(&want, &walk).unwrap();
                            assert!(
                                acc.within_contract(),
                                "walk {dims:?} rank {rank} mode {mode} {threads} threads: {acc:?}"
                            );
                        }
                    }
                });
            }
            if k == 5 {
                let g = &RowMttkrp::new(&hls).unwrap().unwrap();
                assert!(g.plans[2].cut, "the 3-row mode is cut into pieces");
            }
        }
    }
}
