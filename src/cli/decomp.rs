//! `sptmc cp` and `sptmc tucker`.

use super::args::{CpArgs, ModelArgs, TuckerArgs};
use super::load::{load, report_precision};
use super::{engine, print_json};
use serde_json::json;
use sptmc::decomp::{
    CpOptions, IterStats, TuckerOptions, cp_als_with_progress, tucker_hooi_with_progress,
};
use sptmc::engine::{Engine, Prepared, Workload};
use sptmc::memplan::MemoryPlan;
use sptmc::model_io::{read_factors, write_factors, write_matrix};
use sptmc::{CooTensor, Error, Matrix, Op, Result};
use std::path::Path;
use std::process::ExitCode;
use std::time::Instant;

/// Everything the run allocates checked first (`plan` plus the tensor's preparation),
/// then `x` prepared for `workload`, saying which threshold it got and what precision
/// its values lost.
pub(super) fn prepare(
    engine: &Engine,
    x: &CooTensor,
    workload: Workload,
    mut plan: MemoryPlan,
) -> Result<Prepared> {
    plan.add_prepare(x.nnz(), x.order(), 1, engine.threshold(workload).threshold);
    plan.check()?;
    let prepared = engine.prepare(x, &[workload])?;
    super::say_thresholds(&prepared);
    report_precision(prepared.hls(workload.op)?.stats());
    Ok(prepared)
}

/// The per-iteration callback: a SPLATT-`cpd`-style progress line on stderr, unless the
/// output is JSON.
fn progress(quiet: bool) -> impl FnMut(&IterStats) {
    move |s| {
        if !quiet {
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
    }
}

pub(super) fn read_init(dir: Option<&Path>, order: usize) -> Result<Option<Vec<Matrix>>> {
    dir.map(|d| read_factors(d, order)).transpose()
}

/// Fails with [`Error::NonFinite`] when `values` hold inf or NaN: never written or
/// printed as a result.
pub(super) fn check_finite(what: &str, values: &[f64]) -> Result<()> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(p) => Err(Error::NonFinite(format!(
            "{what}: entry {p} is {}; nothing was written",
            values[p]
        ))),
    }
}

/// Checks `--iters` and `--tol` by their names (the library's messages name its fields).
pub(super) fn check_model_options(iters: usize, tol: f64) -> Result<()> {
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

/// What both decompositions report of a run (the caller adds its kind and ranks).
fn run_summary(
    name: &str,
    x: &CooTensor,
    engine: &Engine,
    fit: Option<f64>,
    total: f64,
    iters: &[IterStats],
) -> serde_json::Value {
    json!({
        "tensor": name, "dims": x.dims(), "nnz": x.nnz(),
        "backend": engine.backend().describe(), "final_fit": fit, "seconds": total,
        "seconds_per_iter": total / iters.len().max(1) as f64,
        "iterations": iters.iter().map(|s| json!({
            "iter": s.iter, "fit": s.fit, "delta": s.delta,
            "seconds_kernel": s.seconds_kernel, "seconds_linalg": s.seconds_linalg,
            "seconds_other": s.seconds_other, "bytes_to_device": s.bytes_to_device,
            "bytes_from_device": s.bytes_from_device,
        })).collect::<Vec<_>>(),
    })
}

/// Writes the model into `--out` when given (the factors, the model's own `files` as
/// `(name, header, matrix)`, model.json), then prints the summary: as JSON, or as one
/// line saying `what` reached which fit.
fn finish(
    m: &ModelArgs,
    factors: &[Matrix],
    files: &[(&str, String, Matrix<f64>)],
    summary: &serde_json::Value,
    what: &str,
) -> Result<()> {
    if let Some(dir) = &m.out {
        write_factors(dir, factors)?;
        for (name, header, matrix) in files {
            write_matrix(&dir.join(name), header, matrix)?;
        }
        let path = dir.join("model.json");
        let text = serde_json::to_string_pretty(summary).expect("JSON serializes");
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
        let names: Vec<&str> = files.iter().map(|f| f.0).collect();
        eprintln!(
            "sptmc: wrote {}, factor-*.txt, model.json to {}",
            names.join(", "),
            dir.display()
        );
    }
    if m.common.json {
        print_json(summary);
    } else {
        let iters = summary["iterations"].as_array().map_or(0, Vec::len);
        let total = summary["seconds"].as_f64().unwrap_or(f64::NAN);
        println!(
            "{what}: final fit {:.6} after {iters} iterations, {total:.3}s ({:.4}s/iteration)",
            summary["final_fit"].as_f64().unwrap_or(f64::NAN),
            total / iters.max(1) as f64
        );
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
    let prepared = prepare(&engine, x, workload, MemoryPlan::cp(x.dims(), a.rank))?;
    eprintln!(
        "sptmc: CP-ALS rank {} on {:?}, {} nonzeros (prepared in {:.3}s, {} bytes)",
        a.rank,
        x.dims(),
        x.nnz(),
        prepared.build_time().as_secs_f64(),
        prepared.bytes()
    );
    let start = Instant::now();
    let model = cp_als_with_progress(
        &engine,
        &prepared,
        &opts,
        &mut progress(a.model.common.json),
    )?;
    let total = start.elapsed().as_secs_f64();
    check_finite("CP weights", &model.weights)?;
    let mut summary = run_summary(&loaded.name, x, &engine, model.fit(), total, &model.iters);
    summary["kind"] = json!("cp");
    summary["rank"] = json!(a.rank);
    summary["weights"] = json!(model.weights);
    let weights = Matrix::new(model.weights.len(), 1, model.weights.clone())?;
    let files = [("weights.txt", "CP weights (lambda)".to_string(), weights)];
    let what = format!("CP-ALS rank {}", a.rank);
    finish(&a.model, &model.factors, &files, &summary, &what)?;
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
    let prepared = prepare(&engine, x, workload, MemoryPlan::tucker(x.dims(), &a.ranks))?;
    eprintln!(
        "sptmc: Tucker-HOOI ranks {:?} on {:?}, {} nonzeros",
        a.ranks,
        x.dims(),
        x.nnz()
    );
    let start = Instant::now();
    let model = tucker_hooi_with_progress(
        &engine,
        &prepared,
        &opts,
        &mut progress(a.model.common.json),
    )?;
    let total = start.elapsed().as_secs_f64();
    check_finite("the Tucker core", &model.core)?;
    let mut summary = run_summary(&loaded.name, x, &engine, model.fit(), total, &model.iters);
    summary["kind"] = json!("tucker");
    summary["ranks"] = json!(a.ranks);
    summary["core_dims"] = json!(model.core_dims);
    let r0 = model.core_dims[0];
    let core = Matrix::new(r0, model.core.len() / r0.max(1), model.core.clone())?;
    let header = format!(
        "Tucker core {:?} unfolded along mode 0, last mode fastest",
        model.core_dims
    );
    let what = format!("Tucker-HOOI ranks {:?}", a.ranks);
    finish(
        &a.model,
        &model.factors,
        &[("core.txt", header, core)],
        &summary,
        &what,
    )?;
    Ok(ExitCode::SUCCESS)
}
