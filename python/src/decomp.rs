//! CP-ALS and Tucker-HOOI for Python: the arguments as a request to
//! [`sptmc::driver`] (the command line's driver: its validation, memory check,
//! preparation and fit), run watched ([`crate::run::watched`]) with the tensor's kept
//! forms reused, the report returned as a dict of numpy arrays for
//! `sptmc/__init__.py` to wrap.

use crate::Tensor;
use crate::convert::matrix;
use crate::errors::to_py;
use crate::run::{backend_choice, engine, value_choice, values_dict, warn_values, watched};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use sptmc::Matrix;
use sptmc::decomp::IterStats;
use sptmc::driver::{self, CpRequest, Events, Forms, Job, NoForms, TuckerRequest, count};
use sptmc::engine::{Engine, Prepared, Workload};
use sptmc::memplan::MemoryPlan;
use sptmc::tensor::CooTensor;
use sptmc::tensor::relabel::{Relabelled, init_rows, relabel_if_needed};
use std::borrow::Cow;

/// Initial factors from Python (one 2-D float array per mode).
pub(crate) fn init_factors(
    py: Python<'_>,
    init: Option<Vec<Bound<'_, PyAny>>>,
) -> PyResult<Option<Vec<Matrix>>> {
    init.map(|fs| {
        fs.iter()
            .enumerate()
            .map(|(m, f)| matrix(py, f, &format!("init[{m}]")))
            .collect()
    })
    .transpose()
}

/// The tensor a decomposition runs on: the user's, with its kept forms, or, where its
/// coordinates need more key bits than the HLS format holds, its modes renumbered to
/// their used indices (as on the command line: [`sptmc::tensor::relabel`]), with no
/// kept forms; the way from the user's rows and back.
pub(crate) struct RunOn<'t> {
    t: &'t Tensor,
    relabelled: Option<Relabelled>,
}

impl<'t> RunOn<'t> {
    /// For the Python tensor `t`.
    pub(crate) fn of(py: Python<'_>, t: &'t Tensor) -> PyResult<Self> {
        let relabelled = relabel_if_needed(&t.x).map_err(|e| to_py(py, e))?;
        Ok(RunOn { t, relabelled })
    }

    /// The tensor the run prepares.
    pub(crate) fn x(&self) -> &CooTensor {
        self.relabelled.as_ref().map_or(&self.t.x, |r| &r.tensor)
    }

    /// Where its prepared forms are kept: with the user's tensor, or nowhere.
    pub(crate) fn forms(&self) -> &dyn Forms {
        match self.relabelled {
            Some(_) => &NoForms,
            None => self.t,
        }
    }

    /// Initial factors on the user's rows, cut to the run's.
    pub(crate) fn init(&self, init: Option<Vec<Matrix>>) -> Option<Vec<Matrix>> {
        init_rows(self.relabelled.as_ref(), init)
    }

    /// `job`, whose model has factors of `ranks[m]` columns and `more` other values,
    /// returned to Python ([`Returned`]): each factor entry on the user's rows as an
    /// f64, and where modes were renumbered, as the f32 it is expanded to first.
    pub(crate) fn returning<'j, J>(
        &self,
        job: &'j J,
        ranks: &[usize],
        more: u128,
    ) -> Returned<'j, J> {
        let entries = (self.t.x.dims().iter().zip(ranks)).fold(0u128, |s, (&d, &r)| {
            s.saturating_add((d as u128).saturating_mul(r as u128))
        });
        let per_entry = if self.relabelled.is_some() { 12 } else { 8 };
        Returned {
            job,
            bytes: entries
                .saturating_mul(per_entry)
                .saturating_add(more.saturating_mul(8)),
        }
    }

    /// A model's factors on the user's rows (borrowed where the run was on them).
    pub(crate) fn factors<'f>(&self, factors: &'f [Matrix]) -> Cow<'f, [Matrix]> {
        match &self.relabelled {
            None => Cow::Borrowed(factors),
            Some(r) => Cow::Owned(
                (factors.iter().enumerate())
                    .map(|(m, f)| r.expand(m, f))
                    .collect(),
            ),
        }
    }
}

