//! The completion kernels against their FP64 references, on both backends (CUDA twins
//! skip visibly without a device): ALS normal equations, CCD++ residual and column
//! terms, SGD steps and the loss, on tensors with dense tiles, a sparse part or both,
//! of orders 3 and 4.

use crate::common;

use common::twin;
use sptmc::accuracy::{SMAPE_TARGET_PERCENT, compare_slices};
use sptmc::engine::{BackendKind, CpuOptions, CpuVectors, Engine, Prepared, SgdStep};
use sptmc::reference::completion as reference;
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::{CooTensor, Error, Matrix, Op};

/// The tensor as the session sees it: its nonzeros in the session's order, with the
/// values as stored.
fn in_session_order(p: &Prepared) -> CooTensor {
    let hls = p.hls(Op::Completion).unwrap();
    let mut entries = Vec::with_capacity(hls.nnz());
    hls.for_each_nonzero(|c, v| entries.push((c.to_vec(), v)));
    CooTensor::from_entries(hls.dims().to_vec(), entries).unwrap()
}

/// Whether `engine` has completion kernels. Both backends have them
/// (`kernels/completion.cu` on CUDA), so this holds wherever a twin gets an engine: the
/// CUDA twin skips visibly only when no device is usable ([`common::cuda_engine`]), and
/// fails under `SPTMC_REQUIRE_GPU=1`. A backend that answers `Unsupported` skips the
/// same way, and fails under `SPTMC_REQUIRE_GPU=1` too.
fn has_completion_kernels(engine: &Engine) -> bool {
    let x = CooTensor::from_entries(vec![2, 2, 2], [([0u32, 0, 0], 1.0)]).unwrap();
    let p = engine
        .prepare_with_thresholds(&x, &[(Op::Completion, 78)])
        .unwrap();
    let f = Matrix::random_factors(x.dims(), &[1; 3], 1);
    match engine.completion_session(&p, &f, 0.0) {
        Err(Error::Unsupported(why)) => {
            common::skip::<()>("SPTMC_REQUIRE_GPU", &why);
            false
        }
        _ => true,
    }
}

fn wide(f: &[Matrix]) -> Vec<Matrix<f64>> {
    f.iter().map(Matrix::to_f64).collect()
}

/// Every row of a mode of `len` rows, as the ALS kernels take rows.
fn all_rows(len: usize) -> Vec<u32> {
    (0..len).map(|i| i as u32).collect()
}

/// The rows `rows` of `m`, in that order.
fn pick_rows(m: &Matrix<f64>, rows: &[u32]) -> Matrix<f64> {
    Matrix::from_fn(rows.len(), m.cols(), |k, c| m.get(rows[k] as usize, c))
}

fn assert_close(what: &str, want: &[f64], got: &[f32]) {
    let acc = compare_slices(want, got).unwrap();
    assert!(acc.smape_percent <= SMAPE_TARGET_PERCENT, "{what}: {acc:?}");
}

/// Tensors of every regime: dense tiles and a sparse part (3rd order, low threshold),
/// all sparse (3rd order, no tile dense), order 4 (sparse only).
fn cases(engine: &Engine, seed: u64) -> Vec<(String, Prepared)> {
    let specs = [
        (
            vec![40, 50, 30],
            6000,
            Pattern::BlockDense {
                tile_nnz: 200,
                dense_share: 0.6,
            },
            16,
        ),
        (vec![37, 45, 29], 3000, Pattern::Uniform, u32::MAX),
        (
            vec![20, 13, 9, 7],
            2500,
            Pattern::PowerLaw { alpha: 0.8 },
            16,
        ),
    ];
    specs
        .into_iter()
        .enumerate()
        .map(|(k, (dims, nnz, pattern, t))| {
            let x = generate(&GenSpec {
                dims: dims.clone(),
                nnz,
                pattern,
                seed: seed.wrapping_add(k as u64),
            })
            .unwrap();
            let p = engine
                .prepare_with_thresholds(&x, &[(Op::Completion, t)])
                .unwrap();
            (format!("{dims:?} T={t}"), p)
        })
        .collect()
}

