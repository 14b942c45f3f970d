//! The completion solvers end to end (CPU): held-out entries of synthetic low-rank
//! tensors, with and without noise; explicit zeros as observed values; awkward input;
//! MovieLens-100k from the shared data (skipped visibly without it).

use crate::common;

use rand::{Rng, SeedableRng};
use sptmc::decomp::completion::{Baselines, Split, split};
use sptmc::decomp::{CompletionOptions, Solver, complete};
use sptmc::engine::{Engine, Prepared, Workload};
use sptmc::{CooTensor, Error, Matrix, Op};

/// A rank-`rank` tensor with factors uniform in [−1, 1) and about `share` of its cells
/// observed, plus Gaussian noise of standard deviation `sigma`, split 80/10/10.
fn low_rank(
    dims: &[usize],
    rank: usize,
    share: f64,
    sigma: f64,
    seed: u64,
) -> (Split, Vec<Matrix<f64>>) {
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(seed);
    let truth: Vec<Matrix<f64>> = dims
        .iter()
        .map(|&d| Matrix::from_fn(d, rank, |_, _| rng.random::<f64>() * 2.0 - 1.0))
        .collect();
    let cells: usize = dims.iter().product();
    let mut entries = Vec::new();
    for cell in 0..cells {
        if rng.random::<f64>() >= share {
            continue;
        }
        let mut c = vec![0u32; dims.len()];
        let mut rest = cell;
        for (m, &d) in dims.iter().enumerate().rev() {
            c[m] = (rest % d) as u32;
            rest /= d;
        }
        let v: f64 = (0..rank)
            .map(|r| {
                c.iter()
                    .enumerate()
                    .map(|(m, &i)| truth[m].get(i as usize, r))
                    .product::<f64>()
            })
            .sum();
        // Box–Muller.
        let (u1, u2): (f64, f64) = (rng.random::<f64>().max(1e-300), rng.random());
        let noise = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
        entries.push((c, v + sigma * noise));
    }
    let x = CooTensor::from_entries(dims.to_vec(), entries).unwrap();
    (split(&x, [0.8, 0.1, 0.1], seed).unwrap(), truth)
}

fn prepare(engine: &Engine, x: &CooTensor, rank: usize) -> Prepared {
    engine
        .prepare(
            x,
            &[Workload {
                op: Op::Completion,
                rank,
            }],
        )
        .unwrap()
}

/// Every tenth epoch's validation RMSE, for failure messages.
fn trace(m: &sptmc::decomp::CompletionModel) -> Vec<String> {
    m.epochs
        .iter()
        .step_by(10)
        .map(|e| format!("{}:{:.3e}", e.epoch, e.validation_rmse))
        .collect()
}

fn options(solver: Solver, rank: usize, lambda: f64, seed: u64) -> CompletionOptions {
    CompletionOptions {
        rank,
        solver,
        lambda: Some(lambda),
        max_epochs: 400,
        patience: 10,
        seed,
        learning_rate: Some(0.02),
        ccd_inner: 3,
        init: None,
        // The truth is a pure rank-`rank` CP tensor.
        center: false,
        biases: false,
        bias_lambda: 5.0,
    }
}

#[test]
fn every_solver_predicts_held_out_entries_to_the_noise_level() {
    let seed = common::fresh_seed("completion solvers with noise");
    let sigma = 0.05;
    // About 16,000 training entries for 550 parameters: the estimation error adds a few
    // percent to σ.
    let (s, _) = low_rank(&[40, 36, 34], 3, 0.4, sigma, seed);
    let engine = Engine::cpu();
    // The model has two components more than the truth: a rank-3 fit of a rank-3
    // tensor has spurious local minima that SGD and CCD++ sometimes stop in (one
    // component lost, RMSE about 0.15 here); the spare components remove them.
    let p = prepare(&engine, &s.train, 5);
    for solver in [Solver::Als, Solver::Ccd, Solver::Sgd] {
        // SGD crosses plateaus of tens of epochs on its way down.
        let o = CompletionOptions {
            max_epochs: 2000,
            patience: 50,
            ..options(solver, 5, 0.05, seed)
        };
        let m = complete(&engine, &p, &s.validation, &o).unwrap();
        let rmse = m.rmse(&s.test).unwrap().unwrap();
        eprintln!(
            "{solver}: test RMSE {rmse:.5} (σ {sigma}), {} epochs",
            m.epochs.len()
        );
        assert!(
            (rmse - sigma).abs() <= 0.1 * sigma,
            "{solver}: test RMSE {rmse} is not within 10 % of σ = {sigma}; validation {:?}",
            trace(&m)
        );
        let best = m.best().unwrap();
        assert!(
            m.epochs
                .iter()
                .all(|e| e.validation_rmse >= best.validation_rmse)
        );
    }
}

