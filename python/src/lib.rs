//! `sptmc._sptmc`: the Rust side of the `sptmc` Python package.
//!
//! [`Tensor`] holds a sparse tensor in the library's COO form and, once a kernel or a
//! decomposition asked for them, its prepared HLS forms (one per backend, op and tile
//! threshold), so that repeated calls build nothing twice. The functions here take
//! arguments already normalized by the Python side (`sptmc/__init__.py`: layouts,
//! duck typing, dtypes) and return plain values that it wraps.

mod complete;
mod convert;
mod cp_apr;
mod decomp;
mod errors;
mod gcp;
mod read;
mod run;

use convert::values_arg;
use convert::{IndexSpec, describe, matrix, mode_indices, values};
use convert::{backend_arg, factors_arg, mode_arg, op_arg, rank_arg, threads_arg, threshold_arg};
use errors::{input_error, settle};
use numpy::{PyArray1, PyArray2, PyArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};
use run::{engine, in_engine, lock};
use sptmc::driver;
use sptmc::engine::{BackendChoice, Engine, Prepared, Workload};
use sptmc::hls::{HlsBuilder, ValueChoice};
use sptmc::memplan::MemoryPlan;
use sptmc::tensor::CooTensor;
use sptmc::{Matrix, Op};
use std::panic::catch_unwind;
use std::sync::{Arc, Mutex};

/// `(subs, vals)` of [`Tensor::to_coo`]: `nnz × N` int64 indices, `nnz` float64 values.
type CooArrays<'py> = (Bound<'py, PyArray2<i64>>, Bound<'py, PyArray1<f64>>);

/// A prepared form of a tensor: for which engine (by address: engines live for the
/// process), op and tile threshold.
struct Form {
    engine: usize,
    op: Op,
    threshold: u32,
    prepared: Arc<Prepared>,
}

/// A sparse tensor of any order, held by sptmc.
///
/// Make one with `sptmc.read`, `sptmc.from_coo`, `sptmc.from_pyttb` or
/// `sptmc.tensor`. Coordinates are stored 0-based, sorted, with repeated coordinates
/// summed; the HLS form each kernel needs is built on first use and kept.
#[pyclass(frozen, module = "sptmc", name = "Tensor")]
pub struct Tensor {
    x: Arc<CooTensor>,
    duplicates: usize,
    note: String,
    forms: Mutex<Vec<Form>>,
}

impl Tensor {
    fn new(x: CooTensor, duplicates: usize, note: String) -> Self {
        Tensor {
            x: Arc::new(x),
            duplicates,
            note,
            forms: Mutex::new(Vec::new()),
        }
    }

    /// The form of this tensor for `op` at `rank` on `engine`, built (with the GIL
    /// released, inside the engine) unless an earlier call left one.
    fn prepared(
        &self,
        py: Python<'_>,
        engine: &Arc<Engine>,
        op: Op,
        rank: usize,
    ) -> PyResult<Arc<Prepared>> {
        let x = &self.x;
        let plan = MemoryPlan::new(
            format!("the HLS form of {} nonzeros", x.nnz()),
            "the tensor is too large for this machine",
        );
        let w = Workload { op, rank };
        in_engine(py, engine, || {
            Ok(driver::prepare(engine, x, w, plan, self)?.prepared)
        })
    }