twin!(
    normal_equations_residual_column_terms_and_loss_match_fp64,
    |engine| {
        if !has_completion_kernels(engine) {
            return;
        }
        let seed = common::fresh_seed("completion kernels");
        for (what, p) in cases(engine, seed) {
            let x = in_session_order(&p);
            if what.contains("T=16") && x.order() == 3 {
                let d = p
                    .hls(Op::Completion)
                    .unwrap()
                    .dense()
                    .map_or(0, |d| d.len());
                assert!(d > 0, "{what}: no dense tiles to test");
            }
            let rank = 12;
            let f = Matrix::random_factors(x.dims(), &vec![rank; x.order()], seed);
            let fw = wide(&f);
            let offset = 0.25f32;
            let mut s = engine.completion_session(&p, &f, offset).unwrap();
            assert_eq!(s.rank(), rank);
            let mut out = Matrix::zeros(1, 1);
            for mode in 0..x.order() {
                s.normal_equations(mode, &all_rows(x.dims()[mode]), &mut out)
                    .unwrap();
                let want = reference::normal_equations(&x, mode, &fw, offset.into()).unwrap();
                assert_eq!(out.shape(), want.shape());
                assert_close(
                    &format!("{what}: normal equations of mode {mode}"),
                    want.data(),
                    out.data(),
                );
                // Rows asked for in two lists, every third row left out: each list's
                // systems are those rows' of the whole mode.
                let picked: Vec<u32> = all_rows(x.dims()[mode])
                    .into_iter()
                    .filter(|i| i % 3 != 1)
                    .collect();
                let (head, tail) = picked.split_at(picked.len() / 2);
                for rows in [head, tail] {
                    s.normal_equations(mode, rows, &mut out).unwrap();
                    assert_close(
                        &format!(
                            "{what}: normal equations of {} rows of mode {mode}",
                            rows.len()
                        ),
                        pick_rows(&want, rows).data(),
                        out.data(),
                    );
                }
            }
            let loss = s.loss().unwrap();
            let want_loss = reference::loss(&x, &fw, offset.into()).unwrap();
            assert!(
                (loss - want_loss).abs() <= 1e-4 * want_loss,
                "{what}: loss {loss} vs {want_loss}"
            );
            s.reset_residual().unwrap();
            let mut res = reference::residual(&x, &fw, offset.into()).unwrap();
            assert_close(&format!("{what}: residual"), &res, &s.residual().unwrap());
            // Take column 3 out, then the terms of every mode, then put it back.
            s.add_column(3, 1.0).unwrap();
            let mut col = vec![0f64; x.nnz()];
            for (e, c) in col.iter_mut().enumerate() {
                *c = (0..x.order())
                    .map(|m| fw[m].get(x.indices(m)[e] as usize, 3))
                    .product();
            }
            for (r, c) in res.iter_mut().zip(&col) {
                *r += c;
            }
            assert_close(
                &format!("{what}: residual + column 3"),
                &res,
                &s.residual().unwrap(),
            );
            for mode in 0..x.order() {
                s.column_terms(mode, 3, &mut out).unwrap();
                let want = reference::column_terms(&x, &res, mode, 3, &fw).unwrap();
                assert_close(
                    &format!("{what}: column terms of mode {mode}"),
                    want.data(),
                    out.data(),
                );
            }
            s.add_column(3, -1.0).unwrap();
            let res = reference::residual(&x, &fw, offset.into()).unwrap();
            assert_close(
                &format!("{what}: residual after the column"),
                &res,
                &s.residual().unwrap(),
            );
            // A new factor and a new column reach the kernels.
            let g = Matrix::random(x.dims()[1], rank, seed ^ 77);
            s.set_factor(1, &g).unwrap();
            let newcol: Vec<f32> = (0..x.dims()[0]).map(|i| 0.5 + i as f32 / 100.0).collect();
            s.set_column(0, 5, &newcol).unwrap();
            let mut fw = fw;
            fw[1] = g.to_f64();
            for (i, &v) in newcol.iter().enumerate() {
                fw[0].set(i, 5, v.into());
            }
            let now = s.factors().unwrap();
            assert_eq!(
                wide(&now),
                fw,
                "{what}: factors after set_factor and set_column"
            );
            let loss = s.loss().unwrap();
            let want_loss = reference::loss(&x, &fw, offset.into()).unwrap();
            assert!(
                (loss - want_loss).abs() <= 1e-4 * want_loss,
                "{what}: loss {loss} vs {want_loss}"
            );
        }
    }
);

