//! CP-ALS and CP-APR on the used rows of mostly empty modes ([`crate::decomp::used_rows::UsedRows`])
//! against the run on all rows.

use super::*;
use crate::decomp::cp_als::cp_als_on_rows;
use crate::decomp::cp_apr::cp_apr_on_rows;
use crate::decomp::used_rows::UsedRows;

/// `nnz` distinct nonzeros with values in 1..=5 whose modes 0 and 1 use only `used0`
/// and `used1` rows (spread over extents 500 and 400); mode 2 (7 rows) uses every row.
pub(super) fn mostly_empty(used0: usize, used1: usize, nnz: usize, seed: u64) -> CooTensor {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = |n: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % n as u64) as u32
    };
    let rows0: Vec<u32> = (0..used0).map(|k| (k * 500 / used0) as u32 + 3).collect();
    let rows1: Vec<u32> = (0..used1).map(|k| (k * 400 / used1) as u32 + 1).collect();
    let mut seen = std::collections::BTreeSet::new();
    while seen.len() < nnz {
        let (a, b, c) = (next(used0), next(used1), next(7));
        seen.insert((rows0[a as usize], rows1[b as usize], c));
    }
    let idx = vec![
        seen.iter().map(|t| t.0).collect(),
        seen.iter().map(|t| t.1).collect(),
        seen.iter().map(|t| t.2).collect(),
    ];
    let values = (0..nnz).map(|_| f64::from(next(5) + 1)).collect();
    CooTensor::new(vec![503, 401, 7], idx, values).unwrap()
}

/// The run on the used rows is the run on all rows: the same fit at every iteration
/// and the same model, exactly zero on the empty rows, from a drawn start and from a
/// given one whose largest entries (which set the start's scale) are on empty rows.
///
/// Both runs form the same f32 products and may sum them in another order (the
/// renumbered tensor's keys sort otherwise), so each MTTKRP entry (a sum of at most 40
/// products) may differ by about 40 u ≈ 2.4e-6 of its magnitude; the fits and the
/// unit-norm factors come from those through well-conditioned rank-3 solves (random
/// data), so 1e-5 bounds them (measured: 1e-12 and 2e-9). Each part of the start
/// shows above that: the empty rows' Gram left out of the first iteration moved the
/// first fit by 1.6e-4, and the start scaled over the used rows only by 3e-3.
#[test]
fn the_used_rows_run_is_the_all_rows_run() {
    let e = Engine::cpu();
    for seed in [11u64, 12] {
        let x = mostly_empty(40, 30, 600, seed);
        let rows = UsedRows::of(&x, 3)
            .unwrap()
            .expect("modes 0 and 1 mostly empty");
        assert_eq!(rows.tensor().dims(), &[40, 30, 7]);
        assert_eq!(rows.dims(), x.dims());
        assert!(
            rows.note("CP-ALS")
                .contains("mode 0: 40 of 503 rows, mode 1: 30 of 401 rows")
        );
        let (full_p, cut_p) = (prep(&x, Op::Mttkrp, 3), prep(rows.tensor(), Op::Mttkrp, 3));
        let mut given = Matrix::random_factors(x.dims(), &[3; 3], seed + 100);
        // Mode 1's largest entry on an empty row (row 0), a thousand times the rest.
        given[1].data_mut()[0] = 1000.0;
        for init in [None, Some(given)] {
            let opts = CpOptions {
                init,
                ..cp_opts(3, 10, 0.0, seed)
            };
            let all = cp_als(&e, &full_p, &opts).unwrap();
            let used = cp_als_on_rows(&e, &cut_p, &rows, &opts, &mut |_| ControlFlow::Continue(()))
                .unwrap();
            assert_eq!(all.fits.len(), used.fits.len());
            for (it, (a, b)) in all.fits.iter().zip(&used.fits).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5,
                    "seed {seed} iteration {it}: {a} vs {b}"
                );
            }
            for (a, b) in all.weights.iter().zip(&used.weights) {
                assert!((a - b).abs() <= 1e-5 * a.abs(), "weights {a} vs {b}");
            }
            for (m, (fa, fb)) in all.factors.iter().zip(&used.factors).enumerate() {
                assert_eq!(fa.shape(), fb.shape());
                for (k, (a, b)) in fa.data().iter().zip(fb.data()).enumerate() {
                    assert!((a - b).abs() <= 1e-5, "mode {m} entry {k}: {a} vs {b}");
                }
            }
            // Empty rows exactly zero; every used row of modes 0 and 1 not.
            let used0: std::collections::BTreeSet<u32> = x.indices(0).iter().copied().collect();
            for i in 0..503 {
                let zero = used.factors[0].row(i).iter().all(|&v| v == 0.0);
                assert_eq!(zero, !used0.contains(&(i as u32)), "mode 0 row {i}");
            }
        }
    }
}

/// No renumbering where it does not pay: modes mostly used, or empty rows holding
/// fewer factor entries than the tensor has nonzeros.
#[test]
fn renumbering_only_where_the_empty_rows_outweigh_the_nonzeros() {
    // 450 of 503 and 380 of 401 rows used.
    let x = mostly_empty(450, 380, 3000, 3);
    assert!(UsedRows::of(&x, 3).unwrap().is_none());
    // 463 + 371 empty rows at rank 1 are 834 entries, below 900 nonzeros; at rank 2,
    // 1668 are above.
    let y = mostly_empty(40, 30, 900, 4);
    assert!(UsedRows::of(&y, 1).unwrap().is_none());
    assert!(UsedRows::of(&y, 2).unwrap().is_some());
}

