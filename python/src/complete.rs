//! Tensor completion for Python: the arguments as a [`CompletionRequest`] to
//! [`sptmc::driver`] (the command line's validation, baselines, λ path, fit and
//! report), run watched ([`crate::run::watched_steps`]); the result is a
//! [`Completion`], the fitted model with the run's summary (the JSON `sptmc complete
//! --json` prints), which predicts, scores, and saves the folder `sptmc predict` reads.

use crate::Tensor;
use crate::decomp::{counted, factor_array};
use crate::errors::{input_error, to_py};
use crate::run::{backend_choice, engine, in_engine, value_choice, watched_steps};
use numpy::{PyArray1, PyReadonlyArray2};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use sptmc::decomp::completion::{files, split};
use sptmc::decomp::{CompletionModel, EpochStats, Solver};
use sptmc::driver::{self, CompletionRequest, NoForms};
use sptmc::engine::BackendChoice;
use sptmc::tensor::CooTensor;
use std::path::PathBuf;
use std::sync::Arc;

/// A fitted completion model and the summary of the run that made it (or of the
/// `model.json` it was read from).
#[pyclass(frozen, module = "sptmc", name = "_Completion")]
pub struct Completion {
    model: CompletionModel,
    summary: serde_json::Value,
}

#[pymethods]
impl Completion {
    /// The predictions at `coords` (`n × N`, 0-based int64 indices).
    fn predict<'py>(
        &self,
        py: Python<'py>,
        coords: PyReadonlyArray2<'py, i64>,
    ) -> PyResult<Bound<'py, PyArray1<f64>>> {
        let a = coords.as_array();
        let order = self.model.factors.len();
        if a.ncols() != order {
            return Err(input_error(
                py,
                format!(
                    "coords must have one column per mode ({order}), got {}",
                    a.ncols()
                ),
            ));
        }
        let mut c = vec![0u32; order];
        let mut out = Vec::with_capacity(a.nrows());
        for (k, row) in a.rows().into_iter().enumerate() {
            for (m, (cm, &i)) in c.iter_mut().zip(row).enumerate() {
                // Checked here: the model words its own check as a bad option.
                let rows = self.model.factors[m].rows();
                *cm = (u32::try_from(i).ok())
                    .filter(|&v| (v as usize) < rows)
                    .ok_or_else(|| {
                        input_error(
                            py,
                            format!(
                                "coords[{k}] index {i} in mode {m} is outside 0..{rows} (the model's extent; indices are 0-based)"
                            ),
                        )
                    })?;
            }
            out.push(self.model.predict(&c).map_err(|e| to_py(py, e))?);
        }
        Ok(PyArray1::from_vec(py, out))
    }

    /// The RMSE of the predictions over the entries of `tensor` (`None` when it has
    /// none).
    fn rmse(&self, py: Python<'_>, tensor: &Bound<'_, Tensor>) -> PyResult<Option<f64>> {
        self.model.rmse(&tensor.get().x).map_err(|e| to_py(py, e))
    }

    /// Writes the model folder (`factor-*.txt`, `bias-*.txt`, `model.json`), as
    /// `sptmc complete --out` does, whole or not at all.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        py.detach(|| files::write(&path, &self.model, &self.summary))
            .map_err(|e| to_py(py, e))
    }

    /// The summary as JSON text.
    fn summary_json(&self) -> String {
        self.summary.to_string()
    }

    /// The factors, one float64 `I_m × R` array per mode.
    fn factors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let fs = (self.model.factors.iter())
            .map(|f| factor_array(py, f))
            .collect::<PyResult<Vec<_>>>()?;
        PyList::new(py, fs)
    }

    /// The biases, one float64 array per mode (empty without biases).
    fn biases<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let bs: Vec<_> = (self.model.biases.iter())
            .map(|b| PyArray1::from_slice(py, b))
            .collect();
        PyList::new(py, bs)
    }

    /// `μ`.
    #[getter]
    fn offset(&self) -> f64 {
        self.model.offset
    }
}

/// A completion epoch as the `progress` dict.
fn epoch_dict<'py>(py: Python<'py>, s: &EpochStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("epoch", s.epoch)?;
    d.set_item("lambda", s.lambda)?;
    d.set_item("train_rmse", s.train_rmse)?;
    d.set_item("validation_rmse", s.validation_rmse)?;
    d.set_item("objective", s.objective)?;
    d.set_item("learning_rate", s.learning_rate)?;
    d.set_item("undone", s.undone)?;
    d.set_item("seconds", s.seconds)?;
    d.set_item("seconds_kernel", s.seconds_kernel)?;
    Ok(d)
}

/// `x` with the extents `dims`.
fn with_dims(x: &CooTensor, dims: &[usize]) -> sptmc::Result<CooTensor> {
    let (_, indices, values) = x.clone().into_parts();
    CooTensor::new(dims.to_vec(), indices, values)
}

/// A tensor's entries split by `fractions` (train, validation, test) with `seed`, as
/// `sptmc complete FILE --split` does.
#[pyfunction]
pub fn _split(
    py: Python<'_>,
    tensor: &Bound<'_, Tensor>,
    fractions: [f64; 3],
    seed: i64,
) -> PyResult<(Tensor, Tensor, Tensor)> {
    let seed = counted(py, "seed", seed)? as u64;
    let x = &tensor.get().x;
    let s = split(x, fractions, seed).map_err(|e| to_py(py, e))?;
    let note = |what: &str| format!("{what} of a split of {} entries", x.nnz());
    Ok((
        Tensor::new(s.train, 0, note("training entries")),
        Tensor::new(s.validation, 0, note("validation entries")),
        Tensor::new(s.test, 0, note("test entries")),
    ))
}

