//! Values at the edges of what the kernels can represent: subnormal f64 values (no hang
//! in the scale search), values beyond f32 (refused), results that overflow f32 (an
//! error, never `inf` printed with exit 0) and values so small that the f32 kernels
//! flush them (a warning, and an honest `--check`).

use crate::common;

use common::{assert_one_error_line, output_within, sptmc_command, within};
use sptmc::Error;
use sptmc::hls::HlsBuilder;
use sptmc::tensor::{CooTensor, tns};
use std::path::{Path, PathBuf};

fn parse(text: &str) -> CooTensor {
    tns::parse(text.as_bytes(), Path::new("values.tns"))
        .unwrap()
        .0
}

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn subnormal_values_build_at_once_and_are_reported_as_lost() {
    for v in ["1e-320", "5e-324", "3e-319"] {
        let x = parse(&format!("1 1 1 {v}\n2 2 2 {v}\n"));
        let hls = within(&format!("building HLS of {v}"), 60, move || {
            HlsBuilder::new(78).build(&x).unwrap()
        });
        let q = hls.stats().quant;
        assert_eq!(q.scale, 2f32.powi(-126), "{v}");
        assert_eq!(q.flushed_to_zero, 2, "{v}: {q:?}");
        assert_eq!(q.kernel_flushed, 2, "{v}: {q:?}");
    }
}

#[test]
fn values_beyond_f32_are_refused_by_the_builder() {
    for v in ["3.5e38", "-1e39", "1e43", "1e300"] {
        let x = parse(&format!("1 1 1 1\n2 3 2 {v}\n"));
        match HlsBuilder::new(78).build(&x) {
            Err(Error::Unsupported(m)) => {
                assert!(m.contains("f32") && m.contains("[2, 3, 2]"), "{v}: {m}")
            }
            other => panic!("{v}: expected Unsupported, got {other:?}"),
        }
    }
    // The largest f32 itself is fine.
    let x = parse(&format!("1 1 1 {:e}\n", f32::MAX as f64));
    HlsBuilder::new(78).build(&x).unwrap();
}

/// One output row that sums 40 values near f32's largest: no scale can save it.
fn overflowing(dir: &Path) -> PathBuf {
    let mut text = String::new();
    for j in 1..=5 {
        for k in 1..=8 {
            text += &format!("1 {j} {k} 3.3e38\n");
        }
    }
    text += "2 1 1 1\n";
    write(dir, "overflow.tns", &text)
}

#[test]
fn results_beyond_f32_are_an_error_never_printed() {
    let dir = tempfile::tempdir().unwrap();
    let f = overflowing(dir.path());
    let out = dir.path().join("out.txt");
    let fs = f.to_str().unwrap();
    let os = out.to_str().unwrap();
    for args in [
        vec!["mttkrp", fs, "--rank", "4", "--reps", "1"],
        vec!["mttkrp", fs, "--rank", "4", "--reps", "1", "--json"],
        vec!["mttkrp", fs, "--rank", "4", "--reps", "1", "--out", os],
        vec!["ttmc", fs, "--ranks", "2,2,2", "--reps", "1", "--json"],
        vec!["ttmc", fs, "--ranks", "2,2,2", "--reps", "1", "--out", os],
    ] {
        let mut c = sptmc_command(dir.path());
        c.args(&args).args(["--backend", "cpu"]);
        let o = output_within(c, 120);
        assert_one_error_line(&o, &["non-finite", "f32"]);
        assert!(o.stdout.is_empty(), "{args:?} printed a result");
        assert!(!out.exists(), "{args:?} wrote a result");
    }
}

#[test]
fn tiny_values_are_reported_and_checked_honestly() {
    let x = parse("1 1 1 1e-39\n1 2 1 2e-39\n2 1 2 5e-31\n2 2 2 1\n");
    let q = HlsBuilder::new(78).build(&x).unwrap().stats().quant;
    assert_eq!((q.kernel_tiny, q.kernel_flushed), (3, 2), "{q:?}");
    let normal = parse("1 1 1 1e-20\n2 2 2 1\n");
    let q = HlsBuilder::new(78).build(&normal).unwrap().stats().quant;
    assert_eq!((q.kernel_tiny, q.kernel_flushed), (0, 0), "{q:?}");

    // Values around 1e-39 (flushed by the kernels) and 1e-200 (lost in fp16 too): the
    // user is told, and --check measures the loss with both error measures.
    let dir = tempfile::tempdir().unwrap();
    for v in [1e-39, 1e-200] {
        let f = write(
            dir.path(),
            &format!("tiny{v:e}.tns"),
            &format!(
                "1 1 1 {:e}\n1 2 1 {:e}\n2 1 2 {:e}\n2 2 2 {:e}\n",
                v,
                2.0 * v,
                3.0 * v,
                1.5 * v
            ),
        );
        let mut c = sptmc_command(dir.path());
        c.args(["mttkrp", f.to_str().unwrap(), "--rank", "2", "--reps", "1"])
            .args(["--check", "--json", "--backend", "cpu"]);
        let o = output_within(c, 120);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("warning") && err.contains("vanish"),
            "{v}: {err}"
        );
        let out: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let smape = out["accuracy"]["smape_percent"].as_f64().unwrap();
        let frob = out["accuracy"]["rel_frobenius"].as_f64().unwrap();
        // Whatever the kernels kept, the two measures agree on how much was lost.
        if smape > 99.0 {
            assert!(
                frob > 0.99,
                "{v}: SMAPE {smape}% beside rel Frobenius {frob}"
            );
        }
        if v < 1e-100 {
            assert_eq!((smape, frob), (100.0, 1.0), "{v}");
        }
    }
}
