//! `sptmc cp` and `sptmc tucker`.

use super::args::{CpArgs, TuckerArgs};
use super::load::{load, report_precision};
use super::{engine, print_json};
use serde_json::json;
use sptmc::decomp::{
    CpOptions, IterStats, TuckerOptions, cp_als_with_progress, tucker_hooi_with_progress,
};
use sptmc::engine::Workload;
use sptmc::memplan::MemoryPlan;
use sptmc::model_io::{read_factors, write_factors, write_matrix};
use sptmc::{Error, Matrix, Op, Result};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// One SPLATT-`cpd`-style progress line on stderr.
fn progress_line(s: &IterStats) {
    eprintln!(
        "  its = {:3} ({:.3}s: kernel {:.3}s, linalg {:.3}s)  fit = {:.5}  delta = {:+.4e}",
        s.iter + 1,
        s.seconds_kernel + s.seconds_linalg + s.seconds_other,
        s.seconds_kernel,
        s.seconds_linalg,
        s.fit,
        s.delta
    );
}

fn iters_json(iters: &[IterStats]) -> serde_json::Value {
    iters
        .iter()
        .map(|s| {
            json!({"iter": s.iter, "fit": s.fit, "delta": s.delta,
                   "seconds_kernel": s.seconds_kernel, "seconds_linalg": s.seconds_linalg,
                   "seconds_other": s.seconds_other,
                   "bytes_to_device": s.bytes_to_device,
                   "bytes_from_device": s.bytes_from_device})
        })
        .collect()
}

fn read_init(dir: Option<&Path>, order: usize) -> Result<Option<Vec<Matrix>>> {
    dir.map(|d| read_factors(d, order)).transpose()
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    std::fs::write(
        path,
        serde_json::to_string_pretty(value).expect("JSON serializes"),
    )
    .map_err(|e| Error::io(path, e))
}

/// Fails with [`Error::NonFinite`] when `values` hold inf or NaN: never written or
/// printed as a result.
fn check_finite(what: &str, values: &[f64]) -> Result<()> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(p) => Err(Error::NonFinite(format!(
            "{what}: entry {p} is {}; nothing was written",
            values[p]
        ))),
    }
}

/// Checks `--iters` and `--tol` by their names (the library's messages name its fields).
fn check_model_options(iters: usize, tol: f64) -> Result<()> {
    if iters == 0 {
        return Err(Error::InvalidOption("--iters must be at least 1".into()));
    }
    if tol.is_nan() || tol < 0.0 {
        return Err(Error::InvalidOption(format!(
            "--tol must be a number ≥ 0 (0 runs every iteration), got {tol}"
        )));
    }
    Ok(())
}

