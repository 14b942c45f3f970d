//! Tucker-HOOI on the used rows of mostly empty modes
//! ([`crate::decomp::used_rows::UsedRows::of_tucker`]) against the run on all rows.

use super::cp_rows::mostly_empty;
use super::tucker::{max_orthonormality_error, tk_opts};
use super::*;
use crate::decomp::tucker::tucker_hooi_on_rows;
use crate::decomp::used_rows::UsedRows;

/// `‖AᵀB‖²_F` for factors with orthonormal columns: their rank where both span the
/// same subspace (signs and rotations within it do not count).
fn overlap(a: &Matrix, b: &Matrix) -> f64 {
    let (r, s) = (a.cols(), b.cols());
    let mut sum = 0.0;
    for i in 0..r {
        for j in 0..s {
            let d: f64 = (0..a.rows())
                .map(|k| f64::from(a.get(k, i)) * f64::from(b.get(k, j)))
                .sum();
            sum += d * d;
        }
    }
    sum
}

/// Both runs of `x` from `opts`: on all rows, and on `rows`.
fn both(x: &CooTensor, rows: &UsedRows, opts: &TuckerOptions) -> (TuckerModel, TuckerModel) {
    let e = Engine::cpu();
    let rank = opts.ranks.iter().copied().max().unwrap();
    let all = tucker_hooi(&e, &prep(x, Op::Ttmc, rank), opts).unwrap();
    let cut = prep(rows.tensor(), Op::Ttmc, rank);
    let used =
        tucker_hooi_on_rows(&e, &cut, rows, opts, &mut |_| ControlFlow::Continue(())).unwrap();
    (all, used)
}

/// The run on the used rows is the run on all rows: the same fit at every iteration,
/// factors spanning the same subspaces (the leading vectors may come from the other
/// Gram of a TTMc output now shorter, so signs may differ), the same model value at
/// every nonzero, and factors orthonormal on the tensor's rows, exactly zero on the
/// empty ones; from a drawn start and from a given one whose largest entries are on
/// empty rows.
///
/// Both runs form the same f32 products of the same factor entries and sum them in
/// another order: each TTMc entry (at most 40 products here) moves by about 40 u ≈
/// 2.4e-6 of its magnitude. The fits and model values, from well-conditioned
/// eigenproblems of random data, move by as much: 1e-5 bounds them. A subspace moves
/// by that over the relative gap below its last singular value; the test asks for
/// gaps of at least 5 % (the data's are wider), so 1e-4 bounds `R − overlap`.
#[test]
fn the_used_rows_run_is_the_all_rows_run() {
    for seed in [21u64, 22] {
        let x = mostly_empty(40, 30, 600, seed);
        let ranks = [3, 3, 2];
        let rows = UsedRows::of_tucker(&x, &ranks)
            .unwrap()
            .expect("modes 0 and 1 mostly empty");
        assert_eq!(rows.tensor().dims(), &[40, 30, 7]);
        assert!(
            rows.note("Tucker-HOOI")
                .contains("mode 0: 40 of 503 rows, mode 1: 30 of 401 rows")
        );
        let mut given = Matrix::random_factors(x.dims(), &ranks, seed + 100);
        given[1].data_mut()[0] = 1000.0;
        for init in [None, Some(given)] {
            let opts = TuckerOptions {
                init,
                ..tk_opts(&ranks, 8, 0.0, seed)
            };
            let (all, used) = both(&x, &rows, &opts);
            assert_eq!(all.fits.len(), used.fits.len());
            for (it, (a, b)) in all.fits.iter().zip(&used.fits).enumerate() {
                assert!(
                    (a - b).abs() <= 1e-5,
                    "seed {seed} iteration {it}: {a} vs {b}"
                );
            }
            for (m, (fa, fb)) in all.factors.iter().zip(&used.factors).enumerate() {
                assert_eq!(fa.shape(), fb.shape());
                let r = ranks[m] as f64;
                let o = overlap(fa, fb);
                assert!(r - o <= 1e-4, "seed {seed} mode {m}: overlap {o} of {r}");
                assert!(max_orthonormality_error(fb) < 1e-6, "mode {m}");
            }
            for k in (0..x.nnz()).step_by(7) {
                let c: Vec<usize> = x.coords(k).iter().map(|&i| i as usize).collect();
                let (a, b) = (all.entry(&c).unwrap(), used.entry(&c).unwrap());
                let scale = all.core.iter().fold(0f64, |s, g| s.max(g.abs()));
                assert!((a - b).abs() <= 1e-5 * scale, "entry {c:?}: {b} vs {a}");
            }
            for m in 0..2 {
                let kept: std::collections::BTreeSet<u32> = x.indices(m).iter().copied().collect();
                for i in 0..x.dims()[m] {
                    let zero = used.factors[m].row(i).iter().all(|&v| v == 0.0);
                    assert_eq!(zero, !kept.contains(&(i as u32)), "mode {m} row {i}");
                }
            }
        }
    }
}

/// A mode with fewer used rows than its rank keeps every row (its factor's columns
/// need the room), and the run is still the run on all rows, whose output for that
/// mode has fewer nonzero singular values than the rank: the fits agree, and both
/// factors are orthonormal.
#[test]
fn a_mode_with_fewer_used_rows_than_its_rank_keeps_them_all() {
    let x = mostly_empty(2, 30, 300, 23);
    let ranks = [3, 3, 2];
    let rows = UsedRows::of_tucker(&x, &ranks).unwrap().expect("mode 1");
    assert!(!rows.renumbered(0) && rows.renumbered(1) && !rows.renumbered(2));
    assert_eq!(rows.tensor().dims(), &[503, 30, 7]);
    let (all, used) = both(&x, &rows, &tk_opts(&ranks, 6, 0.0, 4));
    for (it, (a, b)) in all.fits.iter().zip(&used.fits).enumerate() {
        assert!((a - b).abs() <= 1e-5, "iteration {it}: {a} vs {b}");
    }
    for u in &used.factors {
        assert!(max_orthonormality_error(u) < 1e-6);
    }
}

/// The renumbering pays by the TTMc outputs' rows: the same tensor renumbers for ranks
/// whose outputs are wide, not for narrow ones, and never where modes are mostly used.
#[test]
fn tucker_renumbers_where_the_outputs_empty_rows_outweigh_the_nonzeros() {
    // 463 + 371 empty rows: at ranks [1, 1, 1] each costs 2 entries (an output row and
    // a factor row), 1668 in all, below 1800 nonzeros; at [2, 2, 1], 4 each, above.
    let y = mostly_empty(40, 30, 1800, 24);
    assert!(UsedRows::of_tucker(&y, &[1, 1, 1]).unwrap().is_none());
    assert!(UsedRows::of_tucker(&y, &[2, 2, 1]).unwrap().is_some());
    let x = mostly_empty(450, 380, 3000, 25);
    assert!(UsedRows::of_tucker(&x, &[3, 3, 2]).unwrap().is_none());
}
