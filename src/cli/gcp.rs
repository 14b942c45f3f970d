//! `sptmc gcp`: Generalized CP under a chosen loss, with `sptmc cp`'s output
//! conventions (per-epoch lines on stderr, `--out`, `--json`).

use super::args::{BackendArg, Common};
use super::load::load;
use super::{engine, print_json};
use clap::{Args, ValueEnum};
use sptmc::decomp::GcpIter;
use sptmc::decomp::gcp::{self, units::BAND};
use sptmc::driver::{GcpRequest, run_gcp};
use sptmc::model_io::{read_cp_init, write_model};
use sptmc::{Matrix, Result};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;

/// `sptmc gcp`.
#[derive(Debug, Args)]
#[command(allow_negative_numbers = true)]
pub struct GcpArgs {
    /// Tensor file (.tns, .tns.gz, .sptb); omitted: a built-in generated tensor.
    pub file: Option<PathBuf>,
    /// Rank of the model.
    #[arg(long, short = 'r', default_value_t = 16)]
    pub rank: usize,
    /// Loss: gaussian, bernoulli-logit, bernoulli-odds, poisson-log, poisson, gamma,
    /// rayleigh, negative-binomial, huber, beta.
    #[arg(long, default_value = "gaussian")]
    pub loss: String,
    /// Negative-binomial's number of trials, huber's threshold or beta's exponent.
    #[arg(long)]
    pub loss_param: Option<f64>,
    /// sgd: stochastic gradients with Adam (GenTen gcp_sgd); lbfgs: L-BFGS-B on the
    /// exact loss (pyttb gcp_opt), for small tensors.
    #[arg(long, value_enum, default_value_t = MethodArg::Sgd)]
    pub method: MethodArg,
    /// SGD: the most epochs (GenTen maxiters).
    #[arg(long, default_value_t = 100)]
    pub epochs: usize,
    /// SGD: iterations per epoch (GenTen epoch_iters).
    #[arg(long, default_value_t = 1000)]
    pub epoch_iters: usize,
    /// SGD: Adam's initial step (GenTen rate).
    #[arg(long, default_value_t = 1e-3)]
    pub rate: f64,
    /// SGD: the step's factor after an epoch that does not improve (GenTen decay).
    #[arg(long, default_value_t = 0.1)]
    pub decay: f64,
    /// SGD: failed epochs tolerated; one more stops the run (GenTen max_fails).
    #[arg(long, default_value_t = 10)]
    pub max_fails: usize,
    /// SGD: nonzeros per gradient sample (0: GenTen's default, 3·nnz/epochs, at least
    /// 1000 and at most nnz).
    #[arg(long, default_value_t = 0)]
    pub grad_nonzeros: usize,
    /// SGD: zeros per gradient sample (0: GenTen's default).
    #[arg(long, default_value_t = 0)]
    pub grad_zeros: usize,
    /// SGD: nonzeros of the fixed loss-estimate sample (0: GenTen's default).
    #[arg(long, default_value_t = 0)]
    pub value_nonzeros: usize,
    /// SGD: zeros of the fixed loss-estimate sample (0: GenTen's default).
    #[arg(long, default_value_t = 0)]
    pub value_zeros: usize,
    /// L-BFGS: the most iterations (scipy maxiter).
    #[arg(long, default_value_t = 1000)]
    pub max_iters: usize,
    /// The most cells a loss without closed-form zeros may sum over (L-BFGS: every
    /// iteration; SGD: its exact final loss, else only estimated).
    #[arg(long, default_value_t = 67_108_864.0)]
    pub dense_limit: f64,
    /// Seed of the random initial factors and of every sample.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Folder with initial factors factor-<m>.txt, as written by --out; its weights.txt,
    /// when there, is multiplied into the first factor (so the run resumes that model).
    #[arg(long)]
    pub init: Option<PathBuf>,
    /// Write the model (factors, weights.txt) as numpy.loadtxt-readable text, plus
    /// model.json, into this folder.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Read a text tensor without the binary cache, and write no cache entry.
    #[arg(long)]
    pub no_cache: bool,
    /// Shared options (`--backend auto` runs on the CPU: the sampled gradient has no
    /// CUDA kernel yet).
    #[command(flatten)]
    pub common: Common,
}

