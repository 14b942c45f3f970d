//! The engine against the FP64 reference: every op, every mode, several orders,
//! thresholds that put everything dense, mixed or everything sparse, extreme and
//! log-uniform factor magnitudes, fresh seeds. Every test body runs on the CPU backend
//! and, as its CUDA twin, on the GPU (skipped visibly without one; see `common::twin`).

use crate::common;

use common::twin;
use sptmc::accuracy::{SMAPE_TARGET_PERCENT, compare};
use sptmc::engine::{ColumnMax, Engine, Workload};
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::{CooTensor, Matrix, Op, reference};

/// Asserts that `got` meets the SMAPE contract against the FP64 `want`; `what` names
/// the case in the failure message.
fn within_contract(want: &Matrix<f64>, got: &Matrix, what: impl FnOnce() -> String) {
    let acc = compare(want, got).unwrap();
    assert!(
        acc.smape_percent <= SMAPE_TARGET_PERCENT,
        "{}: {acc:?}",
        what()
    );
}

/// Every op on every mode against the reference, at each explicit threshold and at the
/// engine's tuned ones (`None`).
fn check_all_modes(
    engine: &Engine,
    x: &CooTensor,
    thresholds: &[Option<u32>],
    ranks_for: &dyn Fn(Op) -> Vec<usize>,
    seed: u64,
    what: &str,
) {
    for &t in thresholds {
        let p = match t {
            Some(t) => engine
                .prepare_with_thresholds(x, &[(Op::Mttkrp, t), (Op::Ttmc, t)])
                .unwrap(),
            None => engine
                .prepare(
                    x,
                    &Op::ALL.map(|op| Workload {
                        op,
                        rank: ranks_for(op).into_iter().max().unwrap_or(1),
                    }),
                )
                .unwrap(),
        };
        for op in Op::ALL {
            let ranks = ranks_for(op);
            let f = Matrix::random_factors(x.dims(), &ranks, seed);
            for mode in 0..x.order() {
                let got = engine.run(op, &p, mode, &f).unwrap();
                let want = reference::apply(op, x, mode, &f).unwrap();
                within_contract(&want, &got, || format!("{what}: {op} mode {mode} T={t:?}"));
            }
        }
    }
}

twin!(generated_tensors_every_regime_and_order, |engine| {
    let seed = common::fresh_seed("generated_tensors_every_regime_and_order");
    let cases: Vec<(Vec<usize>, usize, Pattern)> = vec![
        (vec![37, 45, 29], 3000, Pattern::Uniform),
        (vec![100, 80, 60], 6000, Pattern::PowerLaw { alpha: 1.1 }),
        (
            vec![70, 50, 40],
            8000,
            Pattern::BlockDense {
                tile_nnz: 300,
                dense_share: 0.7,
            },
        ),
        (vec![33], 20, Pattern::Uniform),
        (vec![17, 1], 15, Pattern::Uniform),
        (vec![20, 13, 9, 7], 2500, Pattern::PowerLaw { alpha: 0.8 }),
        (vec![9, 8, 7, 6, 5], 1500, Pattern::Uniform),
    ];
    for (k, (dims, nnz, pattern)) in cases.into_iter().enumerate() {
        let spec = GenSpec {
            dims,
            nnz,
            pattern,
            seed: seed.wrapping_add(k as u64),
        };
        let x = generate(&spec).unwrap();
        let order = x.order();
        let ranks = move |op: Op| match op {
            Op::Mttkrp | Op::Phi => vec![16; order],
            Op::Ttmc => (0..order).map(|m| [3, 4, 5, 2, 3][m]).collect(),
            // Not in Op::ALL: its kernels run in a completion session (tests/integration/completion.rs).
            Op::Completion => Vec::new(),
        };
        check_all_modes(
            engine,
            &x,
            &[Some(1), Some(40), Some(u32::MAX), None],
            &ranks,
            seed,
            &format!("{spec:?}"),
        );
    }
});

