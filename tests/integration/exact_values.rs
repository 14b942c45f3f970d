//! Exact values: a tensor's values are stored in fp16 only where fp16 holds every one of
//! them exactly (after the tensor's power-of-two scale), else in f32 (`--values auto`,
//! the default), or as asked (`f16`, `f32`).
//!
//! - Exact real-valued CP tensors (rank 1 and 3, orders 3 and 4, values written with 9
//!   decimals) fit to at least 1 − 1e-6 with `auto` (fp16 storage stops near 1 − 1e-4).
//! - `auto` picks fp16 for integer counts up to 2048 and f32 once a count fp16 cannot
//!   hold appears, and says why.
//! - CP-APR on counts above 2048 gives the log-likelihood of an FP64 run of the same
//!   multiplicative updates (pyttb's `cp_apr(algorithm="mu")`, written here on COO in
//!   f64) from the same start within 1e-8 relative; fp16 storage misses it.
//! - MTTKRP and TTMc meet the accuracy contract with either type on every mode.
//!
//! Backend tests come as CPU and CUDA twins (the CUDA one skips visibly without a
//! device, fails with `SPTMC_REQUIRE_GPU=1`).

use crate::common;

use sptmc::decomp::{CpAprOptions, CpOptions, cp_als, cp_apr};
use sptmc::engine::{Engine, Prepared, Workload};
use sptmc::hls::values::{choose_scale, dequantize, quantize};
use sptmc::hls::{HlsBuilder, ValueChoice, ValueType};
use sptmc::tensor::cache::{Cache, LoadSource};
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::{CooTensor, Matrix, Op, accuracy, reference};

/// CPU and CUDA twins of a test whose body makes its engines with a given value choice
/// (`make(values)`).
macro_rules! values_twin {
    ($name:ident, |$make:ident| $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;
            fn body($make: &dyn Fn(ValueChoice) -> Engine) $body
            #[test]
            fn cpu() {
                body(&|v| Engine::cpu().with_values(v));
            }
            #[test]
            fn cuda() {
                if crate::common::cuda_engine().is_none() {
                    return;
                }
                body(&|v| {
                    crate::common::cuda_engine()
                        .expect("a device was found")
                        .with_values(v)
                });
            }
        }
    };
}

/// Every cell of a `dims` tensor holding `Σ_r Π_m A_m[i_m, r]`, written with 9
/// decimals, the factor entries of magnitude 0.5–1.5 (of random signs when `rank` > 1,
/// so that the components are far from parallel); and the factors.
fn real_cp(dims: &[usize], rank: usize, seed: u64) -> (CooTensor, Vec<Matrix>) {
    let factors: Vec<Matrix> = dims
        .iter()
        .enumerate()
        .map(|(m, &d)| {
            let u = Matrix::random(d, rank, seed.wrapping_add(m as u64));
            let s = Matrix::random(d, rank, seed.wrapping_add(100 + m as u64));
            Matrix::from_fn(d, rank, |i, r| {
                let sign = if rank > 1 && s.get(i, r) < 0.5 {
                    -1.0
                } else {
                    1.0
                };
                sign * (0.5 + u.get(i, r))
            })
        })
        .collect();
    let cells: usize = dims.iter().product();
    let mut entries = Vec::with_capacity(cells);
    for mut k in 0..cells {
        let mut c = vec![0u32; dims.len()];
        for m in (0..dims.len()).rev() {
            c[m] = (k % dims[m]) as u32;
            k /= dims[m];
        }
        let v: f64 = (0..rank)
            .map(|r| {
                (0..dims.len())
                    .map(|m| f64::from(factors[m].get(c[m] as usize, r)))
                    .product::<f64>()
            })
            .sum();
        entries.push((c, (v * 1e9).round() / 1e9));
    }
    (
        CooTensor::from_entries(dims.to_vec(), entries).unwrap(),
        factors,
    )
}

fn prepare(engine: &Engine, x: &CooTensor, op: Op, rank: usize) -> Prepared {
    engine.prepare(x, &[Workload { op, rank }]).unwrap()
}

