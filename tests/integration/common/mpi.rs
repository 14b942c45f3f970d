//! Helpers of the MPI tests: whether `mpirun` can run this build, the binary as one
//! process and under `mpirun`, and its JSON output.

use serde_json::Value;
use sptmc::tensor::{CooTensor, tns};
use std::path::Path;
use std::process::{Command, Output};

/// `mpirun` when this build has MPI and the command exists; else a skip.
pub fn mpirun() -> Option<()> {
    if !cfg!(feature = "mpi") {
        return super::skip(
            "SPTMC_REQUIRE_MPI",
            "built without --features mpi: the MPI tests need it",
        );
    }
    match Command::new("mpirun").arg("--version").output() {
        Ok(o) if o.status.success() => Some(()),
        _ => super::skip("SPTMC_REQUIRE_MPI", "no mpirun on the PATH"),
    }
}

/// `sptmc args` as one process (no launcher variables in its environment).
pub fn single(args: &[&str]) -> Output {
    single_with(args, &[])
}

/// [`single`] with the variables `env` set.
pub fn single_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sptmc"))
        .args(args)
        .envs(env.iter().copied())
        .env_remove("OMPI_COMM_WORLD_SIZE")
        .env_remove("PMI_SIZE")
        .output()
        .expect("sptmc runs")
}

/// `mpirun -np ranks sptmc args`, each rank on one thread.
pub fn ranks(n: usize, args: &[&str]) -> Output {
    ranks_with(n, args, &[])
}

/// [`ranks`] with the variables `env` set on every rank.
pub fn ranks_with(n: usize, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new("mpirun");
    c.args(["--allow-run-as-root", "--oversubscribe", "-np"])
        .arg(n.to_string())
        .args(["-x", "RAYON_NUM_THREADS=1"]);
    for (k, v) in env {
        c.args(["-x", &format!("{k}={v}")]);
    }
    c.arg(env!("CARGO_BIN_EXE_sptmc"))
        .args(args)
        .output()
        .expect("mpirun runs")
}

pub fn json(o: &Output, what: &str) -> Value {
    assert!(
        o.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: stdout is not one JSON document ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

/// `x` written as `.tns` into `dir` under `name`; the path as text.
pub fn write(dir: &Path, name: &str, x: &CooTensor) -> String {
    let p = dir.join(name);
    tns::write(&p, x).unwrap();
    p.to_str().unwrap().to_string()
}

/// Checks that two model folders (one process's and several ranks') hold the same files,
/// and that each text file has the same number of lines, header lines and columns.
pub fn assert_same_model_form(a: &Path, b: &Path) {
    let names = |d: &Path| {
        let mut v: Vec<String> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    };
    assert_eq!(names(a), names(b));
    for n in names(a).iter().filter(|n| n.ends_with(".txt")) {
        let (x, y) = (
            std::fs::read_to_string(a.join(n)).unwrap(),
            std::fs::read_to_string(b.join(n)).unwrap(),
        );
        assert_eq!(x.lines().count(), y.lines().count(), "{n}");
        let header = |t: &str| t.lines().take_while(|l| l.starts_with('#')).count();
        assert_eq!(header(&x), header(&y), "{n}");
        let row = |t: &str| {
            t.lines()
                .rfind(|l| !l.starts_with('#'))
                .unwrap()
                .split_whitespace()
                .count()
        };
        assert_eq!(row(&x), row(&y), "{n}");
    }
}

/// The factor and weight files of a model folder (every `.txt`), by name.
fn model_texts(d: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "txt"))
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read_to_string(&p).unwrap())
        })
        .collect();
    v.sort();
    v
}

/// Checks that the model folder `b` (written by several ranks) holds `a`'s text files
/// (one process's) byte for byte.
pub fn assert_same_model_bytes(a: &Path, b: &Path) {
    let (x, y) = (model_texts(a), model_texts(b));
    assert_eq!(
        x.iter().map(|f| &f.0).collect::<Vec<_>>(),
        y.iter().map(|f| &f.0).collect::<Vec<_>>()
    );
    assert!(!x.is_empty());
    for ((name, x), (_, y)) in x.iter().zip(&y) {
        assert!(x == y, "{name} differs from one process's");
    }
}

/// Checks that the model folder `b` holds `a`'s text files with the same header lines
/// and the same values within `tol` of each column's largest magnitude: every row in
/// its place.
pub fn assert_same_model_values(a: &Path, b: &Path, tol: f64) {
    let (x, y) = (model_texts(a), model_texts(b));
    assert_eq!(x.len(), y.len());
    for ((name, x), (other, y)) in x.iter().zip(&y) {
        assert_eq!(name, other);
        let header = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| l.starts_with('#'))
                .map(str::to_string)
                .collect()
        };
        assert_eq!(header(x), header(y), "{name}");
        let rows = |t: &str| -> Vec<Vec<f64>> {
            t.lines()
                .filter(|l| !l.starts_with('#'))
                .map(|l| l.split(' ').map(|v| v.parse().unwrap()).collect())
                .collect()
        };
        let (x, y) = (rows(x), rows(y));
        assert_eq!(x.len(), y.len(), "{name}");
        let cols = x.first().map_or(0, Vec::len);
        let largest: Vec<f64> = (0..cols)
            .map(|c| x.iter().map(|r| r[c].abs()).fold(0.0, f64::max))
            .collect();
        for (i, (p, q)) in x.iter().zip(&y).enumerate() {
            assert_eq!(p.len(), q.len(), "{name} row {i}");
            for (c, (u, v)) in p.iter().zip(q).enumerate() {
                assert!(
                    (u - v).abs() <= tol * largest[c],
                    "{name} row {i} column {c}: {v} vs {u} of one process"
                );
            }
        }
    }
}
