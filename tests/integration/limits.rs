//! Ranks and sizes a user can type: every command plans its memory from the shapes
//! before any work and refuses a plan beyond the smallest limit (MemAvailable,
//! `ulimit -v`/`-d`, the cgroup) with one line saying how much and which option
//! reduces it; under `ulimit -v 4000000` every command on every input of the tests
//! either succeeds or exits 1 with one line — never a signal, never an abort.

use crate::common;

use common::{assert_one_error_line, output_within, sptmc_command};
use sptmc::decomp::{CpOptions, TuckerOptions, cp_als, tucker_hooi};
use sptmc::engine::Engine;
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::tensor::{CooTensor, binary, tns};
use sptmc::{Error, Op};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The address-space limit of the issue: about 4 GB.
const ULIMIT_V_KIB: u64 = 4_000_000;

/// `sptmc ARGS` under `ulimit -v`, with the cache under `cache`.
fn limited(cache: &Path, args: &[&str]) -> Output {
    let mut c = Command::new("sh");
    c.arg("-c")
        .arg(format!("ulimit -v {ULIMIT_V_KIB} && exec \"$0\" \"$@\""))
        .arg(env!("CARGO_BIN_EXE_sptmc"))
        .args(args);
    // The environment of sptmc_command, on the shell.
    let base = sptmc_command(cache);
    for (k, v) in base.get_envs() {
        if let Some(v) = v {
            c.env(k, v);
        }
    }
    output_within(c, 300)
}

fn write_text(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

/// A 1000 × 1000 × 400 tensor with 30,000 nonzeros: room for large Tucker ranks.
fn wide(dir: &Path) -> PathBuf {
    let x = generate(&GenSpec {
        dims: vec![1000, 1000, 400],
        nnz: 30_000,
        pattern: Pattern::Uniform,
        seed: 3,
    })
    .unwrap();
    let p = dir.join("wide.tns");
    tns::write(&p, &x).unwrap();
    p
}

/// An order-20 tensor of extent 10 per mode.
fn order20(dir: &Path) -> PathBuf {
    let mut text = String::new();
    for k in 0..50u32 {
        let c: Vec<String> = (0..20)
            .map(|m| ((k * 7 + m * 3) % 10 + 1).to_string())
            .collect();
        text += &format!("{} {}\n", c.join(" "), k + 1);
    }
    write_text(dir, "order20.tns", &text)
}

/// A binary file whose first mode is 2^32 long (what a fuzzed header can declare).
fn huge_extent(dir: &Path) -> PathBuf {
    let x = CooTensor::new(
        vec![1 << 32, 3, 3],
        vec![vec![0, u32::MAX], vec![0, 2], vec![1, 2]],
        vec![1.0, 2.0],
    )
    .unwrap();
    let p = dir.join("huge-extent.sptb");
    binary::write(&p, &x).unwrap();
    p
}

#[cfg(unix)]
#[test]
fn plans_beyond_the_limit_are_refused_with_the_option_that_helps() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let wide = wide(d);
    let o20 = order20(d);
    let idx31 = write_text(d, "idx31.tns", "1 1 2147483648 1.0\n1 1 1 2.0\n");
    let huge = huge_extent(d);
    let s = |p: &PathBuf| p.to_str().unwrap().to_string();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec!["cp".into(), s(&wide), "--rank".into(), "20000".into()],
            "--rank",
        ),
        (
            vec![
                "tucker".into(),
                s(&wide),
                "--ranks".into(),
                "1000,1000,400".into(),
            ],
            "--ranks",
        ),
        (
            vec!["tucker".into(), s(&idx31), "--ranks".into(), "1,1,1".into()],
            "2147483648",
        ),
        (
            vec!["cp".into(), s(&huge), "--rank".into(), "2".into()],
            "4294967296",
        ),
        (
            vec!["ttmc".into(), s(&o20), "--rank".into(), "3".into()],
            "--ranks",
        ),
        (
            vec!["mttkrp".into(), s(&huge), "--rank".into(), "64".into()],
            "--rank",
        ),
    ];
    for (args, word) in cases {
        let mut args: Vec<&str> = args.iter().map(String::as_str).collect();
        args.extend(["--backend", "cpu"]);
        let o = limited(d, &args);
        assert_one_error_line(&o, &["not enough memory", "ulimit -v", word]);
    }
}

