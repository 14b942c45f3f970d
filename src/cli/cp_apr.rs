//! `sptmc cp-apr`: Poisson CP of a count tensor, with `sptmc cp`'s output conventions
//! (per-iteration lines on stderr, `--out`, `--json`).

use super::args::{CpAprArgs, NonIntegerArg};
use super::decomp::{check_finite, check_model_options, prepare, read_init};
use super::load::load;
use super::{engine, print_json};
use serde_json::json;
use sptmc::decomp::{CpAprIter, CpAprOptions, NonInteger, cp_apr_with_progress};
use sptmc::engine::Workload;
use sptmc::memplan::MemoryPlan;
use sptmc::model_io::{write_factors, write_matrix};
use sptmc::{Error, Matrix, Op, Result};
use std::process::ExitCode;
use std::time::Instant;

/// CP-APR.
pub fn cp_apr(a: CpAprArgs) -> Result<ExitCode> {
    check_model_options(a.iters, a.tol)?;
    if a.rank == 0 {
        return Err(Error::InvalidRank("--rank must be at least 1".into()));
    }
    if a.inner == 0 {
        return Err(Error::InvalidOption("--inner must be at least 1".into()));
    }
    if let Some(dir) = &a.out {
        super::output::check_dir(dir)?;
    }
    let engine = engine(&a.common)?;
    let loaded = load(a.file.as_deref(), !a.no_cache)?;
    eprintln!("sptmc: {}", loaded.note);
    let x = &loaded.tensor;
    let opts = CpAprOptions {
        rank: a.rank,
        max_iters: a.iters,
        max_inner: a.inner,
        tol: a.tol,
        max_seconds: a.stoptime,
        eps: a.eps,
        kappa: a.kappa,
        kappa_tol: a.kappa_tol,
        seed: a.seed,
        init: read_init(a.init.as_deref(), x.order())?,
        non_integer: match a.non_integer {
            NonIntegerArg::Warn => NonInteger::Warn,
            NonIntegerArg::Error => NonInteger::Error,
        },
    };
    opts.validate(x.dims())?;
    let workload = Workload {
        op: Op::Mttkrp,
        rank: a.rank,
    };
    let prepared = prepare(&engine, x, workload, MemoryPlan::cp_apr(x.dims(), a.rank))?;
    eprintln!(
        "sptmc: CP-APR rank {} on {:?}, {} nonzeros (prepared in {:.3}s)",
        a.rank,
        x.dims(),
        x.nnz(),
        prepared.build_time().as_secs_f64(),
    );
    let quiet = a.common.json;
    let mut progress = |s: &CpAprIter| {
        if !quiet {
            eprintln!(
                "  its = {:3} ({:.3}s: kernel {:.3}s)  log-likelihood = {:.6e}  kkt = {:.4e}  inner = {}  κ-modes = {}",
                s.iter + 1,
                s.seconds,
                s.seconds_kernel,
                s.log_likelihood,
                s.kkt_violation,
                s.inner_iters,
                s.violations
            );
        }
    };
    let start = Instant::now();
    let model = cp_apr_with_progress(&engine, &prepared, &opts, &mut progress)?;
    let total = start.elapsed().as_secs_f64();
    for w in &model.warnings {
        eprintln!("sptmc: warning: {w}");
    }
    check_finite("CP-APR weights", &model.weights)?;
    check_finite("CP-APR log-likelihoods", &model.log_likelihoods())?;
    let summary = json!({
        "kind": "cp-apr", "tensor": loaded.name, "dims": x.dims(), "nnz": x.nnz(),
        "rank": a.rank, "backend": engine.backend().describe(),
        "log_likelihood": model.log_likelihood, "converged": model.converged,
        "seconds": total, "seconds_per_iter": total / model.iters.len().max(1) as f64,
        "weights": model.weights, "warnings": model.warnings,
        "options": {
            "iters": a.iters, "inner": a.inner, "tol": a.tol, "stoptime": a.stoptime,
            "eps": a.eps, "kappa": a.kappa, "kappa_tol": a.kappa_tol,
        },
        "iterations": model.iters,
    });
    if let Some(dir) = &a.out {
        write_factors(dir, &model.factors)?;
        let weights = Matrix::new(model.weights.len(), 1, model.weights.clone())?;
        write_matrix(
            &dir.join("weights.txt"),
            "CP-APR weights (lambda); factor columns sum to 1",
            &weights,
        )?;
        let path = dir.join("model.json");
        let text = serde_json::to_string_pretty(&summary).expect("JSON serializes");
        std::fs::write(&path, text).map_err(|e| Error::io(&path, e))?;
        eprintln!(
            "sptmc: wrote weights.txt, factor-*.txt, model.json to {}",
            dir.display()
        );
    }
    if a.common.json {
        print_json(&summary);
    } else {
        let n = model.iters.len();
        println!(
            "CP-APR rank {}: final log-likelihood {:.10e} after {n} iterations{}, {total:.3}s ({:.4}s/iteration)",
            a.rank,
            model.log_likelihood,
            if model.converged {
                " (KKT tolerance met)"
            } else {
                ""
            },
            total / n.max(1) as f64
        );
    }
    Ok(ExitCode::SUCCESS)
}