/// Completion; the arguments as `sptmc.complete` takes them (the command line's
/// options under their names), `progress(dict)` after every epoch (a true return
/// value stops the run, which returns the best model so far).
#[pyfunction]
#[pyo3(signature = (train, validation, test, rank, solver, lambda_, epochs, patience, seed, learning_rate, ccd_inner, center, biases, bias_lambda, backend, threads, values, progress))]
#[allow(clippy::too_many_arguments)]
pub fn _complete<'py>(
    py: Python<'py>,
    train: &Bound<'py, Tensor>,
    validation: Option<&Bound<'py, Tensor>>,
    test: Option<&Bound<'py, Tensor>>,
    rank: i64,
    solver: &str,
    lambda_: Option<f64>,
    epochs: i64,
    patience: i64,
    seed: i64,
    learning_rate: Option<f64>,
    ccd_inner: i64,
    center: bool,
    biases: bool,
    bias_lambda: f64,
    backend: &str,
    threads: Option<i64>,
    values: &str,
    progress: Option<Bound<'py, PyAny>>,
) -> PyResult<(Completion, bool)> {
    let solver = match solver {
        "als" => Solver::Als,
        "ccd" => Solver::Ccd,
        "sgd" => Solver::Sgd,
        other => {
            return Err(input_error(
                py,
                format!("solver must be \"als\", \"ccd\" or \"sgd\", got {other:?}"),
            ));
        }
    };
    let request = CompletionRequest {
        rank: counted(py, "rank", rank)?,
        solver,
        lambda: lambda_,
        epochs: counted(py, "epochs", epochs)?,
        patience: counted(py, "patience", patience)?,
        seed: counted(py, "seed", seed)? as u64,
        learning_rate,
        ccd_inner: counted(py, "ccd_inner", ccd_inner)?,
        center,
        biases,
        bias_lambda,
    };
    request.check().map_err(|e| to_py(py, e))?;
    // As on the command line: "auto" keeps completion on the CPU.
    let choice = match backend_choice(py, backend)? {
        BackendChoice::Auto => BackendChoice::Cpu,
        c => c,
    };
    let tr = train.get();
    let va = validation.map(|v| v.get());
    let te = test.map(|t| t.get());
    let order = tr.x.order();
    for (what, t) in [("validation", va), ("test", te)] {
        if let Some(t) = t
            && t.x.order() != order
        {
            return Err(to_py(
                py,
                sptmc::Error::shape(format!("{what} order (that of train)"), order, t.x.order()),
            ));
        }
    }
    // One set of extents for all: the largest of each mode.
    let mut dims = tr.x.dims().to_vec();
    for t in [va, te].into_iter().flatten() {
        for (d, &e) in dims.iter_mut().zip(t.x.dims()) {
            *d = (*d).max(e);
        }
    }
    let fit = |x: &Arc<CooTensor>| -> sptmc::Result<Arc<CooTensor>> {
        if x.dims() == dims.as_slice() {
            Ok(x.clone())
        } else {
            Ok(Arc::new(with_dims(x, &dims)?))
        }
    };
    let prepared = || -> sptmc::Result<_> {
        let train_x = fit(&tr.x)?;
        let (train_x, validation_x, how) = match va {
            Some(v) => (train_x, fit(&v.x)?, "validation given".to_string()),
            None => {
                let s = split(&train_x, [8.0 / 9.0, 1.0 / 9.0, 0.0], request.seed)?;
                (
                    Arc::new(s.train),
                    Arc::new(s.validation),
                    format!("validation: 1/9 of train held out by seed {}", request.seed),
                )
            }
        };
        let test_x = match te {
            Some(t) => fit(&t.x)?,
            None => Arc::new(CooTensor::new(
                dims.clone(),
                vec![Vec::new(); order],
                Vec::new(),
            )?),
        };
        Ok((train_x, validation_x, test_x, how))
    };
    let (train_x, validation_x, test_x, how) = prepared().map_err(|e| to_py(py, e))?;
    let job = request
        .validate(&train_x, &validation_x)
        .map_err(|e| to_py(py, e))?;
    let engine = engine(py, choice, threads, value_choice(py, values)?)?;
    // The training tensor's kept forms serve when it is the one given.
    let same = Arc::ptr_eq(&train_x, &tr.x);
    let (report, watch) =
        watched_steps(py, &engine, progress.as_ref(), epoch_dict, |mut control| {
            if same {
                driver::run(&job, &engine, &train_x, tr, &mut control)
            } else {
                driver::run(&job, &engine, &train_x, &NoForms, &mut control)
            }
        })?;
    let summary = in_engine(py, &engine, || {
        report.summary(&job, tr.source(), &how, &train_x, &test_x)
    })?;
    Ok((
        Completion {
            model: report.model,
            summary,
        },
        watch.stopped_by_callback,
    ))
}

/// Reads a model folder written by `sptmc complete --out` or `CompletionModel.save`.
#[pyfunction]
pub fn _load_completion(py: Python<'_>, path: PathBuf) -> PyResult<Completion> {
    let read = || -> sptmc::Result<Completion> {
        let model = files::read(&path)?;
        let json = path.join("model.json");
        let text = std::fs::read_to_string(&json).map_err(|e| sptmc::Error::io(&json, e))?;
        let summary = serde_json::from_str(&text).map_err(|e| {
            sptmc::Error::InvalidOption(format!("{}: not JSON: {e}", json.display()))
        })?;
        Ok(Completion { model, summary })
    };
    py.detach(read).map_err(|e| to_py(py, e))
}