/// A job whose model is returned to Python ([`RunOn::returning`]): its memory plan
/// also counts the float64 arrays the model is copied into, so that a model too large
/// to hand back is refused before the run, not an allocation failure after it.
pub(crate) struct Returned<'j, J> {
    job: &'j J,
    bytes: u128,
}

impl<J: Job> Job for Returned<'_, J> {
    type Step = J::Step;
    type Report = J::Report;

    fn workload(&self) -> Workload {
        self.job.workload()
    }

    fn memory(&self, engine: &Engine) -> MemoryPlan {
        let mut plan = self.job.memory(engine);
        plan.add("the model returned as float64 arrays", self.bytes, 1);
        plan
    }

    fn tensor<'x>(&'x self, x: &'x CooTensor) -> &'x CooTensor {
        self.job.tensor(x)
    }

    fn fit(
        &self,
        engine: &Engine,
        prepared: &Prepared,
        events: &mut dyn Events<Self::Step>,
    ) -> sptmc::Result<Self::Report> {
        self.job.fit(engine, prepared, events)
    }
}

/// The integer option `name` as a count ([`count`]: a negative value is refused by
/// name).
pub(crate) fn counted(py: Python<'_>, name: &str, value: i64) -> PyResult<usize> {
    count(name, value).map_err(|e| to_py(py, e))
}

/// A factor as a new float64 `rows × cols` array.
pub(crate) fn factor_array<'py>(py: Python<'py>, f: &Matrix) -> PyResult<Bound<'py, PyAny>> {
    let data: Vec<f64> = f.data().iter().map(|&v| v as f64).collect();
    Ok(PyArray1::from_vec(py, data)
        .reshape([f.rows(), f.cols()])?
        .into_any())
}

/// What both models report: factors, fits, per-iteration seconds and statistics, how
/// the run ended, where it ran and how the values were stored.
fn common<'py, M>(
    py: Python<'py>,
    d: &Bound<'py, PyDict>,
    factors: &[Matrix],
    iters: &[IterStats],
    stopped_by_callback: bool,
    report: &driver::Report<M>,
) -> PyResult<()> {
    let fs = factors
        .iter()
        .map(|f| factor_array(py, f))
        .collect::<PyResult<Vec<_>>>()?;
    d.set_item("factors", PyList::new(py, fs)?)?;
    let fits: Vec<f64> = iters.iter().map(|s| s.fit).collect();
    d.set_item("fits", PyArray1::from_vec(py, fits))?;
    let seconds: Vec<f64> = iters
        .iter()
        .map(|s| s.seconds_kernel + s.seconds_linalg + s.seconds_other)
        .collect();
    d.set_item("seconds", PyArray1::from_vec(py, seconds))?;
    let stats = PyList::empty(py);
    for s in iters {
        let e = PyDict::new(py);
        e.set_item("iteration", s.iter)?;
        e.set_item("fit", s.fit)?;
        e.set_item("delta", s.delta)?;
        e.set_item("seconds_kernel", s.seconds_kernel)?;
        e.set_item("seconds_linalg", s.seconds_linalg)?;
        e.set_item("seconds_other", s.seconds_other)?;
        e.set_item("bytes_to_device", s.bytes_to_device)?;
        e.set_item("bytes_from_device", s.bytes_from_device)?;
        stats.append(e)?;
    }
    d.set_item("stats", stats)?;
    d.set_item("stopped_by_callback", stopped_by_callback)?;
    d.set_item("backend", &report.backend)?;
    d.set_item("values", values_dict(py, report.values.as_ref())?)?;
    warn_values(py, report.values.as_ref())?;
    Ok(())
}