twin!(
    normal_equations_and_loss_of_every_rank_kernel_and_order_match_fp64,
    |engine| {
        if !has_completion_kernels(engine) {
            return;
        }
        // The CPU builds each row's system with a kernel per width (8 to 64 in steps
        // of 8, ranks between them zero-padded up, each width's Gram in its own row
        // blocks; above 64, unblocked) and sums the loss over rows once the rows are grouped: every one of
        // them, orders 1 to 5, a row with no nonzeros, rows with more than one chunk.
        let seed = common::fresh_seed("completion ranks");
        let shapes: [&[usize]; 5] = [
            &[70],
            &[60, 9],
            &[33, 20, 6],
            &[9, 8, 7, 6],
            &[6, 5, 4, 4, 3],
        ];
        for (k, dims) in shapes.iter().enumerate() {
            let x = generate(&GenSpec {
                dims: dims.to_vec(),
                nnz: 400.min(dims.iter().product::<usize>() / 2),
                pattern: Pattern::PowerLaw { alpha: 0.7 },
                seed: seed.wrapping_add(k as u64),
            })
            .unwrap();
            let p = engine
                .prepare_with_thresholds(&x, &[(Op::Completion, u32::MAX)])
                .unwrap();
            let x = in_session_order(&p);
            for rank in [8, 16, 32, 64, 5, 19, 24, 36, 45, 70] {
                let what = format!("{dims:?} rank {rank}");
                let mut f = Matrix::random_factors(x.dims(), &vec![rank; x.order()], seed ^ 5);
                // Row 0 of mode 0 is never hit by a nonzero at index 0 for long modes
                // after this shift; factors of mixed sign and size.
                for v in f[0].data_mut() {
                    *v = 2.0 * *v - 0.7;
                }
                let fw = wide(&f);
                let offset = -0.5f32;
                let mut s = engine.completion_session(&p, &f, offset).unwrap();
                let want_loss = reference::loss(&x, &fw, offset.into()).unwrap();
                let before = s.loss().unwrap();
                let mut out = Matrix::zeros(1, 1);
                for mode in 0..x.order() {
                    s.normal_equations(mode, &all_rows(x.dims()[mode]), &mut out)
                        .unwrap();
                    let want = reference::normal_equations(&x, mode, &fw, offset.into()).unwrap();
                    assert_eq!(out.shape(), want.shape(), "{what}");
                    assert_close(
                        &format!("{what}: normal equations of mode {mode}"),
                        want.data(),
                        out.data(),
                    );
                }
                let after = s.loss().unwrap();
                for loss in [before, after] {
                    assert!(
                        (loss - want_loss).abs() <= 1e-5 * want_loss,
                        "{what}: loss {loss} vs {want_loss}"
                    );
                }
            }
        }
    }
);

