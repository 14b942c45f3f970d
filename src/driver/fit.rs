//! The fit of each job and what it reports: the model, the seconds it took and the
//! device it ran on, with the summary the command line's `--json` prints.

use super::options::{CompletionJob, CpAprJob, CpJob, TuckerJob};
use super::value_scale::ScaledValues;
use super::{Events, Job, check_finite};
use crate::decomp::cp_als::cp_als_on_rows;
use crate::decomp::cp_apr::cp_apr_on_rows;
use crate::decomp::tucker::tucker_hooi_on_rows;
use crate::decomp::{
    CompletionModel, CpAprIter, CpAprModel, CpModel, EpochStats, IterStats, Solver, TuckerModel,
    complete_compacted, complete_with_control, cp_als_with_control, cp_apr_with_control,
    tucker_hooi_with_control,
};
use crate::engine::cpu::{CacheSizes, add_streamed_to_plan, private_output_floats};
use crate::engine::{Backend, Engine, Prepared, Workload};
use crate::error::Result;
use crate::hls::ValueReport;
use crate::memplan::MemoryPlan;
use crate::ops::Op;
use crate::tensor::CooTensor;
use serde_json::{Value, json};
use std::ops::ControlFlow;
use std::time::Instant;

/// A fitted model and how the run went: what every job reports.
#[derive(Debug, Clone)]
pub struct Report<M> {
    /// The model (its weights, core and log-likelihoods finite where it has them).
    pub model: M,
    /// Seconds of the fit (the preparation not included).
    pub seconds: f64,
    /// The device it ran on, in words.
    pub backend: String,
    /// How the tensor's values were stored (`None` where the model reads them from
    /// the input in f64, as GCP's samples do).
    pub values: Option<ValueReport>,
}

/// A CP-ALS model and how the run went.
pub type CpReport = Report<CpModel>;
/// A Tucker-HOOI model and how the run went.
pub type TuckerReport = Report<TuckerModel>;
/// A CP-APR model and how the run went.
pub type CpAprReport = Report<CpAprModel>;
/// A completion model and how the run went.
pub type CompletionReport = Report<CompletionModel>;

/// What CP-ALS and Tucker-HOOI summaries share: the tensor (`name`, `dims`, `nnz`),
/// the device and the values' type, the final fit, the seconds and every iteration's
/// statistics.
fn iterations_summary<M>(
    r: &Report<M>,
    name: &str,
    dims: &[usize],
    nnz: usize,
    fit: Option<f64>,
    iters: &[IterStats],
) -> Value {
    let (backend, seconds) = (&r.backend, r.seconds);
    json!({
        "tensor": name, "dims": dims, "nnz": nnz,
        "backend": backend, "values": r.values, "final_fit": fit, "seconds": seconds,
        "seconds_per_iter": seconds / iters.len().max(1) as f64,
        "iterations": iters.iter().map(|s| json!({
            "iter": s.iter, "fit": s.fit, "delta": s.delta,
            "seconds_kernel": s.seconds_kernel, "seconds_linalg": s.seconds_linalg,
            "seconds_other": s.seconds_other, "bytes_to_device": s.bytes_to_device,
            "bytes_from_device": s.bytes_from_device,
        })).collect::<Vec<_>>(),
    })
}

impl CpReport {
    /// The run as JSON (`kind`, the tensor named `name`, `rank`, `weights`, fit,
    /// seconds and iterations).
    pub fn summary(&self, name: &str, dims: &[usize], nnz: usize) -> Value {
        let m = &self.model;
        let mut v = iterations_summary(self, name, dims, nnz, m.fit(), &m.iters);
        v["kind"] = json!("cp");
        v["rank"] = json!(m.rank());
        v["weights"] = json!(m.weights);
        v
    }
}

impl TuckerReport {
    /// The run as JSON (`kind`, the tensor named `name`, the `ranks` of `job`,
    /// `core_dims`, fit, seconds and iterations).
    pub fn summary(&self, job: &TuckerJob, name: &str, dims: &[usize], nnz: usize) -> Value {
        let m = &self.model;
        let mut v = iterations_summary(self, name, dims, nnz, m.fit(), &m.iters);
        v["kind"] = json!("tucker");
        v["ranks"] = json!(job.options.ranks);
        v["core_dims"] = json!(m.core_dims);
        v
    }
}