    /// The factor list of a kernel call: one matrix per mode, `None` allowed for the
    /// target mode (whose matrix is not read).
    fn kernel_factors(
        &self,
        py: Python<'_>,
        factors: &[Option<Bound<'_, PyAny>>],
        mode: usize,
    ) -> PyResult<Vec<Matrix>> {
        let order = self.x.order();
        if factors.len() != order {
            return Err(input_error(
                py,
                format!(
                    "factors: expected {order} matrices (one per mode; the target mode's may be None), got {}",
                    factors.len()
                ),
            ));
        }
        factors
            .iter()
            .enumerate()
            .map(|(m, f)| match f {
                Some(f) => matrix(py, f, &format!("factors[{m}]")),
                None if m == mode => Ok(Matrix::zeros(0, 0)),
                None => Err(input_error(
                    py,
                    format!("factors[{m}] is None; only the target mode's ({mode}) may be"),
                )),
            })
            .collect()
    }

    /// Runs `op` on `mode`; the result as a float32 array (no copy of the engine's
    /// output).
    #[allow(clippy::too_many_arguments)]
    fn kernel<'py>(
        &self,
        py: Python<'py>,
        op: Op,
        factors: Vec<Option<Bound<'py, PyAny>>>,
        mode: i64,
        backend: BackendChoice,
        threads: Option<i64>,
        values: ValueChoice,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        let order = self.x.order();
        // Negative modes are refused (not counted from the end), as the library does.
        let mode = match usize::try_from(mode) {
            Ok(m) if m < order => m,
            _ => {
                return Err(input_error(
                    py,
                    format!(
                        "mode {mode} is out of range for a tensor of order {order} (modes are 0 to {}, counted from 0)",
                        order.saturating_sub(1)
                    ),
                ));
            }
        };
        let fs = self.kernel_factors(py, &factors, mode)?;
        let engine = engine(py, backend, threads, values)?;
        // The rank the tile threshold is tuned for: MTTKRP's rank, TTMc's largest.
        let rank = fs
            .iter()
            .enumerate()
            .filter(|&(m, _)| m != mode)
            .map(|(_, f)| f.cols())
            .max()
            .unwrap_or(1);
        // Shapes checked before any HLS is built for them.
        sptmc::ops::output_shape(op, self.x.dims(), mode, &fs).map_err(|e| errors::to_py(py, e))?;
        let prepared = self.prepared(py, &engine, op, rank)?;
        let out = in_engine(py, &engine, || engine.run(op, &prepared, mode, &fs))?;
        if let Ok(hls) = prepared.hls(op) {
            run::warn_values(py, Some(&hls.stats().value_report()))?;
        }
        let (rows, cols) = out.shape();
        PyArray1::from_vec(py, out.into_data()).reshape([rows, cols])
    }
}

/// The prepared forms a tensor keeps, by engine (its address: engines live for the
/// process), op and tile threshold.
impl driver::Forms for Tensor {
    fn find(&self, engine: &Engine, op: Op, threshold: u32) -> Option<Arc<Prepared>> {
        let key = engine as *const Engine as usize;
        lock(&self.forms)
            .iter()
            .find(|f| f.engine == key && f.op == op && f.threshold == threshold)
            .map(|f| f.prepared.clone())
    }

    fn keep(&self, engine: &Engine, op: Op, threshold: u32, prepared: &Arc<Prepared>) {
        lock(&self.forms).push(Form {
            engine: engine as *const Engine as usize,
            op,
            threshold,
            prepared: prepared.clone(),
        });
    }
}

