//! Tests of TTMc row by row: against the FP64 reference, on several worker counts,
//! and within the error bound of sums in runs on dense rows.

use super::*;
use crate::accuracy::compare;
use crate::hls::HlsBuilder;
use crate::tensor::CooTensor;
use crate::tensor::generate::Pattern;

/// Runs TTMc of every mode of `hls` row by row on 1, 2 and 3 workers: against the
/// FP64 reference of `x` within the accuracy contract, the same bits on every
/// worker count, and the key-order walk it replaces beside it.
fn check(x: &CooTensor, hls: &HlsTensor, ranks: &[usize], seed: u64) -> RowTtmc {
    let dims = x.dims().to_vec();
    let f = Matrix::random_factors(&dims, ranks, seed);
    let mut first: Vec<Matrix> = Vec::new();
    let mut kept = None;
    for threads in [1, 2, 3] {
        let pool = crate::pool_of(threads);
        pool.install(|| {
            let rows = RowTtmc::new(hls).unwrap().expect("small groups fit");
            for mode in 0..dims.len() {
                let cols = (0..dims.len())
                    .filter(|&m| m != mode)
                    .map(|m| ranks[m])
                    .product();
                let mut out = Matrix::from_fn(dims[mode], cols, |_, _| f32::NAN);
                rows.run(mode, &f, &mut out);
                let want = crate::reference::ttmc(x, mode, &f).unwrap();
                let acc = compare(&want, &out).unwrap();
                assert!(
                    acc.within_contract(),
                    "{dims:?} ranks {ranks:?} mode {mode} {threads} threads: {acc:?}"
                );
                match first.get(mode) {
                    None => first.push(out),
                    Some(f1) => assert!(
                        f1.data()
                            .iter()
                            .zip(out.data())
                            .all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{dims:?} mode {mode}: {threads} threads differ from 1"
                    ),
                }
                // The walk stays the fallback (no room for the groups, or
                // SPTMC_CPU_MTTKRP=walk): kept under test here.
                let mut walk = Matrix::zeros(dims[mode], cols);
                let pool = std::sync::Mutex::new(Vec::new());
                super::super::kernel::run(crate::ops::Op::Ttmc, hls, mode, &f, &mut walk, &pool);
                let walk = walk.map(|v| v * hls.scale());
                let acc = compare(&want, &walk).unwrap();
                assert!(acc.within_contract(), "walk {dims:?} mode {mode}: {acc:?}");
            }
            kept = Some(rows);
        });
    }
    kept.expect("ran")
}

/// Orders 2 to 5 with mixed ranks, power-law and block-dense patterns (dense tiles
/// in the HLS form), and a mode of three rows each longer than a piece (cut).
#[test]
fn rows_match_the_reference_at_every_order() {
    // (extents, ranks, nonzeros, pattern, tile threshold)
    type Case = (Vec<usize>, Vec<usize>, usize, Pattern, u32);
    let cases: Vec<Case> = vec![
        (vec![40, 30], vec![3, 5], 600, Pattern::Uniform, u32::MAX),
        (
            vec![37, 45, 29],
            vec![8, 8, 8],
            4000,
            Pattern::PowerLaw { alpha: 1.0 },
            u32::MAX,
        ),
        (
            vec![60, 50, 40],
            vec![2, 5, 3],
            9000,
            Pattern::BlockDense {
                tile_nnz: 300,
                dense_share: 0.6,
            },
            16,
        ),
        (
            vec![20, 13, 9, 7],
            vec![3, 4, 2, 5],
            3000,
            Pattern::Uniform,
            u32::MAX,
        ),
        (
            vec![9, 8, 7, 6, 5],
            vec![2, 3, 2, 2, 3],
            2000,
            Pattern::Uniform,
            u32::MAX,
        ),
        (
            vec![3, 300, 200],
            vec![2, 4, 3],
            40_000,
            Pattern::Uniform,
            u32::MAX,
        ),
        // 3rd order at leaf ranks padded to whole vectors, in and against mode
        // order (upper ranks padded too, or not: 8), a row narrower than one padded
        // leaf (rank 1 above a leaf of 7); 4th order at ranks off the vectors.
        (
            vec![50, 70, 30],
            vec![10, 5, 12],
            6000,
            Pattern::PowerLaw { alpha: 1.0 },
            u32::MAX,
        ),
        (
            vec![40, 90, 60],
            vec![8, 20, 16],
            6000,
            Pattern::Uniform,
            u32::MAX,
        ),
        (
            vec![30, 20, 40],
            vec![5, 1, 7],
            3000,
            Pattern::Uniform,
            u32::MAX,
        ),
        (
            vec![16, 22, 12, 19],
            vec![6, 3, 10, 5],
            3000,
            Pattern::PowerLaw { alpha: 1.0 },
            u32::MAX,
        ),
    ];
    for (k, (dims, ranks, nnz, pattern, threshold)) in cases.into_iter().enumerate() {
        let (x, hls) = super::super::generated_case(&dims, nnz, pattern, threshold, 190 + k as u64);
        let rows = check(&x, &hls, &ranks, 7 + k as u64);
        if k == 5 {
            assert!(rows.plans[0].cut, "the 3-row mode is cut into pieces");
        }
    }
}

