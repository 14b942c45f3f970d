//! CP-APR's Φ on the engine against the FP64 reference: generated tensors of every
//! regime and order, thresholds that put everything dense, mixed or everything sparse,
//! ranks that fill and do not fill the vector lanes, the log term, and every mode of
//! every shared tensor. Every body runs on the CPU and, as its CUDA twin, on the GPU
//! (skipped visibly without one; see `common::twin`).

mod common;

use common::twin;
use sptmc::accuracy::{SMAPE_TARGET_PERCENT, compare};
use sptmc::engine::{Call, Engine, PhiParams, Workload};
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::{CooTensor, Matrix, Op, reference};

/// Nonnegative factors in `[0.05, 1)` (CP-APR's are nonnegative; the target's is `B`).
fn factors(dims: &[usize], rank: usize, seed: u64) -> Vec<Matrix> {
    Matrix::random_factors(dims, &vec![rank; dims.len()], seed)
        .into_iter()
        .map(|f| f.map(|u| 0.05 + 0.95 * u))
        .collect()
}

/// The generated tensor `spec` with its values turned into counts 1..=9 (Poisson data;
/// fp16 holds them exactly, so the reference sees the values the kernels see).
fn counts(spec: &GenSpec) -> CooTensor {
    let (dims, idx, vals) = generate(spec).unwrap().into_parts();
    let vals = vals
        .iter()
        .map(|v| (v.abs() * 9.0).ceil().clamp(1.0, 9.0))
        .collect();
    CooTensor::new(dims, idx, vals).unwrap()
}

/// Φ on every mode against the reference (SMAPE within the contract, the log term
/// within 1e-5 relative).
fn check_modes(engine: &Engine, x: &CooTensor, threshold: Option<u32>, rank: usize, what: &str) {
    let p = match threshold {
        Some(t) => engine.prepare_with_thresholds(x, &[(Op::Phi, t)]).unwrap(),
        None => engine
            .prepare(
                x,
                &[Workload {
                    op: Op::Mttkrp,
                    rank,
                }],
            )
            .unwrap(),
    };
    let f = factors(x.dims(), rank, 3 + rank as u64);
    for mode in 0..x.order() {
        let (got, log) = engine.phi(&p, mode, &f, 1e-10).unwrap();
        let (want, want_log) = reference::phi(x, mode, &f, 1e-10).unwrap();
        let acc = compare(&want, &got).unwrap();
        assert!(
            acc.smape_percent <= SMAPE_TARGET_PERCENT,
            "{what}: Φ mode {mode} rank {rank} T={threshold:?}: {acc:?}"
        );
        let rel = (log - want_log).abs() / want_log.abs().max(1e-300);
        assert!(
            rel <= 1e-5,
            "{what}: log term of mode {mode}: {log} vs {want_log}"
        );
    }
    // The same through a PhiRun (the Khatri-Rao rows kept between calls), where the
    // backend has one: every mode, two targets B per fix, with and without the log
    // term.
    let Some(mut run) = engine.phi_run(&p, rank).unwrap() else {
        return;
    };
    let mut out = Matrix::zeros(1, 1);
    for mode in 0..x.order() {
        run.fix(mode, &f).unwrap();
        for (k, log_term) in [(0u64, false), (1, true)] {
            let mut g = f.clone();
            g[mode] = factors(x.dims(), rank, 40 + k)[mode].clone();
            let params = PhiParams {
                eps: 1e-10,
                log_term,
            };
            let stats = run.phi(&g[mode], params, &mut out).unwrap();
            let (want, want_log) = reference::phi(x, mode, &g, 1e-10).unwrap();
            let acc = compare(&want, &out).unwrap();
            assert!(
                acc.smape_percent <= SMAPE_TARGET_PERCENT,
                "{what}: PhiRun Φ mode {mode} rank {rank} B #{k}: {acc:?}"
            );
            match stats.log_term {
                Some(log) => {
                    assert!(log_term);
                    let rel = (log - want_log).abs() / want_log.abs().max(1e-300);
                    assert!(
                        rel <= 1e-5,
                        "{what}: PhiRun log term of mode {mode}: {log} vs {want_log}"
                    );
                }
                None => assert!(!log_term, "{what}: no log term"),
            }
        }
    }
}