#[pymethods]
impl Tensor {
    /// The extent of every mode.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.x.dims())
    }

    /// The number of modes.
    #[getter]
    fn ndim(&self) -> usize {
        self.x.order()
    }

    /// The number of stored nonzeros (after repeated coordinates were summed).
    #[getter]
    fn nnz(&self) -> usize {
        self.x.nnz()
    }

    /// How many input entries were merged into others because their coordinates
    /// repeated (their values were added). For `sptmc.read`, as counted when the text
    /// was parsed (kept with its binary cache entry).
    #[getter]
    fn duplicates_summed(&self) -> usize {
        self.duplicates
    }

    /// Where the tensor came from, in one line.
    #[getter]
    fn source(&self) -> &str {
        &self.note
    }

    /// The Frobenius norm of the values (FP64).
    fn norm(&self) -> f64 {
        self.x.norm_sq().sqrt()
    }

    /// The coordinates and values as new arrays: `(subs, vals)` with `subs` an
    /// `nnz × ndim` int64 array of 0-based indices (pyttb's layout) and `vals` a
    /// float64 array of length `nnz`, sorted by coordinates (mode 0 slowest).
    fn to_coo<'py>(&self, py: Python<'py>) -> PyResult<CooArrays<'py>> {
        let (n, order) = (self.x.nnz(), self.x.order());
        let mut subs = Vec::with_capacity(n * order);
        for k in 0..n {
            for m in 0..order {
                subs.push(self.x.indices(m)[k] as i64);
            }
        }
        let subs = PyArray1::from_vec(py, subs).reshape([n, order])?;
        let vals = PyArray1::from_slice(py, self.x.values());
        Ok((subs, vals))
    }

    /// The tensor as a `pyttb.sptensor` (needs pyttb).
    fn to_pyttb<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let ttb = py.import("pyttb").map_err(|e| {
            pyo3::exceptions::PyImportError::new_err(format!(
                "Tensor.to_pyttb needs pyttb (pip install pyttb): {e}"
            ))
        })?;
        let (subs, vals) = self.to_coo(py)?;
        let vals = vals.reshape([self.x.nnz(), 1])?;
        ttb.getattr("sptensor")?
            .call1((subs, vals, self.shape(py)?))
    }

    /// MTTKRP of `mode`: `M[i, r] = sum over nonzeros x(i_0..i_{N-1}) with i_mode = i
    /// of prod_{m != mode} factors[m][i_m, r]`.
    ///
    /// `factors` holds one 2-D float array per mode, `shape[m] × R` with one rank `R`;
    /// the target mode's is not read (it may be `None`). Returns a `shape[mode] × R`
    /// float32 array: the kernels compute in f32 on the values as stored (`values`:
    /// "auto" stores them in fp16 where fp16 holds every one exactly, as integers up
    /// to 2048, else in f32; "f16" or "f32" force either; see the accuracy contract in
    /// sptmc's README).
    #[pyo3(
        signature = (factors, mode, *, backend = BackendChoice::Auto, threads = None, values = ValueChoice::Auto),
        text_signature = "(self, factors, mode, *, backend='auto', threads=None, values='auto')"
    )]
    fn mttkrp<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = factors_arg)] factors: Vec<Option<Bound<'py, PyAny>>>,
        #[pyo3(from_py_with = mode_arg)] mode: i64,
        #[pyo3(from_py_with = backend_arg)] backend: BackendChoice,
        #[pyo3(from_py_with = threads_arg)] threads: Option<i64>,
        #[pyo3(from_py_with = values_arg)] values: ValueChoice,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        self.kernel(py, Op::Mttkrp, factors, mode, backend, threads, values)
    }

    /// TTM-chain of `mode`: the tensor times every factor but `mode`'s, transposed,
    /// unfolded along `mode`.
    ///
    /// `factors` holds one 2-D float array per mode, `shape[m] × R_m`; the target
    /// mode's is not read (it may be `None`). Returns a float32 array of
    /// `shape[mode]` rows and `prod_{m != mode} R_m` columns, the other modes' rank
    /// indices in increasing mode order with the last fastest (so
    /// `Y.reshape(shape[mode], R_a, R_b)` for a 3-way tensor).
    #[pyo3(
        signature = (factors, mode, *, backend = BackendChoice::Auto, threads = None, values = ValueChoice::Auto),
        text_signature = "(self, factors, mode, *, backend='auto', threads=None, values='auto')"
    )]
    fn ttmc<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = factors_arg)] factors: Vec<Option<Bound<'py, PyAny>>>,
        #[pyo3(from_py_with = mode_arg)] mode: i64,
        #[pyo3(from_py_with = backend_arg)] backend: BackendChoice,
        #[pyo3(from_py_with = threads_arg)] threads: Option<i64>,
        #[pyo3(from_py_with = values_arg)] values: ValueChoice,
    ) -> PyResult<Bound<'py, PyArray2<f32>>> {
        self.kernel(py, Op::Ttmc, factors, mode, backend, threads, values)
    }

    /// The tensor's statistics and its HLS form's, as a dict.
    ///
    /// The HLS form is the one `op` ("mttkrp" or "ttmc") at `rank` uses on `backend`
    /// (its tuned tile threshold), or, with `threshold` given, one built at that
    /// threshold. Keys: `shape`, `ndim`, `nnz`, `density`, `norm`,
    /// `duplicates_summed`, `threshold`, `threshold_source` and `hls` (tiles, dense
    /// tiles, nonzeros and bytes of each part, bytes of COO for comparison, the
    /// values' type `values` with how it was chosen and the bytes of either type, the
    /// fp16 quantization report), `dense_share`, `hls_bytes`, and `values` (the type
    /// and why, as `sptmc.cp_als`'s result says it).
    #[pyo3(
        signature = (*, op = Op::Mttkrp, rank = 16, threshold = None, backend = BackendChoice::Auto, threads = None, values = ValueChoice::Auto),
        text_signature = "(self, *, op='mttkrp', rank=16, threshold=None, backend='auto', threads=None, values='auto')"
    )]
    #[allow(clippy::too_many_arguments)]
    fn info<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = op_arg)] op: Op,
        #[pyo3(from_py_with = rank_arg)] rank: i64,
        #[pyo3(from_py_with = threshold_arg)] threshold: Option<u32>,
        #[pyo3(from_py_with = backend_arg)] backend: BackendChoice,
        #[pyo3(from_py_with = threads_arg)] threads: Option<i64>,
        #[pyo3(from_py_with = values_arg)] values: ValueChoice,
    ) -> PyResult<Bound<'py, PyDict>> {
        let Some(rank) = usize::try_from(rank).ok().filter(|&r| r > 0) else {
            return Err(errors::to_py(
                py,
                sptmc::Error::InvalidRank(format!("rank must be at least 1, got {rank}")),
            ));
        };
        let (stats, source) = match threshold {
            Some(t) => {
                // Built on the workers of a CPU engine of that many threads.
                let cpu = engine(py, BackendChoice::Cpu, threads, values)?;
                let x = &self.x;
                let hls = in_engine(py, &cpu, || HlsBuilder::new(t).with_values(values).build(x))?;
                (hls.stats().clone(), "given".to_string())
            }
            None => {
                let engine = engine(py, backend, threads, values)?;
                let p = self.prepared(py, &engine, op, rank)?;
                let stats = p.hls(op).map_err(|e| errors::to_py(py, e))?.stats().clone();
                let source = p
                    .thresholds()
                    .first()
                    .map(|(_, c)| c.source.clone())
                    .unwrap_or_default();
                (stats, source)
            }
        };
        let d = PyDict::new(py);
        d.set_item("shape", self.shape(py)?)?;
        d.set_item("ndim", self.x.order())?;
        d.set_item("nnz", self.x.nnz())?;
        d.set_item("density", self.x.density())?;
        d.set_item("norm", self.norm())?;
        d.set_item("duplicates_summed", self.duplicates)?;
        d.set_item("threshold", stats.threshold)?;
        d.set_item("threshold_source", source)?;
        d.set_item("dense_share", stats.dense_share())?;
        d.set_item("hls_bytes", stats.hls_bytes())?;
        d.set_item("values", run::values_dict(py, Some(&stats.value_report()))?)?;
        let json = serde_json::to_string(&stats).map_err(|e| input_error(py, e.to_string()))?;
        d.set_item("hls", py.import("json")?.getattr("loads")?.call1((json,))?)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "<sptmc.Tensor shape={:?} nnz={}>",
            self.x.dims(),
            self.x.nnz()
        )
    }
}