/// Fibers that the sort must bring together: each row's nonzeros arrive with their
/// first other index interleaved, rows of 0 to 9000 nonzeros (cut ones straddling
/// tasks) among empty ones, and a row of a single fiber.
#[test]
fn interleaved_fibers_and_cut_rows_match_the_reference() {
    let dims = vec![200, 50, 400];
    let mut entries = Vec::new();
    for i in 0..200u32 {
        let n: u32 = match i {
            4 => 9000,
            9 => 20_000,
            100 => 8193,
            _ if i % 6 == 0 => 0,
            _ => 1 + (i * 7) % 23,
        };
        for t in 0..n {
            // The first other index cycles fastest: no two neighbours share it.
            let (j, k) = if i == 151 {
                (7, t % 400)
            } else {
                (t % 50, (t / 50 + i) % 400)
            };
            entries.push(([i, j, k], 0.25 + f64::from((t * 13 + i) % 97) / 97.0));
        }
    }
    let x = CooTensor::from_entries(dims, entries).unwrap();
    let hls = HlsBuilder::new(u32::MAX).build(&x).unwrap();
    let rows = check(&x, &hls, &[3, 8, 5], 3);
    let plan = &rows.plans[0];
    assert!(plan.cut && plan.is_cut(9) && !plan.is_cut(10));
    // The sort left every row lexicographic in (j, k).
    let g = &rows.groups[0];
    for i in 0..200 {
        let ix = &g.others()[g.ptr()[i] * 2..g.ptr()[i + 1] * 2];
        assert!(ix.chunks_exact(2).is_sorted_by(|a, b| a < b), "row {i}");
    }
}

/// Rows of 50 000 nonzeros (a power-law tensor's dense slices), in fibers of
/// thousands (a short mode beside a long one), at 3rd order (the fixed-width tree,
/// in and out of mode order) and 4th (the generic tree), on 1
/// and 2 workers: every entry within the error bound of sums in runs
/// ([`piece_in_runs`]), derived from the tree, not from what passed. A term
/// `x · Π F` passes through at most: the value's rounding to f32, the leaf's
/// multiply-add, the leaf sum's adds, a rounding per fold's product and the adds
/// into each parent, then the f64 sum of runs and one rounding (a cut row: one per
/// piece, then one). Within a run its leaf and fold adds number at most the run's
/// nonzeros plus the levels, so `(run + 2 d + 4) u Σ |t|` bounds each entry.
/// Values of 0.1 and a column of factors of ones: one f32 leaf sum of a dense
/// fiber's nonzeros drifts far past it.
#[test]
fn dense_rows_stay_within_the_bound_of_sums_in_runs() {
    let cases: [(Vec<usize>, Vec<usize>); 3] = [
        (vec![3, 20_000, 4], vec![1, 1, 1]),
        (vec![3, 20_000, 4], vec![2, 8, 4]),
        (vec![3, 2, 2, 40_000], vec![2, 2, 3, 2]),
    ];
    for (dims, ranks) in cases {
        let (x, hls) = super::super::dense_rows_case(&dims);
        let (f, abs) = super::super::ones_and_mixed_signs(&dims, &ranks, 43);
        for threads in [1, 2] {
            let pool = crate::pool_of(threads);
            pool.install(|| {
                let rows = RowTtmc::new(&hls).unwrap().expect("small groups fit");
                for mode in 0..dims.len() {
                    let want = crate::reference::ttmc(&x, mode, &f).unwrap();
                    let scale = crate::reference::ttmc(&x, mode, &abs).unwrap();
                    let mut out = Matrix::from_fn(dims[mode], want.cols(), |_, _| f32::NAN);
                    rows.run(mode, &f, &mut out);
                    let run = RUN.max(4 * want.cols());
                    let what = format!("{dims:?} ranks {ranks:?} mode {mode}");
                    let terms = run + 2 * (dims.len() - 1) + 4;
                    super::super::assert_within_sum_bound(&want, &scale, &out, terms, &what);
                }
            });
        }
    }
}