#[test]
fn the_library_refuses_a_decomposition_beyond_the_memory_available() {
    let e = Engine::cpu();
    let x = generate(&GenSpec {
        dims: vec![30, 20, 10],
        nnz: 500,
        pattern: Pattern::Uniform,
        seed: 1,
    })
    .unwrap();
    let p = e.prepare_with_thresholds(&x, &[(Op::Mttkrp, 78)]).unwrap();
    // 9 Gram-sized matrices of 400,000² f64: over 10 PiB.
    let err = cp_als(&e, &p, &CpOptions::with_rank(400_000)).unwrap_err();
    assert!(matches!(err, Error::Memory { .. }), "{err}");
    // One huge mode: every TTMc output of mode 2 is 2^32 rows.
    let y = CooTensor::new(vec![2, 2, 1 << 32], vec![vec![0, 1]; 3], vec![1.0, 2.0]).unwrap();
    let p = e.prepare_with_thresholds(&y, &[(Op::Ttmc, 61)]).unwrap();
    let err = tucker_hooi(&e, &p, &TuckerOptions::with_ranks(vec![1, 1, 1])).unwrap_err();
    assert!(matches!(err, Error::Memory { .. }), "{err}");
}

/// Every input the tests use, written into `d`.
fn corpus(d: &Path) -> Vec<PathBuf> {
    let small_p = common::small_tns(d);
    let small = tns::read(&small_p).unwrap().0;
    let small_gz = d.join("small.tns.gz");
    tns::write(&small_gz, &small).unwrap();
    let mut garbage_gz = std::fs::read(&small_gz).unwrap();
    garbage_gz.extend_from_slice(b"\0\0\0\0trailing garbage");
    let trailing = d.join("trailing.tns.gz");
    std::fs::write(&trailing, garbage_gz).unwrap();
    let dup = d.join("dup.sptb");
    binary::write(
        &dup,
        &CooTensor::new(vec![3, 3, 3], vec![vec![0, 0, 2]; 3], vec![1.0, 2.0, 4.0]).unwrap(),
    )
    .unwrap();
    let mut overflow = String::new();
    for j in 1..=5 {
        for k in 1..=8 {
            overflow += &format!("1 {j} {k} 3.3e38\n");
        }
    }
    vec![
        small_p,
        small_gz,
        trailing,
        dup,
        huge_extent(d),
        order20(d),
        write_text(d, "one.tns", "1 1 1 3.7\n"),
        write_text(d, "order1.tns", "1 1.5\n3 2\n"),
        write_text(d, "order4.tns", "1 2 3 4 1\n2 2 2 2 2\n3 1 1 1 3\n"),
        write_text(d, "subnormal.tns", "1 1 1 1e-320\n2 2 2 1e-320\n"),
        write_text(d, "tiny.tns", "1 1 1 1e-39\n2 2 2 2e-39\n"),
        write_text(d, "overflow.tns", &overflow),
        write_text(d, "beyond-f32.tns", "1 1 1 1e39\n2 2 2 1\n"),
        write_text(d, "idx31.tns", "1 1 2147483648 1.0\n1 1 1 2.0\n"),
        write_text(d, "garbage.tns", "1 2 3 4\n1 2 x 4\n"),
        write_text(d, "empty.tns", "# nothing\n"),
        write_text(d, "comment.tns", "1 1 1 2.5 # note\n2 2 2 1\n"),
    ]
}

#[cfg(unix)]
#[test]
fn every_command_on_every_input_succeeds_or_exits_1_with_one_line() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let inputs = corpus(d);
    let out = d.join("out.sptb");
    let os = out.to_str().unwrap();
    let commands: Vec<Vec<&str>> = vec![
        vec!["info"],
        vec!["mttkrp", "--rank", "8", "--reps", "1", "--backend", "cpu"],
        vec!["ttmc", "--rank", "4", "--reps", "1", "--backend", "cpu"],
        vec!["cp", "--rank", "4", "--iters", "2", "--backend", "cpu"],
        vec!["cp", "--rank", "10000", "--iters", "1", "--backend", "cpu"],
        vec![
            "tucker",
            "--ranks",
            "2,2,2",
            "--iters",
            "2",
            "--backend",
            "cpu",
        ],
        vec![
            "tucker",
            "--ranks",
            "1000,1000,400",
            "--iters",
            "1",
            "--backend",
            "cpu",
        ],
        vec!["convert", "--force"],
    ];
    let (mut ok, mut refused) = (0, 0);
    for input in &inputs {
        for cmd in &commands {
            let mut args = vec![cmd[0], input.to_str().unwrap()];
            if cmd[0] == "convert" {
                args.push(os);
            }
            args.extend(&cmd[1..]);
            let o = limited(d, &args);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.signal(), None, "{args:?} died of a signal: {err}");
            match o.status.code() {
                Some(0) => ok += 1,
                Some(1) => {
                    refused += 1;
                    assert_one_error_line(&o, &[]);
                }
                other => panic!("{args:?}: exit status {other:?}: {err}"),
            }
        }
    }
    eprintln!("{ok} runs succeeded, {refused} were refused with one line");
    // Neither side may be empty: the corpus has good and bad inputs.
    assert!(ok > 20 && refused > 20, "{ok} succeeded, {refused} refused");
}