/// `--method`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MethodArg {
    /// Stochastic gradients with Adam.
    Sgd,
    /// L-BFGS-B on the exact loss and gradient.
    Lbfgs,
}

/// The progress line of an epoch or iteration; `decay` is SGD's step factor after an
/// undone epoch. An SGD epoch's loss is its estimate over the fixed sample; one that
/// is not a finite number is said in words.
fn progress_line(method: gcp::Method, decay: f64, s: &GcpIter) -> String {
    let loss = |l: Option<f64>| l.map_or("not finite".to_string(), |l| format!("{l:.6e}"));
    match (method, s.loss) {
        (gcp::Method::Sgd, None) => format!(
            "  epoch = {:3}  epoch undone: loss estimate not finite; step {:.3e} reduced to \
             {:.3e}  ({:.3}s)",
            s.iter + 1,
            s.step,
            s.step * decay,
            s.seconds
        ),
        (gcp::Method::Sgd, Some(l)) => format!(
            "  epoch = {:3}  loss estimate = {l:.6e}  step = {:.3e}{}  ({:.3}s)",
            s.iter + 1,
            s.step,
            if s.accepted { "" } else { "  (undone)" },
            s.seconds
        ),
        (gcp::Method::Lbfgs, l) => format!(
            "  its = {:3}  loss = {}  projected gradient = {:.3e}  ({:.3}s)",
            s.iter + 1,
            loss(l),
            s.step,
            s.seconds
        ),
    }
}

/// The closing line's loss: the exact one where it is known, else the estimate
/// labelled with its sample; `cells` counts the index space.
fn final_loss_words(model: &gcp::GcpModel, cells: f64) -> String {
    match (model.loss, &model.estimate) {
        (Some(l), None) => format!("final loss {l:.10e}"),
        (Some(l), Some(e)) => format!(
            "final loss {l:.10e} (exact, over all {cells:.0} cells; the last estimate \
             {:.4e} over {} sampled entries)",
            e.final_loss,
            e.nonzeros + e.zeros
        ),
        (None, Some(e)) => format!(
            "final loss estimated over {} sampled entries ({} nonzeros, {} zeros): {:.4e} \
             (not exact: see --json final_loss_note)",
            e.nonzeros + e.zeros,
            e.nonzeros,
            e.zeros,
            e.final_loss
        ),
        (None, None) => "final loss not finite".to_string(),
    }
}

