//! Cross-check with a peer: our MTTKRP on every mode of movielens-100k (rank 16, seeded
//! factors) against pyttb's `sptensor.mttkrp` on the same factors, SMAPE ≤ 0.1%.
//!
//! Needs pyttb (`$SPTMC_PYTHON`, else `.venv/bin/python`, else `python3`) and the shared
//! data (`$SPTMC_DATA_DIR`, else `../shared/data`); without either it prints a visible
//! SKIPPED line, and fails instead when `SPTMC_REQUIRE_PYTTB=1` (or, for the data,
//! `SPTMC_REQUIRE_DATA=1`).

use crate::common;

use sptmc::accuracy::{SMAPE_TARGET_PERCENT, compare};
use sptmc::engine::{Engine, Workload};
use sptmc::tools::bench::peers;
use sptmc::{Matrix, Op, reference};
use std::path::Path;

const RANK: usize = 16;
const SEED: u64 = 16;

#[test]
fn mttkrp_matches_pyttb_on_movielens_100k_every_mode() {
    let Some((python, file)) = common::pyttb_and_data("movielens-100k.tns.gz") else {
        return;
    };
    let x = &sptmc::tensor::tns::read(&file).unwrap().0;
    assert_eq!((x.dims(), x.nnz()), (&[943, 1682, 31][..], 100_000));
    let factors = Matrix::random_factors(x.dims(), &[RANK; 3], SEED);

    let work = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/peer_mttkrp.py");
    let py = peers::run_pyttb_mttkrp(
        &python,
        &script,
        &file,
        &factors,
        RANK,
        SEED,
        1,
        work.path(),
    )
    .unwrap();
    assert_eq!(py.results.len(), 3);

    let engine = Engine::cpu();
    let p = engine
        .prepare(
            x,
            &[Workload {
                op: Op::Mttkrp,
                rank: RANK,
            }],
        )
        .unwrap();
    for mode in 0..3 {
        let ours = engine.mttkrp(&p, mode, &factors).unwrap();
        let a = compare(&py.results[mode], &ours).unwrap();
        eprintln!(
            "mode {mode}: SMAPE {:.2e}%, rel Frobenius {:.2e} vs pyttb {}",
            a.smape_percent, a.rel_frobenius, py.pyttb_version
        );
        assert!(
            a.smape_percent <= SMAPE_TARGET_PERCENT,
            "mode {mode}: SMAPE {}% against pyttb",
            a.smape_percent
        );
        // pyttb itself must agree with our FP64 reference, or the check above proves
        // nothing about either side.
        let want = reference::mttkrp(x, mode, &factors).unwrap();
        let b = compare(&want, &py.results[mode]).unwrap();
        assert!(b.rel_frobenius < 1e-12, "pyttb vs FP64 reference: {b:?}");
    }
}
