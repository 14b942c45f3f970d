//! CP-ALS and Tucker-HOOI end to end on both backends (each test body runs on the CPU
//! and, as its CUDA twin, on the GPU; see `common::twin`): exact low-rank tensors are
//! recovered; on a GPU, CP-ALS keeps its factors on the device (R × R matrices cross
//! the bus) and Tucker-HOOI moves one factor per step, not all of them.

use crate::common;

use common::twin;
use sptmc::decomp::{CpOptions, TuckerOptions, cp_als, tucker_hooi};
use sptmc::engine::{Call, Engine, FactorVersions, Workload};
use sptmc::{CooTensor, Matrix, Op};

/// A fully stored 3-way tensor (every cell a nonzero, so 16³ tiles are dense) of
/// multilinear rank `ranks`: a core with entries in 1..=3 times factors with entries in
/// 1..=2 (1..=4 with `cp`: less collinear components, which ALS separates faster), all
/// small integers, so fp16 holds every value exactly. With `cp` the core is
/// superdiagonal: a CP tensor of rank `ranks[0]`, returned with its CP factors (the
/// core's diagonal folded into the first).
fn low_rank(dims: [usize; 3], ranks: [usize; 3], seed: u64, cp: bool) -> (CooTensor, Vec<Matrix>) {
    let small = |rows, cols, top: f32, s| {
        Matrix::random(rows, cols, s).map(|u| 1.0 + (u * top).floor().min(top - 1.0))
    };
    let f: Vec<Matrix> = (0..3)
        .map(|m| {
            small(
                dims[m],
                ranks[m],
                if cp { 4.0 } else { 2.0 },
                seed + m as u64,
            )
        })
        .collect();
    let core = small(ranks[0], ranks[1] * ranks[2], 3.0, seed + 9);
    let mut entries = Vec::new();
    for i in 0..dims[0] {
        for j in 0..dims[1] {
            for k in 0..dims[2] {
                let mut v = 0.0f64;
                for a in 0..ranks[0] {
                    for b in 0..ranks[1] {
                        for c in 0..ranks[2] {
                            if cp && !(a == b && b == c) {
                                continue;
                            }
                            v += f64::from(core.get(a, b * ranks[2] + c))
                                * f64::from(f[0].get(i, a) * f[1].get(j, b) * f[2].get(k, c));
                        }
                    }
                }
                entries.push(([i as u32, j as u32, k as u32], v));
            }
        }
    }
    let mut cp_factors = f;
    if cp {
        cp_factors[0] = Matrix::from_fn(dims[0], ranks[0], |i, a| {
            cp_factors[0].get(i, a) * core.get(a, a * ranks[2] + a)
        });
    }
    (
        CooTensor::from_entries(dims.to_vec(), entries).unwrap(),
        cp_factors,
    )
}

const DIMS: [usize; 3] = [40, 36, 34];

