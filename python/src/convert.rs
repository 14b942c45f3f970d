//! numpy arrays in: coordinates, values and factor matrices, read in place.
//!
//! Every array is read through a borrowed view of its own memory, whatever its strides
//! (a column of an `nnz × N` array is as good as a row of an `N × nnz` one), for every
//! integer dtype (indices) and for float64 and float32 (values, factors): no numpy copy
//! is made. What is built is the library's own form (u32 indices per mode, f64
//! values; f32 factors), checked as it is built.

use crate::errors::{input_error, new_error};
use numpy::ndarray::ArrayView1;
use numpy::{
    PyArray1, PyArray2, PyArrayDescrMethods, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods,
};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};
use sptmc::engine::BackendChoice;
use sptmc::hls::ValueChoice;
use sptmc::{Matrix, Op};

/// The largest number of positions a mode may have (indices are u32).
const MAX_EXTENT: u64 = 1 << 32;

/// How [`mode_indices`] reads a mode's indices.
pub struct IndexSpec {
    /// The mode, for messages.
    pub mode: usize,
    /// The first index (0 or 1).
    pub base: i64,
    /// The mode's length, when the caller gave the shape.
    pub extent: Option<u64>,
}

/// The 0-based indices of one mode as u32, and the largest, from a 1-D integer array.
pub fn mode_indices(
    py: Python<'_>,
    arr: &Bound<'_, PyAny>,
    spec: &IndexSpec,
) -> PyResult<(Vec<u32>, u32)> {
    macro_rules! try_dtype {
        ($($t:ty),*) => {$(
            if let Ok(a) = arr.cast::<PyArray1<$t>>() {
                let ro = a.readonly();
                return indices_from(py, ro.as_array(), spec, |v| v as i128);
            }
        )*};
    }
    try_dtype!(i64, i32, u64, u32, i16, u16, i8, u8);
    Err(input_error(
        py,
        format!(
            "subs of mode {}: expected a 1-D array of integers, got {}",
            spec.mode,
            describe(arr)
        ),
    ))
}

/// The 0-based u32 indices of one mode read from `view` (widened to i128 by `widen`
/// for the checks), and the largest; the first bad index is named in the error.
fn indices_from<T: Copy>(
    py: Python<'_>,
    view: ArrayView1<'_, T>,
    spec: &IndexSpec,
    widen: impl Fn(T) -> i128,
) -> PyResult<(Vec<u32>, u32)> {
    let limit = spec.extent.unwrap_or(MAX_EXTENT) as i128;
    let base = spec.base as i128;
    let mut out = Vec::with_capacity(view.len());
    let mut max = 0u32;
    let mut bad = None;
    for (k, &v) in view.iter().enumerate() {
        let i = widen(v) - base;
        if i < 0 || i >= limit {
            bad = Some((k, widen(v)));
            break;
        }
        let i = i as u32;
        max = max.max(i);
        out.push(i);
    }
    let Some((k, v)) = bad else {
        return Ok((out, max));
    };
    let m = spec.mode;
    let msg = if v < base {
        if spec.base == 0 {
            format!("subs: index {v} of nonzero {k} in mode {m} is negative")
        } else {
            format!(
                "subs: index {v} of nonzero {k} in mode {m} is below index_base={} \
                 (0 in 1-based coordinates)",
                spec.base
            )
        }
    } else if let Some(e) = spec.extent {
        format!(
            "subs: index {v} of nonzero {k} in mode {m} is out of range for shape[{m}] = {e} \
             (index_base={})",
            spec.base
        )
    } else {
        format!(
            "subs: index {v} of nonzero {k} in mode {m} is too large (a mode may have at most \
             2^32 positions)"
        )
    };
    Err(input_error(py, msg))
}

/// The values as f64, checked finite, from a 1-D float64 or float32 array.
pub fn values(py: Python<'_>, arr: &Bound<'_, PyAny>) -> PyResult<Vec<f64>> {
    let out: Vec<f64> = if let Ok(a) = arr.cast::<PyArray1<f64>>() {
        a.readonly().as_array().iter().copied().collect()
    } else if let Ok(a) = arr.cast::<PyArray1<f32>>() {
        a.readonly().as_array().iter().map(|&v| v as f64).collect()
    } else {
        return Err(input_error(
            py,
            format!(
                "vals: expected a 1-D float64 or float32 array, got {}",
                describe(arr)
            ),
        ));
    };
    if let Some(k) = out.iter().position(|v| !v.is_finite()) {
        return Err(input_error(
            py,
            format!(
                "vals: the value of nonzero {k} is {}; values must be finite",
                out[k]
            ),
        ));
    }
    Ok(out)
}

/// A factor matrix as f32 from a 2-D float64 or float32 array (`what` names it in
/// messages). Finiteness is left to the library, which names the entry.
pub fn matrix(py: Python<'_>, arr: &Bound<'_, PyAny>, what: &str) -> PyResult<Matrix> {
    macro_rules! try_dtype {
        ($($t:ty),*) => {$(
            if let Ok(a) = arr.cast::<PyArray2<$t>>() {
                let ro = a.readonly();
                let v = ro.as_array();
                let (rows, cols) = v.dim();
                let data: Vec<f32> = v.iter().map(|&x| x as f32).collect();
                // A finite f64 past f32's range would turn into inf unseen.
                if let Some((k, x)) = (v.iter().zip(&data).enumerate())
                    .find(|(_, (x, y))| x.is_finite() && y.is_infinite())
                    .map(|(k, (x, _))| (k, x))
                {
                    let c = cols.max(1);
                    return Err(input_error(
                        py,
                        format!(
                            "{what} holds {x:e} at ({}, {}), past the f32 range (±{:e}) \
                             the kernels compute in",
                            k / c,
                            k % c,
                            f32::MAX
                        ),
                    ));
                }
                return Matrix::new(rows, cols, data).map_err(|e| crate::errors::to_py(py, e));
            }
        )*};
    }
    try_dtype!(f64, f32);
    // Lists, integer arrays, ...: numpy's float64 conversion (a copy), once.
    if !arr.is_instance_of::<PyUntypedArray>() || is_real(arr) {
        let converted = py
            .import("numpy")?
            .getattr("asarray")?
            .call1((arr, py.import("numpy")?.getattr("float64")?));
        if let Ok(a) = converted
            && let Ok(a) = a.cast::<PyArray2<f64>>()
        {
            return matrix(py, a.as_any(), what);
        }
    }
    Err(input_error(
        py,
        format!(
            "{what}: expected a 2-D float64 or float32 array, got {}",
            describe(arr)
        ),
    ))
}