impl CpAprReport {
    /// The run as JSON: the tensor named `name`, the model's log-likelihood, weights
    /// and warnings, the options of `job` under the command line's names, every
    /// iteration.
    pub fn summary(&self, job: &CpAprJob, name: &str, dims: &[usize], nnz: usize) -> Value {
        let (m, o) = (&self.model, &job.options);
        json!({
            "kind": "cp-apr", "tensor": name, "dims": dims, "nnz": nnz,
            "rank": o.rank, "backend": self.backend, "values": self.values,
            "log_likelihood": m.log_likelihood, "converged": m.converged,
            "seconds": self.seconds, "seconds_per_iter": self.seconds / m.iters.len().max(1) as f64,
            "weights": m.weights, "warnings": m.warnings,
            "values_scaled_by_2_to_the": job.scale.map(|s| s.values_power()),
            "options": {
                "iters": o.max_iters, "inner": o.max_inner, "tol": o.tol,
                "stoptime": o.max_seconds, "eps": o.eps, "kappa": o.kappa,
                "kappa_tol": o.kappa_tol,
            },
            "iterations": m.iters,
        })
    }
}

/// The copy of the tensor a run on scaled values ([`ScaledValues`]) prepares.
fn add_scaled_to_plan(plan: &mut MemoryPlan, scaled: Option<&ScaledValues>) {
    if let Some(s) = scaled {
        plan.add(
            "the entries with their values scaled (a copy)".to_string(),
            s.tensor.coo_bytes() as u128,
            1,
        );
    }
}

/// The fit `f` on `engine`, timed, with the device it ran on and how the values of
/// `prepared`'s form for `op` are stored.
fn timed<M>(
    engine: &Engine,
    prepared: &Prepared,
    op: Op,
    f: impl FnOnce() -> Result<M>,
) -> Result<Report<M>> {
    // The CPU backend describes the thread count of its own pool.
    let backend = engine.backend().describe();
    let values = Some(prepared.hls(op)?.stats().value_report());
    let start = Instant::now();
    let model = f()?;
    Ok(Report {
        model,
        seconds: start.elapsed().as_secs_f64(),
        backend,
        values,
    })
}

impl Job for CpJob {
    type Step = IterStats;
    type Report = CpReport;

    fn workload(&self) -> Workload {
        Workload {
            op: Op::Mttkrp,
            rank: self.options.rank,
        }
    }

    fn tensor<'x>(&'x self, x: &'x CooTensor) -> &'x CooTensor {
        match (&self.rows, &self.scaled) {
            (Some(r), _) => r.tensor(),
            (None, Some(s)) => &s.tensor,
            (None, None) => x,
        }
    }

    fn memory(&self, engine: &Engine) -> MemoryPlan {
        // The run's extents: the renumbered ones, where modes are.
        let dims: &[usize] = match &self.rows {
            Some(r) => r.tensor().dims(),
            None => &self.dims,
        };
        let rank = self.options.rank;
        // Named by the tensor's own extents: those a user can act on.
        let mut plan = MemoryPlan::cp(dims, rank).named(
            format!("CP-ALS rank {rank}"),
            crate::memplan::rank_hint(&[rank], &self.dims),
        );
        if let Some(r) = &self.rows {
            r.add_to_plan(&mut plan, &[rank].repeat(self.dims.len()));
        }
        add_scaled_to_plan(&mut plan, self.scaled.as_ref());
        if let Backend::Cpu(_) = engine.backend() {
            plan.add_padded_rank(dims, rank);
            let modes: Vec<usize> = (0..dims.len()).collect();
            add_streamed_to_plan(
                &mut plan,
                dims,
                self.nnz,
                rank,
                &modes,
                CacheSizes::of_this_machine(),
            );
        }
        plan
    }

    fn fit(
        &self,
        engine: &Engine,
        prepared: &Prepared,
        events: &mut dyn Events<IterStats>,
    ) -> Result<CpReport> {
        let (opts, mut step) = (&self.options, |s: &IterStats| events.step(s));
        let r = timed(engine, prepared, self.workload().op, || match &self.rows {
            Some(rows) => cp_als_on_rows(engine, prepared, rows, opts, &mut step),
            None => cp_als_with_control(engine, prepared, opts, &mut step),
        })?;
        let mut r = r;
        if let Some(s) = &self.scaled {
            r.model.weights.iter_mut().for_each(|w| *w = s.back(*w));
        }
        check_finite("CP weights", &r.model.weights)?;
        Ok(r)
    }
}

impl Job for TuckerJob {
    type Step = IterStats;
    type Report = TuckerReport;