#[test]
fn every_solver_recovers_a_noise_free_tensor_to_1e_3() {
    let seed = common::fresh_seed("completion solvers without noise");
    let (s, _) = low_rank(&[30, 28, 26], 3, 0.4, 0.0, seed);
    let engine = Engine::cpu();
    // Two spare components, as for the noisy tensor.
    let p = prepare(&engine, &s.train, 5);
    for solver in [Solver::Als, Solver::Ccd, Solver::Sgd] {
        let mut o = options(solver, 5, 1e-4, seed);
        o.max_epochs = 3000;
        o.patience = 100;
        let mut m = complete(&engine, &p, &s.validation, &o).unwrap();
        // SGD shrinks a direction the training entries do not see at only `η λ` per
        // epoch (about 1e-5 here: 3000 epochs remove 3 %), where ALS and CCD++ remove it
        // in one exact solve. A spare component that settles there (as one did for
        // seed 1795586983550345176: training RMSE 8e-6, validation 1.1e-2, three
        // held-out entries off) stays; at rank 3 instead, SGD sometimes stops with a
        // component lost (about 1 seed in 150). What a user does then is start again
        // from another seed and keep the better validation RMSE; so does this test,
        // choosing on validation entries only.
        if solver == Solver::Sgd && m.best().unwrap().validation_rmse > 1e-3 {
            o.seed = seed ^ 0x5eed;
            let again = complete(&engine, &p, &s.validation, &o).unwrap();
            eprintln!(
                "sgd: validation RMSE {:.2e}; second start {:.2e}",
                m.best().unwrap().validation_rmse,
                again.best().unwrap().validation_rmse
            );
            if again.best().unwrap().validation_rmse < m.best().unwrap().validation_rmse {
                m = again;
            }
        }
        let rmse = m.rmse(&s.test).unwrap().unwrap();
        eprintln!(
            "{solver}: test RMSE {rmse:.2e}, {} epochs, best {:?}",
            m.epochs.len(),
            m.best()
        );
        assert!(
            rmse <= 1e-3,
            "{solver}: test RMSE {rmse} > 1e-3 without noise; validation {:?}",
            trace(&m)
        );
    }
}

#[test]
fn an_explicit_zero_is_an_observed_value() {
    // Every entry of row 0 of mode 0 is an explicit 0; all others are 1 + small
    // structure. Treated as missing, row 0 would predict the mean (about 0.9).
    let dims = [20usize, 18, 16];
    let mut entries = Vec::new();
    for i in 0..20u32 {
        for j in 0..18u32 {
            for k in 0..16u32 {
                if (i * 7 + j * 5 + k * 3) % 3 == 0 {
                    let v = if i == 0 {
                        0.0
                    } else {
                        1.0 + 0.01 * f64::from(j)
                    };
                    entries.push(([i, j, k], v));
                }
            }
        }
    }
    let x = CooTensor::from_entries(dims.to_vec(), entries).unwrap();
    let s = split(&x, [0.8, 0.1, 0.1], 5).unwrap();
    let engine = Engine::cpu();
    let p = prepare(&engine, &s.train, 2);
    assert_eq!(p.nnz(), s.train.nnz(), "every zero is stored");
    let zeros_in_test: Vec<usize> = (0..s.test.nnz())
        .filter(|&e| s.test.indices(0)[e] == 0)
        .collect();
    assert!(
        !zeros_in_test.is_empty(),
        "the test set holds some zeros of row 0"
    );
    let m = complete(
        &engine,
        &p,
        &s.validation,
        // Centered: a row of missing entries would predict the mean, far from 0.
        &CompletionOptions {
            center: true,
            ..options(Solver::Als, 2, 1e-3, 5)
        },
    )
    .unwrap();
    assert!(m.offset > 0.5, "mean {}", m.offset);
    for e in zeros_in_test {
        let c = s.test.coords(e);
        let v = m.predict(&c).unwrap();
        assert!(
            v.abs() < 0.05,
            "entry {c:?} (an observed-zero row) predicts {v}"
        );
    }
}

