//! The engine's seam: backends dispatched by enum (no downcasts), switches as typed
//! options (no environment read under `engine` or `decomp`), the CPU backend on its
//! own pool of the size asked for, sessions through one entry point, and the passes
//! over the tensor as engine ops (on both backends; the CUDA twins skip visibly
//! without a device).

use crate::common;

use common::twin;
use sptmc::engine::{
    BackendChoice, CompletionKind, CpKind, CpuOptions, Engine, EngineOptions, MttkrpKernel, PhiKind,
};
use sptmc::tensor::generate::{GenSpec, Pattern, generate};
use sptmc::{CooTensor, Matrix, Op};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("source folder is readable") {
        let path = entry.expect("source entry is readable").path();
        if path.is_dir() {
            out.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
    out
}

/// `file:line: text` of every line of the `.rs` files under `src/<dir>` that contains
/// one of `needles`.
fn lines_with(dir: &str, needles: &[&str]) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(dir);
    let mut hits = Vec::new();
    for file in rust_files(&root) {
        let text = std::fs::read_to_string(&file).expect("source file is readable");
        for (k, line) in text.lines().enumerate() {
            if needles.iter().any(|n| line.contains(n)) {
                hits.push(format!("{}:{}: {}", file.display(), k + 1, line.trim()));
            }
        }
    }
    hits
}

/// Every `.rs` file under `root` (recursively) of more than `limit` lines, as
/// `path: N lines`.
fn files_over(root: &Path, limit: usize) -> Vec<String> {
    rust_files(root)
        .into_iter()
        .filter_map(|file| {
            let n = std::fs::read_to_string(&file)
                .expect("source file is readable")
                .lines()
                .count();
            (n > limit).then(|| format!("{}: {n} lines", file.display()))
        })
        .collect()
}

#[test]
fn no_source_file_holds_more_than_one_job() {
    // A file past 600 lines has always turned out to hold several jobs; split it by
    // what the pieces hold. The Python extension's sources count too.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut hits = files_over(&root.join("src"), 600);
    hits.extend(files_over(&root.join("python").join("src"), 600));
    assert!(
        hits.is_empty(),
        "files over 600 lines:\n{}",
        hits.join("\n")
    );
    // The check sees the files it should: the engine's module file is among them.
    assert!(
        rust_files(&root.join("src"))
            .iter()
            .any(|f| f.ends_with("engine/mod.rs"))
    );
}

#[test]
fn the_engine_has_no_downcasts() {
    // Spelled in two pieces so that this file does not match itself if moved.
    let needles = [concat!("down", "cast"), concat!("as_", "any")];
    let hits = lines_with("engine", &needles);
    assert!(
        hits.is_empty(),
        "dispatch by downcast:\n{}",
        hits.join("\n")
    );
}

#[test]
fn neither_the_engine_nor_the_decompositions_read_the_environment() {
    let needles = [concat!("env::", "var")];
    let mut hits = lines_with("engine", &needles);
    hits.extend(lines_with("decomp", &needles));
    assert!(
        hits.is_empty(),
        "environment read below the edge:\n{}",
        hits.join("\n")
    );
}

/// Runs `f` on every one of `n` items in parallel, each item waiting (up to 10 s)
/// until `n` items have started, and returns the names of the threads they ran on:
/// `n` distinct names when the pool has at least `n` workers.
fn threads_of_parallel_items(n: usize) -> HashSet<String> {
    use rayon::prelude::*;
    let started = AtomicUsize::new(0);
    let names = Mutex::new(HashSet::new());
    (0..n).into_par_iter().for_each(|_| {
        started.fetch_add(1, Ordering::SeqCst);
        let deadline = Instant::now() + Duration::from_secs(10);
        while started.load(Ordering::SeqCst) < n && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        let name = std::thread::current().name().unwrap_or("?").to_string();
        names.lock().unwrap().insert(name);
    });
    names.into_inner().unwrap()
}