    fn workload(&self) -> Workload {
        // The tile threshold is tuned by the largest rank a TTMc multiplies by.
        let rank = self.options.ranks.iter().copied().max().unwrap_or(1);
        Workload { op: Op::Ttmc, rank }
    }

    fn tensor<'x>(&'x self, x: &'x CooTensor) -> &'x CooTensor {
        match (&self.rows, &self.scaled) {
            (Some(r), _) => r.tensor(),
            (None, Some(s)) => &s.tensor,
            (None, None) => x,
        }
    }

    fn memory(&self, engine: &Engine) -> MemoryPlan {
        // The run's extents: the renumbered ones, where modes are.
        let dims: &[usize] = match &self.rows {
            Some(r) => r.tensor().dims(),
            None => &self.dims,
        };
        let ranks = &self.options.ranks;
        // Named by the tensor's own extents: those a user can act on.
        // Its Grams run in waves of one per thread of the pool the dense algebra runs on:
        // the caller's.
        let mut plan = MemoryPlan::tucker(dims, ranks, rayon::current_num_threads()).named(
            format!("Tucker-HOOI ranks {ranks:?}"),
            crate::memplan::rank_hint(ranks, &self.dims),
        );
        if let Some(r) = &self.rows {
            r.add_to_plan(&mut plan, ranks);
        }
        add_scaled_to_plan(&mut plan, self.scaled.as_ref());
        if let Backend::Cpu(cpu) = engine.backend() {
            // The walk's private copies of the widest TTMc output it does not cut by rows.
            let floats = (0..dims.len())
                .map(|n| {
                    let cols = (0..ranks.len()).filter(|&m| m != n).map(|m| ranks[m]);
                    let cols = cols.fold(1usize, usize::saturating_mul);
                    private_output_floats(Op::Ttmc, self.nnz, cpu.threads(), dims[n], cols)
                })
                .max()
                .unwrap_or(0);
            plan.add_private_outputs(cpu.threads(), floats);
        }
        plan
    }

    fn fit(
        &self,
        engine: &Engine,
        prepared: &Prepared,
        events: &mut dyn Events<IterStats>,
    ) -> Result<TuckerReport> {
        let (opts, mut step) = (&self.options, |s: &IterStats| events.step(s));
        let r = timed(engine, prepared, self.workload().op, || match &self.rows {
            Some(rows) => tucker_hooi_on_rows(engine, prepared, rows, opts, &mut step),
            None => tucker_hooi_with_control(engine, prepared, opts, &mut step),
        })?;
        let mut r = r;
        if let Some(s) = &self.scaled {
            r.model.core.iter_mut().for_each(|g| *g = s.back(*g));
        }
        check_finite("the Tucker core", &r.model.core)?;
        Ok(r)
    }
}

impl Job for CpAprJob {
    type Step = CpAprIter;
    type Report = CpAprReport;

    fn workload(&self) -> Workload {
        Workload {
            op: Op::Mttkrp,
            rank: self.options.rank,
        }
    }

    fn memory(&self, _: &Engine) -> MemoryPlan {
        let rank = self.options.rank;
        let mut plan = match &self.rows {
            // The run's extents, named by the tensor's own.
            Some(r) => MemoryPlan::cp_apr(r.tensor().dims(), self.nnz, rank).named(
                format!("CP-APR rank {rank}"),
                crate::memplan::rank_hint(&[rank], &self.dims),
            ),
            None => MemoryPlan::cp_apr(&self.dims, self.nnz, rank),
        };
        if let Some(r) = &self.rows {
            r.add_to_plan(&mut plan, &[rank].repeat(self.dims.len()));
        }
        if let Some(run) = &self.scaled {
            plan.add(
                "the entries with their values scaled (a copy)".to_string(),
                run.tensor.coo_bytes() as u128,
                1,
            );
        }
        plan
    }

    fn tensor<'x>(&'x self, x: &'x CooTensor) -> &'x CooTensor {
        match (&self.rows, &self.scaled) {
            (Some(r), _) => r.tensor(),
            (None, Some(run)) => &run.tensor,
            (None, None) => x,
        }
    }

