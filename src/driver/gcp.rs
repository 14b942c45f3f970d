//! GCP through the driver: the request under the names users give its options, its
//! one validation, the run and its report. GCP samples the tensor's stored entries
//! itself and needs no HLS form, so it runs on the COO tensor ([`run_gcp`]) instead of
//! through [`super::run`].

use super::Report;
use crate::decomp::gcp::{self, GcpIter, GcpModel, GcpOptions, Loss, Method};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::matrix::Matrix;
use crate::tensor::CooTensor;
use serde_json::{Value, json};
use std::ops::ControlFlow;
use std::time::Instant;

/// A GCP run as a user asks for it. [`GcpRequest::new`] fills the defaults (GenTen's
/// `gcp_sgd` and pyttb's `gcp_opt` ones; see [`GcpOptions`]).
#[derive(Debug, Clone, PartialEq)]
pub struct GcpRequest {
    /// The number of components.
    pub rank: usize,
    /// The loss's name (one of [`gcp::loss::NAMES`]).
    pub loss: String,
    /// Negative-binomial's trials, huber's threshold or beta's exponent.
    pub loss_param: Option<f64>,
    /// `sgd` or `lbfgs`.
    pub method: String,
    /// Seed of the initial factors and the samples.
    pub seed: u64,
    /// Initial factors instead of random ones.
    pub init: Option<Vec<Matrix<f64>>>,
    /// SGD: the most epochs.
    pub epochs: usize,
    /// SGD: iterations per epoch.
    pub epoch_iters: usize,
    /// SGD: Adam's initial step.
    pub rate: f64,
    /// SGD: the step's factor after a failed epoch.
    pub decay: f64,
    /// SGD: failed epochs tolerated.
    pub max_fails: usize,
    /// SGD: nonzeros per gradient sample (0: the default).
    pub grad_nonzeros: usize,
    /// SGD: zeros per gradient sample (0: the default).
    pub grad_zeros: usize,
    /// SGD: nonzeros of the loss-estimate sample (0: the default).
    pub value_nonzeros: usize,
    /// SGD: zeros of the loss-estimate sample (0: the default).
    pub value_zeros: usize,
    /// L-BFGS: the most iterations.
    pub max_iters: usize,
    /// The most cells summed over for a loss without closed-form zeros (L-BFGS: its
    /// every iteration; SGD: its exact final loss, only estimated beyond).
    pub dense_limit: f64,
}

impl GcpRequest {
    /// A request for `rank` and `loss` with every other option at its default.
    pub fn new(rank: usize, loss: &str) -> Self {
        let d = GcpOptions::new(rank, Loss::Gaussian);
        GcpRequest {
            rank,
            loss: loss.to_string(),
            loss_param: None,
            method: "sgd".into(),
            seed: d.seed,
            init: None,
            epochs: d.epochs,
            epoch_iters: d.epoch_iters,
            rate: d.rate,
            decay: d.decay,
            max_fails: d.max_fails,
            grad_nonzeros: d.grad_nonzeros,
            grad_zeros: d.grad_zeros,
            value_nonzeros: d.value_nonzeros,
            value_zeros: d.value_zeros,
            max_iters: d.max_iters,
            dense_limit: d.dense_limit,
        }
    }

    /// The options, checked as far as they can be without a tensor.
    pub fn options(&self) -> Result<GcpOptions> {
        let loss = Loss::parse(&self.loss, self.loss_param)?;
        let method = match self.method.as_str() {
            "sgd" => Method::Sgd,
            "lbfgs" | "lbfgsb" => Method::Lbfgs,
            m => {
                return Err(Error::InvalidOption(format!(
                    "unknown method {m:?}; the methods are sgd, lbfgs"
                )));
            }
        };
        let opts = GcpOptions {
            method,
            seed: self.seed,
            init: self.init.clone(),
            epochs: self.epochs,
            epoch_iters: self.epoch_iters,
            rate: self.rate,
            decay: self.decay,
            max_fails: self.max_fails,
            grad_nonzeros: self.grad_nonzeros,
            grad_zeros: self.grad_zeros,
            value_nonzeros: self.value_nonzeros,
            value_zeros: self.value_zeros,
            max_iters: self.max_iters,
            dense_limit: self.dense_limit,
            ..GcpOptions::new(self.rank, loss)
        };
        gcp::check_options(&opts)?;
        Ok(opts)
    }

