//! The library's errors as the Python exceptions a user expects.
//!
//! The classes live in `sptmc/_errors.py` (Python allows them two bases, e.g.
//! `sptmc.InputError(sptmc.Error, ValueError)`, which an extension type cannot have);
//! this module picks the class for each [`sptmc::Error`] and keeps the library's
//! message.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use sptmc::Error;

/// Which class of `sptmc._errors` an error becomes.
fn class_of(e: &Error) -> &'static str {
    match e {
        Error::Io { .. } => "FileError",
        Error::Parse { .. }
        | Error::BadBinary { .. }
        | Error::Decompress { .. }
        | Error::Profile { .. } => "FormatError",
        Error::InvalidTensor(_)
        | Error::ModeOutOfRange { .. }
        | Error::InvalidRank(_)
        | Error::Shape { .. }
        | Error::InvalidOption(_)
        | Error::Unsupported(_)
        | Error::NonFinite(_) => "InputError",
        Error::DeviceMemory { .. } | Error::HostMemory { .. } | Error::Memory { .. } => {
            "OutOfMemoryError"
        }
        Error::NoDevice(_) | Error::Cuda { .. } | Error::Nvrtc { .. } => "DeviceError",
        Error::Numerical(_) => "NumericalError",
        _ => "Error",
    }
}

/// An instance of `sptmc._errors.<class>` with `message`, or a `RuntimeError` saying
/// why it could not be made (the package is broken).
pub fn new_error(py: Python<'_>, class: &str, message: String) -> PyErr {
    let made = (|| -> PyResult<PyErr> {
        let cls = py.import("sptmc._errors")?.getattr(class)?;
        Ok(PyErr::from_value(cls.call1((message.clone(),))?))
    })();
    made.unwrap_or_else(|why| {
        PyRuntimeError::new_err(format!(
            "{message} (and sptmc._errors.{class} could not be raised: {why})"
        ))
    })
}

/// `sptmc.InputError` (a `ValueError`) with `message`.
pub fn input_error(py: Python<'_>, message: impl Into<String>) -> PyErr {
    new_error(py, "InputError", message.into())
}

/// The Python exception for a library error: its class by kind, the library's message;
/// file errors carry `errno` and `filename` as `OSError`s do.
pub fn to_py(py: Python<'_>, e: Error) -> PyErr {
    let Error::Io { path, source } = &e else {
        let mut message = e.to_string();
        if matches!(e, Error::Memory { .. }) {
            // The plan's hint names the command line's options; here they are arguments.
            message = message
                .replace("--ranks", "ranks")
                .replace("--rank", "rank");
        }
        return new_error(py, class_of(&e), message);
    };
    let missing = source.kind() == std::io::ErrorKind::NotFound;
    let class = if missing {
        "MissingFileError"
    } else {
        "FileError"
    };
    let err = new_error(py, class, e.to_string());
    let value = err.value(py);
    // The library words a missing file itself (without the OS's code): ENOENT.
    let code: Option<Bound<'_, PyAny>> = match source.raw_os_error() {
        Some(c) => c.into_pyobject(py).ok().map(|c| c.into_any()),
        None if missing => py.import("errno").and_then(|m| m.getattr("ENOENT")).ok(),
        None => None,
    };
    if let Some(code) = code {
        let _ = value.setattr("errno", code);
    }
    let _ = value.setattr("filename", path.to_string_lossy().into_owned());
    err
}

/// A panic caught at the boundary: a bug in sptmc, reported as `sptmc.Error`.
pub fn from_panic(py: Python<'_>, payload: Box<dyn std::any::Any + Send>) -> PyErr {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    new_error(
        py,
        "Error",
        format!("internal error in sptmc (please report it): {what}"),
    )
}

/// A library result or panic (from [`std::panic::catch_unwind`]) as a Python result.
pub fn settle<T>(py: Python<'_>, r: std::thread::Result<sptmc::Result<T>>) -> PyResult<T> {
    match r {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(to_py(py, e)),
        Err(p) => Err(from_panic(py, p)),
    }
}