/// GCP.
pub fn gcp(a: GcpArgs) -> Result<ExitCode> {
    let mut request = GcpRequest {
        loss_param: a.loss_param,
        method: match a.method {
            MethodArg::Sgd => "sgd",
            MethodArg::Lbfgs => "lbfgs",
        }
        .into(),
        seed: a.seed,
        epochs: a.epochs,
        epoch_iters: a.epoch_iters,
        rate: a.rate,
        decay: a.decay,
        max_fails: a.max_fails,
        grad_nonzeros: a.grad_nonzeros,
        grad_zeros: a.grad_zeros,
        value_nonzeros: a.value_nonzeros,
        value_zeros: a.value_zeros,
        max_iters: a.max_iters,
        dense_limit: a.dense_limit,
        ..GcpRequest::new(a.rank, &a.loss)
    };
    request.check()?;
    if let Some(dir) = &a.out {
        super::output::check_dir(dir)?;
    }
    // GCP's sampled gradient has no CUDA kernel yet: `auto` means the CPU.
    let mut common = a.common.clone();
    if common.backend == BackendArg::Auto {
        common.backend = BackendArg::Cpu;
    }
    let engine = engine(&common)?;
    let loaded = load(a.file.as_deref(), !a.no_cache)?;
    eprintln!("sptmc: {}", loaded.note);
    let x = &loaded.tensor;
    if let Some(dir) = &a.init {
        request.init = Some(read_cp_init(dir, x.order())?);
    }
    let job = request.validate(x)?;
    eprintln!(
        "sptmc: GCP rank {} with loss {} by {} on {:?}, {} nonzeros",
        a.rank,
        job.options.loss,
        job.options.method.name(),
        x.dims(),
        x.nnz()
    );
    let quiet = a.common.json;
    let o = &job.options;
    let (_, grads) = gcp::sgd::strata(x.dims(), x.nnz(), o);
    // GenTen's rule sizes the sample to the run's length: few epochs, whole passes (a
    // tensor of at most 1000 nonzeros is sampled whole at any length).
    let whole = grads.nonzeros >= x.nnz() && x.nnz() > 1000;
    if !quiet && o.method == gcp::Method::Sgd && o.grad_nonzeros == 0 && whole {
        eprintln!(
            "sptmc: note: with --epochs {}, each iteration's gradient samples all {} \
             nonzeros (GenTen's default, 3·nnz/epochs): an epoch of {} iterations passes \
             over the tensor {} times; --grad-nonzeros N samples fewer",
            o.epochs,
            x.nnz(),
            o.epoch_iters,
            o.epoch_iters
        );
    }
    if !quiet && o.method == gcp::Method::Sgd {
        let (values, _) = gcp::sgd::strata(x.dims(), x.nnz(), o);
        eprintln!(
            "sptmc: each epoch's loss is estimated over a fixed sample of {} entries ({} \
             nonzeros, {} zeros); the final loss is exact where its zeros have a closed form \
             or the tensor at most --dense-limit cells",
            values.nonzeros + values.zeros,
            values.nonzeros,
            values.zeros
        );
    }
    if let (Some(s), false) = (gcp::value_scale(x, &job.options), quiet) {
        eprintln!(
            "sptmc: the values' RMS is more than 2^{BAND} from 1: {} runs on them divided \
             by 2^{} ({}); the model and losses are in the given units",
            job.options.method.name(),
            s.exponent * s.order as i32,
            match job.options.method {
                gcp::Method::Sgd => "Adam's step and epsilon are sized for values near 1",
                gcp::Method::Lbfgs => "L-BFGS-B's stopping tests are sized for losses near 1",
            }
        );
    }
    let report = run_gcp(&job, &engine, x, &mut |s| {
        if !quiet {
            eprintln!(
                "{}",
                progress_line(job.options.method, job.options.decay, s)
            );
        }
        ControlFlow::Continue(())
    })?;
    let model = &report.model;
    for w in &model.warnings {
        eprintln!("sptmc: warning: {w}");
    }
    let summary = report.summary(&job, &loaded.name, x.dims(), x.nnz());
    if let Some(dir) = &a.out {
        let weights = Matrix::new(model.weights.len(), 1, model.weights.clone())?;
        let names: Vec<String> = (0..x.order()).map(|m| format!("factor-{m}.txt")).collect();
        let mut files: Vec<(&str, String, Matrix<f64>)> = vec![(
            "weights.txt",
            format!("GCP weights (lambda), loss {}", job.options.loss),
            weights,
        )];
        for (m, f) in model.factors.iter().enumerate() {
            files.push((&names[m], format!("factor of mode {m}"), f.clone()));
        }
        write_model(dir, &[], &files, &summary)?;
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
            "GCP rank {} ({} loss, {}): {} after {n} {} ({}), {:.3}s ({:.4}s/{})",
            a.rank,
            job.options.loss,
            job.options.method.name(),
            final_loss_words(model, gcp::cells(x.dims())),
            if a.method == MethodArg::Sgd {
                "epochs"
            } else {
                "iterations"
            },
            model.stopped,
            report.seconds,
            report.seconds / n.max(1) as f64,
            if a.method == MethodArg::Sgd {
                "epoch"
            } else {
                "iteration"
            },
        );
    }
    Ok(ExitCode::SUCCESS)
}