#[test]
fn bad_options_are_refused_by_name() {
    let (s, _) = low_rank(&[12, 10, 8], 2, 0.5, 0.0, 3);
    let engine = Engine::cpu();
    let p = prepare(&engine, &s.train, 2);
    let base = options(Solver::Sgd, 2, 0.1, 1);
    let cases: Vec<(CompletionOptions, &str)> = vec![
        (
            CompletionOptions {
                lambda: Some(-0.5),
                ..base.clone()
            },
            "λ",
        ),
        (
            CompletionOptions {
                lambda: Some(f64::NAN),
                ..base.clone()
            },
            "λ",
        ),
        (
            CompletionOptions {
                learning_rate: Some(0.0),
                ..base.clone()
            },
            "learning rate",
        ),
        (
            CompletionOptions {
                learning_rate: Some(-1.0),
                ..base.clone()
            },
            "learning rate",
        ),
        (
            CompletionOptions {
                max_epochs: 0,
                ..base.clone()
            },
            "max_epochs",
        ),
        (
            CompletionOptions {
                patience: 0,
                ..base.clone()
            },
            "patience",
        ),
    ];
    for (o, word) in cases {
        match complete(&engine, &p, &s.validation, &o) {
            Err(Error::InvalidOption(msg)) => assert!(msg.contains(word), "{msg}"),
            other => panic!("{word}: {other:?}"),
        }
    }
    let zero_rank = CompletionOptions {
        rank: 0,
        ..base.clone()
    };
    assert!(matches!(
        complete(&engine, &p, &s.validation, &zero_rank),
        Err(Error::InvalidRank(_))
    ));
    let empty = CooTensor::new(s.train.dims().to_vec(), vec![Vec::new(); 3], Vec::new()).unwrap();
    match complete(&engine, &p, &empty, &base) {
        Err(Error::InvalidOption(msg)) => assert!(msg.contains("validation set is empty"), "{msg}"),
        other => panic!("empty validation: {other:?}"),
    }
    assert!(matches!(
        split(&s.train, [0.0, 0.5, 0.5], 1),
        Err(Error::InvalidOption(_))
    ));
    assert!(matches!(
        split(&s.train, [0.8, 0.1, 0.2], 1),
        Err(Error::InvalidOption(_))
    ));
    assert!(matches!(
        split(&s.train, [1.2, -0.1, -0.1], 1),
        Err(Error::InvalidOption(_))
    ));
}

#[test]
fn rows_without_training_entries_predict_the_mean_and_nothing_is_nan() {
    let (s, _) = low_rank(&[16, 14, 12], 2, 0.5, 0.01, 9);
    // Move every entry of row 3 of mode 1 from training to test.
    let keep: Vec<usize> = (0..s.train.nnz())
        .filter(|&e| s.train.indices(1)[e] != 3)
        .collect();
    let moved: Vec<usize> = (0..s.train.nnz())
        .filter(|&e| s.train.indices(1)[e] == 3)
        .collect();
    assert!(!moved.is_empty());
    let pick = |x: &CooTensor, sel: &[usize]| {
        CooTensor::from_entries(
            x.dims().to_vec(),
            sel.iter().map(|&e| (x.coords(e), x.values()[e])),
        )
        .unwrap()
    };
    let train = pick(&s.train, &keep);
    let test = pick(&s.train, &moved);
    let engine = Engine::cpu();
    let p = prepare(&engine, &train, 2);
    for solver in [Solver::Als, Solver::Ccd, Solver::Sgd] {
        for lambda in [0.0, 0.1] {
            let o = CompletionOptions {
                center: true,
                ..options(solver, 2, lambda, 2)
            };
            let m = complete(&engine, &p, &s.validation, &o).unwrap();
            assert!(m.offset != 0.0);
            assert_eq!(m.empty_rows[1], 1, "{solver}");
            assert!(m.factors[1].row(3).iter().all(|&v| v == 0.0), "{solver}");
            for e in 0..test.nnz() {
                let v = m.predict(&test.coords(e)).unwrap();
                assert!(
                    (v - m.offset).abs() < 1e-12,
                    "{solver} λ {lambda}: {v} vs {}",
                    m.offset
                );
            }
            let r = m.rmse(&s.test).unwrap().unwrap();
            assert!(r.is_finite(), "{solver} λ {lambda}: {r}");
        }
    }
}

