//! `sptmc complete` and `sptmc predict`.

use super::args::{BackendArg, CompleteArgs, PredictArgs, SolverArg};
use super::load::load;
use super::{Told, engine, print_json, sig5};
use serde_json::json;
use sptmc::decomp::completion::{files, split};
use sptmc::decomp::{CompletionModel, EpochStats, Solver};
use sptmc::driver::{self, CompletionRequest, NoForms};
use sptmc::model_io::write_file_atomically;
use sptmc::{CooTensor, Error, Result};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::Path;
use std::process::ExitCode;

/// `x` with the extents `dims` (each at least `x`'s own).
fn with_dims(x: CooTensor, dims: &[usize]) -> Result<CooTensor> {
    let (_, indices, values) = x.into_parts();
    CooTensor::new(dims.to_vec(), indices, values)
}

/// The training, validation and test entries, and a line saying where they came from.
fn entries(a: &CompleteArgs) -> Result<(String, [CooTensor; 3], String)> {
    let cache = !a.no_cache;
    if let Some(file) = &a.file {
        if a.split.len() != 3 {
            return Err(Error::InvalidOption(format!(
                "--split takes three fractions (train,validation,test), got {}",
                a.split.len()
            )));
        }
        let loaded = load(Some(file.as_path()), cache)?;
        eprintln!("sptmc: {}", loaded.note);
        let s = split(&loaded.tensor, [a.split[0], a.split[1], a.split[2]], a.seed)?;
        let how = format!("split {:?} of {} by seed {}", a.split, loaded.name, a.seed);
        return Ok((loaded.name, [s.train, s.validation, s.test], how));
    }
    let (Some(train), Some(test)) = (&a.train, &a.test) else {
        return Err(Error::InvalidOption(
            "give a FILE to split, or --train and --test".into(),
        ));
    };
    let tr = load(Some(train.as_path()), cache)?;
    eprintln!("sptmc: {}", tr.note);
    let te = load(Some(test.as_path()), cache)?;
    eprintln!("sptmc: {}", te.note);
    let va = a
        .validation
        .as_deref()
        .map(|v| load(Some(v), cache))
        .transpose()?;
    if let Some(v) = &va {
        eprintln!("sptmc: {}", v.note);
    }
    let order = tr.tensor.order();
    for (what, x) in [("--test", &te.tensor)]
        .into_iter()
        .chain(va.as_ref().map(|v| ("--validation", &v.tensor)))
    {
        if x.order() != order {
            return Err(Error::shape(
                format!("{what} order (that of --train)"),
                order,
                x.order(),
            ));
        }
    }
    // One set of extents for all: the largest of each mode.
    let mut dims = tr.tensor.dims().to_vec();
    for x in [Some(&te.tensor), va.as_ref().map(|v| &v.tensor)]
        .into_iter()
        .flatten()
    {
        for (d, &e) in dims.iter_mut().zip(x.dims()) {
            *d = (*d).max(e);
        }
    }
    let test = with_dims(te.tensor, &dims)?;
    let (train, validation, how) = match va {
        Some(v) => (
            with_dims(tr.tensor, &dims)?,
            with_dims(v.tensor, &dims)?,
            "validation from --validation".to_string(),
        ),
        None => {
            let s = split(
                &with_dims(tr.tensor, &dims)?,
                [8.0 / 9.0, 1.0 / 9.0, 0.0],
                a.seed,
            )?;
            (
                s.train,
                s.validation,
                format!("validation: 1/9 of --train held out by seed {}", a.seed),
            )
        }
    };
    Ok((tr.name, [train, validation, test], how))
}

/// The progress line of an epoch.
fn progress_line(s: &EpochStats) -> String {
    let lr = s
        .learning_rate
        .map(|r| format!("  lr {r:.3e}{}", if s.undone { " (undone)" } else { "" }))
        .unwrap_or_default();
    format!(
        "  epoch {:3} (λ {:.3e}, {:.3}s, kernels {:.3}s)  train RMSE {}  validation RMSE {}{lr}",
        s.epoch + 1,
        s.lambda,
        s.seconds,
        s.seconds_kernel,
        sig5(s.train_rmse),
        sig5(s.validation_rmse)
    )
}