    fn fit(
        &self,
        engine: &Engine,
        prepared: &Prepared,
        events: &mut dyn Events<CpAprIter>,
    ) -> Result<CpAprReport> {
        let fit = |control: &mut dyn FnMut(&CpAprIter) -> ControlFlow<()>| match &self.rows {
            Some(rows) => cp_apr_on_rows(engine, prepared, rows, &self.options, control),
            None => cp_apr_with_control(engine, prepared, &self.options, control),
        };
        let r = timed(engine, prepared, self.workload().op, || {
            match &self.scaled {
                Some(run) => {
                    let (scale, sum) = (run.scale, run.sum);
                    let mut m = fit(&mut |s| events.step(&scale.iteration(s, sum)))?;
                    scale.model(&mut m, sum);
                    m.warnings.splice(0..0, run.warnings.iter().cloned());
                    Ok(m)
                }
                None => fit(&mut |s| events.step(s)),
            }
        })?;
        check_finite("CP-APR weights", &r.model.weights)?;
        check_finite("CP-APR log-likelihoods", &r.model.log_likelihoods())?;
        Ok(r)
    }
}

impl Job for CompletionJob<'_> {
    type Step = EpochStats;
    type Report = CompletionReport;

    fn workload(&self) -> Workload {
        Workload {
            op: Op::Completion,
            rank: self.options.rank,
        }
    }

    fn memory(&self, _: &Engine) -> MemoryPlan {
        let order = self.dims.len();
        // With biases every mode's bias rides as one more factor column.
        let width = self.options.rank + if self.options.biases { order } else { 0 };
        // The run's extents: the compacted ones, where modes are.
        let dims = match &self.compaction {
            Some(c) => c.train().dims().to_vec(),
            None => self.dims.clone(),
        };
        let mut plan = MemoryPlan::cp(&dims, width).named(
            format!("completion rank {}", self.options.rank),
            crate::memplan::rank_hint(&[self.options.rank], &self.dims),
        );
        if self.compaction.is_some() {
            // The initial factors drawn on the tensor's rows, and the model put back
            // on them: rank R of f32 and a bias of f64 per row.
            let rows: usize = self.dims.iter().sum();
            let per_row = 4 * self.options.rank + 8 * usize::from(self.options.biases);
            plan.add(
                "the model on the tensor's own rows".to_string(),
                (rows * per_row) as u128,
                1,
            );
        }
        if let Some((t, v)) = &self.scaled {
            plan.add(
                "the entries with their values scaled (a copy)".to_string(),
                (t.coo_bytes() + v.coo_bytes()) as u128,
                1,
            );
        }
        if self.options.solver == Solver::Als {
            // Per mode, a buffer of normal equations (each row's K × K Gram and
            // right-hand side, f32, and with biases their reduction to R + 1 unknowns),
            // as many rows as one call builds: a long mode is taken in ranges.
            let (bytes, rows) = crate::decomp::completion::als_systems_bytes(
                self.nnz,
                &dims,
                self.options.rank,
                self.options.biases,
            );
            plan.add(
                format!("the modes' ALS normal equations ({rows} rows at most per call, f32)"),
                bytes,
                1,
            );
        }
        if self.options.lambda.is_none() {
            // The λ path keeps the best point's factors and its current point's best
            // beside the running ones (measured: a 3 M-row mode's path peaked 1.6
            // copies above the same run at a given λ).
            let rows: usize = dims.iter().sum();
            plan.add(
                format!("the λ path's best factors (2 copies of {rows} rows × {width}, f32)"),
                2 * (rows as u128) * (width as u128),
                4,
            );
        }
        plan
    }

    fn fit(
        &self,
        engine: &Engine,
        prepared: &Prepared,
        events: &mut dyn Events<EpochStats>,
    ) -> Result<CompletionReport> {
        let scale = self.scale;
        // The run sees the scaled values; its epochs and model go out in the given units.
        let control = &mut |s: &EpochStats| match scale {
            Some(v) => events.step(&v.epoch(s)),
            None => events.step(s),
        };
        let options = match scale {
            Some(v) => v.options(&self.options),
            None => self.options.clone(),
        };
        let validation = self.scaled.as_ref().map_or(self.validation, |(_, v)| v);
        let mut report = timed(engine, prepared, self.workload().op, || {
            match &self.compaction {
                Some(c) => complete_compacted(engine, prepared, c, &options, control),
                None => complete_with_control(engine, prepared, validation, &options, control),
            }
        })?;
        if let Some(v) = scale {
            report.model = v.model(report.model);
        }
        Ok(report)
    }

    fn tensor<'x>(&'x self, x: &'x CooTensor) -> &'x CooTensor {
        match (&self.compaction, &self.scaled) {
            (Some(c), _) => c.train(),
            (None, Some((t, _))) => t,
            (None, None) => x,
        }
    }
}