/// CP-ALS; the arguments as `sptmc.cp_als` takes them, `progress(dict)` called after
/// every iteration when given (a true return value stops the run).
#[pyfunction]
#[pyo3(signature = (tensor, rank, iters, tol, seed, init, backend, threads, values, progress))]
#[allow(clippy::too_many_arguments)]
pub fn _cp_als<'py>(
    py: Python<'py>,
    tensor: &Bound<'py, Tensor>,
    rank: i64,
    iters: i64,
    tol: f64,
    seed: i64,
    init: Option<Vec<Bound<'py, PyAny>>>,
    backend: &str,
    threads: Option<i64>,
    values: &str,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let t = tensor.get();
    let run_on = RunOn::of(py, t)?;
    let request = CpRequest {
        rank: counted(py, "rank", rank)?,
        iters: counted(py, "iters", iters)?,
        tol,
        seed: counted(py, "seed", seed)? as u64,
        init: run_on.init(init_factors(py, init)?),
    };
    // Bad options before any engine is made or HLS built.
    let rank = request.rank;
    let job = request.validate(run_on.x()).map_err(|e| to_py(py, e))?;
    let job = run_on.returning(&job, &vec![rank; t.x.order()], 0);
    let values = value_choice(py, values)?;
    let engine = engine(py, backend_choice(py, backend)?, threads, values)?;
    let (report, watch) = watched(py, &engine, progress.as_ref(), |mut control| {
        driver::run(&job, &engine, run_on.x(), run_on.forms(), &mut control)
    })?;
    let d = PyDict::new(py);
    d.set_item("weights", PyArray1::from_slice(py, &report.model.weights))?;
    d.set_item("pinv_solves", report.model.pinv_solves)?;
    common(
        py,
        &d,
        &run_on.factors(&report.model.factors),
        &report.model.iters,
        watch.stopped_by_callback,
        &report,
    )?;
    Ok(d)
}

/// Tucker-HOOI; the arguments as `sptmc.tucker_hooi` takes them, `progress` as for
/// [`_cp_als`].
#[pyfunction]
#[pyo3(signature = (tensor, ranks, iters, tol, seed, init, backend, threads, values, progress))]
#[allow(clippy::too_many_arguments)]
pub fn _tucker_hooi<'py>(
    py: Python<'py>,
    tensor: &Bound<'py, Tensor>,
    ranks: Vec<i64>,
    iters: i64,
    tol: f64,
    seed: i64,
    init: Option<Vec<Bound<'py, PyAny>>>,
    backend: &str,
    threads: Option<i64>,
    values: &str,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let t = tensor.get();
    let run_on = RunOn::of(py, t)?;
    let ranks: Vec<usize> = ranks
        .iter()
        .enumerate()
        .map(|(m, &r)| counted(py, &format!("ranks[{m}]"), r))
        .collect::<PyResult<_>>()?;
    let request = TuckerRequest {
        // One rank for every mode, lowered where a mode is shorter (as `--ranks R`).
        ranks: match ranks.as_slice() {
            [_] => driver::tucker_ranks(Some(&ranks), run_on.x().dims()),
            _ => ranks,
        },
        iters: counted(py, "iters", iters)?,
        tol,
        seed: counted(py, "seed", seed)? as u64,
        init: run_on.init(init_factors(py, init)?),
    };
    let ranks = request.ranks.clone();
    let job = request.validate(run_on.x()).map_err(|e| to_py(py, e))?;
    let core = ranks
        .iter()
        .fold(1u128, |p, &r| p.saturating_mul(r as u128));
    let job = run_on.returning(&job, &ranks, core);
    let values = value_choice(py, values)?;
    let engine = engine(py, backend_choice(py, backend)?, threads, values)?;
    let (report, watch) = watched(py, &engine, progress.as_ref(), |mut control| {
        driver::run(&job, &engine, run_on.x(), run_on.forms(), &mut control)
    })?;
    let d = PyDict::new(py);
    let model = &report.model;
    let core = PyArray1::from_slice(py, &model.core).reshape(model.core_dims.clone())?;
    d.set_item("core", core)?;
    common(
        py,
        &d,
        &run_on.factors(&model.factors),
        &model.iters,
        watch.stopped_by_callback,
        &report,
    )?;
    Ok(d)
}
