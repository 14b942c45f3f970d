//! CP-APR (Poisson CP) for Python: the arguments as a [`CpAprRequest`] to
//! [`sptmc::driver`] (the command line's validation, memory check, preparation and
//! fit), run watched ([`crate::run::watched_steps`]) with the tensor's kept forms
//! reused, the report returned as a dict of numpy arrays for `sptmc/__init__.py` to
//! wrap.

use crate::Tensor;
use crate::decomp::{RunOn, counted, factor_array, init_factors};
use crate::errors::{input_error, to_py};
use crate::run::{backend_choice, engine, value_choice, values_dict, warn_values, watched_steps};
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use sptmc::decomp::{CpAprIter, NonInteger};
use sptmc::driver::{self, CpAprRequest};

/// A CP-APR outer iteration as the `progress` dict.
fn iteration_dict<'py>(py: Python<'py>, s: &CpAprIter) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("iteration", s.iter)?;
    d.set_item("log_likelihood", s.log_likelihood)?;
    d.set_item("kkt_violation", s.kkt_violation)?;
    d.set_item("inner_iters", s.inner_iters)?;
    d.set_item("violations", s.violations)?;
    d.set_item("seconds", s.seconds)?;
    d.set_item("seconds_kernel", s.seconds_kernel)?;
    d.set_item("bytes_to_device", s.bytes_to_device)?;
    d.set_item("bytes_from_device", s.bytes_from_device)?;
    Ok(d)
}

/// CP-APR; the arguments as `sptmc.cp_apr` takes them (the command line's options
/// under their names), `progress(dict)` called after every outer iteration when
/// given (a true return value stops the run after that iteration).
#[pyfunction]
#[pyo3(signature = (tensor, rank, iters, inner, tol, stoptime, eps, kappa, kappa_tol, seed, init, non_integer, backend, threads, values, progress))]
#[allow(clippy::too_many_arguments)]
pub fn _cp_apr<'py>(
    py: Python<'py>,
    tensor: &Bound<'py, Tensor>,
    rank: i64,
    iters: i64,
    inner: i64,
    tol: f64,
    stoptime: f64,
    eps: f64,
    kappa: f64,
    kappa_tol: f64,
    seed: i64,
    init: Option<Vec<Bound<'py, PyAny>>>,
    non_integer: &str,
    backend: &str,
    threads: Option<i64>,
    values: &str,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let t = tensor.get();
    let run_on = RunOn::of(py, t)?;
    let non_integer = match non_integer {
        "warn" => NonInteger::Warn,
        "error" => NonInteger::Error,
        other => {
            return Err(input_error(
                py,
                format!("non_integer must be \"warn\" or \"error\", got {other:?}"),
            ));
        }
    };
    let request = CpAprRequest {
        rank: counted(py, "rank", rank)?,
        iters: counted(py, "iters", iters)?,
        inner: counted(py, "inner", inner)?,
        tol,
        stoptime,
        eps,
        kappa,
        kappa_tol,
        seed: counted(py, "seed", seed)? as u64,
        init: run_on.init(init_factors(py, init)?),
        non_integer,
    };
    let rank = request.rank;
    let job = request.validate(run_on.x()).map_err(|e| to_py(py, e))?;
    let job = run_on.returning(&job, &vec![rank; t.x.order()], 0);
    let values = value_choice(py, values)?;
    let engine = engine(py, backend_choice(py, backend)?, threads, values)?;
    let (report, watch) = watched_steps(
        py,
        &engine,
        progress.as_ref(),
        iteration_dict,
        |mut control| driver::run(&job, &engine, run_on.x(), run_on.forms(), &mut control),
    )?;
    let m = &report.model;
    let d = PyDict::new(py);
    d.set_item("weights", PyArray1::from_slice(py, &m.weights))?;
    let fs = (run_on.factors(&m.factors).iter())
        .map(|f| factor_array(py, f))
        .collect::<PyResult<Vec<_>>>()?;
    d.set_item("factors", PyList::new(py, fs)?)?;
    d.set_item("log_likelihood", m.log_likelihood)?;
    d.set_item(
        "log_likelihoods",
        PyArray1::from_vec(py, m.log_likelihoods()),
    )?;
    d.set_item("converged", m.converged)?;
    d.set_item("stopped_by_callback", watch.stopped_by_callback)?;
    d.set_item("warnings", PyList::new(py, &m.warnings)?)?;
    let stats = PyList::empty(py);
    for s in &m.iters {
        stats.append(iteration_dict(py, s)?)?;
    }
    d.set_item("stats", stats)?;
    d.set_item("seconds", report.seconds)?;
    d.set_item("backend", report.backend.clone())?;
    d.set_item("values", values_dict(py, report.values.as_ref())?)?;
    warn_values(py, report.values.as_ref())?;
    Ok(d)
}
