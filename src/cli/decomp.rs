//! `sptmc cp` and `sptmc tucker`: the arguments as a request to [`sptmc::driver`], its
//! report written and printed.

use super::args::{CpArgs, ModelArgs, TuckerArgs};
use super::load::load;
use super::{Told, engine, print_json};
use sptmc::decomp::IterStats;
use sptmc::driver::{self, CpRequest, NoForms, TuckerRequest};
use sptmc::model_io::{read_cp_init, read_factors, write_model};
use sptmc::tensor::relabel::{Relabelled, relabel_if_needed};
pub(super) use sptmc::tensor::relabel::{init_rows, original_rows};
use sptmc::{CooTensor, Matrix, Result};
use std::path::Path;
use std::process::ExitCode;

/// A SPLATT-`cpd`-style progress line.
pub(super) fn progress_line(s: &IterStats) -> String {
    format!(
        "  its = {:3} ({:.3}s: kernel {:.3}s, linalg {:.3}s)  fit = {:.5}  delta = {:+.4e}",
        s.iter + 1,
        s.seconds_kernel + s.seconds_linalg + s.seconds_other,
        s.seconds_kernel,
        s.seconds_linalg,
        s.fit,
        s.delta
    )
}

/// The initial factors of a CP model's `--init`, for a tensor of `order` modes: the
/// folder's factors with its weights multiplied in ([`read_cp_init`]).
pub(super) fn read_init(dir: Option<&Path>, order: usize) -> Result<Option<Vec<Matrix>>> {
    dir.map(|d| Ok(read_cp_init(d, order)?.iter().map(Matrix::to_f32).collect()))
        .transpose()
}

/// `x` with its modes renumbered to their used indices where its coordinates need more
/// key bits than the format holds (said on stderr); `None` where they fit.
pub(super) fn renumbered(x: &CooTensor) -> Result<Option<Relabelled>> {
    let r = relabel_if_needed(x)?;
    if let Some(r) = &r {
        eprintln!("sptmc: note: {}", r.note());
    }
    Ok(r)
}

/// Writes the model into `--out` when given (the factors, the model's own `files` as
/// `(name, header, matrix)`, model.json), then prints the summary: as JSON, or as one
/// line saying `what` reached which fit.
pub(super) fn finish(
    m: &ModelArgs,
    factors: &[Matrix],
    files: &[(&str, String, Matrix<f64>)],
    summary: &serde_json::Value,
    what: &str,
) -> Result<()> {
    if let Some(dir) = &m.out {
        write_model(dir, factors, files, summary)?;
        let names: Vec<&str> = files.iter().map(|f| f.0).collect();
        say_written(&names, dir);
    }
    print_summary(m.common.json, summary, what);
    Ok(())
}

/// Says on stderr that the model's files `names`, its factors and model.json are in
/// `dir`.
pub(super) fn say_written(names: &[&str], dir: &Path) {
    eprintln!(
        "sptmc: wrote {}, factor-*.txt, model.json to {}",
        names.join(", "),
        dir.display()
    );
}