/// CP-ALS's last fit on `x` with the values stored as `engine` chooses, from `init`.
fn cp_fit(engine: &Engine, x: &CooTensor, rank: usize, init: &[Matrix]) -> (f64, ValueType) {
    let p = prepare(engine, x, Op::Mttkrp, rank);
    let stored = p.hls(Op::Mttkrp).unwrap().value_type();
    let opts = CpOptions {
        rank,
        max_iters: 300,
        tol: 1e-12,
        init: Some(init.to_vec()),
        ..Default::default()
    };
    let model = cp_als(engine, &p, &opts).unwrap();
    (*model.fits.last().unwrap(), stored)
}

values_twin!(exact_real_valued_cp_tensors_fit_to_one_with_auto, |make| {
    let seed = common::fresh_seed("exact_real_valued_cp_tensors_fit_to_one_with_auto");
    let engine = make(ValueChoice::Auto);
    let f16 = make(ValueChoice::F16);
    for dims in [vec![15, 12, 9], vec![8, 7, 6, 5]] {
        for rank in [1, 3] {
            let (x, truth) = real_cp(&dims, rank, seed);
            // ALS from a random start may stall in a swamp short of the exact fit
            // whatever the values' precision (one fresh seed stopped at 1 − 1.3e-5).
            // Started from the true factors, each entry off by up to ±10 %, it reaches
            // the exact model, and what is left of the fit is the values' storage.
            let init: Vec<Matrix> = truth
                .iter()
                .enumerate()
                .map(|(m, f)| {
                    let noise = Matrix::random(f.rows(), rank, seed ^ (0xabc + m as u64));
                    Matrix::from_fn(f.rows(), rank, |i, r| {
                        f.get(i, r) * (0.9 + 0.2 * noise.get(i, r))
                    })
                })
                .collect();
            let what = format!("{dims:?} rank {rank} on {}", engine.backend().describe());
            let (fit, stored) = cp_fit(&engine, &x, rank, &init);
            assert_eq!(stored, ValueType::F32, "{what}");
            assert!(fit >= 1.0 - 1e-6, "{what}: fit {fit} with auto");
            // What fp16 storage gave before: the data the model saw was rounded.
            let (fit16, stored) = cp_fit(&f16, &x, rank, &init);
            assert_eq!(stored, ValueType::F16, "{what}");
            assert!(fit16 < 1.0 - 1e-5, "{what}: fit {fit16} with f16");
        }
    }
});

/// Counts `1..=top` over a generated pattern, `top` at the first entry.
fn counts(top: u32, seed: u64) -> CooTensor {
    let (dims, idx, vals) = generate(&GenSpec {
        dims: vec![30, 25, 20],
        nnz: 3000,
        pattern: Pattern::PowerLaw { alpha: 0.8 },
        seed,
    })
    .unwrap()
    .into_parts();
    let mut vals: Vec<f64> = vals
        .iter()
        .map(|v| (v.abs() * f64::from(top)).ceil().clamp(1.0, f64::from(top)))
        .collect();
    vals[0] = f64::from(top);
    CooTensor::new(dims, idx, vals).unwrap()
}

values_twin!(each_engine_prepares_the_type_auto_picks, |make| {
    // What the builder chooses is what an engine's prepared form holds (on CUDA,
    // what is uploaded), for every op that reads values.
    let seed = common::fresh_seed("each_engine_prepares_the_type_auto_picks");
    for (top, want) in [(2048, ValueType::F16), (2049, ValueType::F32)] {
        let x = counts(top, seed);
        for op in [Op::Mttkrp, Op::Ttmc] {
            let p = prepare(&make(ValueChoice::Auto), &x, op, 4);
            let got = p.hls(op).unwrap().value_type();
            assert_eq!(got, want, "{op:?} on counts up to {top}");
        }
        let p = prepare(&make(ValueChoice::F32), &x, Op::Mttkrp, 4);
        assert_eq!(p.hls(Op::Mttkrp).unwrap().value_type(), ValueType::F32);
    }
});

