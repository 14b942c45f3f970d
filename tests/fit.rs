//! The fit near 1: `‖X‖²` and `⟨X, X̂⟩` come from the same (stored) values, so an exact
//! model reports a fit of 1 up to rounding, whatever fp16 did to the values and
//! whether the input repeated coordinates.

use sptmc::decomp::{CpOptions, TuckerOptions, cp_als, tucker_hooi};
use sptmc::engine::Engine;
use sptmc::tensor::CooTensor;
use sptmc::{Error, Op};

/// `a ∘ b ∘ c` with values fp16 cannot hold exactly.
fn rank_one() -> CooTensor {
    let (a, b, c) = (
        [1.3, 2.1, 0.7, 1.9],
        [0.5, 1.1, 2.3],
        [1.7, 0.9, 1.2, 0.4, 2.2],
    );
    let mut entries = Vec::new();
    for (i, x) in a.iter().enumerate() {
        for (j, y) in b.iter().enumerate() {
            for (k, z) in c.iter().enumerate() {
                entries.push(([i as u32, j as u32, k as u32], x * y * z));
            }
        }
    }
    CooTensor::from_entries(vec![4, 3, 5], entries).unwrap()
}

fn cp_fit(x: &CooTensor, iters: usize) -> f64 {
    let e = Engine::cpu();
    let p = e.prepare_with_thresholds(x, &[(Op::Mttkrp, 78)]).unwrap();
    let opts = CpOptions {
        rank: 1,
        max_iters: iters,
        tol: 0.0,
        ..CpOptions::default()
    };
    cp_als(&e, &p, &opts).unwrap().fit().unwrap()
}

fn tucker_fit(x: &CooTensor) -> f64 {
    let e = Engine::cpu();
    let p = e.prepare_with_thresholds(x, &[(Op::Ttmc, 61)]).unwrap();
    let mut opts = TuckerOptions::with_ranks(vec![1; x.order()]);
    opts.max_iters = 3;
    tucker_hooi(&e, &p, &opts).unwrap().fit().unwrap()
}

#[test]
fn an_exact_rank_one_tensor_fits_to_rounding() {
    let x = rank_one();
    // ⟨X, X̂⟩ comes from an f32 MTTKRP: relative rounding up to about 4 · 2⁻²⁴ per term
    // (x times three factor entries), so ‖X − X̂‖² of an exact model is 0 within about
    // 5e-7 · ‖X‖², and the fit 1 within √5e-7 ≈ 7e-4: the bound. (The row-by-row
    // kernel's rounding gives 0.99988 after 2 iterations; the walk's happened to stay
    // above 0.9999, which is below what f32 can promise.)
    for iters in [1, 2, 5] {
        let fit = cp_fit(&x, iters);
        assert!(fit > 0.999 && fit <= 1.0, "{iters} iterations: fit {fit}");
    }
    let fit = tucker_fit(&x);
    assert!(fit > 0.9999 && fit <= 1.0, "Tucker fit {fit}");
}

#[test]
fn a_single_value_fits_exactly() {
    for v in [3.7, 1e-3, 12345.678, -0.3] {
        let x = CooTensor::from_entries(vec![1, 1, 1], [([0u32, 0, 0], v)]).unwrap();
        for iters in [1, 3] {
            let fit = cp_fit(&x, iters);
            assert!(
                fit > 0.9999 && fit <= 1.0,
                "{v}, {iters} iterations: fit {fit}"
            );
        }
        let fit = tucker_fit(&x);
        assert!(fit > 0.9999 && fit <= 1.0, "{v}: Tucker fit {fit}");
    }
}

#[test]
fn repeated_coordinates_in_the_input_do_not_change_the_fit() {
    // The rank-one tensor with every value split into two entries at the same cell,
    // 2v and −v: the squares of the entries sum to 5v², not v².
    let x = rank_one();
    let mut entries = Vec::new();
    for k in 0..x.nnz() {
        let c = x.coords(k);
        entries.push((c.clone(), 2.0 * x.values()[k]));
        entries.push((c, -x.values()[k]));
    }
    let split = CooTensor::from_entries(x.dims().to_vec(), entries).unwrap();
    let fit = cp_fit(&split, 3);
    assert!(fit > 0.9999 && fit <= 1.0, "fit {fit}");
}

#[test]
fn a_tensor_whose_values_all_vanish_in_fp16_has_no_fit() {
    let x = CooTensor::from_entries(vec![2, 2, 2], [([0u32, 0, 0], 1e-320), ([1, 1, 1], 2e-320)])
        .unwrap();
    let e = Engine::cpu();
    let p = e.prepare_with_thresholds(&x, &[(Op::Mttkrp, 78)]).unwrap();
    match cp_als(&e, &p, &CpOptions::with_rank(1)) {
        Err(Error::InvalidTensor(m)) => assert!(m.contains("fp16"), "{m}"),
        other => panic!("expected InvalidTensor, got {other:?}"),
    }
}