/// Prints the summary: as JSON when `json`, or as one line saying `what` reached which
/// fit.
pub(super) fn print_summary(json: bool, summary: &serde_json::Value, what: &str) {
    if json {
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
}

/// CP-ALS (across ranks under mpirun, [`super::dist`]).
pub fn cp(a: CpArgs) -> Result<ExitCode> {
    if super::dist::wanted(a.grain.is_some())? {
        return super::dist::cp(a);
    }
    let mut request = CpRequest {
        rank: a.rank,
        iters: a.iters,
        tol: a.model.tol,
        seed: a.model.seed,
        init: None,
    };
    // Bad options before the tensor is read.
    request.check()?;
    if let Some(dir) = &a.model.out {
        super::output::check_dir(dir)?;
    }
    let engine = engine(&a.model.common)?;
    let loaded = load(a.file.as_deref(), !a.model.no_cache)?;
    eprintln!("sptmc: {}", loaded.note);
    let relabelled = renumbered(&loaded.tensor)?;
    let x = relabelled.as_ref().map_or(&loaded.tensor, |r| &r.tensor);
    let init = read_init(a.model.init.as_deref(), x.order())?;
    request.init = init_rows(relabelled.as_ref(), init);
    let job = request.validate(x)?;
    if let Some(rows) = &job.rows {
        eprintln!("sptmc: note: {}", rows.note("CP-ALS"));
    }
    let mut told = Told {
        quiet: a.model.common.json,
        header: &|p| {
            format!(
                "CP-ALS rank {} on {:?}, {} nonzeros (prepared in {:.3}s, {} bytes)",
                a.rank,
                x.dims(),
                x.nnz(),
                p.build_time().as_secs_f64(),
                p.bytes()
            )
        },
        line: progress_line,
    };
    let report = driver::run(&job, &engine, x, &NoForms, &mut told)?;
    let summary = report.summary(&loaded.name, loaded.tensor.dims(), x.nnz());
    let model = report.model;
    let weights = Matrix::new(model.weights.len(), 1, model.weights)?;
    let files = [("weights.txt", "CP weights (lambda)".to_string(), weights)];
    let what = format!("CP-ALS rank {}", a.rank);
    let factors = original_rows(relabelled.as_ref(), model.factors);
    finish(&a.model, &factors, &files, &summary, &what)?;
    Ok(ExitCode::SUCCESS)
}

/// Tucker-HOOI.
pub fn tucker(a: TuckerArgs) -> Result<ExitCode> {
    // The ranks resolve against the tensor's extents once it is read; their checks
    // that need none run first.
    let mut request = TuckerRequest {
        ranks: a.ranks.clone().unwrap_or_default(),
        iters: a.iters,
        tol: a.model.tol,
        seed: a.model.seed,
        init: None,
    };
    request.check()?;
    if let Some(dir) = &a.model.out {
        super::output::check_dir(dir)?;
    }
    let loaded = load(a.file.as_deref(), !a.model.no_cache)?;
    let relabelled = renumbered(&loaded.tensor)?;
    let x = relabelled.as_ref().map_or(&loaded.tensor, |r| &r.tensor);
    let init = (a.model.init.as_deref())
        .map(|d| read_factors(d, x.order()))
        .transpose()?;
    request.ranks = match (&init, a.ranks.as_deref()) {
        // Without --ranks, the initial factors' widths are the ranks.
        (Some(f), None) => f.iter().map(Matrix::cols).collect(),
        (_, given) => driver::tucker_ranks(given, x.dims()),
    };
    request.init = init_rows(relabelled.as_ref(), init);
    let ranks = request.ranks.clone();
    let job = request.validate(x)?;
    let engine = engine(&a.model.common)?;
    eprintln!("sptmc: {}", loaded.note);
    if let Some(rows) = &job.rows {
        eprintln!("sptmc: note: {}", rows.note("Tucker-HOOI"));
    }
    let mut told = Told {
        quiet: a.model.common.json,
        header: &|_| {
            format!(
                "Tucker-HOOI ranks {:?} on {:?}, {} nonzeros",
                ranks,
                x.dims(),
                x.nnz()
            )
        },
        line: progress_line,
    };
    let report = driver::run(&job, &engine, x, &NoForms, &mut told)?;
    let summary = report.summary(&job, &loaded.name, loaded.tensor.dims(), x.nnz());
    let model = report.model;
    let r0 = model.core_dims[0];
    let core = Matrix::new(r0, model.core.len() / r0.max(1), model.core)?;
    let header = format!(
        "Tucker core {:?} unfolded along mode 0, last mode fastest",
        model.core_dims
    );
    let what = format!("Tucker-HOOI ranks {ranks:?}");
    let factors = original_rows(relabelled.as_ref(), model.factors);
    finish(
        &a.model,
        &factors,
        &[("core.txt", header, core)],
        &summary,
        &what,
    )?;
    Ok(ExitCode::SUCCESS)
}