#[test]
fn auto_picks_fp16_for_counts_up_to_2048_and_f32_above() {
    let seed = common::fresh_seed("auto_picks_fp16_for_counts_up_to_2048_and_f32_above");
    let build = |x: &CooTensor, v| HlsBuilder::new(8).with_values(v).build(x).unwrap();
    for top in [1, 9, 255, 2047, 2048] {
        let x = counts(top, seed);
        let s = build(&x, ValueChoice::Auto).stats().clone();
        assert_eq!(s.values, ValueType::F16, "counts up to {top}");
        assert_eq!(s.value_note(), "fp16 exact");
        assert_eq!(s.quant.f16_inexact, 0);
        assert_eq!(ValueChoice::Auto.resolve_values(x.values()), ValueType::F16);
    }
    for top in [2049, 4097, 100_001] {
        let x = counts(top, seed);
        // The counts fp16 rounds after the tensor's scale (2^e, the largest count
        // within fp16's range): those above 2048 · 2^e that are not multiples of 2^(e+1).
        let scale = choose_scale(f64::from(top));
        let inexact = x
            .values()
            .iter()
            .filter(|&&v| dequantize(quantize(v, scale), scale) != v)
            .count();
        assert!(inexact >= 1, "counts up to {top}");
        let h = build(&x, ValueChoice::Auto);
        let s = h.stats();
        assert_eq!(s.values, ValueType::F32, "counts up to {top}");
        assert_eq!(s.quant.f16_inexact, inexact, "counts up to {top}");
        assert_eq!(
            s.value_note(),
            format!("f32: {inexact} values not exact in fp16")
        );
        assert_eq!(ValueChoice::Auto.resolve_values(x.values()), ValueType::F32);
        // Stored exactly, and the statistics price both choices.
        assert_eq!(h.to_coo().values(), x.values(), "counts up to {top}");
        assert_eq!(s.f32_bytes, s.hls_bytes());
        assert_eq!(s.f32_bytes - s.f16_bytes, 2 * x.nnz());
        // Forcing either type is obeyed and said.
        let forced = build(&x, ValueChoice::F16);
        assert_eq!(forced.value_type(), ValueType::F16);
        assert_eq!(
            forced.stats().value_note(),
            format!("fp16 (asked for; {inexact} values not exact)")
        );
        assert_eq!(forced.stats().hls_bytes(), s.f16_bytes);
        assert_ne!(forced.to_coo().values(), x.values());
    }
    let x = counts(9, seed);
    let forced = build(&x, ValueChoice::F32);
    assert_eq!(forced.value_type(), ValueType::F32);
    assert_eq!(forced.stats().value_note(), "f32 (asked for)");
    assert_eq!(forced.to_coo().values(), x.values());
}

/// pyttb's `cp_apr(algorithm="mu")` in f64 on COO, as the crate runs it (modes in
/// order; inadmissible zeros from the second iteration on; the weights into the mode,
/// up to `inner` updates `B ← B ∗ Φ`, the column sums back out): the log-likelihood
/// after `iters` outer iterations from `init`.
fn mu_fp64(x: &CooTensor, init: &[Matrix], iters: usize, o: &CpAprOptions) -> f64 {
    let (n_modes, rank) = (x.order(), o.rank);
    let mut a: Vec<Matrix<f64>> = init.iter().map(Matrix::to_f64).collect();
    let mut lambda = vec![1.0; rank];
    let col_sums = |f: &Matrix<f64>| -> Vec<f64> {
        (0..rank)
            .map(|r| (0..f.rows()).map(|i| f.get(i, r)).sum())
            .collect()
    };
    let scale = |f: &mut Matrix<f64>, s: &[f64]| {
        for i in 0..f.rows() {
            for (v, &s) in f.row_mut(i).iter_mut().zip(s) {
                *v *= s;
            }
        }
    };
    let inverse = |s: &[f64]| -> Vec<f64> {
        s.iter()
            .map(|&s| if s > 0.0 { 1.0 / s } else { 1.0 })
            .collect()
    };
    for f in &mut a {
        let s = col_sums(f);
        scale(f, &inverse(&s));
        for (l, s) in lambda.iter_mut().zip(&s) {
            *l *= s;
        }
    }
    let mut phis: Vec<Option<Matrix<f64>>> = vec![None; n_modes];
    for it in 0..iters {
        for n in 0..n_modes {
            if it > 0
                && let Some(phi) = &phis[n]
            {
                for (v, &p) in a[n].data_mut().iter_mut().zip(phi.data()) {
                    if p > 0.0 && *v < o.kappa_tol {
                        *v += o.kappa;
                    }
                }
            }
            scale(&mut a[n], &lambda);
            lambda.fill(1.0);
            // Π: per nonzero, the product of the other modes' rows.
            let pi: Vec<Vec<f64>> = (0..x.nnz())
                .map(|k| {
                    let mut p = vec![1.0; rank];
                    for m in (0..n_modes).filter(|&m| m != n) {
                        let row = a[m].row(x.indices(m)[k] as usize);
                        for (p, &v) in p.iter_mut().zip(row) {
                            *p *= v;
                        }
                    }
                    p
                })
                .collect();
            for _ in 0..o.max_inner {
                let mut phi = Matrix::<f64>::zeros(x.dims()[n], rank);
                for (k, p) in pi.iter().enumerate() {
                    let i = x.indices(n)[k] as usize;
                    let mu: f64 = a[n].row(i).iter().zip(p).map(|(b, p)| b * p).sum();
                    let w = x.values()[k] / mu.max(o.eps);
                    for (f, &p) in phi.row_mut(i).iter_mut().zip(p) {
                        *f += w * p;
                    }
                }
                for (b, &f) in a[n].data_mut().iter_mut().zip(phi.data()) {
                    *b *= f;
                }
                phis[n] = Some(phi);
            }
            let s = col_sums(&a[n]);
            scale(&mut a[n], &inverse(&s));
            lambda = s;
        }
    }
    reference::log_likelihood(x, &lambda, &a, o.eps).unwrap()
}

