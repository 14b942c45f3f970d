//! CP-ALS and Tucker-HOOI for Python: options checked, the tensor prepared (or its
//! kept form reused), the run watched ([`crate::run::watched`]), the model returned as
//! a dict of numpy arrays for `sptmc/__init__.py` to wrap.

use crate::Tensor;
use crate::convert::matrix;
use crate::errors::to_py;
use crate::run::{backend_choice, engine, pool, watched};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use sptmc::decomp::{
    CpOptions, IterStats, TuckerOptions, cp_als_with_control, tucker_hooi_with_control,
};
use sptmc::memplan::MemoryPlan;
use sptmc::{Matrix, Op};

/// Initial factors from Python (one 2-D float array per mode).
fn init_factors(
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

/// A factor as a new float64 `rows × cols` array.
fn factor_array<'py>(py: Python<'py>, f: &Matrix) -> PyResult<Bound<'py, PyAny>> {
    let data: Vec<f64> = f.data().iter().map(|&v| v as f64).collect();
    Ok(PyArray1::from_vec(py, data)
        .reshape([f.rows(), f.cols()])?
        .into_any())
}

/// What both models report: factors, fits, per-iteration seconds and statistics, how
/// the run ended and where it ran.
fn common<'py>(
    py: Python<'py>,
    d: &Bound<'py, PyDict>,
    factors: &[Matrix],
    iters: &[IterStats],
    stopped_by_callback: bool,
    backend: String,
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
    d.set_item("backend", backend)?;
    Ok(())
}

/// CP-ALS; the arguments as `sptmc.cp_als` takes them, `progress(dict)` called after
/// every iteration when given (a true return value stops the run).
#[pyfunction]
#[pyo3(signature = (tensor, rank, iters, tol, seed, init, backend, threads, progress))]
#[allow(clippy::too_many_arguments)]
pub fn _cp_als<'py>(
    py: Python<'py>,
    tensor: &Bound<'py, Tensor>,
    rank: usize,
    iters: usize,
    tol: f64,
    seed: u64,
    init: Option<Vec<Bound<'py, PyAny>>>,
    backend: &str,
    threads: Option<i64>,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let t = tensor.get();
    let opts = CpOptions {
        rank,
        max_iters: iters,
        tol,
        seed,
        init: init_factors(py, init)?,
    };
    // Bad options before any HLS is built.
    opts.validate(t.x.dims()).map_err(|e| to_py(py, e))?;
    // The run's own memory (factors, Grams) before the HLS form is built for it.
    MemoryPlan::cp(t.x.dims(), rank)
        .check()
        .map_err(|e| to_py(py, e))?;
    let engine = engine(py, backend_choice(py, backend)?)?;
    let pool = pool(py, threads)?;
    let prepared = t.prepared(py, &engine, &pool, Op::Mttkrp, rank)?;
    let (model, watch) = watched(py, &pool, progress.as_ref(), |control| {
        cp_als_with_control(&engine, &prepared, &opts, control)
    })?;
    let d = PyDict::new(py);
    d.set_item("weights", PyArray1::from_slice(py, &model.weights))?;
    d.set_item("pinv_solves", model.pinv_solves)?;
    let backend = pool.install(|| engine.backend().describe());
    common(
        py,
        &d,
        &model.factors,
        &model.iters,
        watch.stopped_by_callback,
        backend,
    )?;
    Ok(d)
}

/// Tucker-HOOI; the arguments as `sptmc.tucker_hooi` takes them, `progress` as for
/// [`_cp_als`].
#[pyfunction]
#[pyo3(signature = (tensor, ranks, iters, tol, seed, init, backend, threads, progress))]
#[allow(clippy::too_many_arguments)]
pub fn _tucker_hooi<'py>(
    py: Python<'py>,
    tensor: &Bound<'py, Tensor>,
    ranks: Vec<usize>,
    iters: usize,
    tol: f64,
    seed: u64,
    init: Option<Vec<Bound<'py, PyAny>>>,
    backend: &str,
    threads: Option<i64>,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let t = tensor.get();
    let opts = TuckerOptions {
        ranks: ranks.clone(),
        max_iters: iters,
        tol,
        seed,
        init: init_factors(py, init)?,
    };
    opts.validate(t.x.dims()).map_err(|e| to_py(py, e))?;
    MemoryPlan::tucker(t.x.dims(), &ranks)
        .check()
        .map_err(|e| to_py(py, e))?;
    let engine = engine(py, backend_choice(py, backend)?)?;
    let pool = pool(py, threads)?;
    // The tile threshold is tuned by the largest rank a TTMc multiplies by.
    let rank = ranks.iter().copied().max().unwrap_or(1);
    let prepared = t.prepared(py, &engine, &pool, Op::Ttmc, rank)?;
    let (model, watch) = watched(py, &pool, progress.as_ref(), |control| {
        tucker_hooi_with_control(&engine, &prepared, &opts, control)
    })?;
    let d = PyDict::new(py);
    let core = PyArray1::from_slice(py, &model.core).reshape(model.core_dims.clone())?;
    d.set_item("core", core)?;
    let backend = pool.install(|| engine.backend().describe());
    common(
        py,
        &d,
        &model.factors,
        &model.iters,
        watch.stopped_by_callback,
        backend,
    )?;
    Ok(d)
}