twin!(
    bias_normal_equations_of_every_rank_kernel_and_order_match_fp64,
    |engine| {
        if !has_completion_kernels(engine) {
            return;
        }
        // The CPU builds the systems on AVX-512 where the CPU has it, else on AVX2:
        // both are checked (on a CPU without AVX-512 the first engine runs AVX2 too).
        let avx2;
        let mut engines = vec![engine];
        if engine.kind() == BackendKind::Cpu {
            avx2 = Engine::cpu_with(CpuOptions {
                vectors: CpuVectors::Avx2,
                ..CpuOptions::default()
            })
            .unwrap();
            engines.push(&avx2);
        }
        for engine in engines {
            // The bias layout (CP columns, then one bias column per mode: the mode's own
            // bias there, 1 in every other mode): the CPU builds the `rank + 1` system at
            // the CP rank's width (every blocked width; above 64 from the full system),
            // CUDA reduces the full one; both against the FP64 reduction, orders 2 to 5,
            // a row without nonzeros and rows of more than one chunk.
            let seed = common::fresh_seed("completion bias layout");
            let shapes: [&[usize]; 4] = [&[60, 9], &[33, 20, 6], &[9, 8, 7, 6], &[6, 5, 4, 4, 3]];
            for (k, dims) in shapes.iter().enumerate() {
                let x = generate(&GenSpec {
                    dims: dims.to_vec(),
                    nnz: 400.min(dims.iter().product::<usize>() / 2),
                    pattern: Pattern::PowerLaw { alpha: 0.7 },
                    seed: seed.wrapping_add(k as u64),
                })
                .unwrap();
                let p = engine
                    .prepare_with_thresholds(&x, &[(Op::Completion, u32::MAX)])
                    .unwrap();
                let x = in_session_order(&p);
                let order = x.order();
                for rank in [1, 5, 8, 16, 19, 32, 36, 45, 60, 64, 70] {
                    let what = format!("{dims:?} rank {rank} + {order} biases");
                    let wide_rank = rank + order;
                    let mut f = Matrix::random_factors(x.dims(), &vec![wide_rank; order], seed ^ 9);
                    for (m, fm) in f.iter_mut().enumerate() {
                        for row in fm.data_mut().chunks_exact_mut(wide_rank) {
                            for (c, v) in row.iter_mut().enumerate() {
                                if c < rank {
                                    *v = 2.0 * *v - 0.7;
                                } else if c == rank + m {
                                    *v = 3.0 * *v - 1.5;
                                } else {
                                    *v = 1.0;
                                }
                            }
                        }
                    }
                    let fw = wide(&f);
                    let offset = 0.75f32;
                    let mut s = engine.completion_session(&p, &f, offset).unwrap();
                    let mut out = Matrix::zeros(1, 1);
                    let mut squares = vec![f64::NAN; 3];
                    for mode in 0..order {
                        let every = all_rows(x.dims()[mode]);
                        // Every row, then every other row from row 1.
                        let odd: Vec<u32> = every.iter().copied().filter(|i| i % 2 == 1).collect();
                        let want =
                            reference::bias_normal_equations(&x, mode, &fw, rank, offset.into())
                                .unwrap();
                        let want_squares =
                            reference::bias_target_squares(&x, mode, &fw, rank, offset.into())
                                .unwrap();
                        for rows in [&every[..], &odd[..]] {
                            s.bias_normal_equations(mode, rank, rows, &mut out, &mut squares)
                                .unwrap();
                            let what = format!("{what}: {} rows of mode {mode}", rows.len());
                            let want = pick_rows(&want, rows);
                            assert_eq!(out.shape(), want.shape(), "{what}");
                            assert_close(
                                &format!("{what}: bias normal equations"),
                                want.data(),
                                out.data(),
                            );
                            // The targets' squares: the CPU gives them at the blocked
                            // widths (up to a CP rank of 64); a backend that does not
                            // leaves them out.
                            if engine.kind() == BackendKind::Cpu && rank <= 64 {
                                let want: Vec<f64> =
                                    rows.iter().map(|&i| want_squares[i as usize]).collect();
                                let got: Vec<f32> = squares.iter().map(|&v| v as f32).collect();
                                assert_close(&format!("{what}: Σ y²"), &want, &got);
                            } else {
                                assert!(squares.is_empty(), "{what}: {} squares", squares.len());
                            }
                        }
                    }
                    // A layout without a bias column for the last mode is refused.
                    let err = s
                        .bias_normal_equations(
                            order - 1,
                            wide_rank - order + 1,
                            &all_rows(x.dims()[order - 1]),
                            &mut out,
                            &mut squares,
                        )
                        .unwrap_err();
                    assert!(matches!(err, Error::InvalidRank(_)), "{what}: {err}");
                }
            }
        }
    }
);

