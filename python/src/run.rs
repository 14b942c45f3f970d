//! Where and how the engine runs for Python: one engine per backend choice and thread
//! count (kept for the process; the CPU backend owns a thread pool of that size), work
//! done inside the engine with the GIL released, and a decomposition's loop that Python
//! can watch and stop.

use crate::errors::{input_error, settle};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use sptmc::decomp::IterStats;
use sptmc::engine::{BackendChoice, Engine};
use sptmc::hls::{ValueChoice, ValueReport};
use std::ops::ControlFlow;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often a waiting call wakes to look for Ctrl-C.
const SIGNAL_POLL: Duration = Duration::from_millis(50);

/// The backend a Python call asked for, by name.
pub fn backend_choice(py: Python<'_>, name: &str) -> PyResult<BackendChoice> {
    match name {
        "auto" => Ok(BackendChoice::Auto),
        "cpu" => Ok(BackendChoice::Cpu),
        "cuda" => Ok(BackendChoice::Cuda),
        other => Err(input_error(
            py,
            format!("backend must be \"auto\", \"cpu\" or \"cuda\", got {other:?}"),
        )),
    }
}

/// How a Python call asked for the tensor's values to be stored (`values=`), by name.
pub fn value_choice(py: Python<'_>, name: &str) -> PyResult<ValueChoice> {
    name.parse().map_err(|e| crate::errors::to_py(py, e))
}

/// How the run's values were stored, as a dict (`type`, `choice`, `why`,
/// `f16_inexact`, `f16_bytes`, `f32_bytes`), or None.
pub fn values_dict<'py>(
    py: Python<'py>,
    values: Option<&ValueReport>,
) -> PyResult<Bound<'py, PyAny>> {
    let json = serde_json::to_string(&values).map_err(|e| input_error(py, e.to_string()))?;
    py.import("json")?.getattr("loads")?.call1((json,))
}

/// Raises each of `values`' warnings ([`ValueReport::warnings`]: precision lost in
/// storage, integers rounded, values small enough for the kernels to lose) as a
/// `RuntimeWarning` at the caller of the package's function, as the command line
/// prints them.
pub fn warn_values(py: Python<'_>, values: Option<&ValueReport>) -> PyResult<()> {
    for w in values.map(ValueReport::warnings).unwrap_or_default() {
        // At the user's line, however many of the package's functions lie between.
        py.import("sptmc._args")?.getattr("warn")?.call1((
            format!("sptmc: {w}"),
            py.get_type::<pyo3::exceptions::PyRuntimeWarning>(),
        ))?;
    }
    Ok(())
}

/// The engine for `choice` whose CPU backend runs `threads` workers (`None`:
/// `RAYON_NUM_THREADS`, else one per core) and stores values as `values` chooses, made
/// on first use and kept (a CUDA engine holds a device context; "auto" decides once
/// per thread count). The backends'
/// switches come from the environment ([`sptmc::environment`]); tuning profiles from
/// the folders every front end reads ([`sptmc::driver::tuning::profiles`]), a profile
/// file that cannot be read becoming a Python warning.
pub fn engine(
    py: Python<'_>,
    choice: BackendChoice,
    threads: Option<i64>,
    values: ValueChoice,
) -> PyResult<Arc<Engine>> {
    type Engines = Vec<((BackendChoice, Option<usize>, ValueChoice), Arc<Engine>)>;
    static ENGINES: Mutex<Engines> = Mutex::new(Vec::new());
    let threads = match threads {
        None => None,
        Some(n) => match usize::try_from(n) {
            Ok(n) if n >= 1 => Some(n),
            _ => {
                return Err(input_error(
                    py,
                    format!("threads must be at least 1 (or None), got {n}"),
                ));
            }
        },
    };
    let key = (choice, threads, values);
    if let Some((_, e)) = lock(&ENGINES).iter().find(|(k, _)| *k == key) {
        return Ok(e.clone());
    }
    let made = py.detach(|| {
        catch_unwind(|| {
            let (profiles, skipped) = sptmc::driver::tuning::profiles();
            let mut opts = sptmc::environment::engine_options();
            opts.cpu.threads = threads;
            Engine::choose_with(choice, &opts)
                .map(|e| (e.with_profiles(profiles).with_values(values), skipped))
        })
    });
    let (engine, skipped) = settle(py, made)?;
    for why in skipped {
        let msg = format!("sptmc: tuning profile skipped: {why}");
        let _ = PyErr::warn(
            py,
            &py.get_type::<pyo3::exceptions::PyUserWarning>(),
            &std::ffi::CString::new(msg).unwrap_or_default(),
            1,
        );
    }
    let engine = Arc::new(engine);
    let mut cache = lock(&ENGINES);
    // Another thread may have made one meanwhile: keep the first.
    if let Some((_, e)) = cache.iter().find(|(k, _)| *k == key) {
        return Ok(e.clone());
    }
    cache.push((key, engine.clone()));
    Ok(engine)
}

/// Locks `m`, whether or not a panic poisoned it (the data are caches of finished
/// objects, never left half-made).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` inside `engine` ([`Engine::install`]: on the CPU backend's workers) with
/// the GIL released; a library error or a panic becomes a Python exception.
pub fn in_engine<T: Send>(
    py: Python<'_>,
    engine: &Engine,
    f: impl FnOnce() -> sptmc::Result<T> + Send,
) -> PyResult<T> {
    let r = py.detach(|| catch_unwind(AssertUnwindSafe(|| engine.install(f))));
    settle(py, r)
}

