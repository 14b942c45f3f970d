//! Memory across MPI ranks: each rank holds its share of the nonzeros, never the whole
//! tensor, so a run fits a per-process memory limit (`ulimit -v`) that one process
//! cannot meet on the same tensor.
//!
//! Needs a build with `--features mpi` and `mpirun`; skipped visibly otherwise (a
//! failure under `SPTMC_REQUIRE_MPI=1`).

use crate::common;

use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::tensor::tns;
use std::process::Command;

/// The largest factor allowed between a rank's planned and measured memory, either way
/// (the single process's plans are held to the same: `memory_plan.rs`).
const PLAN_WITHIN: f64 = 1.5;

#[test]
fn four_ranks_fit_under_a_memory_limit_that_one_process_does_not() {
    if !cfg!(feature = "mpi") {
        common::skip::<()>("SPTMC_REQUIRE_MPI", "built without --features mpi");
        return;
    }
    if !Command::new("mpirun")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        common::skip::<()>("SPTMC_REQUIRE_MPI", "no mpirun on the PATH");
        return;
    }
    let x = generate(&GenSpec {
        dims: vec![2000, 2000, 2000],
        nnz: 4_000_000,
        pattern: Pattern::Uniform,
        seed: 2,
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("big.tns");
    tns::write(&f, &x).unwrap();
    drop(x);
    let bin = env!("CARGO_BIN_EXE_sptmc");
    let f = f.to_str().unwrap();
    // 380 MB of address space per process on a machine with a 32 MiB last-level
    // cache. One glibc malloc arena per process (MPI's threads would each reserve
    // 64 MiB of address space for their own), in both runs. Each rank's plan (about
    // 70 MiB for its million nonzeros, besides the address space MPI, the binary and
    // the workers' reserves take) fits with some 40 MiB to spare in a build with the
    // kernels embedded; one process's plan (about 270 MiB) misses by some 90 MiB.
    // The one worker of every run reserves twice the last-level cache for faer's
    // packing buffers (520 MiB on a 260 MiB L3), in both runs alike: the limit moves
    // with it and both margins stay.
    let llc = sptmc::memplan::last_level_cache_bytes().unwrap_or(32 << 20) as i64;
    let limit_kb = 380_000 + (2 * llc - (64 << 20)) / 1024;
    let limit = format!("ulimit -v {limit_kb}");
    let one = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{limit}; exec {bin} cp {f} --rank 8 --iters 2 --no-cache --threads 1"
        ))
        .env("MALLOC_ARENA_MAX", "1")
        .env_remove("OMPI_COMM_WORLD_SIZE")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&one.stderr);
    assert_eq!(one.status.code(), Some(1), "one process: {err}");
    assert!(err.contains("memory"), "one process: {err}");
    let four = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{limit}; exec mpirun --allow-run-as-root --oversubscribe -np 4 -x RAYON_NUM_THREADS=1 -x MALLOC_ARENA_MAX=1 {bin} cp {f} --rank 8 --iters 2"
        ))
        .output()
        .unwrap();
    assert!(
        four.status.success(),
        "4 ranks: {}",
        String::from_utf8_lossy(&four.stderr)
    );
}