twin!(sgd_steps_on_disjoint_rows_match_fp64, |engine| {
    if !has_completion_kernels(engine) {
        return;
    }
    // Nonzeros on the diagonal touch disjoint rows of every mode: any visiting order
    // and any parallel scheme give the sequential reference's result.
    let n = 300u32;
    let x = CooTensor::from_entries(
        vec![n as usize; 3],
        (0..n).map(|i| ([i, i, i], 1.0 + f64::from(i % 7) / 4.0)),
    )
    .unwrap();
    let p = engine
        .prepare_with_thresholds(&x, &[(Op::Completion, 2)])
        .unwrap();
    let x = in_session_order(&p);
    let rank = 8;
    let f = Matrix::random_factors(x.dims(), &[rank; 3], 3);
    let mut s = engine.completion_session(&p, &f, 0.5).unwrap();
    let mut want = wide(&f);
    for epoch in 0..3 {
        let step = SgdStep {
            learning_rate: 0.05,
            lambda: 0.1,
            seed: epoch,
            shuffle: true,
            bias: None,
            anchors: Vec::new(),
        };
        s.sgd_epoch(&step).unwrap();
        reference::sgd_epoch(&x, &mut want, 0.5, 0.05, 0.1).unwrap();
    }
    for (m, (g, w)) in s.factors().unwrap().iter().zip(&want).enumerate() {
        assert_close(&format!("SGD factor of mode {m}"), w.data(), g.data());
    }
});

#[test]
fn cpu_sgd_with_one_worker_in_stored_order_matches_the_sequential_reference() {
    let x = generate(&GenSpec {
        dims: vec![30, 40, 20],
        nnz: 3000,
        pattern: Pattern::BlockDense {
            tile_nnz: 150,
            dense_share: 0.5,
        },
        seed: 4,
    })
    .unwrap();
    let pool = common::pool_of(1);
    pool.install(|| {
        let engine = Engine::cpu();
        let p = engine
            .prepare_with_thresholds(&x, &[(Op::Completion, 16)])
            .unwrap();
        assert!(
            p.hls(Op::Completion)
                .unwrap()
                .dense()
                .is_some_and(|d| !d.is_empty())
        );
        let x = in_session_order(&p);
        let f = Matrix::random_factors(x.dims(), &[6; 3], 9);
        let mut s = engine.completion_session(&p, &f, 0.1).unwrap();
        let mut want = wide(&f);
        let step = SgdStep {
            learning_rate: 0.02,
            lambda: 0.05,
            seed: 1,
            shuffle: false,
            bias: None,
            anchors: Vec::new(),
        };
        for _ in 0..2 {
            s.sgd_epoch(&step).unwrap();
            reference::sgd_epoch(&x, &mut want, 0.1, 0.02, 0.05).unwrap();
        }
        for (m, (g, w)) in s.factors().unwrap().iter().zip(&want).enumerate() {
            assert_close(&format!("SGD factor of mode {m}"), w.data(), g.data());
        }
    });
}