// Wide TTMc outputs are split by rows between workers instead of summed from private
// copies: by runs of the sorted stream when the target leads the keys (mode 0 here),
// by every worker filtering the whole stream otherwise (mode 1), and narrow outputs
// keep the private copies (mode 2). Three workers, so the cuts are uneven; dense
// tiles mixed in, so the filter covers them too.
twin!(
    wide_ttmc_outputs_split_by_rows_match_the_reference,
    |engine| {
        let seed = common::fresh_seed("wide_ttmc_outputs_split_by_rows_match_the_reference");
        let spec = GenSpec {
            dims: vec![1100, 1500, 40],
            nnz: 40_000,
            pattern: Pattern::BlockDense {
                tile_nnz: 400,
                dense_share: 0.3,
            },
            seed,
        };
        let x = generate(&spec).unwrap();
        let f = Matrix::random_factors(x.dims(), &[32, 32, 32], seed);
        let pool = common::pool_of(3);
        pool.install(|| {
            for t in [40, u32::MAX] {
                let p = engine
                    .prepare_with_thresholds(&x, &[(Op::Ttmc, t)])
                    .unwrap();
                for mode in 0..3 {
                    let got = engine.run(Op::Ttmc, &p, mode, &f).unwrap();
                    // Modes 0 and 1 are above the split size (1M floats), mode 2 below.
                    assert_eq!(got.data().len() >= 1 << 20, mode < 2);
                    let want = reference::apply(Op::Ttmc, &x, mode, &f).unwrap();
                    within_contract(&want, &got, || format!("{spec:?}: TTMc mode {mode} T={t}"));
                }
            }
        });
    }
);

// Every MTTKRP rank with a specialized walker (8, 16, 32, 64 at orders 3 to 6, one
// instantiation per target mode; 48 on the row kernels), ranks the CPU pads up to one
// of them (3, 12, 20, 45) and ranks above them (70, 100, 129: in column blocks, and by
// the generic walker on the tensor with fewer nonzeros than twice its rows), on every
// mode, with tiles dense, mixed and all sparse.
twin!(specialized_mttkrp_ranks_every_mode, |engine| {
    let seed = common::fresh_seed("specialized_mttkrp_ranks_every_mode");
    let cases: Vec<(Vec<usize>, usize, Pattern)> = vec![
        (
            vec![70, 50, 40],
            6000,
            Pattern::BlockDense {
                tile_nnz: 200,
                dense_share: 0.6,
            },
        ),
        (vec![30, 41, 23, 9], 4000, Pattern::PowerLaw { alpha: 0.9 }),
        (vec![1500, 900, 40], 3000, Pattern::Uniform),
        (vec![12, 9, 8, 7, 6], 3000, Pattern::PowerLaw { alpha: 0.9 }),
        (vec![7, 6, 5, 5, 4, 3], 2500, Pattern::Uniform),
    ];
    for (k, (dims, nnz, pattern)) in cases.into_iter().enumerate() {
        let spec = GenSpec {
            dims,
            nnz,
            pattern,
            seed: seed.wrapping_add(k as u64),
        };
        let x = generate(&spec).unwrap();
        for t in [1, 40, u32::MAX] {
            let p = engine
                .prepare_with_thresholds(&x, &[(Op::Mttkrp, t)])
                .unwrap();
            for rank in [8, 12, 16, 32, 64, 3, 20, 45, 48, 70, 100, 129] {
                let f =
                    Matrix::random_factors(x.dims(), &vec![rank; x.order()], seed ^ rank as u64);
                for mode in 0..x.order() {
                    let got = engine.mttkrp(&p, mode, &f).unwrap();
                    let want = reference::mttkrp(&x, mode, &f).unwrap();
                    within_contract(&want, &got, || {
                        format!("{spec:?}: rank {rank} mode {mode} T={t}")
                    });
                }
            }
        }
    }
});

// A model's loop: between calls one factor is written and the caller says so, with
// its versions at every call. A backend that keeps copies of the factors (the CPU's
// padded ones at ranks between its widths, a GPU's on the device) must read each as
// last written; specialized and padded ranks, orders 3 to 5.
twin!(
    mttkrp_with_versions_reads_each_factor_as_last_written,
    |engine| {
        let seed = common::fresh_seed("mttkrp_with_versions_reads_each_factor_as_last_written");
        for (k, (dims, nnz)) in [
            (vec![60, 45, 30], 4000),
            (vec![25, 30, 12, 9], 3000),
            (vec![10, 9, 8, 7, 6], 3000),
        ]
        .into_iter()
        .enumerate()
        {
            let spec = GenSpec {
                dims,
                nnz,
                pattern: Pattern::PowerLaw { alpha: 0.8 },
                seed: seed.wrapping_add(k as u64),
            };
            let x = generate(&spec).unwrap();
            let p = engine
                .prepare_with_thresholds(&x, &[(Op::Mttkrp, 8)])
                .unwrap();
            for rank in [3, 16, 20, 45] {
                let mut f =
                    Matrix::random_factors(x.dims(), &vec![rank; x.order()], seed ^ rank as u64);
                let mut versions = engine.factor_versions(x.order());
                for it in 0..2 {
                    for mode in 0..x.order() {
                        let call = sptmc::engine::Call {
                            versions: Some(&versions),
                            ..Default::default()
                        };
                        let mut got = Matrix::zeros(0, 0);
                        engine
                            .run_into_with(Op::Mttkrp, &p, mode, &f, &call, &mut got)
                            .unwrap();
                        let want = reference::mttkrp(&x, mode, &f).unwrap();
                        within_contract(&want, &got, || {
                            format!("{spec:?}: rank {rank} mode {mode} iteration {it}")
                        });
                        // The step: a new factor from the result (its rows normalized, as
                        // no two calls see the same one), and the caller says so.
                        f[mode] = Matrix::from_fn(got.rows(), rank, |i, c| {
                            let row = got.row(i);
                            let norm = row.iter().map(|v| v * v).sum::<f32>().sqrt().max(1e-30);
                            0.25 + (row[c] / norm).abs()
                        });
                        versions.changed(mode);
                    }
                }
            }
        }
    }
);

