//! CP-APR's Φ on the engine against the FP64 reference: generated tensors of every
//! regime and order, thresholds that put everything dense, mixed or everything sparse,
//! ranks that fill and do not fill the vector lanes, the log term, and every mode of
//! every shared tensor. Every body runs on the CPU and, as its CUDA twin, on the GPU
//! (skipped visibly without one; see `common::twin`).

use crate::common;

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
    // The same through a PhiRun (the Khatri-Rao rows kept between calls, all in f64),
    // where the backend has one: every mode, two targets B per fix, with and without
    // the log term, against the f64 reference to 1e-12.
    let Some(mut run) = engine.phi_run(&p, rank).unwrap() else {
        return;
    };
    let f64s = as_f64(&f);
    let views = views(&f64s);
    let mut out = Vec::new();
    for mode in 0..x.order() {
        run.fix(mode, &views).unwrap();
        for (k, log_term) in [(0u64, false), (1, true)] {
            let mut g = f.clone();
            g[mode] = factors(x.dims(), rank, 40 + k)[mode].clone();
            let params = PhiParams {
                eps: 1e-10,
                log_term,
            };
            let stats = run
                .phi(&as_f64(&g[mode..=mode])[0], params, &mut out)
                .unwrap();
            let (want, want_log) = reference::phi(x, mode, &g, 1e-10).unwrap();
            let worst = worst_rel(want.data(), &out);
            assert!(
                worst <= 1e-12,
                "{what}: PhiRun Φ mode {mode} rank {rank} B #{k}: {worst:e}"
            );
            match stats.log_term {
                Some(log) => {
                    assert!(log_term);
                    let rel = (log - want_log).abs() / want_log.abs().max(1e-300);
                    assert!(
                        rel <= 1e-12,
                        "{what}: PhiRun log term of mode {mode}: {log} vs {want_log}"
                    );
                }
                None => assert!(!log_term, "{what}: no log term"),
            }
        }
    }
}

/// The factors in f64 (a PhiRun's type).
fn as_f64(f: &[Matrix]) -> Vec<Vec<f64>> {
    f.iter()
        .map(|m| m.data().iter().map(|&v| f64::from(v)).collect())
        .collect()
}

/// The slices a PhiRun takes.
fn views(f: &[Vec<f64>]) -> Vec<&[f64]> {
    f.iter().map(Vec::as_slice).collect()
}