twin!(
    phi_matches_the_reference_in_every_regime_and_order,
    |engine| {
        let seed = common::fresh_seed("phi_matches_the_reference_in_every_regime_and_order");
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
            (vec![17, 3], 40, Pattern::Uniform),
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
            let x = counts(&spec);
            for t in [Some(1), Some(40), Some(u32::MAX), None] {
                for rank in [16, 5, 8, 32] {
                    check_modes(engine, &x, t, rank, &format!("{spec:?}"));
                }
            }
        }
    }
);

// Ranks that need several vectors per lane (CUDA: 2 and 4 slots) and a tensor large
// enough that the CPU splits it between workers.
twin!(phi_at_wide_ranks_and_split_between_workers, |engine| {
    let x = counts(&GenSpec {
        dims: vec![300, 200, 150],
        nnz: 60_000,
        pattern: Pattern::BlockDense {
            tile_nnz: 400,
            dense_share: 0.4,
        },
        seed: 21,
    });
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(3)
        .build()
        .unwrap();
    pool.install(|| {
        for rank in [40, 64, 100, 256] {
            check_modes(engine, &x, Some(100), rank, "block-dense 300×200×150");
        }
    });
});

// One prepare serves CP-ALS and CP-APR: Φ runs on the form prepared for MTTKRP, and
// the default ε of `Engine::run` is pyttb's.
twin!(phi_runs_on_the_mttkrp_form, |engine| {
    let x = generate(&GenSpec {
        dims: vec![40, 30, 20],
        nnz: 2000,
        pattern: Pattern::Uniform,
        seed: 4,
    })
    .unwrap();
    let p = engine
        .prepare(
            &x,
            &[Workload {
                op: Op::Mttkrp,
                rank: 8,
            }],
        )
        .unwrap();
    let f = factors(x.dims(), 8, 1);
    let got = engine.run(Op::Phi, &p, 1, &f).unwrap();
    let want = reference::apply(Op::Phi, &x, 1, &f).unwrap();
    assert!(compare(&want, &got).unwrap().within_contract());
    // The MTTKRP of the same prepare still works alongside.
    let m = engine.run(Op::Mttkrp, &p, 1, &f).unwrap();
    assert!(
        compare(&reference::mttkrp(&x, 1, &f).unwrap(), &m)
            .unwrap()
            .within_contract()
    );
    // Without the log term the call reports none.
    let mut out = Matrix::zeros(0, 0);
    let stats = engine.run_into(Op::Phi, &p, 1, &f, &mut out).unwrap();
    assert_eq!(stats.log_term, None);
    // A tensor prepared only for TTMc has no form for Φ.
    let t = engine
        .prepare_with_thresholds(&x, &[(Op::Ttmc, 61)])
        .unwrap();
    let e = engine.run(Op::Phi, &t, 0, &f).unwrap_err();
    assert!(e.to_string().contains("not prepared for phi"), "{e}");
});

