//! Bad options: every parse error is one `sptmc: error:` line and exit status 1 (not
//! clap's several lines and status 2); `--threads` is bounded by the machine's cores;
//! `--help` and `--version` still print and succeed.

use crate::common;

use std::path::Path;
use std::process::Output;

fn sptmc(dir: &Path, args: &[&str]) -> Output {
    let mut c = common::sptmc_command(dir);
    c.args(args);
    common::output_within(c, 60)
}

#[test]
fn parse_errors_are_one_line_and_status_1() {
    let tmp = tempfile::tempdir().unwrap();
    let f = common::small_tns(tmp.path());
    let f = f.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &[&str])> = vec![
        (vec!["cp", f, "--rank", "-1"], &["--rank", "-1"]),
        (vec!["cp", f, "--rank", "2.5"], &["--rank"]),
        (
            vec!["cp", f, "--seed", "18446744073709551616"],
            &["--seed", "too large"],
        ),
        (vec!["cp", f, "--iters", "lots"], &["--iters"]),
        (vec!["tucker", f, "--ranks", "2,,2"], &["--ranks"]),
        (vec!["tucker", f, "--ranks", "2,-2,2"], &["--ranks"]),
        (vec!["cp", f, "--out", ""], &["--out"]),
        (vec!["mttkrp", f, "--out", ""], &["--out"]),
        (
            vec!["cp", f, "--threads", "10000"],
            &["--threads", "at most"],
        ),
        (vec!["cp", f, "--threads", "-3"], &["--threads"]),
        (
            vec!["cp", f, "--threads", "0"],
            &["--threads", "at least 1"],
        ),
        (vec!["cp", f, "--backend", "tpu"], &["tpu"]),
        (vec!["cp", f, "--frobnicate"], &["--frobnicate"]),
        (vec!["predict"], &["required", "<MODEL>"]),
        (vec!["frobnicate"], &["frobnicate"]),
    ];
    for (args, words) in cases {
        let start = std::time::Instant::now();
        let o = sptmc(tmp.path(), &args);
        common::assert_one_error_line(&o, words);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(start.elapsed().as_secs() < 10, "{args:?} ran");
    }
}

#[test]
fn threads_up_to_four_per_core_run() {
    let tmp = tempfile::tempdir().unwrap();
    let f = common::small_tns(tmp.path());
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    for n in [1, cores, 4 * cores] {
        let n = n.to_string();
        let args = ["cp", f.to_str().unwrap(), "--rank", "2", "--iters", "2"];
        let o = sptmc(
            tmp.path(),
            &[&args[..], &["--threads", &n, "--backend", "cpu"]].concat(),
        );
        assert!(
            o.status.success(),
            "{n}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    let too_many = (4 * cores + 1).to_string();
    for cmd in ["cp", "tucker", "mttkrp", "cp-apr", "complete"] {
        let o = sptmc(
            tmp.path(),
            &[cmd, f.to_str().unwrap(), "--threads", &too_many],
        );
        common::assert_one_error_line(&o, &["--threads", "at most"]);
    }
}

#[test]
fn help_and_version_print_and_succeed() {
    let tmp = tempfile::tempdir().unwrap();
    for args in [vec!["--help"], vec!["cp", "--help"], vec!["--version"]] {
        let o = sptmc(tmp.path(), &args);
        assert!(o.status.success(), "{args:?}");
        assert!(!o.stdout.is_empty(), "{args:?}");
    }
    // No subcommand: the help, on stderr, and status 1.
    let o = sptmc(tmp.path(), &[]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("Usage"));
}