#[test]
fn the_split_is_deterministic_and_partitions_the_entries() {
    let (s, _) = low_rank(&[10, 9, 8], 2, 0.6, 0.0, 4);
    let x = &s.train;
    let a = split(x, [0.5, 0.25, 0.25], 11).unwrap();
    let b = split(x, [0.5, 0.25, 0.25], 11).unwrap();
    let c = split(x, [0.5, 0.25, 0.25], 12).unwrap();
    assert_eq!(a, b);
    assert_ne!(a.train, c.train);
    assert_eq!(a.train.nnz() + a.validation.nnz() + a.test.nnz(), x.nnz());
    let mut all: Vec<(Vec<u32>, u64)> = [&a.train, &a.validation, &a.test]
        .iter()
        .flat_map(|t| (0..t.nnz()).map(|e| (t.coords(e), t.values()[e].to_bits())))
        .collect();
    let mut want: Vec<(Vec<u32>, u64)> = (0..x.nnz())
        .map(|e| (x.coords(e), x.values()[e].to_bits()))
        .collect();
    all.sort();
    want.sort();
    assert_eq!(all, want);
}

#[test]
fn the_bias_baseline_beats_the_mean_on_biased_data() {
    // x = 3 + u_i + v_j: the bias baseline fits it up to its shrinkage.
    let mut entries = Vec::new();
    for i in 0..40u32 {
        for j in 0..30u32 {
            if (i + 2 * j) % 3 != 0 {
                entries.push((
                    [i, j, 0],
                    3.0 + f64::from(i % 5) * 0.3 - f64::from(j % 4) * 0.2,
                ));
            }
        }
    }
    let x = CooTensor::from_entries(vec![40, 30, 1], entries).unwrap();
    let s = split(&x, [0.8, 0.1, 0.1], 3).unwrap();
    let b = Baselines::fit(&s.train).unwrap();
    let (mean, bias) = (b.mean_rmse(&s.test).unwrap(), b.bias_rmse(&s.test).unwrap());
    assert!(bias < 0.5 * mean, "bias {bias} vs mean {mean}");
}

#[test]
fn movielens_100k_every_solver_stays_below_1_0() {
    let Some(path) = common::shared_file("movielens-100k.tns.gz") else {
        return;
    };
    let (x, _) = sptmc::tensor::tns::read(&path).unwrap();
    let s = split(&x, [0.8, 0.1, 0.1], 1).unwrap();
    let b = Baselines::fit(&s.train).unwrap();
    let bias = b.bias_rmse(&s.test).unwrap();
    let engine = Engine::cpu();
    let p = prepare(&engine, &s.train, 16);
    for (solver, lambda) in [
        (Solver::Als, 15.0),
        (Solver::Ccd, 15.0),
        (Solver::Sgd, 10.0),
    ] {
        let o = CompletionOptions {
            rank: 16,
            solver,
            lambda: Some(lambda),
            max_epochs: 100,
            patience: 5,
            seed: 1,
            learning_rate: Some(0.05),
            ccd_inner: 1,
            init: None,
            center: true,
            biases: false,
            bias_lambda: 5.0,
        };
        let m = complete(&engine, &p, &s.validation, &o).unwrap();
        let rmse = m.rmse(&s.test).unwrap().unwrap();
        eprintln!("movielens-100k {solver}: test RMSE {rmse:.4} (bias baseline {bias:.4})");
        assert!(rmse < 1.0, "{solver}: test RMSE {rmse}");
        assert!(rmse.is_finite());
    }
}