#[test]
fn the_cpu_backend_runs_on_as_many_workers_as_asked() {
    for n in [1usize, 3] {
        let engine = Engine::cpu_with(CpuOptions {
            threads: Some(n),
            ..CpuOptions::default()
        })
        .unwrap();
        assert!(
            engine
                .backend()
                .describe()
                .ends_with(&format!("({n} threads)"))
        );
        assert!(engine.backend().device_id().ends_with(&format!(":{n}t")));
        let (count, names) =
            engine.install(|| (rayon::current_num_threads(), threads_of_parallel_items(n)));
        assert_eq!(count, n);
        assert_eq!(names.len(), n, "{names:?}");
        assert!(
            names.iter().all(|t| t.starts_with("sptmc-cpu-")),
            "{names:?}"
        );
    }
    // The same pool size wherever the engine is called from.
    let engine = Engine::cpu_with(CpuOptions {
        threads: Some(2),
        ..CpuOptions::default()
    })
    .unwrap();
    let outer = common::pool_of(5);
    assert_eq!(
        outer.install(|| engine.install(rayon::current_num_threads)),
        2
    );
}

#[test]
fn more_than_four_threads_per_core_are_refused_with_a_typed_error() {
    let (most, _) = sptmc::engine::most_cpu_threads();
    for (n, ok) in [(most, true), (most + 1, false)] {
        let got = Engine::cpu_with(CpuOptions {
            threads: Some(n),
            ..CpuOptions::default()
        });
        match got {
            Ok(_) => assert!(ok, "{n} threads"),
            Err(sptmc::Error::InvalidOption(m)) => {
                assert!(!ok && m.contains(&format!("at most {most} threads")), "{m}")
            }
            Err(e) => panic!("{n} threads: {e}"),
        }
    }
}

#[test]
fn zero_threads_is_refused_with_a_typed_error() {
    let opts = CpuOptions {
        threads: Some(0),
        ..CpuOptions::default()
    };
    assert!(matches!(
        Engine::cpu_with(opts),
        Err(sptmc::Error::InvalidOption(_))
    ));
    let all = EngineOptions {
        cpu: opts,
        ..EngineOptions::default()
    };
    assert!(matches!(
        Engine::choose_with(BackendChoice::Cpu, &all),
        Err(sptmc::Error::InvalidOption(_))
    ));
}

fn small() -> CooTensor {
    generate(&GenSpec {
        dims: vec![40, 30, 20],
        nnz: 3000,
        pattern: Pattern::BlockDense {
            tile_nnz: 150,
            dense_share: 0.5,
        },
        seed: 7,
    })
    .unwrap()
}

#[test]
fn the_walk_and_the_rows_give_the_same_mttkrp() {
    let x = small();
    let f = Matrix::random_factors(x.dims(), &[5; 3], 3);
    let run = |mttkrp| {
        let e = Engine::cpu_with(CpuOptions {
            mttkrp,
            ..CpuOptions::default()
        })
        .unwrap();
        let p = e.prepare_with_thresholds(&x, &[(Op::Mttkrp, 16)]).unwrap();
        (0..3)
            .map(|m| e.mttkrp(&p, m, &f).unwrap())
            .collect::<Vec<_>>()
    };
    for (m, (a, b)) in run(MttkrpKernel::Rows)
        .iter()
        .zip(run(MttkrpKernel::Walk))
        .enumerate()
    {
        for (u, v) in a.data().iter().zip(b.data()) {
            assert!(
                (u - v).abs() <= 1e-4 * (1.0 + u.abs()),
                "mode {m}: {u} vs {v}"
            );
        }
    }
}

twin!(sessions_open_through_one_entry_point, |engine| {
    let x = small();
    let p = engine
        .prepare_with_thresholds(&x, &[(Op::Mttkrp, 16), (Op::Completion, 16)])
        .unwrap();
    let f = Matrix::random_factors(x.dims(), &[4; 3], 5);
    // CP: on the host on the CPU, on the device on CUDA.
    let cp = engine.session::<CpKind>(&p, &f).unwrap();
    assert_eq!(
        cp.is_some(),
        engine.kind() == sptmc::engine::BackendKind::Cuda
    );
    // Φ: the CPU's row session; CUDA runs Φ per call.
    let phi = engine.session::<PhiKind>(&p, 4).unwrap();
    assert_eq!(
        phi.is_some(),
        engine.kind() == sptmc::engine::BackendKind::Cpu
    );
    let mut c = engine.session::<CompletionKind>(&p, (&f, 0.5)).unwrap();
    assert_eq!(c.rank(), 4);
    assert!(c.loss().unwrap().is_finite());
});