twin!(
    cp_als_recovers_an_exact_rank_2_tensor_moving_no_factor_per_step,
    |engine| {
        let rank = 2;
        let (x, truth) = low_rank(DIMS, [rank; 3], 7, true);
        // ALS from a random start can creep through a swamp for hundreds of iterations
        // (with factor entries 1–2, 0.998 after 60 on the CPU); started from the true factors, each
        // entry off by up to ±10 %, it reaches the exact model, and what is left of the
        // fit is the backend's arithmetic.
        let init: Vec<Matrix> = truth
            .iter()
            .enumerate()
            .map(|(m, f)| {
                let noise = Matrix::random(f.rows(), rank, 0xabc + m as u64);
                Matrix::from_fn(f.rows(), rank, |i, r| {
                    f.get(i, r) * (0.9 + 0.2 * noise.get(i, r))
                })
            })
            .collect();
        let p = engine
            .prepare(
                &x,
                &[Workload {
                    op: Op::Mttkrp,
                    rank,
                }],
            )
            .unwrap();
        let opts = CpOptions {
            rank,
            max_iters: 60,
            tol: 0.0,
            init: Some(init),
            ..Default::default()
        };
        let model = cp_als(engine, &p, &opts).unwrap();
        let fit = *model.fits.last().unwrap();
        // A residual of relative size e (the backend's rounding) leaves a fit of 1 − e;
        // twice that is the tolerance the decompositions themselves use.
        let want = 1.0 - 2.0 * engine.backend().relative_error();
        assert!(
            fit > want,
            "{}: fit {fit} < {want}",
            engine.backend().describe()
        );
        let gpu = engine.kind() == sptmc::engine::BackendKind::Cuda;
        let factor_bytes: u64 = DIMS.iter().map(|&d| (d * rank * 4) as u64).sum();
        let r = rank as u64;
        for s in &model.iters {
            if gpu {
                // The factors stay on the device: per mode W (R × R) and the inverse
                // norms go up, the Gram, norms, inner products and a flag come back.
                let up = 3 * (r * r + r) * 8 + if s.iter == 0 { factor_bytes } else { 0 };
                assert_eq!(s.bytes_to_device, up, "iteration {}", s.iter);
                let down = 3 * ((r * r + 2 * r) * 8 + 4);
                assert_eq!(s.bytes_from_device, down, "iteration {}", s.iter);
            } else {
                assert_eq!((s.bytes_to_device, s.bytes_from_device), (0, 0));
            }
        }
    }
);

twin!(
    tucker_recovers_an_exact_multilinear_rank_moving_one_factor_per_step,
    |engine| {
        let ranks = [3, 2, 4];
        let x = low_rank(DIMS, ranks, 11, false).0;
        let p = engine
            .prepare(
                &x,
                &[Workload {
                    op: Op::Ttmc,
                    rank: 4,
                }],
            )
            .unwrap();
        let opts = TuckerOptions {
            ranks: ranks.to_vec(),
            max_iters: 10,
            tol: 0.0,
            ..Default::default()
        };
        let model = tucker_hooi(engine, &p, &opts).unwrap();
        let fit = *model.fits.last().unwrap();
        assert!(fit > 0.999, "{}: fit {fit}", engine.backend().describe());
        let gpu = engine.kind() == sptmc::engine::BackendKind::Cuda;
        let factor_bytes: u64 = (0..3).map(|m| (DIMS[m] * ranks[m] * 4) as u64).sum();
        let output_bytes: u64 = (0..3)
            .map(|n| {
                let cols: usize = (0..3).filter(|&m| m != n).map(|m| ranks[m]).product();
                (DIMS[n] * cols * 4) as u64
            })
            .sum();
        for s in &model.iters {
            if gpu {
                assert_eq!(s.bytes_from_device, output_bytes, "iteration {}", s.iter);
                if s.iter > 0 {
                    assert_eq!(s.bytes_to_device, factor_bytes, "iteration {}", s.iter);
                }
            } else {
                assert_eq!((s.bytes_to_device, s.bytes_from_device), (0, 0));
            }
        }
    }
);

/// The engine's byte counts call by call, with the caller's [`FactorVersions`]: a call
/// with unchanged factors uploads nothing, a factor marked changed is uploaded once, a
/// cloned set (a new set) once more, a call without versions everything it reads, and
/// every call copies its whole output back.
#[test]
fn cuda_calls_upload_only_changed_factors() {
    let Some(engine) = common::cuda_engine() else {
        return;
    };
    check_uploads(&engine);
}

/// The CPU twin of the check above: nothing is ever copied.
#[test]
fn cpu_calls_copy_nothing() {
    let engine = Engine::cpu();
    let x = low_rank([20, 18, 17], [2, 2, 2], 3, false).0;
    let p = engine
        .prepare_with_thresholds(&x, &[(Op::Mttkrp, 40)])
        .unwrap();
    let f = Matrix::random_factors(x.dims(), &[8; 3], 1);
    let mut out = Matrix::zeros(0, 0);
    let s = engine.run_into(Op::Mttkrp, &p, 0, &f, &mut out).unwrap();
    assert_eq!(
        (s.bytes_to_device, s.bytes_from_device, s.kernel_seconds),
        (0, 0, None)
    );
}

