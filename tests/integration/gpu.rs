//! GPU integration tests: every op on every mode at the contract's ranks on generated
//! tensors of each regime, against the FP64 reference (SMAPE ≤ 0.1%).
//!
//! Without a usable CUDA device every test prints `SKIPPED: no CUDA device (...)` and
//! passes, unless `SPTMC_REQUIRE_GPU=1`, when it fails.

use crate::common;

use common::cuda_engine as gpu;
use sptmc::Op;
use sptmc::engine::Engine;
use sptmc::tools::selftest::{SelftestCase, generated_cases, run};

fn check(engine: &Engine, cases: &[SelftestCase]) {
    let report = run(engine, cases).expect("tensors prepare on the device");
    eprintln!("{}", report.table());
    assert!(report.passed(), "{}", report.table());
}

fn cases(runs: &[(Op, usize)]) -> Vec<SelftestCase> {
    generated_cases(160, 120_000, runs).expect("generator")
}

#[test]
fn mttkrp_ranks_8_16_32_every_mode_every_regime() {
    let Some(e) = gpu() else { return };
    check(
        &e,
        &cases(&[(Op::Mttkrp, 8), (Op::Mttkrp, 16), (Op::Mttkrp, 32)]),
    );
}

#[test]
fn mttkrp_rank_64_every_mode_every_regime() {
    let Some(e) = gpu() else { return };
    check(&e, &cases(&[(Op::Mttkrp, 64)]));
}

#[test]
fn ttmc_ranks_8x8_and_16x16_every_mode_every_regime() {
    let Some(e) = gpu() else { return };
    check(&e, &cases(&[(Op::Ttmc, 8), (Op::Ttmc, 16)]));
}

#[test]
fn odd_ranks_are_padded_correctly() {
    let Some(e) = gpu() else { return };
    check(
        &e,
        &cases(&[(Op::Mttkrp, 5), (Op::Mttkrp, 40), (Op::Ttmc, 3)]),
    );
}

#[test]
fn dense_tiles_exist_in_the_block_dense_case() {
    let Some(e) = gpu() else { return };
    let c = &cases(&[(Op::Mttkrp, 16)])[2];
    let p = e
        .prepare(
            &c.tensor,
            &[sptmc::engine::Workload {
                op: Op::Mttkrp,
                rank: 16,
            }],
        )
        .unwrap();
    let dense = p.hls(Op::Mttkrp).unwrap().dense().map_or(0, |d| d.len());
    assert!(dense > 0, "the block-dense tensor should have dense tiles");
}

#[test]
fn cuda_describes_its_device() {
    let Some(e) = gpu() else { return };
    let id = e.backend().device_id();
    assert!(id.starts_with("cuda:") && id.contains(":sm_"), "{id}");
}