// Model values below ε are floored (no division by zero, no NaN); zero factors give a
// zero Φ with the log term at ln ε; bad ε and shapes are errors, not panics.
twin!(phi_floors_the_model_and_refuses_bad_arguments, |engine| {
    let x = counts(&GenSpec {
        dims: vec![30, 20, 10],
        nnz: 500,
        pattern: Pattern::Uniform,
        seed: 8,
    });
    let p = engine
        .prepare_with_thresholds(&x, &[(Op::Mttkrp, 1)])
        .unwrap();
    let mut f = factors(x.dims(), 4, 2);
    f[0] = Matrix::zeros(30, 4);
    let (phi, log) = engine.phi(&p, 0, &f, 1e-10).unwrap();
    let (want, want_log) = reference::phi(&x, 0, &f, 1e-10).unwrap();
    assert!(compare(&want, &phi).unwrap().within_contract());
    assert!(
        ((log - want_log) / want_log).abs() < 1e-5,
        "{log} vs {want_log}"
    );
    assert!(
        phi.data()
            .iter()
            .all(|v| v.is_finite() && *v > 0.0 || *v == 0.0)
    );
    // Φ of mode 1 with mode 0 all zero: π is zero everywhere, so Φ is zero.
    let (phi1, _) = engine.phi(&p, 1, &f, 1e-10).unwrap();
    assert!(phi1.data().iter().all(|&v| v == 0.0));
    for bad in [0.0, -1.0, f32::NAN, f32::INFINITY] {
        let call = Call {
            phi: PhiParams {
                eps: bad,
                log_term: false,
            },
            ..Call::default()
        };
        let mut out = Matrix::zeros(0, 0);
        let e = engine
            .run_into_with(Op::Phi, &p, 0, &f, &call, &mut out)
            .unwrap_err();
        assert!(e.to_string().contains("ε"), "{e}");
    }
    // B of the wrong shape is named.
    let mut g = factors(x.dims(), 4, 2);
    g[2] = Matrix::zeros(10, 3);
    let e = engine.phi(&p, 2, &g, 1e-10).unwrap_err();
    assert!(e.to_string().contains("mode 2"), "{e}");
    // A PhiRun: zero factors floored the same way; Φ before fix, bad ε and shapes are
    // typed errors.
    if let Some(mut run) = engine.phi_run(&p, 4).unwrap() {
        let params = PhiParams {
            eps: 1e-10,
            log_term: true,
        };
        let mut out = Matrix::zeros(0, 0);
        let e = run.phi(&f[0], params, &mut out).unwrap_err();
        assert!(e.to_string().contains("fix a mode"), "{e}");
        run.fix(0, &f).unwrap();
        let log = run.phi(&f[0], params, &mut out).unwrap().log_term.unwrap();
        assert!(compare(&want, &out).unwrap().within_contract());
        assert!(
            ((log - want_log) / want_log).abs() < 1e-5,
            "{log} vs {want_log}"
        );
        for bad in [0.0, -1.0, f32::NAN] {
            let e = run
                .phi(&f[0], PhiParams { eps: bad, ..params }, &mut out)
                .unwrap_err();
            assert!(e.to_string().contains("ε"), "{e}");
        }
        let e = run
            .phi(&Matrix::zeros(30, 3), params, &mut out)
            .unwrap_err();
        assert!(e.to_string().contains("mode 0"), "{e}");
        // The target's own factor is not read by fix; another mode's must fit.
        run.fix(2, &g).unwrap();
        let e = run.fix(0, &g).unwrap_err();
        assert!(e.to_string().contains("mode 2"), "{e}");
        assert!(run.fix(3, &f).is_err());
        assert!(engine.phi_run(&p, 0).is_err());
    }
});

// The contract on real data: Φ on every mode of every shared tensor at rank 16, at the
// tuned threshold and with every tile dense (threshold 1).
twin!(
    phi_on_the_shared_tensors_meets_the_accuracy_contract,
    |engine| {
        let Some(dir) = common::shared_data() else {
            return;
        };
        for file in common::shared_files(&dir) {
            let (x, _) = sptmc::tensor::tns::read(&file).unwrap();
            let name = file.file_name().unwrap().to_string_lossy().into_owned();
            let f = factors(x.dims(), 16, 11);
            for p in [
                engine
                    .prepare(
                        &x,
                        &[Workload {
                            op: Op::Mttkrp,
                            rank: 16,
                        }],
                    )
                    .unwrap(),
                engine.prepare_with_thresholds(&x, &[(Op::Phi, 1)]).unwrap(),
            ] {
                for mode in 0..x.order() {
                    let (got, log) = engine.phi(&p, mode, &f, 1e-10).unwrap();
                    let (want, want_log) = reference::phi(&x, mode, &f, 1e-10).unwrap();
                    let acc = compare(&want, &got).unwrap();
                    eprintln!(
                        "{name} Φ r16 mode {mode}: SMAPE {:.2e}%, log term {log:.9e} vs {want_log:.9e}",
                        acc.smape_percent
                    );
                    assert!(
                        acc.smape_percent <= SMAPE_TARGET_PERCENT,
                        "{name} Φ mode {mode}: {acc:?}"
                    );
                    assert!(
                        ((log - want_log) / want_log).abs() <= 1e-5,
                        "{name} mode {mode}"
                    );
                }
                // Through a PhiRun where the backend has one (the longest rows of the
                // larger tensors cut into pieces).
                if let Some(mut run) = engine.phi_run(&p, 16).unwrap() {
                    let mut out = Matrix::zeros(1, 1);
                    let params = PhiParams {
                        eps: 1e-10,
                        log_term: true,
                    };
                    for mode in 0..x.order() {
                        run.fix(mode, &f).unwrap();
                        let log = run
                            .phi(&f[mode], params, &mut out)
                            .unwrap()
                            .log_term
                            .unwrap();
                        let (want, want_log) = reference::phi(&x, mode, &f, 1e-10).unwrap();
                        let acc = compare(&want, &out).unwrap();
                        assert!(
                            acc.smape_percent <= SMAPE_TARGET_PERCENT,
                            "{name} PhiRun Φ mode {mode}: {acc:?}"
                        );
                        assert!(
                            ((log - want_log) / want_log).abs() <= 1e-5,
                            "{name} PhiRun mode {mode}"
                        );
                    }
                }
            }
        }
    }
);