values_twin!(cp_apr_on_counts_above_2048_matches_an_fp64_run, |make| {
    let seed = common::fresh_seed("cp_apr_on_counts_above_2048_matches_an_fp64_run");
    let x = counts(20_000, seed);
    let (rank, iters) = (4, 8);
    let opts = CpAprOptions {
        max_iters: iters,
        tol: 0.0,
        init: Some(Matrix::random_factors(x.dims(), &[rank; 3], seed)),
        ..CpAprOptions::with_rank(rank)
    };
    let want = mu_fp64(&x, opts.init.as_ref().unwrap(), iters, &opts);
    let run = |v| {
        let engine = make(v);
        let p = prepare(&engine, &x, Op::Mttkrp, rank);
        cp_apr(&engine, &p, &opts).unwrap().log_likelihood
    };
    let rel = |got: f64, want: f64| ((got - want) / want).abs();
    let auto = run(ValueChoice::Auto);
    // fp16 storage rounds the odd counts above 2048: the f16 run is an exact run on
    // the rounded counts, not on the data. (How far the rounded counts move the
    // log-likelihood depends on how the ±1 roundings cancel, so it has no fixed
    // lower bound; what must hold is that the f16 run answers the rounded question.)
    let scale = choose_scale(x.values().iter().fold(0.0, |m, v| v.abs().max(m)));
    let rounded_vals: Vec<f64> = x
        .values()
        .iter()
        .map(|&v| dequantize(quantize(v, scale), scale))
        .collect();
    let moved = rounded_vals
        .iter()
        .zip(x.values())
        .filter(|(r, v)| r != v)
        .count();
    assert!(moved > 0, "the counts include values fp16 cannot hold");
    let rounded = CooTensor::new(
        x.dims().to_vec(),
        (0..x.dims().len()).map(|m| x.indices(m).to_vec()).collect(),
        rounded_vals,
    )
    .unwrap();
    let want_rounded = mu_fp64(&rounded, opts.init.as_ref().unwrap(), iters, &opts);
    let f16 = run(ValueChoice::F16);
    eprintln!(
        "{moved} counts moved by fp16; relative to FP64: auto {:e}, f16 {:e}; \
         f16 relative to FP64 on the rounded counts {:e}",
        rel(auto, want),
        rel(f16, want),
        rel(f16, want_rounded)
    );
    assert!(
        rel(auto, want) <= 1e-8,
        "auto: {auto} vs FP64 {want} ({:e})",
        rel(auto, want)
    );
    assert!(
        rel(f16, want_rounded) <= 1e-8,
        "f16: {f16} vs FP64 on the rounded counts {want_rounded} ({:e})",
        rel(f16, want_rounded)
    );
    assert_ne!(
        want_rounded, want,
        "rounding {moved} counts changes the FP64 answer"
    );
});