// Factors far above and below the range where f32 accumulation is safe: the kernels
// scale their columns (from a scan, or from the caller's maxima, which must give the
// same bits) and still meet the accuracy contract; 3-way with dense tiles and 4-way,
// specialized and generic ranks.
twin!(extreme_factor_magnitudes_do_not_overflow, |engine| {
    let seed = common::fresh_seed("extreme_factor_magnitudes_do_not_overflow");
    let cases = [
        (vec![30, 30, 30], 2000, Pattern::Uniform, vec![4, 16]),
        (
            vec![40, 25, 7, 30],
            6000,
            Pattern::PowerLaw { alpha: 1.0 },
            vec![16, 5, 70],
        ),
    ];
    for (dims, nnz, pattern, ranks) in cases {
        let order = dims.len();
        let x = generate(&GenSpec {
            dims,
            nnz,
            pattern,
            seed,
        })
        .unwrap();
        let p = engine
            .prepare_with_thresholds(&x, &[(Op::Mttkrp, 8)])
            .unwrap();
        for rank in ranks {
            let mut f = Matrix::random_factors(x.dims(), &vec![rank; order], seed);
            for v in f[1].data_mut() {
                *v *= 1e30;
            }
            for v in f[order - 1].data_mut() {
                *v *= 1e-30;
            }
            let max = ColumnMax::of(&f);
            for mode in 0..order {
                let scanned = engine.mttkrp(&p, mode, &f).unwrap();
                let mut given = Matrix::zeros(0, 0);
                engine
                    .run_into_with_max(Op::Mttkrp, &p, mode, &f, &max, &mut given)
                    .unwrap();
                // The CPU gives the same bits either way; a GPU adds with atomics in
                // no fixed order, so its two runs agree to rounding.
                if engine.kind() == sptmc::engine::BackendKind::Cpu {
                    assert_eq!(scanned, given, "order {order} rank {rank} mode {mode}");
                } else {
                    let a = compare(&scanned.to_f64(), &given).unwrap();
                    assert!(
                        a.max_rel_err <= 1e-5,
                        "order {order} rank {rank} mode {mode}: {a:?}"
                    );
                }
                let want = reference::mttkrp(&x, mode, &f).unwrap();
                within_contract(&want, &given, || {
                    format!("order {order} rank {rank} mode {mode}")
                });
            }
        }
    }
});

// Factors spread log-uniformly over six decades (1e-6..1) inside every column, as
// CP-ALS produces on power-law data: a GPU stages tile rows in fp16, where a scale per
// whole column would lose the small entries. Both ops, every mode, all tiles dense
// (threshold 1), mixed (40) and the engine's tuned ones.
twin!(log_uniform_factor_magnitudes_meet_the_contract, |engine| {
    let seed = common::fresh_seed("log_uniform_factor_magnitudes_meet_the_contract");
    let x = generate(&GenSpec {
        dims: vec![90, 70, 60],
        nnz: 20_000,
        pattern: Pattern::BlockDense {
            tile_nnz: 300,
            dense_share: 0.7,
        },
        seed,
    })
    .unwrap();
    let kind = sptmc::tools::cases::FactorKind::LogUniform;
    for t in [Some(1), Some(40), None] {
        let p = match t {
            Some(t) => engine
                .prepare_with_thresholds(&x, &[(Op::Mttkrp, t), (Op::Ttmc, t)])
                .unwrap(),
            None => engine
                .prepare(
                    &x,
                    &[
                        Workload {
                            op: Op::Mttkrp,
                            rank: 32,
                        },
                        Workload {
                            op: Op::Ttmc,
                            rank: 16,
                        },
                    ],
                )
                .unwrap(),
        };
        for (op, rank) in [
            (Op::Mttkrp, 16),
            (Op::Mttkrp, 32),
            (Op::Ttmc, 8),
            (Op::Ttmc, 16),
        ] {
            for mode in 0..3 {
                let f = kind.factors(x.dims(), rank, seed ^ (rank * 7 + mode) as u64);
                let got = engine.run(op, &p, mode, &f).unwrap();
                let want = reference::apply(op, &x, mode, &f).unwrap();
                within_contract(&want, &got, || format!("{op} r{rank} mode {mode} T={t:?}"));
            }
        }
    }
});