// MU's inner iterations through a PhiRun (the CPU runs them row by row while a row's
// Khatri-Rao rows are in cache, and again up to the stop when the stop comes early)
// give the sequential loop's result to the bit: every mode (one with rows longer than a
// piece), no stop, an early stop, and the next call after each.
twin!(
    mu_inner_iterations_match_the_sequential_loop_bit_for_bit,
    |engine| {
        // Mode 2's three rows hold 60,000 nonzeros: at least one is longer than a piece
        // (8192), so that mode runs one Φ at a time, the others row by row.
        let x = counts(&GenSpec {
            dims: vec![400, 300, 3],
            nnz: 60_000,
            pattern: Pattern::PowerLaw { alpha: 0.9 },
            seed: 17,
        });
        let p = engine
            .prepare_with_thresholds(&x, &[(Op::Phi, u32::MAX)])
            .unwrap();
        let rank = 16;
        let Some(mut run) = engine.phi_run(&p, rank).unwrap() else {
            return;
        };
        let Some(mut seq) = engine.phi_run(&p, rank).unwrap() else {
            unreachable!("the backend gave one PhiRun above");
        };
        let params = PhiParams {
            eps: 1e-10,
            log_term: false,
        };
        let f = factors(x.dims(), rank, 5);
        for mode in 0..3 {
            // The violation after three iterations: a tolerance just above it stops early.
            seq.fix(mode, &f).unwrap();
            let mut b: Vec<f64> = f[mode].data().iter().map(|&v| f64::from(v)).collect();
            let mut b32 = f[mode].clone();
            let mut out = Matrix::zeros(1, 1);
            let probe = sptmc::engine::phi::mu_inner_seq(
                |b32, out| seq.phi(b32, params, out),
                &mut b,
                &mut b32,
                3,
                0.0,
                &mut out,
            )
            .unwrap();
            for tol in [0.0, probe.violation * 1.0001, 0.0] {
                let start: Vec<f64> = f[mode].data().iter().map(|&v| f64::from(v)).collect();
                let (mut b1, mut b2) = (start.clone(), start);
                let (mut c1, mut c2) = (f[mode].clone(), f[mode].clone());
                let (mut o1, mut o2) = (Matrix::zeros(1, 1), Matrix::zeros(1, 1));
                run.fix(mode, &f).unwrap();
                let got = run
                    .mu_inner(&mut b1, &mut c1, params, 10, tol, &mut o1)
                    .unwrap();
                seq.fix(mode, &f).unwrap();
                let want = sptmc::engine::phi::mu_inner_seq(
                    |b32, out| seq.phi(b32, params, out),
                    &mut b2,
                    &mut c2,
                    10,
                    tol,
                    &mut o2,
                )
                .unwrap();
                assert_eq!(got, want, "mode {mode} tol {tol}");
                assert!(
                    b1.iter().zip(&b2).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "mode {mode} tol {tol}: B differs"
                );
                assert_eq!(c1, c2, "mode {mode} tol {tol}: B's f32 copy differs");
                assert_eq!(o1, o2, "mode {mode} tol {tol}: the last Φ differs");
                if tol > 0.0 {
                    assert!(
                        got.evaluations < 10,
                        "mode {mode}: no early stop at tol {tol}"
                    );
                }
            }
        }
    }
);
