//! The `sptmc` command line end to end: the main job with no arguments, the kernels
//! with --check, model files, and bad options (one clear line, non-zero exit, never a
//! panic or backtrace).

use crate::common;

use std::process::Output;

fn sptmc(args: &[&str]) -> Output {
    // The binary cache in the system's temporary folder, not the user's own.
    let mut c = common::sptmc_command(&std::env::temp_dir());
    c.args(args).output().expect("the binary runs")
}

#[test]
fn main_job_runs_with_no_arguments() {
    let o = sptmc(&["cp", "--iters", "3", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let fit = v["final_fit"].as_f64().unwrap();
    assert!(fit > 0.0 && fit < 1.0, "{v}");
    assert_eq!(v["iterations"].as_array().unwrap().len(), 3);
}

#[test]
fn kernels_check_against_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = common::small_tns(dir);
    for (op, extra) in [
        ("mttkrp", vec!["--rank", "16"]),
        ("ttmc", vec!["--ranks", "4,5,3"]),
        // One entry: that rank for every mode.
        ("ttmc", vec!["--ranks", "3"]),
        ("phi", vec!["--rank", "16"]),
    ] {
        for mode in ["0", "1", "2"] {
            let mut args = vec![op, f.to_str().unwrap(), "--mode", mode, "--check", "--json"];
            args.extend(&extra);
            let o = sptmc(&args);
            assert!(
                o.status.success(),
                "{op} {mode}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            let smape = v["accuracy"]["smape_percent"].as_f64().unwrap();
            assert!(smape <= sptmc::accuracy::SMAPE_TARGET_PERCENT, "{v}");
        }
    }
}

#[test]
fn models_are_written_and_read_back_as_initial_factors() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = common::small_tns(dir);
    let out = dir.join("model");
    let o = sptmc(&[
        "cp",
        f.to_str().unwrap(),
        "--rank",
        "4",
        "--iters",
        "4",
        "--tol",
        "0",
        "--out",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for m in 0..3 {
        let fm = sptmc::model_io::read_matrix(&out.join(format!("factor-{m}.txt"))).unwrap();
        assert_eq!(fm.cols(), 4);
    }
    let w = sptmc::model_io::read_matrix(&out.join("weights.txt")).unwrap();
    assert_eq!(w.shape(), (4, 1));
    // Restarting from the written factors continues from (about) the reached fit.
    let first: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let o2 = sptmc(&[
        "cp",
        f.to_str().unwrap(),
        "--rank",
        "4",
        "--iters",
        "1",
        "--init",
        out.to_str().unwrap(),
        "--json",
    ]);
    assert!(
        o2.status.success(),
        "{}",
        String::from_utf8_lossy(&o2.stderr)
    );
    let second: serde_json::Value = serde_json::from_slice(&o2.stdout).unwrap();
    let (f1, f2) = (
        first["final_fit"].as_f64().unwrap(),
        second["final_fit"].as_f64().unwrap(),
    );
    assert!(f2 >= f1 - 1e-3, "restart fit {f2} fell below {f1}");

    let tk = dir.join("tucker");
    let o = sptmc(&[
        "tucker",
        f.to_str().unwrap(),
        "--ranks",
        "3,3,2",
        "--iters",
        "2",
        "--out",
        tk.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let core = sptmc::model_io::read_matrix(&tk.join("core.txt")).unwrap();
    assert_eq!(core.shape(), (3, 6));
    // Restarted without --ranks: the written factors' widths are the ranks.
    let o = sptmc(&[
        "tucker",
        f.to_str().unwrap(),
        "--iters",
        "1",
        "--init",
        tk.to_str().unwrap(),
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let again: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(again["ranks"], serde_json::json!([3, 3, 2]), "{again}");
}

/// Tucker's ranks fit the tensor's order without being spelled out: none given, 8 per
/// mode (lowered to a shorter mode's length); one given, that rank for every mode.
#[test]
fn tucker_ranks_default_to_every_mode_and_broadcast_one() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("four.tns");
    let mut text = String::new();
    for n in 0..600u32 {
        let (i, j, k, l) = (n % 20 + 1, n * 7 % 12 + 1, n * 13 % 9 + 1, n % 5 + 1);
        text.push_str(&format!("{i} {j} {k} {l} {}\n", 1 + n % 4));
    }
    std::fs::write(&f, text).unwrap();
    let fs = f.to_str().unwrap();
    let core_dims = |args: &[&str]| {
        let o = sptmc(args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        assert!(v["final_fit"].as_f64().unwrap().is_finite(), "{v}");
        v["core_dims"].clone()
    };
    let base = ["tucker", fs, "--iters", "2", "--json"];
    assert_eq!(core_dims(&base), serde_json::json!([8, 8, 8, 5]));
    let mut one = base.to_vec();
    one.extend(["--ranks", "3"]);
    assert_eq!(core_dims(&one), serde_json::json!([3, 3, 3, 3]));
    // `--rank` (as `cp` spells it) and `-r` are the same option.
    for spelling in ["--rank", "-r"] {
        let mut alias = base.to_vec();
        alias.extend([spelling, "4,3,2,2"]);
        assert_eq!(
            core_dims(&alias),
            serde_json::json!([4, 3, 2, 2]),
            "{spelling}"
        );
    }
}

/// Six modes of 2^17 rows need 102 bits of key, more than the format's 96: cp, cp-apr
/// and tucker renumber the modes to their used indices (and say so), and the model
/// comes back on the tensor's own rows.
#[test]
fn coordinates_over_the_key_bits_run_on_renumbered_modes() {
    let tmp = tempfile::tempdir().unwrap();
    let f = tmp.path().join("six.tns");
    let n = 1u32 << 17;
    let mut text = String::new();
    for e in 0..400u32 {
        let c: Vec<String> = (0..6u32)
            .map(|m| ((e * (2 * m + 7919) + m * 104_729) % n + 1).to_string())
            .collect();
        text.push_str(&format!("{} {}\n", c.join(" "), 1 + e % 3));
    }
    std::fs::write(&f, text).unwrap();
    let fs = f.to_str().unwrap();
    let out = tmp.path().join("model");
    let mut first_dim = 0;
    for args in [
        vec![
            "cp",
            fs,
            "--rank",
            "2",
            "--iters",
            "3",
            "--json",
            "--out",
            out.to_str().unwrap(),
        ],
        vec!["cp-apr", fs, "--rank", "2", "--iters", "3", "--json"],
        vec!["tucker", fs, "--ranks", "2", "--iters", "2", "--json"],
    ] {
        let o = sptmc(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.success(), "{args:?}: {err}");
        assert!(
            err.contains("renumbered to its used indices"),
            "{args:?}: {err}"
        );
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        // The extents are the largest indices: each above 2^16, so 17 bits.
        let dims: Vec<u64> = (v["dims"].as_array().unwrap().iter())
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert!(
            dims.len() == 6 && dims.iter().all(|&d| d > 1 << 16),
            "{args:?}: {dims:?}"
        );
        first_dim = dims[0] as usize;
    }
    let f0 = sptmc::model_io::read_matrix(&out.join("factor-0.txt")).unwrap();
    assert_eq!(f0.shape(), (first_dim, 2));
    let nonzero_rows = (0..f0.rows())
        .filter(|&i| f0.row(i).iter().any(|&v| v != 0.0))
        .count();
    assert!(
        nonzero_rows > 0 && nonzero_rows <= 400,
        "{nonzero_rows} rows"
    );
}

#[test]
fn info_reports_hls_statistics() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = common::small_tns(dir);
    let o = sptmc(&["info", f.to_str().unwrap(), "--json"]);
    assert!(o.status.success());
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["dims"], serde_json::json!([40, 30, 20]));
    assert!(v["hls"]["coo_bytes"].as_u64().unwrap() > v["hls_bytes"].as_u64().unwrap());
}

#[test]
fn bad_options_give_one_line_and_a_nonzero_exit() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = common::small_tns(dir);
    let fs = f.to_str().unwrap();
    let unreadable = dir.join("dir.tns");
    std::fs::create_dir_all(&unreadable).unwrap();
    let garbage = dir.join("garbage.tns");
    std::fs::write(&garbage, "1 2 3 4\n1 2 x 4\n").unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["cp", fs, "--rank", "0"],
            "rank must be at least 1, got 0",
        ),
        (
            vec!["tucker", fs, "--ranks", "8,8"],
            "2 ranks for a tensor of order 3",
        ),
        (
            vec!["tucker", fs, "--ranks", "8,0,8"],
            "ranks[1] must be at least 1",
        ),
        (vec!["cp", "/no/such/file.tns"], "no such file"),
        (vec!["cp", unreadable.to_str().unwrap()], "dir.tns"),
        (vec!["cp", garbage.to_str().unwrap()], "garbage.tns:2"),
        (vec!["mttkrp", fs, "--mode", "3"], "mode 3 is out of range"),
        (
            vec!["ttmc", fs, "--rank", "4", "--ranks", "4,4,4"],
            "cannot be used with",
        ),
        (
            vec!["ttmc", fs, "--ranks", "4,4"],
            "--ranks has 2 entries, the tensor has 3 modes",
        ),
        (
            vec!["cp", fs, "--seed", "3", "--init", "/tmp"],
            "cannot be used with",
        ),
        (vec!["cp", fs, "--threads", "0"], "--threads"),
        (vec!["cp", fs, "--tol=-1"], "tol"),
        (vec!["mttkrp", fs, "--backend", "tpu"], "tpu"),
        (vec!["frobnicate"], "unrecognized subcommand"),
        (
            vec!["mttkrp", fs, "--rank", "4000000000000"],
            "not enough memory",
        ),
        (
            vec!["ttmc", fs, "--ranks", "1,100000,100000"],
            "not enough memory",
        ),
    ];
    for (args, needle) in cases {
        let o = sptmc(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{args:?} succeeded");
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(
            !err.contains("panicked") && !err.contains("backtrace"),
            "{args:?}: {err}"
        );
        let error_lines = err.lines().filter(|l| l.contains("error")).count();
        assert_eq!(error_lines, 1, "{args:?}: {err}");
    }
}

/// `bench --threshold` prepares every op at the given threshold (the HLS-S-only and
/// HLS-D-only variants of the GPU comparison): the JSON report says so.
#[test]
fn bench_takes_an_explicit_threshold() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = common::small_tns(dir);
    for t in ["1", "4097"] {
        let args = [
            "bench",
            f.to_str().unwrap(),
            "--threshold",
            t,
            "--reps",
            "1",
            "--backend",
            "cpu",
            "--json",
        ];
        let o = sptmc(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let parts = v["tensors"][0]["prepare"]["parts"].as_array().unwrap();
        assert_eq!(parts.len(), 2, "{v}");
        for p in parts {
            assert_eq!(p["threshold"].to_string(), t, "{v}");
            let dense = p["dense_share"].as_f64().unwrap();
            // Every nonzero of the generated tensor sits in some non-empty tile.
            let want = if t == "1" { 1.0 } else { 0.0 };
            assert_eq!(dense, want, "{v}");
        }
    }
}

/// A binary carried to another machine finds no `tuning/` folder and no build tree: in
/// an empty folder, with an empty home and no `SPTMC_TUNING_DIR`, `sptmc cp` runs on
/// its built-in tensor with the compiled-in profiles and says which one it used.
#[test]
fn a_copied_binary_uses_and_names_the_compiled_in_profiles() {
    let place = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let bin = place.path().join("sptmc");
    std::fs::copy(env!("CARGO_BIN_EXE_sptmc"), &bin).unwrap();
    // A test running beside this one may fork while the copy's write handle is open,
    // and its child holds that handle until it execs: running the copy then fails with
    // ETXTBSY ("text file busy") for a moment. Retry that error only.
    const ETXTBSY: i32 = 26;
    let mut tries = 0;
    let o = loop {
        match std::process::Command::new(&bin)
            .args(["cp", "--iters", "1", "--backend", "cpu"])
            .current_dir(place.path())
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path())
            .env("XDG_CACHE_HOME", home.path())
            .env_remove("SPTMC_TUNING_DIR")
            .output()
        {
            Err(e) if e.raw_os_error() == Some(ETXTBSY) && tries < 100 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => break r.expect("the copied binary runs"),
        }
    };
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("mttkrp tile threshold") && err.contains("(built-in tuning/"),
        "{err}"
    );
    assert!(!err.contains("warning"), "{err}");
}

/// `sptmc cp-apr` on a small count tensor: JSON with the final log-likelihood and one
/// entry per iteration, the model files, a resumed run from them, and the
/// non-integer and rank-0 refusals as one line and a non-zero exit.
#[test]
fn cp_apr_runs_writes_its_model_and_refuses_bad_counts() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let f = dir.join("counts.tns");
    let mut text = String::new();
    for k in 0..400u32 {
        let (i, j, l) = (k % 17 + 1, (k * 7) % 13 + 1, (k * 5) % 11 + 1);
        text.push_str(&format!("{i} {j} {l} {}\n", k % 4 + 1));
    }
    std::fs::write(&f, text).unwrap();
    let file = f.to_str().unwrap();
    let out = dir.join("model");
    let o = sptmc(&[
        "cp-apr",
        file,
        "--rank",
        "3",
        "--iters",
        "4",
        "--tol",
        "0",
        "--json",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ll = v["log_likelihood"].as_f64().unwrap();
    let iters = v["iterations"].as_array().unwrap();
    assert_eq!(iters.len(), 4, "{v}");
    assert_eq!(iters[3]["log_likelihood"].as_f64().unwrap(), ll);
    assert!(ll < 0.0 && ll.is_finite(), "{v}");
    for name in [
        "factor-0.txt",
        "factor-1.txt",
        "factor-2.txt",
        "weights.txt",
        "model.json",
    ] {
        assert!(out.join(name).is_file(), "{name}");
    }
    let o = sptmc(&[
        "cp-apr",
        file,
        "--rank",
        "3",
        "--iters",
        "2",
        "--init",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("final log-likelihood"));

    let frac = dir.join("frac.tns");
    std::fs::write(&frac, "1 1 1 2\n2 3 1 1.5\n3 2 2 4\n").unwrap();
    let o = sptmc(&[
        "cp-apr",
        frac.to_str().unwrap(),
        "--rank",
        "2",
        "--iters",
        "2",
    ]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("warning: 1 of 3 values are not integers"));
    for args in [
        vec!["cp-apr", frac.to_str().unwrap(), "--non-integer", "error"],
        vec!["cp-apr", file, "--rank", "0"],
    ] {
        let o = sptmc(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains("error:") && !err.contains("panicked"), "{err}");
    }
}