/// CP-ALS.
pub fn cp(a: CpArgs) -> Result<ExitCode> {
    check_model_options(a.iters, a.model.tol)?;
    if a.rank == 0 {
        return Err(Error::InvalidRank("--rank must be at least 1".into()));
    }
    if let Some(dir) = &a.model.out {
        super::output::check_dir(dir)?;
    }
    let engine = engine(&a.model.common)?;
    let loaded = load(a.file.as_deref(), !a.model.no_cache)?;
    eprintln!("sptmc: {}", loaded.note);
    let x = &loaded.tensor;
    if a.rank > x.nnz() {
        return Err(Error::InvalidRank(format!(
            "--rank {} exceeds the tensor's {} nonzeros: a CP model of that many components already fits it exactly",
            a.rank,
            x.nnz()
        )));
    }
    let opts = CpOptions {
        rank: a.rank,
        max_iters: a.iters,
        tol: a.model.tol,
        seed: a.model.seed,
        init: read_init(a.model.init.as_deref(), x.order())?,
    };
    opts.validate(x.dims())?;
    let workload = Workload {
        op: Op::Mttkrp,
        rank: a.rank,
    };
    // Everything this run allocates, checked before any of it.
    let mut plan = MemoryPlan::cp(x.dims(), a.rank);
    plan.add_prepare(x.nnz(), x.order(), 1, engine.threshold(workload).threshold);
    plan.check()?;
    let prepared = engine.prepare(x, &[workload])?;
    super::say_thresholds(&prepared);
    report_precision(prepared.hls(Op::Mttkrp)?.stats());
    eprintln!(
        "sptmc: CP-ALS rank {} on {:?}, {} nonzeros (prepared in {:.3}s, {} bytes)",
        a.rank,
        x.dims(),
        x.nnz(),
        prepared.build_time().as_secs_f64(),
        prepared.bytes()
    );
    let start = Instant::now();
    let quiet = a.model.common.json;
    let model = cp_als_with_progress(&engine, &prepared, &opts, &mut |s| {
        if !quiet {
            progress_line(s)
        }
    })?;
    let total = start.elapsed().as_secs_f64();
    check_finite("CP weights", &model.weights)?;
    let summary = json!({
        "kind": "cp", "tensor": loaded.name, "dims": x.dims(), "nnz": x.nnz(),
        "rank": a.rank, "backend": engine.backend().describe(),
        "final_fit": model.fit(), "seconds": total,
        "seconds_per_iter": total / model.iters.len().max(1) as f64,
        "iterations": iters_json(&model.iters), "weights": model.weights,
    });
    if let Some(dir) = &a.model.out {
        write_factors(dir, &model.factors)?;
        let w = Matrix::new(model.weights.len(), 1, model.weights.clone())?;
        write_matrix(&dir.join("weights.txt"), "CP weights (lambda)", &w)?;
        write_json(&dir.join("model.json"), &summary)?;
        eprintln!(
            "sptmc: wrote weights.txt, factor-*.txt, model.json to {}",
            dir.display()
        );
    }
    if a.model.common.json {
        print_json(&summary);
    } else {
        println!(
            "CP-ALS rank {}: final fit {:.6} after {} iterations, {:.3}s ({:.4}s/iteration)",
            a.rank,
            model.fit().unwrap_or(f64::NAN),
            model.iters.len(),
            total,
            total / model.iters.len().max(1) as f64
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Tucker-HOOI.
pub fn tucker(a: TuckerArgs) -> Result<ExitCode> {
    check_model_options(a.iters, a.model.tol)?;
    if let Some(dir) = &a.model.out {
        super::output::check_dir(dir)?;
    }
    let loaded = load(a.file.as_deref(), !a.model.no_cache)?;
    let x = &loaded.tensor;
    if a.ranks.len() != x.order() {
        return Err(Error::InvalidRank(format!(
            "--ranks has {} entries, the tensor has {} modes",
            a.ranks.len(),
            x.order()
        )));
    }
    if a.ranks.contains(&0) {
        return Err(Error::InvalidRank("every rank must be at least 1".into()));
    }
    let opts = TuckerOptions {
        ranks: a.ranks.clone(),
        max_iters: a.iters,
        tol: a.model.tol,
        seed: a.model.seed,
        init: read_init(a.model.init.as_deref(), x.order())?,
    };
    opts.validate(x.dims())?;
    let engine = engine(&a.model.common)?;
    eprintln!("sptmc: {}", loaded.note);
    let rank = *a.ranks.iter().max().expect("order ≥ 1");
    let workload = Workload { op: Op::Ttmc, rank };
    // Everything this run allocates, checked before any of it.
    let mut plan = MemoryPlan::tucker(x.dims(), &a.ranks);
    plan.add_prepare(x.nnz(), x.order(), 1, engine.threshold(workload).threshold);
    plan.check()?;
    let prepared = engine.prepare(x, &[workload])?;
    super::say_thresholds(&prepared);
    report_precision(prepared.hls(Op::Ttmc)?.stats());
    eprintln!(
        "sptmc: Tucker-HOOI ranks {:?} on {:?}, {} nonzeros",
        a.ranks,
        x.dims(),
        x.nnz()
    );
    let start = Instant::now();
    let quiet = a.model.common.json;
    let model = tucker_hooi_with_progress(&engine, &prepared, &opts, &mut |s| {
        if !quiet {
            progress_line(s)
        }
    })?;
    let total = start.elapsed().as_secs_f64();
    check_finite("the Tucker core", &model.core)?;
    let summary = json!({
        "kind": "tucker", "tensor": loaded.name, "dims": x.dims(), "nnz": x.nnz(),
        "ranks": a.ranks, "core_dims": model.core_dims, "backend": engine.backend().describe(),
        "final_fit": model.fit(), "seconds": total,
        "seconds_per_iter": total / model.iters.len().max(1) as f64,
        "iterations": iters_json(&model.iters),
    });
    if let Some(dir) = &a.model.out {
        write_factors(dir, &model.factors)?;
        let r0 = model.core_dims[0];
        let rest = model.core.len() / r0.max(1);
        let core = Matrix::new(r0, rest, model.core.clone())?;
        write_matrix(
            &dir.join("core.txt"),
            &format!(
                "Tucker core {:?} unfolded along mode 0, last mode fastest",
                model.core_dims
            ),
            &core,
        )?;
        write_json(&dir.join("model.json"), &summary)?;
        eprintln!(
            "sptmc: wrote core.txt, factor-*.txt, model.json to {}",
            dir.display()
        );
    }
    if a.model.common.json {
        print_json(&summary);
    } else {
        println!(
            "Tucker-HOOI ranks {:?}: final fit {:.6} after {} iterations, {:.3}s ({:.4}s/iteration)",
            a.ranks,
            model.fit().unwrap_or(f64::NAN),
            model.iters.len(),
            total,
            total / model.iters.len().max(1) as f64
        );
    }
    Ok(ExitCode::SUCCESS)
}