values_twin!(
    both_value_types_meet_the_accuracy_contract_on_every_mode,
    |make| {
        let seed = common::fresh_seed("both_value_types_meet_the_accuracy_contract_on_every_mode");
        let cases = [
            (
                vec![70, 60, 50],
                20_000,
                Pattern::BlockDense {
                    tile_nnz: 400,
                    dense_share: 0.5,
                },
            ),
            (vec![30, 25, 20, 15], 8000, Pattern::PowerLaw { alpha: 0.8 }),
        ];
        for (dims, nnz, pattern) in cases {
            let x = generate(&GenSpec {
                dims: dims.clone(),
                nnz,
                pattern,
                seed,
            })
            .unwrap();
            let order = dims.len();
            for values in [ValueChoice::F16, ValueChoice::F32, ValueChoice::Auto] {
                let engine = make(values);
                for op in [Op::Mttkrp, Op::Ttmc] {
                    let rank = if op == Op::Ttmc { 6 } else { 16 };
                    let p = engine.prepare_with_thresholds(&x, &[(op, 8)]).unwrap();
                    let stored = p.hls(op).unwrap().value_type();
                    let want_type = match values {
                        ValueChoice::F16 => ValueType::F16,
                        _ => ValueType::F32,
                    };
                    assert_eq!(
                        stored, want_type,
                        "{values}: generated values are not fp16's"
                    );
                    let f = Matrix::random_factors(x.dims(), &vec![rank; order], seed);
                    for mode in 0..order {
                        let got = engine.run(op, &p, mode, &f).unwrap();
                        let want = reference::apply(op, &x, mode, &f).unwrap();
                        let a = accuracy::compare(&want, &got).unwrap();
                        let what = format!(
                            "{op} {dims:?} mode {mode}, {stored} values on {}",
                            engine.backend().describe()
                        );
                        assert!(a.within_contract(), "{what}: {a:?}");
                        if stored == ValueType::F32 {
                            // f32 values leave only the kernels' f32 sums.
                            assert!(a.rel_frobenius < 1e-5, "{what}: {a:?}");
                        }
                    }
                }
            }
        }
    }
);

/// The binary cache keeps the values as read (f64), not as an HLS form stores them: a
/// tensor read back from its cache entry gets the same values, and so the same type and
/// stored values, as one parsed from the text. Nothing the cache holds depends on the
/// value type, so entries made before there was a choice are read as they always were
/// (its format version is unchanged).
#[test]
fn the_cache_keeps_values_as_read_so_both_reads_store_them_alike() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("real.tns");
    let mut text = String::new();
    for k in 0..500u32 {
        let v = 0.5 + (f64::from(k) * 0.618_033_988_7).fract();
        text += &format!("{} {} {} {v:.9}\n", k % 7 + 1, k % 11 + 1, k % 13 + 1);
    }
    std::fs::write(&file, text).unwrap();
    let cache = Cache::new(dir.path().join("cache"));
    let (parsed, first) = cache.load(&file).unwrap();
    assert!(matches!(first, LoadSource::Text { .. }), "{first:?}");
    let (cached, second) = cache.load(&file).unwrap();
    assert!(matches!(second, LoadSource::Cache { .. }), "{second:?}");
    assert_eq!(cached.values(), parsed.values());
    let stored: Vec<Vec<f64>> = [&parsed, &cached]
        .iter()
        .map(|x| {
            let h = HlsBuilder::new(8).build(x).unwrap();
            assert_eq!(h.value_type(), ValueType::F32);
            h.to_coo().values().to_vec()
        })
        .collect();
    assert_eq!(stored[0], stored[1]);
    let max = parsed.values().iter().fold(0f64, |m, v| m.max(v.abs()));
    let scale = f64::from(choose_scale(max));
    for (&v, &s) in parsed.values().iter().zip(&stored[0]) {
        assert_eq!(s, f64::from((v / scale) as f32) * scale);
    }
}