/// The value of every stored entry of `x`, in f64.
fn stored(p: &sptmc::engine::Prepared, op: Op) -> CooTensor {
    p.hls(op).unwrap().to_coo()
}

twin!(the_census_counts_every_stored_value, |engine| {
    let entries = vec![
        (vec![0, 0, 0], 2.0),
        (vec![1, 2, 3], -1.0),
        (vec![2, 1, 0], 0.5),
        (vec![3, 3, 3], 0.0),
        (vec![4, 0, 1], -3.0),
        (vec![5, 5, 5], 7.25),
        (vec![6, 1, 2], 4.0),
    ];
    let x = CooTensor::from_entries(vec![20, 20, 20], entries).unwrap();
    let p = engine
        .prepare_with_thresholds(&x, &[(Op::Phi, 16)])
        .unwrap();
    let c = engine.value_census(&p, Op::Phi).unwrap();
    let s = stored(&p, Op::Phi);
    let vals = s.values();
    assert_eq!(c.negative, vals.iter().filter(|&&v| v < 0.0).count());
    assert_eq!(c.negative, 2);
    assert_eq!(
        c.non_integer,
        vals.iter()
            .filter(|&&v| v >= 0.0 && v.fract() != 0.0)
            .count()
    );
    assert_eq!(c.non_integer, 2);
    assert_eq!(c.nonzero, vals.iter().filter(|&&v| v != 0.0).count());
    assert!(c.first_negative.is_some_and(|v| v < 0.0));
    assert!(c.first_non_integer.is_some_and(|v| v.fract() != 0.0));
});

twin!(
    the_row_counts_and_mean_are_those_of_the_stored_entries,
    |engine| {
        let x = small();
        let p = engine
            .prepare_with_thresholds(&x, &[(Op::Completion, 16)])
            .unwrap();
        let got = engine.row_counts(&p, Op::Completion).unwrap();
        let s = stored(&p, Op::Completion);
        let mut want: Vec<Vec<u32>> = s.dims().iter().map(|&d| vec![0; d]).collect();
        for k in 0..s.nnz() {
            for (m, &i) in s.coords(k).iter().enumerate() {
                want[m][i as usize] += 1;
            }
        }
        assert_eq!(got.counts, want);
        let mean = s.values().iter().sum::<f64>() / s.nnz() as f64;
        assert!((got.mean - mean).abs() <= 1e-12 * mean.abs().max(1.0));
    }
);

twin!(
    the_cp_residual_sums_are_those_of_the_stored_entries,
    |engine| {
        let x = small();
        let p = engine
            .prepare_with_thresholds(&x, &[(Op::Mttkrp, 16)])
            .unwrap();
        let f = Matrix::random_factors(x.dims(), &[3; 3], 11);
        let weights = [0.5, -1.25, 2.0];
        let got = engine
            .cp_residual_sums(&p, Op::Mttkrp, &weights, &f)
            .unwrap();
        let s = stored(&p, Op::Mttkrp);
        let (mut misfit, mut on_support) = (0.0, 0.0);
        for k in 0..s.nnz() {
            let c = s.coords(k);
            let xh: f64 = (0..3)
                .map(|r| {
                    weights[r]
                        * (0..3)
                            .map(|m| f[m].get(c[m] as usize, r) as f64)
                            .product::<f64>()
                })
                .sum();
            misfit += (s.values()[k] - xh).powi(2);
            on_support += xh * xh;
        }
        assert!((got.misfit - misfit).abs() <= 1e-10 * misfit);
        assert!((got.on_support - on_support).abs() <= 1e-10 * on_support);
    }
);
