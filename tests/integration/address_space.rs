//! Under `ulimit -v` a command's memory plan is the whole story: at every limit, from
//! one the plan refuses up to one the run fits in, a command either succeeds or is
//! refused by its plan before any work, with one line naming `ulimit -v` — never a plan
//! that passes and then an allocation that fails. The address space a run reserves
//! without touching (worker threads' malloc arenas and dense-algebra buffers) counts
//! against `ulimit -v` though not in the resident memory, so a plan that counted only
//! what becomes resident passed and then failed here.

use crate::common;

use common::{output_within, sptmc_command};
use sptmc::tensor::binary;
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use std::path::Path;

/// A power-law tensor with one long mode, large enough that its form and factors are
/// tens of MB: 400,000 nonzeros on 3,000 × 100,000 × 1,000.
fn long_mode(dir: &Path) -> std::path::PathBuf {
    let x = generate(&GenSpec {
        dims: vec![3_000, 100_000, 1_000],
        nnz: 400_000,
        pattern: Pattern::PowerLaw { alpha: 1.0 },
        seed: 11,
    })
    .unwrap();
    let p = dir.join("long-mode.sptb");
    binary::write(&p, &x).unwrap();
    p
}

/// `sptmc ARGS` under `ulimit -v KIB`.
fn under_limit(cache: &Path, kib: u64, args: &[&str]) -> std::process::Output {
    let mut c = std::process::Command::new("sh");
    c.arg("-c")
        .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_sptmc"))
        .args(args);
    for (k, v) in sptmc_command(cache).get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    output_within(c, 300)
}

/// Raises the limit by 8 % a step from 64 MiB until `args` succeeds, and checks every
/// failure on the way was the plan's refusal; then checks the two next limits succeed
/// too. Returns the first limit that succeeded, in KiB.
fn sweep(cache: &Path, args: &[&str]) -> u64 {
    let mut kib = 64 * 1024u64;
    let mut refused = 0;
    let first_ok = loop {
        assert!(
            kib < 16 * 1024 * 1024,
            "{args:?} never succeeded below 16 GiB"
        );
        let o = under_limit(cache, kib, args);
        let err = String::from_utf8_lossy(&o.stderr);
        match o.status.code() {
            Some(0) => break kib,
            Some(1) => {
                let last = err.lines().last().unwrap_or("");
                // The plan's refusal names the limit it read; anything else (an
                // allocation that failed, a workspace refused mid-run, a crash) is a
                // plan that passed and should not have.
                assert!(
                    last.contains("not enough memory") && last.contains("ulimit -v"),
                    "{args:?} under ulimit -v {kib}: the plan passed, then the run failed:\n{err}"
                );
                refused += 1;
            }
            other => panic!("{args:?} under ulimit -v {kib}: exit status {other:?}:\n{err}"),
        }
        kib = kib * 108 / 100;
    };
    assert!(
        refused > 0,
        "{args:?} succeeded at the lowest limit: the sweep does not reach the plan's edge"
    );
    for k in [first_ok * 108 / 100, first_ok * 117 / 100] {
        let o = under_limit(cache, k, args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "{args:?} succeeded under ulimit -v {first_ok} but not {k}:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
    eprintln!("{args:?}: refused by its plan {refused} times, succeeds from ulimit -v {first_ok}");
    first_ok
}

#[cfg(target_os = "linux")]
#[test]
fn under_ulimit_v_a_plan_that_passes_is_a_run_that_fits() {
    let dir = tempfile::tempdir().unwrap();
    let x = long_mode(dir.path());
    let x = x.to_str().unwrap();
    let common = ["--iters", "2", "--threads", "2", "--no-cache"];
    for cmd in [
        vec!["cp", x, "--rank", "16"],
        vec!["tucker", x, "--ranks", "8,8,8"],
        vec!["cp-apr", x, "--rank", "8"],
    ] {
        let mut args = cmd.clone();
        args.extend(common);
        sweep(dir.path(), &args);
    }
}