/// A small uniform 3-way tensor prepared for MTTKRP (threshold 8) with rank-4 factors.
fn small_case(
    engine: &Engine,
    dims: [usize; 3],
    nnz: usize,
    seed: u64,
) -> (sptmc::engine::Prepared, Vec<Matrix>) {
    let x = generate(&GenSpec {
        dims: dims.to_vec(),
        nnz,
        pattern: Pattern::Uniform,
        seed,
    })
    .unwrap();
    let p = engine
        .prepare_with_thresholds(&x, &[(Op::Mttkrp, 8)])
        .unwrap();
    (p, Matrix::random_factors(x.dims(), &[4; 3], seed))
}

twin!(mis_shaped_column_maxima_are_a_shape_error, |engine| {
    let (p, f) = small_case(engine, [20, 10, 5], 300, 3);
    let mut short = ColumnMax::of(&f);
    short.max[2].pop();
    let err = engine
        .run_into_with_max(Op::Mttkrp, &p, 0, &f, &short, &mut Matrix::zeros(0, 0))
        .unwrap_err();
    assert!(
        matches!(err, sptmc::Error::Shape { .. }),
        "mis-shaped maxima: {err}"
    );
});

#[test]
fn values_beyond_fp16_with_scale_are_an_error_and_overflowing_duplicates_too() {
    use sptmc::hls::HlsBuilder;
    let x =
        CooTensor::from_entries(vec![2, 2, 2], [([0u32, 0, 0], 1e300), ([1, 1, 1], 1.0)]).unwrap();
    let e = HlsBuilder::new(78).build(&x).unwrap_err();
    assert!(matches!(e, sptmc::Error::Unsupported(_)), "{e}");
    let x = CooTensor::from_entries(vec![2, 2, 2], [([0u32, 0, 0], 1e308), ([0, 0, 0], 1e308)])
        .unwrap();
    let e = HlsBuilder::new(78).build(&x).unwrap_err();
    assert!(matches!(e, sptmc::Error::NonFinite(_)), "{e}");
}

