//! Models that collapse: initial factors scaled by 1e-30 gave "final fit 0.000000" and
//! all-zero factors with status 0, and a rank-1 tensor of order 100 gave fit 0 (random
//! entries below 1 multiplied to an f32 underflow). Scale no longer matters where the
//! mathematics does not depend on it, and a model that still collapses to zero is an
//! error, never a quiet success.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

fn sptmc(dir: &Path, args: &[&str]) -> Output {
    let mut c = common::sptmc_command(dir);
    c.args(args).args(["--backend", "cpu", "--json"]);
    common::output_within(c, 120)
}

fn fit(o: &Output) -> f64 {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["final_fit"].as_f64().unwrap()
}

/// Copies the model folder `from`'s factors into `to`, every entry times `scale`.
fn scaled_init(from: &Path, to: &Path, scale: f64, order: usize) {
    std::fs::create_dir_all(to).unwrap();
    for m in 0..order {
        let f = sptmc::model_io::read_matrix(&sptmc::model_io::factor_path(from, m)).unwrap();
        let data: Vec<f64> = f.data().iter().map(|v| v * scale).collect();
        let g = sptmc::Matrix::new(f.rows(), f.cols(), data).unwrap();
        sptmc::model_io::write_matrix(&sptmc::model_io::factor_path(to, m), "init", &g).unwrap();
    }
}

#[test]
fn initial_factors_of_any_scale_give_the_same_model() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = common::small_tns(dir);
    let f = f.to_str().unwrap();
    let base = dir.join("base");
    let b = base.to_str().unwrap();
    let o = sptmc(dir, &["cp", f, "--rank", "3", "--iters", "2", "--out", b]);
    assert!(o.status.success());
    let init = dir.join("init");
    let i = init.to_str().unwrap();
    let cases: [(&[&str], f64); 2] = [
        (
            &["cp", f, "--rank", "3", "--iters", "5", "--tol", "0"],
            1e-5,
        ),
        (
            &[
                "tucker", f, "--ranks", "3,3,3", "--iters", "5", "--tol", "0",
            ],
            1e-5,
        ),
    ];
    for (args, tol) in cases {
        scaled_init(&base, &init, 1.0, 3);
        let want = fit(&sptmc(dir, &[args, &["--init", i]].concat()));
        assert!(want > 0.05, "{args:?}: {want}");
        for scale in [1e-30, 1e-40, 1e-20, 1e20, 1e30] {
            scaled_init(&base, &init, scale, 3);
            let got = fit(&sptmc(dir, &[args, &["--init", i]].concat()));
            assert!(
                (got - want).abs() <= tol,
                "{args:?} ×{scale}: fit {got}, {want} unscaled"
            );
        }
    }
}

/// Rank-1 tensors of order 60 to 300 (extents 1 or 2) are fitted exactly.
#[test]
fn rank_one_tensors_of_many_modes_are_fitted() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for order in [60, 100, 150, 300] {
        let p = dir.join(format!("o{order}.tns"));
        let ones = vec!["1"; order - 1].join(" ");
        std::fs::write(&p, format!("1 {ones} 2.0\n2 {ones} 3.0\n")).unwrap();
        let got = fit(&sptmc(dir, &["cp", p.to_str().unwrap(), "--rank", "1"]));
        assert!(got > 0.999, "order {order}: fit {got}");
    }
}

/// A tensor `t.tns` of 30 nonzeros with extents `dims` declared by a header: entry
/// `k` at `(k % 4, k % 4, (k / 4) % 4)` (1-based: plus one) with value `value(k)`, so
/// rows 4 and up of modes 0 and 1 hold no nonzero.
fn four_row_tensor(dir: &Path, dims: [usize; 3], value: impl Fn(u32) -> u32) -> PathBuf {
    let f = dir.join("t.tns");
    let mut text = format!("3\n{} {} {}\n", dims[0], dims[1], dims[2]);
    for k in 0..30u32 {
        let (i, j) = (k % 4 + 1, (k / 4) % 4 + 1);
        text.push_str(&format!("{i} {i} {j} {}\n", value(k)));
    }
    std::fs::write(&f, text).unwrap();
    f
}