twin!(sessions_refuse_bad_arguments_with_typed_errors, |engine| {
    if !has_completion_kernels(engine) {
        return;
    }
    let x = generate(&GenSpec {
        dims: vec![10, 12, 8],
        nnz: 200,
        pattern: Pattern::Uniform,
        seed: 2,
    })
    .unwrap();
    let p = engine
        .prepare_with_thresholds(&x, &[(Op::Completion, 78)])
        .unwrap();
    let f = Matrix::random_factors(x.dims(), &[4; 3], 1);
    // Wrong shapes, rank 0, non-finite values, a tensor not prepared for completion.
    let mut bad = f.clone();
    bad[1] = Matrix::zeros(12, 5);
    assert!(matches!(
        engine.completion_session(&p, &bad, 0.0),
        Err(Error::Shape { .. })
    ));
    let zero = Matrix::random_factors(x.dims(), &[0; 3], 1);
    assert!(matches!(
        engine.completion_session(&p, &zero, 0.0),
        Err(Error::InvalidRank(_))
    ));
    let mut nan = f.clone();
    nan[2].set(3, 1, f32::NAN);
    assert!(matches!(
        engine.completion_session(&p, &nan, 0.0),
        Err(Error::NonFinite(_))
    ));
    assert!(matches!(
        engine.completion_session(&p, &f, f32::INFINITY),
        Err(Error::NonFinite(_))
    ));
    let q = engine
        .prepare_with_thresholds(&x, &[(Op::Mttkrp, 78)])
        .unwrap();
    assert!(matches!(
        engine.completion_session(&q, &f, 0.0),
        Err(Error::InvalidOption(_))
    ));
    assert!(matches!(
        engine.run(Op::Completion, &p, 0, &f),
        Err(Error::Unsupported(_))
    ));

    let mut s = engine.completion_session(&p, &f, 0.0).unwrap();
    let mut out = Matrix::zeros(1, 1);
    assert!(matches!(
        s.normal_equations(3, &[0], &mut out),
        Err(Error::ModeOutOfRange { .. })
    ));
    // Rows past the mode's end, repeated or descending are refused.
    let len = p.dims()[0] as u32;
    for rows in [&[len][..], &[1, 1], &[2, 1]] {
        assert!(
            matches!(
                s.normal_equations(0, rows, &mut out),
                Err(Error::InvalidOption(_))
            ),
            "rows {rows:?}"
        );
    }
    assert!(
        matches!(s.residual(), Err(Error::InvalidOption(_))),
        "no residual yet"
    );
    assert!(matches!(s.add_column(0, 1.0), Err(Error::InvalidOption(_))));
    s.reset_residual().unwrap();
    assert!(matches!(s.add_column(4, 1.0), Err(Error::InvalidOption(_))));
    assert!(matches!(
        s.column_terms(0, 4, &mut out),
        Err(Error::InvalidOption(_))
    ));
    assert!(matches!(
        s.set_column(0, 0, &[1.0; 3]),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        s.set_column(0, 0, &[f32::NAN; 10]),
        Err(Error::NonFinite(_))
    ));
    assert!(matches!(
        s.set_factor(0, &Matrix::zeros(10, 3)),
        Err(Error::Shape { .. })
    ));
    for (lr, lambda) in [
        (0.0, 0.1),
        (-1.0, 0.1),
        (f32::NAN, 0.1),
        (0.1, -0.5),
        (0.1, f32::INFINITY),
    ] {
        let step = SgdStep {
            learning_rate: lr,
            lambda,
            seed: 1,
            shuffle: true,
            bias: None,
            anchors: Vec::new(),
        };
        assert!(
            matches!(s.sgd_epoch(&step), Err(Error::InvalidOption(_))),
            "{lr} {lambda}"
        );
    }
    // A learning rate that blows up is an error naming the non-finite values, never NaN.
    let huge = SgdStep {
        learning_rate: 1e30,
        lambda: 0.0,
        seed: 1,
        shuffle: true,
        bias: None,
        anchors: Vec::new(),
    };
    let r = s.sgd_epoch(&huge).and_then(|_| s.loss());
    assert!(matches!(r, Err(Error::NonFinite(_))), "{r:?}");
});