#[test]
fn every_solver_is_deterministic_for_a_seed_and_thread_count() {
    let (s, _) = low_rank(&[40, 36, 34], 3, 0.3, 0.05, 21);
    let engine = Engine::cpu();
    let p = prepare(&engine, &s.train, 3);
    for solver in [Solver::Als, Solver::Ccd, Solver::Sgd] {
        let mut o = options(solver, 3, 0.05, 8);
        o.max_epochs = 8;
        let a = complete(&engine, &p, &s.validation, &o).unwrap();
        let b = complete(&engine, &p, &s.validation, &o).unwrap();
        assert_eq!(a.factors, b.factors, "{solver}");
        let trace = |m: &sptmc::decomp::CompletionModel| -> Vec<(f64, f64)> {
            m.epochs
                .iter()
                .map(|e| (e.train_rmse, e.validation_rmse))
                .collect()
        };
        assert_eq!(trace(&a), trace(&b), "{solver}");
        o.seed = 9;
        let c = complete(&engine, &p, &s.validation, &o).unwrap();
        assert_ne!(a.factors, c.factors, "{solver}: the seed changes the start");
    }
}

#[test]
fn als_without_regularization_solves_short_rows_by_the_pseudo_inverse() {
    // λ = 0 and rows with fewer training entries than the rank: those rows' systems
    // are singular and take the pseudo-inverse (counted), the rest Cholesky; ranks 8
    // (solved four rows at a time) and 5 (one at a time). Nothing is NaN.
    let (s, _) = low_rank(&[30, 25, 6], 2, 0.08, 0.01, 31);
    let engine = Engine::cpu();
    for rank in [8, 5] {
        let p = prepare(&engine, &s.train, rank);
        let o = CompletionOptions {
            max_epochs: 3,
            ..options(Solver::Als, rank, 0.0, 7)
        };
        let m = complete(&engine, &p, &s.validation, &o).unwrap();
        assert!(m.pinv_solves > 0, "rank {rank}: no pseudo-inverse solve");
        let solves: usize = (0..3).map(|n| s.train.dims()[n] - m.empty_rows[n]).sum();
        assert!(
            m.pinv_solves < solves * 3,
            "rank {rank}: every solve singular"
        );
        for f in &m.factors {
            assert!(f.data().iter().all(|v| v.is_finite()), "rank {rank}");
        }
        let r = m.rmse(&s.test).unwrap().unwrap();
        assert!(r.is_finite(), "rank {rank}: {r}");
    }
}

/// Near an exact fit, ALS's train RMSE is the model's over the training entries: the
/// loss from the last mode's normal equations (`Σ y² − 2aᵀb + aᵀGa`) cancels to its
/// rounding there and is taken from the entries instead (it was reported as 0, or as
/// a thousand times the truth; here the formula is off by tens of percent). The
/// reported value comes from f32: each value is stored with an error ≤ ε_f32 |x| / 2
/// and each model value (R + 3 biases and offsets, terms of magnitude ≤ 1) is off by
/// ≤ (R + 4) ε_f32 ≈ 4e-7, so the two RMSEs differ by ≤ 5e-7, under 2 % of the noise's
/// 3e-5: agreement within 5 % with the f64 recomputation.
#[test]
fn als_reports_the_train_rmse_of_a_near_exact_fit() {
    let seed = common::fresh_seed("completion ALS train RMSE near an exact fit");
    let engine = Engine::cpu();
    // Rank-2 ALS from a random start can stall far from the exact fit (seed
    // 1796028554685562013: train RMSE 0.19 after 200 epochs); what is checked is the
    // report of a near-exact fit, so the first of a few draws that reaches one is used.
    for draw in seed..seed + 5 {
        let (s, _) = low_rank(&[30, 24, 20], 2, 0.4, 3e-5, draw);
        let p = prepare(&engine, &s.train, 2 + 3);
        let o = CompletionOptions {
            max_epochs: 200,
            patience: 10,
            center: true,
            biases: true,
            ..options(Solver::Als, 2, 1e-7, draw)
        };
        let m = complete(&engine, &p, &s.validation, &o).unwrap();
        let best = &m.epochs[m.best_epoch];
        let want = m.rmse(&s.train).unwrap().unwrap();
        if want >= 1e-3 {
            eprintln!("seed {draw}: not near exact (train RMSE {want:e}); the next draw");
            continue;
        }
        assert!(
            (best.train_rmse - want).abs() <= 0.05 * want,
            "seed {draw}: reported train RMSE {:e}, the model's {want:e}",
            best.train_rmse
        );
        return;
    }
    panic!("no near-exact fit in five draws from seed {seed}");
}
