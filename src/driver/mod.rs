//! One path from a user's request to a reported model, shared by every front end (the
//! `sptmc` command line and the Python package), so that a check written once holds in
//! both:
//!
//! 1. **validate**: a request ([`CpRequest`], [`TuckerRequest`], [`CpAprRequest`],
//!    [`CompletionRequest`]) holds the options under the names users give them (`rank`,
//!    `iters`, `tol`, ...); its `validate` is the only check of them, with one wording
//!    that both front ends print verbatim, and yields a [`Job`];
//! 2. **plan memory**: what the run allocates, plus the tensor's preparation unless a
//!    form kept from an earlier call is reused, checked once ([`prepare()`]);
//! 3. **prepare**: the tensor's HLS form built with the tuned tile threshold, which the
//!    returned [`Preparation`] reports (the library prints nothing);
//! 4. **fit**: the model, with a per-iteration callback ([`Events`]) that can stop it;
//! 5. **report**: what both the command line's `--json` and the Python result are built
//!    from ([`CpReport`], [`TuckerReport`], [`CpAprReport`], [`CompletionReport`]).
//!
//! [`run`] does steps 2 to 5 for a validated [`Job`]. Where tuning profiles come from
//! is also decided here, once: [`tuning::profiles`].

mod completion;
mod fit;
mod gcp;
mod options;
mod prepare;
pub mod tuning;
pub mod value_scale;

pub use fit::{CompletionReport, CpAprReport, CpReport, Report, TuckerReport};
pub use gcp::{GcpJob, GcpReport, GcpRequest, run_gcp};
pub use options::{
    CompletionJob, CompletionRequest, CpAprJob, CpAprRequest, CpJob, CpRequest,
    DEFAULT_TUCKER_RANK, TuckerJob, TuckerRequest, count, tucker_ranks,
};
pub use prepare::{Forms, NoForms, Preparation, prepare};

use crate::engine::{Engine, Prepared, Workload};
use crate::error::Result;
use crate::memplan::MemoryPlan;
use crate::tensor::CooTensor;
use std::ops::ControlFlow;

/// A validated request: what it runs on, what it allocates, how it fits. Made only by
/// a request's `validate`.
pub trait Job {
    /// What the fit reports after each iteration (or epoch).
    type Step;
    /// What the fit returns.
    type Report;

    /// The op and rank the tensor is prepared for.
    fn workload(&self) -> Workload;

    /// What the run allocates on `engine` besides the tensor's preparation (the CPU's
    /// private outputs grow with its thread count).
    fn memory(&self, engine: &Engine) -> MemoryPlan;

    /// The tensor the fit runs on, for the user's tensor `x`: `x` itself, unless the
    /// job made a form of it to run on (completion's compacted modes).
    fn tensor<'x>(&'x self, x: &'x CooTensor) -> &'x CooTensor {
        x
    }

    /// Fits the model on `prepared`, telling `events` of every step.
    fn fit(
        &self,
        engine: &Engine,
        prepared: &Prepared,
        events: &mut dyn Events<Self::Step>,
    ) -> Result<Self::Report>;
}

/// What a front end hears while a job runs.
pub trait Events<S> {
    /// The tensor is prepared (or a kept form was found); the fit starts next.
    fn prepared(&mut self, _preparation: &Preparation) {}

    /// One iteration (or epoch) is done; [`ControlFlow::Break`] stops the run there
    /// and returns the model so far, where the model's loop supports it (CP-ALS,
    /// Tucker-HOOI and completion; CP-APR runs on).
    fn step(&mut self, step: &S) -> ControlFlow<()>;
}

/// A closure is the step callback, with nothing to say about the preparation.
impl<S, F: FnMut(&S) -> ControlFlow<()>> Events<S> for F {
    fn step(&mut self, step: &S) -> ControlFlow<()> {
        self(step)
    }
}

/// Steps 2 to 5 for `job` on `x`: the memory the run needs checked once, `x` prepared
/// (or the form `forms` kept reused, and a new one handed to it), the model fitted and
/// reported.
pub fn run<J: Job>(
    job: &J,
    engine: &Engine,
    x: &CooTensor,
    forms: &dyn Forms,
    events: &mut dyn Events<J::Step>,
) -> Result<J::Report> {
    let run_on = job.tensor(x);
    // Forms kept for the user's tensor do not serve another.
    let forms = if std::ptr::eq(run_on, x) {
        forms
    } else {
        &NoForms
    };
    let preparation = prepare(engine, run_on, job.workload(), job.memory(engine), forms)?;
    events.prepared(&preparation);
    job.fit(engine, &preparation.prepared, events)
}

/// Fails with [`crate::Error::NonFinite`] when `values` hold inf or NaN: such a model
/// is never returned.
pub(crate) fn check_finite(what: &str, values: &[f64]) -> Result<()> {
    match values.iter().position(|v| !v.is_finite()) {
        None => Ok(()),
        Some(p) => Err(crate::Error::NonFinite(format!(
            "{what}: entry {p} is {}; the model is discarded",
            values[p]
        ))),
    }
}

#[cfg(test)]
mod tests;

/// `x` to five significant digits: fixed-point from 0.001 up to 100 000, else in
/// scientific notation (an RMSE of data near 1e-8 printed as "0.00000" said nothing,
/// one of data near 1e8 as "92040651.94509" more than the run knows).
pub fn sig5(x: f64) -> String {
    let a = x.abs();
    if x == 0.0 || !x.is_finite() {
        format!("{x}")
    } else if (1e-3..1e5).contains(&a) {
        let decimals = (4 - a.log10().floor() as i32).max(0) as usize;
        format!("{x:.decimals$}")
    } else {
        format!("{x:.4e}")
    }
}