/// The largest `|got − want| / max(|want|, 1e-300)`, infinite where `got` is not
/// finite or the lengths differ.
fn worst_rel(want: &[f64], got: &[f64]) -> f64 {
    if want.len() != got.len() {
        return f64::INFINITY;
    }
    want.iter()
        .zip(got)
        .map(|(&w, &g)| {
            if g.is_finite() {
                (g - w).abs() / w.abs().max(1e-300)
            } else {
                f64::INFINITY
            }
        })
        .fold(0.0, f64::max)
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
                for rank in [16, 5, 8, 32, 12, 20] {
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
    let pool = common::pool_of(3);
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
        let (f64s, g64s) = (as_f64(&f), as_f64(&g));
        let (fv, gv) = (views(&f64s), views(&g64s));
        let mut out = Vec::new();
        let e = run.phi(fv[0], params, &mut out).unwrap_err();
        assert!(e.to_string().contains("fix a mode"), "{e}");
        run.fix(0, &fv).unwrap();
        let log = run.phi(fv[0], params, &mut out).unwrap().log_term.unwrap();
        // Every model value is floored: Φ = Σ x / ε · π, with ε the f32 1e-10 (1.3e-8
        // above the reference's f64 one).
        let worst = worst_rel(want.data(), &out);
        assert!(worst <= 2e-8, "{worst:e}");
        assert!(
            ((log - want_log) / want_log).abs() < 1e-9, // ln of the f32 ε
            "{log} vs {want_log}"
        );
        for bad in [0.0, -1.0, f32::NAN] {
            let e = run
                .phi(fv[0], PhiParams { eps: bad, ..params }, &mut out)
                .unwrap_err();
            assert!(e.to_string().contains("ε"), "{e}");
        }
        let e = run.phi(&[0.0; 30 * 3], params, &mut out).unwrap_err();
        assert!(e.to_string().contains("mode 0"), "{e}");
        // A non-finite target gives a typed error, not a NaN Φ.
        let mut nan = f64s[0].clone();
        nan[5] = f64::NAN;
        let e = run.phi(&nan, params, &mut out).unwrap_err();
        assert!(matches!(e, sptmc::Error::NonFinite(_)), "{e}");
        // The target's own factor is not read by fix; another mode's must fit.
        run.fix(2, &gv).unwrap();
        let e = run.fix(0, &gv).unwrap_err();
        assert!(e.to_string().contains("mode 2"), "{e}");
        assert!(run.fix(3, &fv).is_err());
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
                    let mut out = Vec::new();
                    let params = PhiParams {
                        eps: 1e-10,
                        log_term: true,
                    };
                    let f64s = as_f64(&f);
                    let fv = views(&f64s);
                    for mode in 0..x.order() {
                        run.fix(mode, &fv).unwrap();
                        let log = run
                            .phi(fv[mode], params, &mut out)
                            .unwrap()
                            .log_term
                            .unwrap();
                        let (want, want_log) = reference::phi(&x, mode, &f, 1e-10).unwrap();
                        // f64 throughout; the values are the prepared form's (fp16 with
                        // the tensor's scale), so the bound is the contract's.
                        let acc = compare(
                            &want,
                            &Matrix::from_fn(want.rows(), 16, |i, j| out[i * 16 + j] as f32),
                        )
                        .unwrap();
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
        // (8192), so that mode runs one Φ at a time, the others row by row. The second
        // tensor's mode 0 has 20,000 rows for 5,000 nonzeros: most rows have none.
        let cases = [
            (vec![400, 300, 3], 60_000, Pattern::PowerLaw { alpha: 0.9 }),
            (vec![20_000, 30, 4], 5_000, Pattern::Uniform),
        ];
        // A rank of the specialized widths and ones the CPU pads up to one.
        for ((dims, nnz, pattern), rank) in (cases.iter()).flat_map(|c| [16, 12, 3].map(|r| (c, r)))
        {
            let x = counts(&GenSpec {
                dims: dims.clone(),
                nnz: *nnz,
                pattern: *pattern,
                seed: 17,
            });
            let p = engine
                .prepare_with_thresholds(&x, &[(Op::Phi, u32::MAX)])
                .unwrap();
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
            let f64s = as_f64(&f);
            let fv = views(&f64s);
            // The sequential loop through the other run's Φ.
            let seq_loop = |seq: &mut sptmc::engine::PhiRun<'_>,
                            b: &mut [f64],
                            max_inner: usize,
                            tol: f64,
                            out: &mut [f64]| {
                let mut buf = Vec::new();
                sptmc::math::mu::inner_iterations(
                    |b, out| {
                        let stats = seq.phi(b, params, &mut buf)?;
                        out.copy_from_slice(&buf);
                        Ok((stats.bytes_to_device, stats.bytes_from_device))
                    },
                    b,
                    max_inner,
                    tol,
                    out,
                )
                .unwrap()
            };
            for (mode, start) in f64s.iter().enumerate() {
                let n = start.len();
                // The violation after three iterations: a tolerance just above it stops early.
                seq.fix(mode, &fv).unwrap();
                let probe = seq_loop(&mut seq, &mut start.clone(), 3, 0.0, &mut vec![0.0; n]);
                for tol in [0.0, probe.violation * 1.0001, 0.0] {
                    let (mut b1, mut b2) = (start.clone(), start.clone());
                    let (mut o1, mut o2) = (Vec::new(), vec![0.0; n]);
                    run.fix(mode, &fv).unwrap();
                    let got = run.mu_inner(&mut b1, params, 10, tol, &mut o1).unwrap();
                    seq.fix(mode, &fv).unwrap();
                    let want = seq_loop(&mut seq, &mut b2, 10, tol, &mut o2);
                    assert_eq!(got, want, "{dims:?} rank {rank} mode {mode} tol {tol}");
                    let same = |a: &[f64], b: &[f64]| {
                        a.len() == b.len()
                            && a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits())
                    };
                    assert!(
                        same(&b1, &b2),
                        "{dims:?} rank {rank} mode {mode} tol {tol}: B differs"
                    );
                    assert!(
                        same(&o1, &o2),
                        "{dims:?} rank {rank} mode {mode} tol {tol}: the last Φ differs"
                    );
                    if tol > 0.0 {
                        assert!(
                            got.evaluations < 10,
                            "mode {mode}: no early stop at tol {tol}"
                        );
                    }
                }
            }
        }
    }
);

twin!(
    /// CP-APR on one rank's distributed path (`sptmc::dist`, the process its own
    /// communicator) against the single process on the same engine: the CPU (f64 Φ
    /// sessions) bit for bit; CUDA (Φ per call in f32, on every rank when spread, whose
    /// reductions add in an order that varies between runs) every iteration's
    /// log-likelihood within the 1e-6 relative that runs across ranks must meet.
    cp_apr_on_one_rank_is_the_single_process,
    |engine| {
        use sptmc::dist::{comm::Channel, exchange::distribute, partition::Scheme};
        let x = counts(&GenSpec {
            dims: vec![40, 30, 20],
            nnz: 3000,
            pattern: Pattern::Uniform,
            seed: 5,
        });
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.tns");
        sptmc::tensor::tns::write(&p, &x).unwrap();
        let opts = sptmc::decomp::CpAprOptions {
            rank: 3,
            max_iters: 8,
            tol: 0.0,
            seed: 4,
            ..Default::default()
        };
        let w = Workload {
            op: Op::Mttkrp,
            rank: 3,
        };
        let prepared = engine.prepare(&x, &[w]).unwrap();
        let want = sptmc::decomp::cp_apr(engine, &prepared, &opts).unwrap();
        let ch = Channel::single();
        let share = sptmc::dist::read::read_share(&ch, &p).unwrap();
        let mut block = distribute(&ch, share, Scheme::Medium, &p, None).unwrap();
        let got = sptmc::dist::cp_apr::cp_apr(&ch, engine, &mut block, &opts, &mut |_| {})
            .unwrap()
            .expect("a run on every row is never redone");
        let (a, b) = (got.model.log_likelihoods(), want.log_likelihoods());
        assert_eq!(a.len(), b.len());
        if engine.kind() == sptmc::engine::BackendKind::Cpu {
            assert_eq!(a, b);
        }
        for (k, (a, b)) in a.iter().zip(&b).enumerate() {
            assert!(
                a.is_finite() && (a - b).abs() <= 1e-6 * b.abs(),
                "iteration {k}: {a} on one rank, {b} alone"
            );
        }
    }
);