fn check_uploads(engine: &Engine) {
    let x = low_rank([20, 18, 17], [2, 2, 2], 3, false).0;
    let p = engine
        .prepare_with_thresholds(&x, &[(Op::Mttkrp, 40)])
        .unwrap();
    let r = 8;
    let mut f = Matrix::random_factors(x.dims(), &[r; 3], 1);
    let mut versions = engine.factor_versions(3);
    let bytes = |m: usize| (x.dims()[m] * r * 4) as u64;
    let mut out = Matrix::zeros(0, 0);
    let run = |mode: usize, f: &[Matrix], v: Option<&FactorVersions>, out: &mut Matrix| {
        let call = Call {
            versions: v,
            ..Call::default()
        };
        engine
            .run_into_with(Op::Mttkrp, &p, mode, f, &call, out)
            .unwrap()
    };
    let s = run(0, &f, Some(&versions), &mut out);
    assert_eq!(s.bytes_to_device, bytes(1) + bytes(2));
    assert_eq!(s.bytes_from_device, bytes(0));
    assert!(s.kernel_seconds.is_some_and(|k| k > 0.0));
    let s = run(0, &f, Some(&versions), &mut out);
    assert_eq!(s.bytes_to_device, 0, "unchanged factors stay on the device");
    f[0].data_mut()[0] = 2.0;
    versions.changed(0);
    let s = run(1, &f, Some(&versions), &mut out);
    assert_eq!(s.bytes_to_device, bytes(0), "only the changed factor moves");
    let s = run(2, &f, Some(&versions.clone()), &mut out);
    assert_eq!(
        s.bytes_to_device,
        bytes(0) + bytes(1),
        "a cloned set is a new set"
    );
    assert_eq!(s.bytes_from_device, bytes(2));
    let s = run(2, &f, None, &mut out);
    assert_eq!(
        s.bytes_to_device,
        bytes(0) + bytes(1),
        "a call without versions uploads what it reads"
    );
}

twin!(
    /// CP-ALS's model does not depend on the tensor's scale, and neither may what it
    /// returns: a tensor of values near 1e-25 collapsed to the zero model, because
    /// pyttb's column normalization (`max(1, max |A|)`) left its solved factors near
    /// 1e-25 and the next mode's f32 products of value and factor entries underflowed.
    /// The same tensor times 2^-84, 2^-20 and 2^40 (powers of two, exact) must give the
    /// fits of the unscaled one within the backend's relative error, and weights in
    /// the same proportion.
    cp_als_gives_the_same_model_at_any_value_scale,
    |engine| {
        use sptmc::tensor::generate::{GenSpec, Pattern, generate};
        let x = generate(&GenSpec {
            dims: vec![60, 50, 40],
            nnz: 6000,
            pattern: Pattern::Uniform,
            seed: 21,
        })
        .unwrap();
        let (dims, idx, vals) = x.into_parts();
        let ints: Vec<f64> = vals.iter().map(|v| v.floor().clamp(1.0, 5.0)).collect();
        let run = |scale: f64| {
            let v = ints.iter().map(|x| x * scale).collect();
            let x = CooTensor::new(dims.clone(), idx.clone(), v).unwrap();
            let w = [Workload {
                op: Op::Mttkrp,
                rank: 4,
            }];
            let p = engine.prepare(&x, &w).unwrap();
            let opts = CpOptions {
                rank: 4,
                max_iters: 12,
                tol: 0.0,
                seed: 3,
                init: None,
            };
            cp_als(engine, &p, &opts)
                .unwrap_or_else(|e| panic!("×{scale}: {e}"))
        };
        let want = run(1.0);
        let tol = engine.backend().relative_error();
        for e in [-84, -20, 40] {
            let scale = 2f64.powi(e);
            let got = run(scale);
            for (it, (g, w)) in got.fits.iter().zip(&want.fits).enumerate() {
                assert!((g - w).abs() <= tol, "×2^{e} iteration {it}: fit {g}, {w} unscaled");
            }
            for (g, w) in got.weights.iter().zip(&want.weights) {
                let rel = (g / scale - w).abs() / w;
                assert!(rel <= tol, "×2^{e}: weight {g} (÷ scale {}), {w} unscaled", g / scale);
            }
        }
    }
);