/// CP-APR on the used rows is the run on all rows: the same log-likelihood and KKT
/// violation at every iteration and the same model, zero on the empty rows, from a
/// drawn start and from a given one. Φ is f64 on the CPU, so only the order of sums
/// differs: 1e-9 relative bounds the log-likelihoods and 1e-6 the factors' entries
/// (columns summing to 1). Left out of the start's column sums or of the first KKT
/// violation, the rows left out move the first log-likelihood by far more.
#[test]
fn cp_apr_on_the_used_rows_is_the_all_rows_run() {
    let e = Engine::cpu();
    let x = mostly_empty(40, 30, 600, 13);
    let rows = UsedRows::of(&x, 3)
        .unwrap()
        .expect("modes 0 and 1 mostly empty");
    let (full_p, cut_p) = (prep(&x, Op::Mttkrp, 3), prep(rows.tensor(), Op::Mttkrp, 3));
    let mut given = Matrix::random_factors(x.dims(), &[3; 3], 200);
    given[1].data_mut()[0] = 50.0;
    // From a fitted model (weights in mode 0) whose mode 1 has its empty row 0 not
    // zero, with one inner iteration: mode 1's first violation, the one reported, is
    // that row's min(B, 1) = 1, above its used rows' 0.07.
    let fitted = cp_apr(
        &e,
        &full_p,
        &CpAprOptions {
            rank: 3,
            max_iters: 40,
            ..CpAprOptions::default()
        },
    )
    .unwrap();
    let mut near = fitted.factors.clone();
    for row in near[0].data_mut().chunks_exact_mut(3) {
        for (v, w) in row.iter_mut().zip(&fitted.weights) {
            *v *= *w as f32;
        }
    }
    near[1].data_mut()[..3].fill(0.01);
    for (init, max_inner) in [(None, 10), (Some(given), 10), (Some(near), 1)] {
        let opts = CpAprOptions {
            rank: 3,
            max_iters: 6,
            max_inner,
            seed: 5,
            init,
            ..CpAprOptions::default()
        };
        let all = cp_apr(&e, &full_p, &opts).unwrap();
        let used =
            cp_apr_on_rows(&e, &cut_p, &rows, &opts, &mut |_| ControlFlow::Continue(())).unwrap();
        assert_eq!(all.iters.len(), used.iters.len());
        for (a, b) in all.iters.iter().zip(&used.iters) {
            let (la, lb) = (a.log_likelihood, b.log_likelihood);
            assert!(
                (la - lb).abs() <= 1e-9 * la.abs(),
                "iteration {}: {lb} vs {la}",
                a.iter
            );
            let (ka, kb) = (a.kkt_violation, b.kkt_violation);
            assert!(
                (ka - kb).abs() <= 1e-9 * ka.abs(),
                "iteration {}: {kb} vs {ka}",
                a.iter
            );
            assert_eq!(a.inner_iters, b.inner_iters);
        }
        for (m, (fa, fb)) in all.factors.iter().zip(&used.factors).enumerate() {
            assert_eq!(fa.shape(), fb.shape());
            for (k, (a, b)) in fa.data().iter().zip(fb.data()).enumerate() {
                assert!((a - b).abs() <= 1e-6, "mode {m} entry {k}: {a} vs {b}");
            }
        }
        assert!(
            used.factors[0].row(0).iter().all(|&v| v == 0.0),
            "row 0 is empty"
        );
    }
}

/// Where a renumbered mode meets the tolerance at the start (so that no mode updates
/// and the empty rows keep their initial values in the run on all rows), the run on
/// the used rows gives way to the run on all rows: the same model, empty rows included.
#[test]
fn cp_apr_on_the_used_rows_gives_way_where_a_mode_does_not_update() {
    let e = Engine::cpu();
    let x = mostly_empty(40, 30, 600, 14);
    let rows = UsedRows::of(&x, 3)
        .unwrap()
        .expect("modes 0 and 1 mostly empty");
    let (full_p, cut_p) = (prep(&x, Op::Mttkrp, 3), prep(rows.tensor(), Op::Mttkrp, 3));
    let opts = CpAprOptions {
        rank: 3,
        max_iters: 3,
        tol: 1e6,
        ..CpAprOptions::default()
    };
    let all = cp_apr(&e, &full_p, &opts).unwrap();
    let used =
        cp_apr_on_rows(&e, &cut_p, &rows, &opts, &mut |_| ControlFlow::Continue(())).unwrap();
    assert!(all.converged && all.iters.len() == 1);
    // The run on all rows itself, so equal to the bit (timings aside).
    assert!(used.converged && used.iters.len() == 1);
    assert_eq!(all.weights, used.weights);
    assert_eq!(all.factors, used.factors);
    assert_eq!(all.log_likelihood, used.log_likelihood);
    assert_eq!(all.iters[0].kkt_violation, used.iters[0].kkt_violation);
    assert!(
        used.factors[0].row(0).iter().any(|&v| v != 0.0),
        "row 0 kept"
    );
}