/// Rank 0 writes the model without holding a whole factor: on a tensor whose mode 0 has
/// a million rows (its factor is 128 MB in f64 at rank 16), rank 0's peak memory, the
/// writing included, stays within a quarter of that factor of the other ranks' (each
/// holds a quarter of mode 0's rows, as rank 0 does); gathering the factor, as a whole,
/// would add it several times over.
///
/// On the same runs, where the factors' rows dominate, every rank's memory plan
/// (`planned_bytes`) is within [`PLAN_WITHIN`] of its peak less the peak of the same
/// command on a tiny tensor (the binary, MPI and thread stacks), as the single
/// process's plans are (`memory_plan.rs`).
#[test]
fn rank_0_writes_the_model_without_holding_a_whole_factor() {
    if common::mpi::mpirun().is_none() {
        return;
    }
    let baseline = |cmd: &str, dir: &std::path::Path| -> u64 {
        let tiny = generate(&GenSpec {
            dims: vec![8, 8, 8],
            nnz: 64,
            pattern: Pattern::Uniform,
            seed: 5,
        })
        .unwrap();
        let f = common::mpi::write(dir, "tiny.tns", &tiny);
        let args = [cmd, f.as_str(), "--rank", "16", "--iters", "2", "--json"];
        let got = common::mpi::json(&common::mpi::ranks(4, &args), cmd);
        let peaks = got["distributed"]["per_rank"].as_array().unwrap().iter();
        peaks
            .map(|r| r["peak_bytes"].as_u64().unwrap())
            .min()
            .unwrap()
    };
    // A million nonzeros, so that about 63 % of mode 0's rows hold some: the runs hold
    // every row (a mode mostly empty would run on its used rows alone).
    let dims = vec![1_000_000, 6, 5];
    let x = generate(&GenSpec {
        dims: dims.clone(),
        nnz: 1_000_000,
        pattern: Pattern::Uniform,
        seed: 3,
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = common::mpi::write(dir.path(), "long.tns", &x);
    let out = dir.path().join("model");
    let whole = (dims[0] * 16 * 8) as u64;
    for cmd in ["cp", "cp-apr"] {
        let args = [
            cmd,
            f.as_str(),
            "--rank",
            "16",
            "--iters",
            "2",
            "--json",
            "--out",
            out.to_str().unwrap(),
        ];
        let got = common::mpi::json(&common::mpi::ranks(4, &args), cmd);
        assert_eq!(got["distributed"]["rows_held"], serde_json::json!(dims));
        let peaks: Vec<u64> = got["distributed"]["per_rank"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["peak_bytes"].as_u64().unwrap())
            .collect();
        let program = baseline(cmd, dir.path());
        for r in got["distributed"]["per_rank"].as_array().unwrap() {
            let planned = r["planned_bytes"].as_u64().unwrap() as f64;
            let used = r["peak_bytes"].as_u64().unwrap().saturating_sub(program) as f64;
            assert!(
                planned <= used * PLAN_WITHIN && used <= planned * PLAN_WITHIN,
                "{cmd}, rank {}: planned {} MB, used {} MB above the program's {} MB",
                r["rank"],
                planned / 1e6,
                used / 1e6,
                program / 1_000_000
            );
        }
        let others = peaks[1..].iter().copied().max().unwrap();
        assert!(
            peaks[0] < others + whole / 4,
            "{cmd}: rank 0 peaked at {} MB, the others at most at {} MB; the whole factor of mode 0 is {} MB",
            peaks[0] >> 20,
            others >> 20,
            whole >> 20
        );
        let text = std::fs::read_to_string(out.join("factor-0.txt")).unwrap();
        let rows = got["dims"][0].as_u64().unwrap() as usize;
        assert!(rows > 990_000, "{cmd}: {rows} rows");
        assert_eq!(text.lines().count(), rows + 1, "{cmd}");
        let planned: Vec<u64> = (got["distributed"]["per_rank"].as_array().unwrap().iter())
            .map(|r| r["planned_bytes"].as_u64().unwrap() >> 20)
            .collect();
        eprintln!(
            "{cmd}: peak memory per rank {:?} MB, planned {planned:?} MB, the program {} MB",
            peaks.iter().map(|p| p >> 20).collect::<Vec<_>>(),
            program >> 20
        );
    }
}

/// A block whose rank's memory plan does not fit the limit stops every rank with one
/// error line, from the lowest such rank, naming it and the memory: before any rank
/// draws its factor rows or prepares its block (which would otherwise abort on a failed
/// allocation). Mode 0 has 20 M rows and few nonzeros, so the ranks read and exchange
/// the tensor within 1.5 GB each, while each half of mode 0's factor at rank 64 alone
/// (10 M rows × 64 × 4 bytes, 2.6 GB) does not fit it. For CP-ALS and CP-APR.
#[test]
fn a_block_over_the_memory_limit_stops_every_rank_with_one_line() {
    if common::mpi::mpirun().is_none() {
        return;
    }
    let x = generate(&GenSpec {
        dims: vec![20_000_000, 6, 5],
        nnz: 20_000,
        pattern: Pattern::Uniform,
        seed: 4,
    })
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let f = common::mpi::write(dir.path(), "long.tns", &x);
    let bin = env!("CARGO_BIN_EXE_sptmc");
    for cmd in ["cp", "cp-apr"] {
        let got = Command::new("sh")
            .arg("-c")
            .arg(format!(
                "ulimit -v 1500000; exec mpirun --allow-run-as-root --oversubscribe -np 2 -x RAYON_NUM_THREADS=1 -x MALLOC_ARENA_MAX=1 {bin} {cmd} {f} --rank 64 --iters 2"
            ))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&got.stderr);
        assert_eq!(got.status.code(), Some(1), "{cmd}: {err}");
        let lines: Vec<&str> = err.lines().filter(|l| l.contains("error:")).collect();
        assert_eq!(lines.len(), 1, "{cmd}: {err}");
        assert!(
            lines[0].starts_with("sptmc: error: not enough memory:")
                && lines[0].contains("on MPI rank 0's block")
                && lines[0].contains("or run on more ranks"),
            "{cmd}: {err}"
        );
        assert!(!err.contains("memory allocation of"), "{cmd}: {err}");
    }
}

/// A mode of 2³² rows holding a few nonzeros: the ranks count its rows by the ones
/// used (a count per row would be 32 GiB on every rank, and every rank's allocation
/// failed on its own line), so what stops the run is the memory plan, once: CP-ALS
/// starts from the single process's factors, drawn on every row of the tensor.
#[test]
fn a_mode_of_four_billion_rows_is_refused_once_by_the_plan() {
    if common::mpi::mpirun().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut text = String::new();
    for k in 0..200u64 {
        let row = [1u64, 2, 4_000_000, 4_294_967_296][k as usize % 4];
        text += &format!("{row} {} {} {}\n", k % 57 + 1, k % 50 + 1, k % 5 + 1);
    }
    let f = dir.path().join("long.tns");
    std::fs::write(&f, text).unwrap();
    let bin = env!("CARGO_BIN_EXE_sptmc");
    let got = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -v 1500000; exec mpirun --allow-run-as-root --oversubscribe -np 3 -x RAYON_NUM_THREADS=1 -x MALLOC_ARENA_MAX=1 {bin} cp {} --rank 8 --iters 2",
            f.display()
        ))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&got.stderr);
    assert_eq!(got.status.code(), Some(1), "{err}");
    assert!(
        err.contains("mode 0: 4 of 4294967296 rows"),
        "the run holds mode 0 on its used rows: {err}"
    );
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("error:")).collect();
    assert_eq!(lines.len(), 1, "{err}");
    assert!(
        lines[0].starts_with("sptmc: error: not enough memory:")
            && lines[0].contains("start drawn on the tensor's rows (4294967296 rows"),
        "{err}"
    );
}