twin!(
    /// A tensor whose coordinates need more key bits than the format holds runs on its
    /// modes renumbered to the used indices (`tensor::relabel`). From initial factors
    /// whose unused rows are zero, that is the same computation as on the original
    /// rows: the Grams, norms and MTTKRP rows of the used indices are the same, and an
    /// unused row's MTTKRP row is zero. Checked on a tensor that fits, with two thirds
    /// of the rows of two modes unused: the fits must agree within the backend's
    /// relative error, and the renumbered model put back on the original rows must be
    /// zero on the unused ones.
    cp_als_on_renumbered_modes_gives_the_model_of_the_original_rows,
    |engine| {
        use sptmc::tensor::generate::{GenSpec, Pattern, generate};
        use sptmc::tensor::relabel::Relabelled;
        let seed = common::fresh_seed("cp-als on renumbered modes");
        let small = generate(&GenSpec {
            dims: vec![60, 50, 40],
            nnz: 4000,
            pattern: Pattern::Uniform,
            seed,
        })
        .unwrap();
        let (_, idx, vals) = small.into_parts();
        // Rows 3i of modes 0 and 1 only.
        let spread: Vec<Vec<u32>> = (idx.into_iter().enumerate())
            .map(|(m, v)| if m < 2 { v.iter().map(|i| 3 * i).collect() } else { v })
            .collect();
        let x = CooTensor::new(vec![180, 150, 40], spread, vals).unwrap();
        let r = Relabelled::of(&x).unwrap();
        assert!(r.tensor.dims()[0] <= 60 && r.tensor.dims()[1] <= 50);
        let mut init = Matrix::random_factors(x.dims(), &[5; 3], seed ^ 1);
        for (m, f) in init.iter_mut().enumerate() {
            let used: std::collections::HashSet<u32> = r.used[m].iter().copied().collect();
            for i in 0..f.rows() {
                if !used.contains(&(i as u32)) {
                    f.row_mut(i).fill(0.0);
                }
            }
        }
        let run = |x: &CooTensor, init: Vec<Matrix>| {
            let w = [Workload {
                op: Op::Mttkrp,
                rank: 5,
            }];
            let p = engine.prepare(x, &w).unwrap();
            let opts = CpOptions {
                rank: 5,
                max_iters: 10,
                tol: 0.0,
                seed: 1,
                init: Some(init),
            };
            cp_als(engine, &p, &opts).unwrap()
        };
        let compressed = (0..3).map(|m| r.compress(m, &init[m])).collect();
        let want = run(&x, init);
        let got = run(&r.tensor, compressed);
        let tol = engine.backend().relative_error();
        for (it, (g, w)) in got.fits.iter().zip(&want.fits).enumerate() {
            assert!((g - w).abs() <= tol, "seed {seed} iteration {it}: fit {g}, {w} on the original rows");
        }
        for m in 0..3 {
            let back = r.expand(m, &got.factors[m]);
            assert_eq!(back.shape(), want.factors[m].shape());
            for i in (0..back.rows()).filter(|i| m < 2 && i % 3 != 0) {
                assert!(back.row(i).iter().all(|&v| v == 0.0), "mode {m} row {i}");
                assert!(want.factors[m].row(i).iter().all(|&v| v == 0.0), "mode {m} row {i}");
            }
        }
    }
);