// The contract on real data: every mode of every shared tensor, MTTKRP at ranks 16 and
// 32, TTMc at rank 8 (16 for 3rd order), at the tuned threshold and with every tile
// dense (threshold 1) so both parts are exercised.
twin!(shared_tensors_meet_the_accuracy_contract, |engine| {
    let Some(dir) = common::shared_data() else {
        return;
    };
    for file in common::shared_files(&dir) {
        let (x, _) = sptmc::tensor::tns::read(&file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().into_owned();
        let p = engine
            .prepare_with_thresholds(&x, &[(Op::Mttkrp, 1), (Op::Ttmc, 78)])
            .unwrap();
        let ttmc_rank = if x.order() == 3 { 16 } else { 8 };
        for (op, rank) in [(Op::Mttkrp, 16), (Op::Mttkrp, 32), (Op::Ttmc, ttmc_rank)] {
            let f = Matrix::random_factors(x.dims(), &vec![rank; x.order()], 11);
            for mode in 0..x.order() {
                let got = engine.run(op, &p, mode, &f).unwrap();
                let want = reference::apply(op, &x, mode, &f).unwrap();
                let acc = compare(&want, &got).unwrap();
                eprintln!(
                    "{name} {op} r{rank} mode {mode}: SMAPE {:.2e}%",
                    acc.smape_percent
                );
                assert!(
                    acc.smape_percent <= SMAPE_TARGET_PERCENT,
                    "{name} {op} r{rank} mode {mode}: {acc:?}"
                );
            }
        }
    }
});

// Two ops prepared at thresholds that classify every tile alike share one form; at
// thresholds with tiles between them, each op gets its own.
twin!(
    ops_share_a_form_when_their_thresholds_classify_alike,
    |engine| {
        let x = generate(&GenSpec {
            dims: vec![64, 64, 64],
            nnz: 4000,
            pattern: Pattern::BlockDense {
                tile_nnz: 100,
                dense_share: 0.5,
            },
            seed: 9,
        })
        .unwrap();
        let one = engine
            .prepare_with_thresholds(&x, &[(Op::Mttkrp, 200)])
            .unwrap();
        // No tile holds 200..300 nonzeros (the dense ones hold 100, the rest few).
        let alike = engine
            .prepare_with_thresholds(&x, &[(Op::Mttkrp, 200), (Op::Ttmc, 300)])
            .unwrap();
        assert_eq!(alike.bytes(), one.bytes());
        // At 50 the 100-nonzero tiles are dense, at 300 they are not: two forms.
        let apart = engine
            .prepare_with_thresholds(&x, &[(Op::Mttkrp, 50), (Op::Ttmc, 300)])
            .unwrap();
        let (d, s) = (apart.hls(Op::Mttkrp).unwrap(), apart.hls(Op::Ttmc).unwrap());
        assert!(d.stats().dense_tiles > 0 && s.stats().dense_tiles == 0);
        assert_eq!(apart.bytes(), d.bytes() + s.bytes());
        // Both still compute the same MTTKRP as the reference.
        let f = Matrix::random_factors(x.dims(), &[8, 8, 8], 3);
        for p in [&alike, &apart] {
            let got = engine.mttkrp(p, 1, &f).unwrap();
            let want = reference::mttkrp(&x, 1, &f).unwrap();
            assert!(compare(&want, &got).unwrap().smape_percent <= SMAPE_TARGET_PERCENT);
        }
    }
);

twin!(each_op_gets_the_key_order_its_walk_prefers, |engine| {
    let x = generate(&GenSpec {
        dims: vec![50, 7, 30],
        nnz: 800,
        pattern: Pattern::Uniform,
        seed: 4,
    })
    .unwrap();
    let p = engine
        .prepare_with_thresholds(&x, &[(Op::Ttmc, 78), (Op::Mttkrp, 78)])
        .unwrap();
    // MTTKRP: shortest mode first; TTMc: mode order (its columns are a Kronecker
    // product in mode order).
    let levels = |op| p.hls(op).unwrap().sparse().layout().levels().to_vec();
    assert_eq!(levels(Op::Mttkrp), vec![1, 2, 0]);
    assert_eq!(levels(Op::Ttmc), vec![0, 1, 2]);
    // A tensor whose extents already increase gives one form for both.
    let y = generate(&GenSpec {
        dims: vec![7, 30, 50],
        nnz: 800,
        pattern: Pattern::Uniform,
        seed: 4,
    })
    .unwrap();
    let one = engine
        .prepare_with_thresholds(&y, &[(Op::Mttkrp, 78), (Op::Ttmc, 78)])
        .unwrap();
    assert_eq!(one.bytes(), one.hls(Op::Mttkrp).unwrap().bytes());
});

// A result beyond f32's range is an error naming the op, mode and entry, never a
// matrix of inf; a caller that scans the result itself may turn the check off.
twin!(results_beyond_f32_are_an_error, |engine| {
    let (p, mut f) = small_case(engine, [20, 30, 40], 2000, 5);
    for m in [1, 2] {
        for v in f[m].data_mut() {
            *v = 1e30;
        }
    }
    let e = engine.mttkrp(&p, 0, &f).unwrap_err();
    assert!(matches!(e, sptmc::Error::NonFinite(_)), "{e}");
    assert!(e.to_string().contains("mttkrp of mode 0"), "{e}");
    let mut out = Matrix::zeros(0, 0);
    let unchecked = sptmc::engine::Call {
        check_finite: false,
        ..Default::default()
    };
    engine
        .run_into_with(Op::Mttkrp, &p, 0, &f, &unchecked, &mut out)
        .unwrap();
    assert!(out.data().iter().any(|v| !v.is_finite()));
});

// NaN and ±inf alike: an inf column is not rescaled (its power of two would
// overflow), and the result's check names the factor.
twin!(
    a_factor_holding_nan_or_inf_is_named_in_the_error,
    |engine| {
        let (p, f) = small_case(engine, [20, 10, 5], 300, 4);
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            let mut f = f.clone();
            let cols = f[1].cols();
            f[1].data_mut()[2 * cols + 3] = bad;
            let e = engine.run(Op::Mttkrp, &p, 0, &f).unwrap_err();
            let err = e.to_string();
            assert!(matches!(e, sptmc::Error::NonFinite(_)), "{bad}: {err}");
            assert!(
                err.contains(&format!("factor 1 holds {bad} at (2, 3)")),
                "{err}"
            );
            assert!(!err.contains("too large"), "{err}");
        }
    }
);