/// Writes initial factors into `init`, one per mode of `rows` rows at `rank`: all ones,
/// but mode `mode`, nonzero in row `row` only (a row past its extent: all zero).
fn stray_row_init(init: &Path, rows: &[usize], rank: usize, mode: usize, row: usize) {
    std::fs::create_dir_all(init).unwrap();
    for (m, &rows_m) in rows.iter().enumerate() {
        let data: Vec<f64> = (0..rows_m * rank)
            .map(|k| {
                if m != mode || k / rank == row {
                    1.0
                } else {
                    0.0
                }
            })
            .collect();
        let g = sptmc::Matrix::new(rows_m, rank, data).unwrap();
        let p = sptmc::model_io::factor_path(init, m);
        sptmc::model_io::write_matrix(&p, "init", &g).unwrap();
    }
}

/// `model FILE --rank RANK --init INIT --out OUT` for a collapse test: must fail with
/// one error line holding `words` and write no model.
fn refused(dir: &Path, model: &str, f: &Path, rank: usize, init: &Path, out: &Path, words: &str) {
    let r = rank.to_string();
    let args = [
        model,
        f.to_str().unwrap(),
        "--rank",
        &r,
        "--init",
        init.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    let res = sptmc(dir, &args);
    common::assert_one_error_line(&res, &[words]);
    assert!(!out.exists(), "{args:?}");
}

/// A CP model that collapses to zero is one error line and writes no model: initial
/// factors whose only nonzero rows meet no nonzero of the tensor (every MTTKRP is
/// zero). Initial factors of zeros are refused before any iteration.
#[test]
fn a_collapsed_model_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Extents 4 × 5 × 4; no nonzero in row 5 of mode 1.
    let f = four_row_tensor(dir, [4, 5, 4], |k| k + 1);
    let out = dir.join("out");
    for rank in [1usize, 2] {
        for (name, rows, row) in [("away", [4usize, 5, 4], 4usize), ("zeros", [4, 5, 4], 9)] {
            let init = dir.join(format!("{name}-{rank}"));
            // Mode 1: nonzero in row `row` only (row 9: nowhere, all zero).
            stray_row_init(&init, &rows, rank, 1, row);
            let words = if name == "zeros" {
                "all zero"
            } else {
                "collapsed to the zero model"
            };
            refused(dir, "cp", &f, rank, &init, &out, words);
        }
    }
}

/// CP-APR collapses as CP-ALS does when its initial factors' nonzero rows meet none
/// of the tensor's nonzeros (every Φ is 0, so the updates zero every factor): one error
/// line, no model written, at every rank and whichever mode holds the stray row.
#[test]
fn a_collapsed_cp_apr_model_is_an_error() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // Extents 6 × 5 × 4: rows 4–5 of mode 0 and row 4 of mode 1 (0-based) hold no
    // nonzero.
    let f = four_row_tensor(dir, [6, 5, 4], |k| k % 7 + 1);
    let rows = [6usize, 5, 4];
    let out = dir.join("out");
    for rank in [1usize, 3] {
        for (mode, row) in [(1usize, 4usize), (0, 5), (0, 4)] {
            let init = dir.join(format!("away-{rank}-{mode}-{row}"));
            stray_row_init(&init, &rows, rank, mode, row);
            let words = "CP-APR collapsed to the zero model";
            refused(dir, "cp-apr", &f, rank, &init, &out, words);
        }
    }
    // The same tensor from random factors is a model.
    let res = sptmc(dir, &["cp-apr", f.to_str().unwrap(), "--rank", "2"]);
    assert!(
        res.status.success(),
        "{}",
        String::from_utf8_lossy(&res.stderr)
    );
}