/// Whether `arr` is a numpy array of booleans, integers or floats.
fn is_real(arr: &Bound<'_, PyAny>) -> bool {
    arr.cast::<PyUntypedArray>()
        .is_ok_and(|a| a.dtype().kind().is_ascii() && b"biuf".contains(&a.dtype().kind()))
}

/// "a 2-D float64 array", "a list", ...: what the caller passed, for messages.
pub fn describe(obj: &Bound<'_, PyAny>) -> String {
    if let Ok(a) = obj.cast::<PyUntypedArray>() {
        let dtype = a
            .dtype()
            .str()
            .map(|s| s.to_string())
            .unwrap_or_else(|_| "?".into());
        return format!("a {}-D {dtype} array", a.ndim());
    }
    obj.get_type()
        .name()
        .map(|n| format!("a {n}"))
        .unwrap_or_else(|_| "an object".into())
}

/// `sptmc._args.<rule>(name, value)`: the Python side's one reading of a scalar
/// argument (its type and 64-bit range), so that the extension's methods refuse a
/// bool, a float or a too-large integer as the package's functions do.
fn by_rule<'py>(rule: &str, name: &str, value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    value
        .py()
        .import("sptmc._args")?
        .getattr(rule)?
        .call1((name, value))
}

/// The integer argument `name` (`sptmc.ArgumentTypeError` for a bool, float, string,
/// ...; `sptmc.ArgumentOverflowError` beyond 64 bits).
fn integer(name: &str, value: &Bound<'_, PyAny>) -> PyResult<i64> {
    by_rule("integer", name, value)?.extract()
}

/// [`integer`], `None` allowed.
fn optional_integer(name: &str, value: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    by_rule("optional_integer", name, value)?.extract()
}

/// `mode=` of a kernel call (its range is checked against the tensor's order).
pub fn mode_arg(value: &Bound<'_, PyAny>) -> PyResult<i64> {
    integer("mode", value)
}

/// `rank=` of `Tensor.info`.
pub fn rank_arg(value: &Bound<'_, PyAny>) -> PyResult<i64> {
    integer("rank", value)
}

/// `threads=`: `None` or an integer (its range is checked where the engine is made).
pub fn threads_arg(value: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    optional_integer("threads", value)
}

/// `threshold=` of `Tensor.info`: `None` or an integer that fits a u32.
pub fn threshold_arg(value: &Bound<'_, PyAny>) -> PyResult<Option<u32>> {
    let Some(t) = optional_integer("threshold", value)? else {
        return Ok(None);
    };
    u32::try_from(t).map(Some).map_err(|_| {
        input_error(
            value.py(),
            format!("threshold must be between 0 and {}, got {t}", u32::MAX),
        )
    })
}

/// `factors=` of a kernel call: a list or tuple with one item per mode, each a 2-D
/// array or `None` (checked later against the mode); anything else, a lone array
/// included, is `sptmc.ArgumentTypeError` naming `factors`.
pub fn factors_arg<'py>(value: &Bound<'py, PyAny>) -> PyResult<Vec<Option<Bound<'py, PyAny>>>> {
    let items = if let Ok(l) = value.cast::<PyList>() {
        l.iter().collect::<Vec<_>>()
    } else if let Ok(t) = value.cast::<PyTuple>() {
        t.iter().collect()
    } else {
        return Err(new_error(
            value.py(),
            "ArgumentTypeError",
            format!(
                "factors must be a list of 2-D arrays (one per mode), got {}",
                describe(value)
            ),
        ));
    };
    Ok(items
        .into_iter()
        .map(|f| (!f.is_none()).then_some(f))
        .collect())
}

/// `backend=`: "auto", "cpu" or "cuda" (`sptmc.ArgumentTypeError` for a non-string).
pub fn backend_arg(value: &Bound<'_, PyAny>) -> PyResult<BackendChoice> {
    let name: String = by_rule("text", "backend", value)?.extract()?;
    crate::run::backend_choice(value.py(), &name)
}

/// `values=`: "auto", "f16" or "f32".
pub fn values_arg(value: &Bound<'_, PyAny>) -> PyResult<ValueChoice> {
    let name: String = by_rule("text", "values", value)?.extract()?;
    crate::run::value_choice(value.py(), &name)
}

/// `op=` of `Tensor.info`: "mttkrp" or "ttmc".
pub fn op_arg(value: &Bound<'_, PyAny>) -> PyResult<Op> {
    let name: String = by_rule("text", "op", value)?.extract()?;
    match name.as_str() {
        "mttkrp" => Ok(Op::Mttkrp),
        "ttmc" => Ok(Op::Ttmc),
        other => Err(input_error(
            value.py(),
            format!("op must be \"mttkrp\" or \"ttmc\", got {other:?}"),
        )),
    }
}