/// `sptmc complete`.
pub fn complete(a: CompleteArgs) -> Result<ExitCode> {
    let solver = match a.solver {
        SolverArg::Als => Solver::Als,
        SolverArg::Ccd => Solver::Ccd,
        SolverArg::Sgd => Solver::Sgd,
    };
    let request = CompletionRequest {
        rank: a.rank,
        solver,
        lambda: a.lambda,
        epochs: a.epochs,
        patience: a.patience,
        seed: a.seed,
        learning_rate: a.learning_rate,
        ccd_inner: a.ccd_inner,
        center: !a.no_center,
        biases: !a.no_biases,
        bias_lambda: a.bias_lambda,
    };
    request.check()?;
    if let Some(dir) = &a.out {
        super::output::check_dir(dir)?;
    }
    // The CUDA completion kernels pass their twins and the self-test on an H100
    // (bench/results/2026-11-24-h100-third-run), but there ALS on MovieLens-100k took
    // 10.6 ms per epoch on CUDA and 8.0 on the CPU backend (16 threads): `auto` keeps
    // completion on the CPU until a size rule is measured; `--backend cuda` runs them.
    let mut common = a.common.clone();
    if common.backend == BackendArg::Auto {
        common.backend = BackendArg::Cpu;
        eprintln!(
            "sptmc: completion runs on the CPU backend (--backend cuda runs the CUDA completion kernels: correct on an H100, not yet faster there)"
        );
    }
    let engine = engine(&common)?;
    let (name, [train, validation, test], how) = entries(&a)?;
    eprintln!(
        "sptmc: {how}: {} training, {} validation, {} test entries",
        train.nnz(),
        validation.nnz(),
        test.nnz()
    );
    let job = request.validate(&train, &validation)?;
    if let Some(c) = &job.compaction {
        eprintln!("sptmc: {}", c.note());
    }
    if let Some(s) = &job.scale {
        eprintln!("sptmc: {}", s.note());
    }
    let opts = &job.options;
    let mut told = Told {
        quiet: a.common.json,
        header: &|_| {
            let lambda = opts
                .lambda
                .map_or("chosen on validation".to_string(), |l| format!("{l}"));
            format!(
                "completion ({solver}) rank {} λ {lambda}{} on {:?}",
                opts.rank,
                if opts.biases { " with biases" } else { "" },
                train.dims()
            )
        },
        line: progress_line,
    };
    let report = driver::run(&job, &engine, &train, &NoForms, &mut told)?;
    let (model, seconds) = (&report.model, report.seconds);
    let baselines = &job.baselines;
    let best = *model.best().expect("at least one epoch ran");
    let test_rmse = model.rmse(&test)?;
    let empty: usize = model.empty_rows.iter().sum();
    if empty > 0 {
        eprintln!(
            "sptmc: note: {:?} rows per mode have no training entry; they predict the training mean{}",
            model.empty_rows,
            if opts.biases {
                " plus the other modes' biases"
            } else {
                ""
            }
        );
    }
    if opts.lambda.is_none() {
        eprintln!(
            "sptmc: λ {:.4e} chosen on validation ({} points of the path, best validation RMSE {})",
            model.lambda,
            model.lambda_path.len(),
            sig5(best.validation_rmse)
        );
    }
    if let (Some(lr), None) = (model.learning_rate, opts.learning_rate) {
        eprintln!(
            "sptmc: SGD's initial learning rate {lr:.4e}, from the values' spread and the rank"
        );
    }
    if let Some(w) = report.warning(&job) {
        eprintln!("sptmc: warning: {w}");
    }
    let summary = report.summary(&job, &name, &how, &train, &test)?;
    if let Some(dir) = &a.out {
        files::write(dir, model, &summary)?;
        eprintln!(
            "sptmc: wrote factor-*.txt{}, model.json to {}",
            if model.biases.is_empty() {
                ""
            } else {
                ", bias-*.txt"
            },
            dir.display()
        );
    }
    if a.common.json {
        print_json(&summary);
    } else {
        let show = |v: Option<f64>| v.map_or("n/a (no entries)".into(), sig5);
        println!(
            "completion {solver} rank {} λ {:.4e}: test RMSE {} (validation {}, train {}; best epoch {} of {}, {seconds:.3}s); baselines on test: user+item bias {}, global mean {}",
            opts.rank,
            model.lambda,
            show(test_rmse),
            sig5(best.validation_rmse),
            sig5(best.train_rmse),
            model.best_epoch + 1,
            model.epochs.len(),
            show(baselines.bias_rmse(&test)),
            show(baselines.mean_rmse(&test)),
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Reads a model folder written by `sptmc complete --out`.
fn read_model(dir: &Path) -> Result<CompletionModel> {
    files::read(dir)
}

/// `sptmc predict`.
pub fn predict(a: PredictArgs) -> Result<ExitCode> {
    let model = read_model(&a.model)?;
    let order = model.factors.len();
    let path = &a.coords;
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let parse_err = |line: usize, reason: String| Error::Parse {
        file: path.clone(),
        line,
        reason,
    };
    // Parsed and predicted in full before anything is written.
    let mut lines: Vec<(Vec<u32>, f64)> = Vec::new();
    let mut truth: Vec<f64> = Vec::new();
    let mut c = vec![0u32; order];
    for (k, line) in BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| Error::io(path, e))?;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = t.split_whitespace().collect();
        if fields.len() != order && fields.len() != order + 1 {
            return Err(parse_err(
                k + 1,
                format!(
                    "{} fields; the model has {order} modes: give {order} indices, optionally then a value",
                    fields.len()
                ),
            ));
        }
        for (m, cm) in c.iter_mut().enumerate() {
            let i: u64 = fields[m].parse().map_err(|_| {
                parse_err(
                    k + 1,
                    format!(
                        "index {:?} in mode {m} is not a positive integer",
                        fields[m]
                    ),
                )
            })?;
            if i == 0 || i > model.factors[m].rows() as u64 {
                return Err(parse_err(
                    k + 1,
                    format!(
                        "index {i} in mode {m} is outside 1..={} (the model's extent; indices are 1-based)",
                        model.factors[m].rows()
                    ),
                ));
            }
            *cm = (i - 1) as u32;
        }
        if let Some(v) = fields.get(order) {
            let v: f64 = v
                .parse()
                .ok()
                .filter(|v: &f64| v.is_finite())
                .ok_or_else(|| parse_err(k + 1, format!("value {v:?} is not a finite number")))?;
            if truth.len() != lines.len() {
                return Err(parse_err(
                    k + 1,
                    "some lines have a value and some not".into(),
                ));
            }
            truth.push(v);
        } else if !truth.is_empty() {
            return Err(parse_err(
                k + 1,
                "some lines have a value and some not".into(),
            ));
        }
        let p = model.predict(&c)?;
        if !p.is_finite() {
            return Err(Error::NonFinite(format!(
                "prediction at line {} is {p}",
                k + 1
            )));
        }
        lines.push((c.clone(), p));
    }
    let rmse = (!truth.is_empty() && truth.len() == lines.len()).then(|| {
        let s: f64 = lines
            .iter()
            .zip(&truth)
            .map(|((_, p), t)| (p - t) * (p - t))
            .sum();
        (s / truth.len() as f64).sqrt()
    });
    let write = |w: &mut dyn Write| -> std::io::Result<()> {
        for (c, p) in &lines {
            for i in c {
                write!(w, "{} ", i + 1)?;
            }
            writeln!(w, "{p}")?;
        }
        w.flush()
    };
    match &a.out {
        Some(out) => {
            super::output::check_file(out, "--out")?;
            super::output::check_not_input(out, "--out", Some(path))?;
            write_file_atomically(out, write)?;
            eprintln!(
                "sptmc: wrote {} predictions to {}",
                lines.len(),
                out.display()
            );
        }
        None if !a.json => {
            let stdout = std::io::stdout();
            write(&mut BufWriter::new(stdout.lock())).map_err(|e| Error::io("<stdout>", e))?;
        }
        None => {}
    }
    if a.json {
        print_json(&json!({
            "model": a.model.display().to_string(),
            "coords": path.display().to_string(),
            "predictions": lines.len(),
            "rmse": rmse,
            "out": a.out.as_ref().map(|p| p.display().to_string()),
        }));
    } else if let Some(r) = rmse {
        eprintln!(
            "sptmc: RMSE over the {} given values: {}",
            lines.len(),
            sig5(r)
        );
    }
    Ok(ExitCode::SUCCESS)
}
