//! Memory across MPI ranks: each rank holds its share of the nonzeros, never the whole
//! tensor, so a run fits a per-process memory limit (`ulimit -v`) that one process
//! cannot meet on the same tensor.
//!
//! Needs a build with `--features mpi` and `mpirun`; skipped visibly otherwise (a
//! failure under `SPTMC_REQUIRE_MPI=1`).

mod common;

use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::tensor::tns;
use std::process::Command;

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
    // 320 MB of address space per process. One glibc malloc arena per process (MPI's
    // threads would each reserve 64 MiB of address space for their own), in both runs.
    let limit = "ulimit -v 320000";
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