/// What [`watched`] saw besides the result.
pub struct Watch {
    /// The Python callback asked to stop (it returned a true value).
    pub stopped_by_callback: bool,
}

/// Runs a decomposition `f` inside `engine` with the GIL released, handing it a control
/// callback. This thread waits, waking every [`SIGNAL_POLL`] to run Python's signal
/// handlers (only the main thread can): Ctrl-C asks the run to stop after the
/// iteration under way and then raises `KeyboardInterrupt`. When `progress` is given,
/// it is called here, with the GIL, after every iteration with a dict of the
/// iteration's statistics; a true return value stops the run, an exception stops it
/// and is raised. Without `progress` the iterations cost no round trip to this thread.
pub fn watched<T: Send>(
    py: Python<'_>,
    engine: &Engine,
    progress: Option<&Bound<'_, PyAny>>,
    f: impl FnOnce(&mut dyn FnMut(&IterStats) -> ControlFlow<()>) -> sptmc::Result<T> + Send,
) -> PyResult<(T, Watch)> {
    watched_steps(py, engine, progress, iteration_dict, f)
}

/// [`watched`] for a loop whose steps are `S`, each handed to `progress` as the dict
/// `to_dict` makes of it.
pub fn watched_steps<T: Send, S: Copy + Send>(
    py: Python<'_>,
    engine: &Engine,
    progress: Option<&Bound<'_, PyAny>>,
    to_dict: for<'py> fn(Python<'py>, &S) -> PyResult<Bound<'py, PyDict>>,
    f: impl FnOnce(&mut dyn FnMut(&S) -> ControlFlow<()>) -> sptmc::Result<T> + Send,
) -> PyResult<(T, Watch)> {
    let interrupted = AtomicBool::new(false);
    let with_progress = progress.is_some();
    let (stats_tx, mut stats_rx) = mpsc::channel::<S>();
    let (reply_tx, reply_rx) = mpsc::channel::<ControlFlow<()>>();
    let mut raised: Option<PyErr> = None;
    let mut stopped_by_callback = false;

    let result = std::thread::scope(|s| {
        let interrupted = &interrupted;
        let worker = s.spawn(move || {
            // Owns its channel ends, so that it is Send (a Receiver is not Sync).
            let mut control = move |st: &S| -> ControlFlow<()> {
                if interrupted.load(Ordering::Relaxed) {
                    return ControlFlow::Break(());
                }
                if !with_progress {
                    return ControlFlow::Continue(());
                }
                if stats_tx.send(*st).is_err() {
                    return ControlFlow::Break(());
                }
                reply_rx.recv().unwrap_or(ControlFlow::Break(()))
            };
            let r = catch_unwind(AssertUnwindSafe(|| engine.install(|| f(&mut control))));
            // Dropping the sender (owned by `control`) ends the waiting loop below.
            drop(control);
            r
        });
        loop {
            // A Receiver is Send but not Sync: it moves into the released section and
            // back out.
            let (msg, rx) = py.detach(move || (stats_rx.recv_timeout(SIGNAL_POLL), stats_rx));
            stats_rx = rx;
            let signal = py.check_signals();
            if let Err(e) = signal {
                interrupted.store(true, Ordering::Relaxed);
                raised.get_or_insert(e);
            }
            match msg {
                Ok(stats) => {
                    let reply = if interrupted.load(Ordering::Relaxed) || raised.is_some() {
                        ControlFlow::Break(())
                    } else {
                        match call_progress(py, progress, to_dict, &stats) {
                            Ok(false) => ControlFlow::Continue(()),
                            Ok(true) => {
                                stopped_by_callback = true;
                                ControlFlow::Break(())
                            }
                            Err(e) => {
                                raised = Some(e);
                                ControlFlow::Break(())
                            }
                        }
                    };
                    let _ = reply_tx.send(reply);
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        // The worker has dropped its sender: it is finishing or done.
        py.detach(|| worker.join())
    });
    let result = match result {
        Ok(r) => r,
        Err(p) => Err(p),
    };
    let value = settle(py, result);
    if let Some(e) = raised {
        return Err(e);
    }
    Ok((
        value?,
        Watch {
            stopped_by_callback,
        },
    ))
}

/// Calls `progress(to_dict(s))`; whether it asked to stop.
fn call_progress<S>(
    py: Python<'_>,
    progress: Option<&Bound<'_, PyAny>>,
    to_dict: for<'py> fn(Python<'py>, &S) -> PyResult<Bound<'py, PyDict>>,
    s: &S,
) -> PyResult<bool> {
    let Some(cb) = progress else {
        return Ok(false);
    };
    cb.call1((to_dict(py, s)?,))?.is_truthy()
}

/// A CP-ALS or Tucker-HOOI iteration as the `progress` dict.
fn iteration_dict<'py>(py: Python<'py>, s: &IterStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("iteration", s.iter)?;
    d.set_item("fit", s.fit)?;
    d.set_item("delta", s.delta)?;
    d.set_item(
        "seconds",
        s.seconds_kernel + s.seconds_linalg + s.seconds_other,
    )?;
    d.set_item("seconds_kernel", s.seconds_kernel)?;
    d.set_item("seconds_linalg", s.seconds_linalg)?;
    d.set_item("seconds_other", s.seconds_other)?;
    Ok(d)
}
