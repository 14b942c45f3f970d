//! Checks on values look at the values as read, not as rounded for the kernels' fp16
//! storage: `cp-apr --non-integer error` refused 2.5 but let 100000.5 and 1e-30 pass
//! (fp16 makes them 100000 and 0), and a tiny negative value rounded to -0.

use crate::common;

use std::path::Path;
use std::process::Output;

/// A count tensor with one odd value at (1, 1, 1).
fn tensor_with(dir: &Path, odd: &str) -> std::path::PathBuf {
    let mut text = String::new();
    for k in 0..200u32 {
        let (i, j, l) = (k % 13 + 2, (k * 7) % 11 + 1, (k * 5) % 9 + 1);
        text.push_str(&format!("{i} {j} {l} {}\n", k % 5 + 1));
    }
    text.push_str(&format!("1 1 1 {odd}\n"));
    let p = dir.join(format!("odd-{odd}.tns"));
    std::fs::write(&p, text).unwrap();
    p
}

fn cp_apr(dir: &Path, file: &Path, extra: &[&str]) -> Output {
    let mut c = common::sptmc_command(dir);
    c.arg("cp-apr")
        .arg(file)
        .args(["--rank", "2", "--iters", "2", "--backend", "cpu"])
        .args(extra);
    common::output_within(c, 120)
}

#[test]
fn non_integers_are_found_in_the_values_as_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for odd in [
        "100000.5",
        "1e-30",
        "65504.25",
        "3.0000001",
        "0.5",
        "7.000000000001",
    ] {
        let f = tensor_with(dir, odd);
        let o = cp_apr(dir, &f, &["--non-integer", "error"]);
        common::assert_one_error_line(&o, &["not integers", "1 of 201"]);
        // Warned about, with the same count, by default.
        let o = cp_apr(dir, &f, &["--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let w = v["warnings"].to_string();
        assert!(w.contains("1 of 201 values are not integers"), "{odd}: {w}");
    }
    // Integers that fp16 cannot hold exactly are still integers.
    for even in ["100001", "1000000", "65505"] {
        let f = tensor_with(dir, even);
        let o = cp_apr(dir, &f, &["--non-integer", "error", "--json"]);
        assert!(
            o.status.success(),
            "{even}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn negatives_are_found_in_the_values_as_read() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    for odd in ["-1e-30", "-0.00001", "-3"] {
        let f = tensor_with(dir, odd);
        let o = cp_apr(dir, &f, &[]);
        common::assert_one_error_line(&o, &["negative"]);
    }
}

#[test]
fn the_census_counts_values_as_read() {
    let c = sptmc::engine::ValueCensus::of_values([100000.5, 1e-30, -1e-30, 4.0]);
    assert_eq!((c.nonzero, c.negative, c.non_integer), (4, 1, 2));
    assert_eq!(c.first_negative, Some(-1e-30));
    assert_eq!(c.first_non_integer, Some(100000.5));
}