    /// The checks that need no tensor (a front end may run them before reading one).
    pub fn check(&self) -> Result<()> {
        self.options().map(|_| ())
    }

    /// The options checked against `x` (the data the loss needs, the initial factors'
    /// shapes): a job to run.
    pub fn validate(self, x: &CooTensor) -> Result<GcpJob> {
        let options = self.options()?;
        gcp::check_data(x, &options)?;
        Ok(GcpJob { options })
    }
}

/// A validated GCP run.
#[derive(Debug, Clone)]
pub struct GcpJob {
    /// The options of the model's loop.
    pub options: GcpOptions,
}

/// A GCP model and how the run went.
pub type GcpReport = Report<GcpModel>;

/// Fits `job` on `x`, telling `step` of every epoch (SGD) or iteration (L-BFGS).
pub fn run_gcp(
    job: &GcpJob,
    engine: &Engine,
    x: &CooTensor,
    step: &mut dyn FnMut(&GcpIter) -> ControlFlow<()>,
) -> Result<GcpReport> {
    let backend = engine.backend().describe();
    let start = Instant::now();
    let model = gcp::gcp(engine, x, &job.options, step)?;
    super::check_finite("GCP weights", &model.weights)?;
    Ok(GcpReport {
        model,
        seconds: start.elapsed().as_secs_f64(),
        backend,
        // GCP samples the input's f64 values; no stored form is involved.
        values: None,
    })
}

impl GcpReport {
    /// Why the model's exact loss is not reported (where it is not): the pass over
    /// the cells it needs, beyond `dense_limit`, or a sum that is not finite.
    pub fn why_not_exact(&self, job: &GcpJob, dims: &[usize]) -> String {
        let o = &job.options;
        let n = gcp::cells(dims);
        if n > o.dense_limit {
            format!(
                "loss {} has no closed form for its zeros, and the exact loss would sum over \
                 all {n:.0} cells, more than dense_limit = {:.0}; the estimate is over the \
                 fixed sample",
                o.loss, o.dense_limit
            )
        } else {
            "the exact loss is not a finite number".to_string()
        }
    }

    /// The run as JSON: the tensor named `name`, the loss, the model's weights, the
    /// options of `job` under the command line's names, every epoch or iteration.
    pub fn summary(&self, job: &GcpJob, name: &str, dims: &[usize], nnz: usize) -> Value {
        let (m, o) = (&self.model, &job.options);
        let (values, grads) = gcp::sgd::strata(dims, nnz, o);
        let est = m.estimate.as_ref();
        json!({
            "kind": "gcp", "tensor": name, "dims": dims, "nnz": nnz,
            "rank": o.rank, "loss": o.loss.name(), "loss_param": o.loss.param(),
            "method": o.method.name(), "backend": self.backend,
            "final_loss": m.loss, "initial_loss": m.initial_loss,
            "final_loss_note": m.loss.is_none().then(|| self.why_not_exact(job, dims)),
            "final_loss_estimate": est.map(|e| e.final_loss),
            "initial_loss_estimate": est.map(|e| e.initial_loss),
            "loss_estimate_sample": est.map(|e| json!({"nonzeros": e.nonzeros, "zeros": e.zeros})),
            "stopped": m.stopped,
            "value_scale": m.value_scale, "warnings": m.warnings,
            "seconds": self.seconds,
            "seconds_per_iter": self.seconds / m.iters.len().max(1) as f64,
            "weights": m.weights,
            "options": {
                "seed": o.seed, "epochs": o.epochs, "epoch_iters": o.epoch_iters,
                "rate": o.rate, "decay": o.decay, "max_fails": o.max_fails,
                "grad_nonzeros": grads.nonzeros, "grad_zeros": grads.zeros,
                "value_nonzeros": values.nonzeros, "value_zeros": values.zeros,
                "max_iters": o.max_iters, "pgtol": o.pgtol, "factr": o.factr,
                "memory": o.memory, "dense_limit": o.dense_limit,
            },
            "iterations": m.iters,
        })
    }
}
