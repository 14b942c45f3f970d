//! Messages that name the real cause: a symlink loop, a comment after a value, gzip
//! files with padding or trailing garbage (read, as `gzip -d` does), negative numbers
//! given to options, `--iters 0`, an all-zero `--init` factor, a kernel on an order-1
//! tensor, values below the smallest f64, a byte order mark.

use crate::common;

use common::{assert_one_error_line, output_within, sptmc_command};
use sptmc::Matrix;
use sptmc::model_io::write_factors;
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::tensor::tns;
use std::io::Write;
use std::path::Path;

fn run(dir: &Path, args: &[&str]) -> std::process::Output {
    let mut c = sptmc_command(dir);
    c.args(args);
    output_within(c, 120)
}

#[cfg(unix)]
#[test]
fn a_symlink_loop_is_named_as_one() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.tns"), dir.path().join("b.tns"));
    std::os::unix::fs::symlink(&b, &a).unwrap();
    std::os::unix::fs::symlink(&a, &b).unwrap();
    let o = run(dir.path(), &["info", a.to_str().unwrap()]);
    assert_one_error_line(&o, &["a.tns", "symbolic links"]);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("no such file"));
}

#[test]
fn a_comment_after_the_value_is_accepted() {
    let text = "# header comment\n1 1 1 2.5 # first\n2 3 2 1.5#second\n\t3 2 1 -1\t# third\n";
    let (x, report) = tns::parse(text.as_bytes(), Path::new("c.tns")).unwrap();
    assert_eq!(x.dims(), &[3, 3, 2]);
    assert_eq!(x.values(), &[2.5, 1.5, -1.0]);
    assert_eq!(report.entries, 3);
    // A `#` that cuts a line short is named as the cause.
    let err = tns::parse(b"1 1 1 2.5\n1 2 # 3 4\n", Path::new("c.tns"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("c.tns:2") && err.contains("comment"), "{err}");
    // A header line may carry one too.
    let (y, _) = tns::parse(b"3 # order\n4 4 4 # dims\n1 1 1 1\n", Path::new("h.tns")).unwrap();
    assert_eq!(y.dims(), &[4, 4, 4]);
}

#[test]
fn gzip_padding_and_trailing_garbage_are_ignored_like_gzip_does() {
    let dir = tempfile::tempdir().unwrap();
    let x = generate(&GenSpec {
        dims: vec![20, 20, 20],
        nnz: 500,
        pattern: Pattern::Uniform,
        seed: 2,
    })
    .unwrap();
    let clean = dir.path().join("x.tns.gz");
    tns::write(&clean, &x).unwrap();
    let gz = std::fs::read(&clean).unwrap();
    for (name, tail) in [
        ("zeros", vec![0u8; 1024]),
        ("garbage", b"trailing garbage\n".to_vec()),
        ("one byte", vec![0x1f]),
    ] {
        let p = dir
            .path()
            .join(format!("{}.tns.gz", name.replace(' ', "-")));
        let mut f = std::fs::File::create(&p).unwrap();
        f.write_all(&gz).unwrap();
        f.write_all(&tail).unwrap();
        drop(f);
        let (y, report) = tns::read(&p).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(y, x, "{name}");
        assert_eq!(report.trailing_bytes, tail.len() as u64, "{name}");
        let o = run(dir.path(), &["info", p.to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{name}: {err}");
        assert!(err.contains("ignored"), "{name}: {err}");
    }
    // Two members and then padding: both members are read.
    let two = dir.path().join("two.tns.gz");
    std::fs::write(&two, [&gz[..], &gz[..], &[0u8; 16][..]].concat()).unwrap();
    let (y, report) = tns::read(&two).unwrap();
    assert_eq!(y.nnz(), x.nnz());
    assert_eq!(report.duplicates_summed, x.nnz());
    assert_eq!(report.trailing_bytes, 16);
}

/// A value below the smallest f64 (`1e-400`) reads as 0, and the command says how many
/// and where, again when it reads the tensor from the cache; a byte order mark before
/// the first line is read past.
#[test]
fn values_read_as_zero_are_named_and_a_byte_order_mark_is_read_past() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("tiny.tns");
    std::fs::write(
        &p,
        b"\xEF\xBB\xBF1 1 1 2.5\n2 2 1 1e-400\n1 2 2 -3E-999\n2 1 2 1\n",
    )
    .unwrap();
    // Parsed without the cache, parsed into it, and read back from it: each says so.
    let cache = dir.path().join("cache");
    for (args, from) in [
        (vec!["--no-cache"], "not cached"),
        (vec![], "cached in"),
        (vec![], "from cache"),
    ] {
        let mut a = vec!["info", p.to_str().unwrap()];
        a.extend(args);
        let o = run(&cache, &a);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{err}");
        assert!(err.contains(from), "{from}: {err}");
        assert!(
            err.contains("2 values below the smallest f64 read as 0 (the first on line 2)"),
            "{from}: {err}"
        );
    }
}

#[test]
fn negative_numbers_reach_the_check_that_names_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let f = common::small_tns(dir.path());
    let fs = f.to_str().unwrap();
    for (args, words) in [
        (vec!["cp", fs, "--tol", "-1"], vec!["tol must be", "-1"]),
        (
            vec!["tucker", fs, "--tol", "-0.5"],
            vec!["tol must be", "-0.5"],
        ),
        (
            vec!["cp", fs, "--iters", "0"],
            vec!["iters must be at least 1"],
        ),
        (
            vec!["tucker", fs, "--iters", "0"],
            vec!["iters must be at least 1"],
        ),
        (
            vec!["cp-apr", fs, "--inner", "0"],
            vec!["inner must be at least 1"],
        ),
    ] {
        let o = run(dir.path(), &args);
        assert_one_error_line(&o, &words);
        // The names users give, not the library's fields.
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !err.contains("max_iters") && !err.contains("max_inner"),
            "{err}"
        );
    }
    // Options that take no negative number say so, without suggesting `-- -1`.
    for args in [
        vec!["mttkrp", fs, "--mode", "-1"],
        vec!["cp", fs, "--rank", "-3"],
        vec!["cp", fs, "--seed", "-1"],
    ] {
        let o = run(dir.path(), &args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success());
        assert!(err.contains("invalid value '-"), "{args:?}: {err}");
        assert!(!err.contains("-- -"), "{args:?}: {err}");
    }
}