/// A tensor from per-mode index arrays (each 1-D, any integer dtype and strides) and a
/// 1-D float64 or float32 value array, read in place. `shape=None` takes each mode's
/// largest index plus one. Called by `sptmc.from_coo`, which accepts the layouts.
#[pyfunction]
#[pyo3(signature = (indices, vals, shape, index_base))]
fn _from_index_arrays(
    py: Python<'_>,
    indices: Vec<Bound<'_, PyAny>>,
    vals: Bound<'_, PyAny>,
    shape: Option<Vec<i64>>,
    index_base: i64,
) -> PyResult<Tensor> {
    if index_base != 0 && index_base != 1 {
        return Err(input_error(
            py,
            format!("index_base must be 0 or 1, got {index_base}"),
        ));
    }
    if indices.is_empty() {
        return Err(input_error(py, "subs: a tensor needs at least one mode"));
    }
    let order = indices.len();
    if let Some(s) = &shape {
        if s.len() != order {
            return Err(input_error(
                py,
                format!("shape {s:?} has {} modes, subs has {order}", s.len()),
            ));
        }
        if let Some(m) = s.iter().position(|&d| d < 1) {
            return Err(input_error(
                py,
                format!("shape[{m}] is {}; every mode needs length at least 1", s[m]),
            ));
        }
    }
    let vals = values(py, &vals)?;
    let mut idx = Vec::with_capacity(order);
    let mut dims = Vec::with_capacity(order);
    for (m, arr) in indices.iter().enumerate() {
        let spec = IndexSpec {
            mode: m,
            base: index_base,
            extent: shape.as_ref().map(|s| s[m] as u64),
        };
        let (ix, max) = mode_indices(py, arr, &spec)?;
        if ix.len() != vals.len() {
            return Err(input_error(
                py,
                format!(
                    "subs of mode {m} has {} indices, vals has {} values",
                    ix.len(),
                    vals.len()
                ),
            ));
        }
        dims.push(match &shape {
            Some(s) => s[m] as usize,
            None if ix.is_empty() => {
                return Err(input_error(
                    py,
                    "an empty tensor needs its shape: pass shape=",
                ));
            }
            None => max as usize + 1,
        });
        idx.push(ix);
    }
    let entries = vals.len();
    let built = py.detach(|| {
        catch_unwind(|| {
            let mut x = CooTensor::new(dims, idx, vals)?;
            // Coordinates named as the caller counts them.
            let duplicates = x.sum_duplicates_finite(index_base as u64)?;
            Ok((x, duplicates))
        })
    });
    let (x, duplicates) = settle(py, built)?;
    let mut note = format!("arrays: {entries} entries");
    if duplicates > 0 {
        note += &format!(", {duplicates} repeated coordinates summed");
    }
    Ok(Tensor::new(x, duplicates, note))
}

