//! `sptmc cp-apr`: Poisson CP of a count tensor, with `sptmc cp`'s output conventions
//! (per-iteration lines on stderr, `--out`, `--json`).

use super::args::{CpAprArgs, NonIntegerArg};
use super::decomp::{init_rows, original_rows, read_init, renumbered};
use super::load::load;
use super::{Told, engine, print_json};
use sptmc::decomp::{CpAprIter, CpAprModel, NonInteger};
use sptmc::driver::{self, CpAprRequest, NoForms};
use sptmc::model_io::write_model;
use sptmc::{Matrix, Result};
use std::process::ExitCode;

/// The progress line of an outer iteration.
pub(super) fn progress_line(s: &CpAprIter) -> String {
    format!(
        "  its = {:3} ({:.3}s: kernel {:.3}s)  log-likelihood = {:.6e}  kkt = {:.4e}  inner = {}  κ-modes = {}",
        s.iter + 1,
        s.seconds,
        s.seconds_kernel,
        s.log_likelihood,
        s.kkt_violation,
        s.inner_iters,
        s.violations
    )
}

/// The request the arguments make (no initial factors read yet).
pub(super) fn request(a: &CpAprArgs) -> CpAprRequest {
    CpAprRequest {
        rank: a.rank,
        iters: a.iters,
        inner: a.inner,
        tol: a.tol,
        stoptime: a.stoptime,
        eps: a.eps,
        kappa: a.kappa,
        kappa_tol: a.kappa_tol,
        seed: a.seed,
        init: None,
        non_integer: match a.non_integer {
            NonIntegerArg::Warn => NonInteger::Warn,
            NonIntegerArg::Error => NonInteger::Error,
        },
    }
}

/// CP-APR (across ranks under mpirun, [`super::dist`]).
pub fn cp_apr(a: CpAprArgs) -> Result<ExitCode> {
    if super::dist::wanted(a.grain.is_some())? {
        return super::dist::cp_apr(a);
    }
    let mut request = request(&a);
    request.check()?;
    if let Some(dir) = &a.out {
        super::output::check_dir(dir)?;
    }
    let engine = engine(&a.common)?;
    let loaded = load(a.file.as_deref(), !a.no_cache)?;
    eprintln!("sptmc: {}", loaded.note);
    let relabelled = renumbered(&loaded.tensor)?;
    let x = relabelled.as_ref().map_or(&loaded.tensor, |r| &r.tensor);
    let init = read_init(a.init.as_deref(), x.order())?;
    request.init = init_rows(relabelled.as_ref(), init);
    let job = request.validate(x)?;
    if let Some(rows) = &job.rows {
        eprintln!("sptmc: note: {}", rows.note("CP-APR"));
    }
    let mut told = Told {
        quiet: a.common.json,
        header: &|p| {
            format!(
                "CP-APR rank {} on {:?}, {} nonzeros (prepared in {:.3}s)",
                a.rank,
                x.dims(),
                x.nnz(),
                p.build_time().as_secs_f64(),
            )
        },
        line: progress_line,
    };
    let mut report = driver::run(&job, &engine, x, &NoForms, &mut told)?;
    let summary = report.summary(&job, &loaded.name, loaded.tensor.dims(), x.nnz());
    let what = format!("CP-APR rank {}", a.rank);
    report.model.factors = original_rows(
        relabelled.as_ref(),
        std::mem::take(&mut report.model.factors),
    );
    finish(&a, &report.model, &summary, report.seconds, &what)?;
    Ok(ExitCode::SUCCESS)
}

/// Says the model's warnings, writes it into `--out` when given, then prints the
/// summary: as JSON, or as one line saying `what` reached which log-likelihood in
/// `total` seconds.
pub(super) fn finish(
    a: &CpAprArgs,
    model: &CpAprModel,
    summary: &serde_json::Value,
    total: f64,
    what: &str,
) -> Result<()> {
    say_warnings(model);
    if let Some(dir) = &a.out {
        write_model(dir, &model.factors, &[weights_file(model)?], summary)?;
        eprintln!(
            "sptmc: wrote weights.txt, factor-*.txt, model.json to {}",
            dir.display()
        );
    }
    print_summary(a.common.json, model, summary, total, what);
    Ok(())
}

/// The model's `weights.txt`, as `(name, header, matrix)`.
pub(super) fn weights_file(model: &CpAprModel) -> Result<(&'static str, String, Matrix<f64>)> {
    let weights = Matrix::new(model.weights.len(), 1, model.weights.clone())?;
    // A component of weight 0 (every one, on a tensor without a nonzero value) has
    // columns of zeros.
    let header = match model.weights.contains(&0.0) {
        true => "CP-APR weights (lambda); factor columns sum to 1, those of weight 0 are 0",
        false => "CP-APR weights (lambda); factor columns sum to 1",
    }
    .to_string();
    Ok(("weights.txt", header, weights))
}

/// Says the model's warnings on stderr.
pub(super) fn say_warnings(model: &CpAprModel) {
    for w in &model.warnings {
        eprintln!("sptmc: warning: {w}");
    }
}

/// Prints the summary: as JSON when `json`, or as one line saying `what` reached
/// which log-likelihood in `total` seconds.
pub(super) fn print_summary(
    json: bool,
    model: &CpAprModel,
    summary: &serde_json::Value,
    total: f64,
    what: &str,
) {
    if json {
        print_json(summary);
    } else {
        let n = model.iters.len();
        println!(
            "{what}: final log-likelihood {:.10e} after {n} iterations{}, {total:.3}s ({:.4}s/iteration)",
            model.log_likelihood,
            if model.converged {
                " (KKT tolerance met)"
            } else {
                ""
            },
            total / n.max(1) as f64
        );
    }
}
