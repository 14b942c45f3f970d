//! GCP for Python: the arguments as a [`GcpRequest`] to [`sptmc::driver`] (the
//! command line's validation and run), run watched ([`crate::run::watched_steps`]:
//! the GIL released, a per-epoch callback that can stop the run), the report returned
//! as a dict of numpy arrays for `sptmc/__init__.py` to wrap in a `CPResult`.

use crate::Tensor;
use crate::convert::matrix;
use crate::errors::to_py;
use crate::run::{backend_choice, engine, watched_steps};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use sptmc::decomp::GcpIter;
use sptmc::driver::{GcpRequest, count, run_gcp};
use sptmc::hls::ValueChoice;

/// An epoch (SGD) or iteration (L-BFGS) as the `progress` dict: `iteration`
/// (0-based), `loss` (SGD: the estimate, `None` where it was not finite), `step`,
/// `accepted`, `undone` (`None`, `"worse"` or `"not-finite"`), `seconds` (since the
/// fit started).
fn epoch_dict<'py>(py: Python<'py>, s: &GcpIter) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("iteration", s.iter)?;
    d.set_item("loss", s.loss)?;
    d.set_item("step", s.step)?;
    d.set_item("accepted", s.accepted)?;
    d.set_item(
        "undone",
        s.undone.map(|u| match u {
            sptmc::decomp::gcp::Undone::Worse => "worse",
            sptmc::decomp::gcp::Undone::NotFinite => "not-finite",
        }),
    )?;
    d.set_item("seconds", s.seconds)?;
    Ok(d)
}

/// GCP; the arguments as `sptmc.gcp` takes them (`options` holds the method's options
/// by their request names: `epochs`, `epoch_iters`, `rate`, `decay`, `max_fails`,
/// `grad_nonzeros`, `grad_zeros`, `value_nonzeros`, `value_zeros`, `max_iters`,
/// `dense_limit`); `progress(dict)` ([`epoch_dict`]) called after every epoch or
/// iteration when given (a true return value stops the run, an exception stops it and
/// is raised).
#[pyfunction]
#[pyo3(signature = (tensor, rank, loss, loss_param, method, seed, init, options, backend, threads, progress))]
#[allow(clippy::too_many_arguments)]
pub fn _gcp<'py>(
    py: Python<'py>,
    tensor: &Bound<'py, Tensor>,
    rank: i64,
    loss: &str,
    loss_param: Option<f64>,
    method: &str,
    seed: i64,
    init: Option<Vec<Bound<'py, PyAny>>>,
    options: &Bound<'py, PyDict>,
    backend: &str,
    threads: Option<i64>,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyDict>> {
    let t = tensor.get();
    let counted = |name: &str, v: i64| count(name, v).map_err(|e| to_py(py, e));
    let mut request = GcpRequest::new(counted("rank", rank)?, loss);
    request.loss_param = loss_param;
    request.method = method.to_string();
    request.seed = counted("seed", seed)? as u64;
    request.init = init
        .map(|fs| {
            fs.iter()
                .enumerate()
                .map(|(m, f)| matrix(py, f, &format!("init[{m}]")).map(|f| f.to_f64()))
                .collect::<PyResult<Vec<_>>>()
        })
        .transpose()?;
    for (key, value) in options.iter() {
        let key: String = key.extract()?;
        let int = |v: &Bound<'py, PyAny>| -> PyResult<usize> { counted(&key, v.extract()?) };
        match key.as_str() {
            "epochs" => request.epochs = int(&value)?,
            "epoch_iters" => request.epoch_iters = int(&value)?,
            "max_fails" => request.max_fails = int(&value)?,
            "grad_nonzeros" => request.grad_nonzeros = int(&value)?,
            "grad_zeros" => request.grad_zeros = int(&value)?,
            "value_nonzeros" => request.value_nonzeros = int(&value)?,
            "value_zeros" => request.value_zeros = int(&value)?,
            "max_iters" => request.max_iters = int(&value)?,
            "rate" => request.rate = value.extract()?,
            "decay" => request.decay = value.extract()?,
            "dense_limit" => request.dense_limit = value.extract()?,
            _ => {
                return Err(to_py(
                    py,
                    sptmc::Error::InvalidOption(format!("gcp has no option {key:?}")),
                ));
            }
        }
    }
    let job = request.validate(&t.x).map_err(|e| to_py(py, e))?;
    // GCP samples the input's f64 values: how an HLS form stores them does not matter.
    let engine = engine(py, backend_choice(py, backend)?, threads, ValueChoice::Auto)?;
    let (report, watch) = watched_steps(py, &engine, progress.as_ref(), epoch_dict, |control| {
        run_gcp(&job, &engine, &t.x, control)
    })?;
    let model = &report.model;
    let d = PyDict::new(py);
    d.set_item("weights", PyArray1::from_slice(py, &model.weights))?;
    let fs = model
        .factors
        .iter()
        .map(|f| {
            Ok(PyArray1::from_slice(py, f.data())
                .reshape([f.rows(), f.cols()])?
                .into_any())
        })
        .collect::<PyResult<Vec<_>>>()?;
    d.set_item("factors", PyList::new(py, fs)?)?;
    // NaN marks an epoch whose estimate was not finite (its dict says so).
    let losses: Vec<f64> = model
        .iters
        .iter()
        .map(|s| s.loss.unwrap_or(f64::NAN))
        .collect();
    d.set_item("losses", PyArray1::from_vec(py, losses))?;
    let mut last = 0.0;
    let seconds: Vec<f64> = model
        .iters
        .iter()
        .map(|s| {
            let dt = s.seconds - last;
            last = s.seconds;
            dt
        })
        .collect();
    d.set_item("seconds", PyArray1::from_vec(py, seconds))?;
    let stats = PyList::empty(py);
    for s in &model.iters {
        stats.append(epoch_dict(py, s)?)?;
    }
    d.set_item("stats", stats)?;
    d.set_item("loss", model.loss)?;
    d.set_item("initial_loss", model.initial_loss)?;
    let est = model.estimate.as_ref();
    d.set_item("loss_estimate", est.map(|e| e.final_loss))?;
    d.set_item("initial_loss_estimate", est.map(|e| e.initial_loss))?;
    d.set_item("loss_estimate_sample", est.map(|e| (e.nonzeros, e.zeros)))?;
    d.set_item("stopped", model.stopped.clone())?;
    d.set_item("value_scale", model.value_scale)?;
    d.set_item("warnings", PyList::new(py, &model.warnings)?)?;
    d.set_item("stopped_by_callback", watch.stopped_by_callback)?;
    d.set_item("backend", report.backend)?;
    Ok(d)
}