/// The engine `backend` ("auto", "cpu" or "cuda") would run on, in words, and why
/// "auto" chose it.
#[pyfunction]
#[pyo3(
    signature = (backend = BackendChoice::Auto, *, threads = None),
    text_signature = "(backend='auto', *, threads=None)"
)]
fn backend_info(
    py: Python<'_>,
    #[pyo3(from_py_with = backend_arg)] backend: BackendChoice,
    #[pyo3(from_py_with = threads_arg)] threads: Option<i64>,
) -> PyResult<String> {
    let engine = engine(py, backend, threads, ValueChoice::Auto)?;
    let describe = engine.backend().describe();
    Ok(match engine.notice() {
        Some(n) => format!("{describe} ({n})"),
        None => describe,
    })
}

/// The same as `describe` in messages, for the Python side.
#[pyfunction]
fn _describe(obj: Bound<'_, PyAny>) -> String {
    describe(&obj)
}

/// sptmc's Rust extension: sparse MTTKRP and TTMc over the HLS format, CP-ALS and
/// Tucker-HOOI. Use it through the `sptmc` package.
#[pymodule(name = "_sptmc")]
mod sptmc_module {
    #[pymodule_export]
    use super::{
        _describe, _from_index_arrays, Tensor, backend_info,
        complete::{_complete, _load_completion, _split, Completion},
        cp_apr::_cp_apr,
        decomp::{_cp_als, _tucker_hooi},
        gcp::_gcp,
        read::read,
    };

    #[pymodule_init]
    fn init(m: &pyo3::Bound<'_, pyo3::types::PyModule>) -> pyo3::PyResult<()> {
        use pyo3::types::PyModuleMethods;
        m.add("KERNEL_BUILD", sptmc::engine::cuda::KERNEL_BUILD)?;
        m.add("__version__", env!("CARGO_PKG_VERSION"))?;
        // Debug builds (`maturin develop` without --release) are several times slower:
        // benchmarks refuse them.
        m.add("DEBUG_BUILD", cfg!(debug_assertions))?;
        Ok(())
    }
}