#[test]
fn an_all_zero_initial_factor_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = common::small_tns(dir.path());
    let fs = f.to_str().unwrap();
    let dims = [40, 30, 20];
    let init = |name: &str, zero_mode: usize, zero_col: Option<usize>, rank: usize| {
        let d = dir.path().join(name);
        let factors: Vec<Matrix> = dims
            .iter()
            .enumerate()
            .map(|(m, &n)| {
                let mut a = Matrix::random(n, rank, m as u64 + 1);
                for i in 0..n {
                    for r in 0..rank {
                        if m == zero_mode && zero_col.is_none_or(|c| c == r) {
                            a.set(i, r, 0.0);
                        }
                    }
                }
                a
            })
            .collect();
        write_factors(&d, &factors).unwrap();
        d.to_str().unwrap().to_string()
    };
    let all = init("all-zero", 1, None, 3);
    let col = init("zero-column", 2, Some(1), 3);
    let mode0 = init("zero-mode-0", 0, None, 3);
    let o = run(dir.path(), &["cp", fs, "--rank", "3", "--init", &all]);
    assert_one_error_line(&o, &["mode 1", "all zero"]);
    let o = run(
        dir.path(),
        &["tucker", fs, "--ranks", "3,3,3", "--init", &all],
    );
    assert_one_error_line(&o, &["mode 1", "all zero"]);
    let o = run(dir.path(), &["cp", fs, "--rank", "3", "--init", &col]);
    assert_one_error_line(&o, &["column 1", "mode 2"]);
    // Mode 0's initial factor is never read: zero there is fine.
    let o = run(
        dir.path(),
        &[
            "cp",
            fs,
            "--rank",
            "3",
            "--iters",
            "2",
            "--init",
            &mode0,
            "--backend",
            "cpu",
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn kernels_on_an_order_one_tensor_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("o1.tns");
    std::fs::write(&f, "1 1.5\n98 2\n").unwrap();
    for args in [
        vec!["mttkrp", f.to_str().unwrap(), "--rank", "8"],
        vec!["ttmc", f.to_str().unwrap(), "--rank", "8"],
    ] {
        let o = run(dir.path(), &args);
        assert_one_error_line(&o, &["order ≥ 2", "one mode"]);
    }
}
