//! Tucker-HOOI on the used rows of mostly empty modes (`decomp/tucker/rows.rs`):
//! through the driver, as both front ends run it, the model is the run on all rows, on
//! the tensor's own rows; the command line says so and writes every row.

use crate::common::{self, twin};
use crate::cp_rows::mostly_empty;

use sptmc::decomp::{TuckerOptions, tucker_hooi};
use sptmc::driver::{self, NoForms, TuckerRequest};
use sptmc::engine::Workload;
use sptmc::{Matrix, Op};

/// `‖AᵀB‖²_F`: the rank of factors with orthonormal columns spanning the same subspace.
fn overlap(a: &Matrix, b: &Matrix) -> f64 {
    let mut sum = 0.0;
    for i in 0..a.cols() {
        for j in 0..b.cols() {
            let d: f64 = (0..a.rows())
                .map(|k| f64::from(a.get(k, i)) * f64::from(b.get(k, j)))
                .sum();
            sum += d * d;
        }
    }
    sum
}

twin!(
    /// The driver runs the renumbered tensor and returns the all-rows run's model: the
    /// fits within four times the backend's bound ε on an entry's relative error (both
    /// runs form the same products, summed in another order, and on CUDA rounded to
    /// fp16 in other tiles), factors spanning the same subspaces — a perturbation ε of
    /// the outputs turns a subspace by about ε over its relative singular-value gap
    /// (at least 5 % assumed), and f32 storage costs `R − ‖AᵀB‖²` about 1e-6 per
    /// column — orthonormal, and exactly zero on every empty row. Fresh seeds.
    tucker_through_the_driver_is_the_all_rows_run,
    |engine| {
        let seed = common::fresh_seed("tucker_rows");
        let x = mostly_empty(300, 6000, seed);
        let ranks = vec![4, 4, 3];
        let request = TuckerRequest {
            ranks: ranks.clone(),
            iters: 8,
            tol: 0.0,
            seed,
            init: None,
        };
        let job = request.validate(&x).unwrap();
        let rows = job.rows.as_ref().expect("modes 0 and 1 are 98.5 % empty");
        assert_eq!(rows.tensor().dims(), &[300, 300, 9]);
        let report = driver::run(&job, engine, &x, &NoForms, &mut |_: &_| {
            std::ops::ControlFlow::Continue(())
        })
        .unwrap();
        let all_rows = engine
            .prepare(&x, &[Workload { op: Op::Ttmc, rank: 4 }])
            .unwrap();
        let opts = TuckerOptions {
            ranks: ranks.clone(),
            max_iters: 8,
            tol: 0.0,
            seed,
            init: None,
        };
        let want = tucker_hooi(engine, &all_rows, &opts).unwrap();
        let got = &report.model;
        let eps = 4.0 * engine.backend().relative_error();
        assert_eq!(want.fits.len(), got.fits.len());
        for (it, (a, b)) in want.fits.iter().zip(&got.fits).enumerate() {
            assert!((a - b).abs() <= eps, "iteration {it}: {b} vs {a} on all rows");
        }
        for (m, (a, b)) in want.factors.iter().zip(&got.factors).enumerate() {
            assert_eq!(a.shape(), b.shape(), "mode {m}");
            let r = ranks[m] as f64;
            let deficit = r - overlap(a, b);
            assert!(
                deficit <= r * ((eps / 0.05).powi(2) + 1e-6),
                "mode {m}: the subspaces differ by {deficit}"
            );
            let self_overlap = overlap(b, b);
            assert!((self_overlap - r).abs() <= r * 1e-5, "mode {m}: not orthonormal");
        }
        for m in 0..2 {
            let used: std::collections::BTreeSet<u32> = x.indices(m).iter().copied().collect();
            for i in 0..x.dims()[m] {
                let zero = got.factors[m].row(i).iter().all(|&v| v == 0.0);
                assert_eq!(zero, !used.contains(&(i as u32)), "mode {m} row {i}");
            }
        }
    }
);

/// `sptmc tucker` says which modes run on their used rows and writes the factors on
/// the tensor's own rows.
#[test]
fn the_command_line_says_so_and_writes_every_row() {
    let dir = tempfile::tempdir().unwrap();
    let tucker = ("tucker", &["--ranks", "3", "--iters", "4"][..]);
    crate::cp_rows::says_so_and_writes_every_row(dir.path(), 8, tucker, "Tucker-HOOI");
}
