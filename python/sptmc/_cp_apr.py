"""CP-APR (Poisson CP) from Python: :func:`cp_apr` and :class:`CPAPRResult`."""

from __future__ import annotations

import time
import warnings
from typing import Any, Callable, Optional

import numpy as np

from . import _args, _sptmc
from ._errors import InputError

Callback = Callable[[int, float], Optional[bool]]


class CPAPRResult:
    """A Poisson CP model ``M = sum_r weights[r] * factors[0][:, r] o ... o
    factors[N-1][:, r]`` of a count tensor and how it was reached.

    Attributes:
        weights: float64 array of the R weights, in decreasing order.
        factors: one nonnegative float64 array per mode, ``shape[m] x R``, columns
            summing to 1.
        log_likelihood: the final ``sum x log M - sum M``.
        log_likelihoods: float64 array, the log-likelihood after each outer iteration.
        converged: whether the KKT tolerance ``tol`` was met (else ``iters``,
            ``stoptime`` or the callback ended the run).
        stopped_by: ``"tol"``, ``"iters"`` (the iteration or time limit) or
            ``"callback"`` (the callback asked to stop).
        warnings: what the run warned of (non-integer values, a zero tensor); each is
            also issued as a ``RuntimeWarning``.
        stats: one dict per outer iteration (log-likelihood, KKT violation, inner
            iterations, modes moved off zero, seconds, seconds in kernels, bytes moved
            to and from a GPU).
        iterations: the number of outer iterations run.
        seconds: the seconds of the fit.
        backend: the device it ran on, in words.
        values: how the tensor's values were stored (as :class:`sptmc.CPResult`'s).
    """

    weights: np.ndarray
    factors: list
    log_likelihood: float
    log_likelihoods: np.ndarray
    converged: bool
    stopped_by: str
    warnings: list
    stats: list
    seconds: float
    backend: str
    values: Optional[dict]

    def __init__(self, raw: dict) -> None:
        self.weights = raw["weights"]
        self.factors = raw["factors"]
        self.log_likelihood = raw["log_likelihood"]
        self.log_likelihoods = raw["log_likelihoods"]
        self.converged = raw["converged"]
        if self.converged:
            self.stopped_by = "tol"
        elif raw["stopped_by_callback"]:
            self.stopped_by = "callback"
        else:
            self.stopped_by = "iters"
        self.warnings = list(raw["warnings"])
        self.stats = raw["stats"]
        self.seconds = raw["seconds"]
        self.backend = raw["backend"]
        self.values = raw.get("values")

    @property
    def iterations(self) -> int:
        """The number of outer iterations run."""
        return len(self.stats)

    def to_pyttb(self) -> Any:
        """The model as a ``pyttb.ktensor`` (needs pyttb)."""
        try:
            import pyttb as ttb
        except ImportError as e:
            raise ImportError(f"CPAPRResult.to_pyttb needs pyttb (pip install pyttb): {e}") from e
        return ttb.ktensor([np.array(f) for f in self.factors], np.array(self.weights))

    def __repr__(self) -> str:
        shape = tuple(f.shape[0] for f in self.factors)
        return (
            f"<sptmc.CPAPRResult rank={len(self.weights)} shape={shape} "
            f"log_likelihood={self.log_likelihood:.6e} iterations={self.iterations} "
            f"stopped_by={self.stopped_by!r}>"
        )


def _progress(verbose: bool, callback: Optional[Callback]):
    """The per-iteration function handed to the engine's loop (None when there is
    nothing to do per iteration)."""
    if not verbose and callback is None:
        return None

    def progress(s: dict) -> bool:
        if verbose:
            print(
                f"  its = {s['iteration'] + 1:3d} ({s['seconds']:.3f}s: kernel "
                f"{s['seconds_kernel']:.3f}s)  log-likelihood = {s['log_likelihood']:.6e}  "
                f"kkt = {s['kkt_violation']:.4e}  inner = {s['inner_iters']}  "
                f"κ-modes = {s['violations']}",
                flush=True,
            )
        if callback is None:
            return False
        try:
            return bool(callback(s["iteration"], s["log_likelihood"]))
        except StopIteration:
            return True

    return progress


def cp_apr(
    X: Any,
    rank: int,
    *,
    iters: int = 1000,
    inner: int = 10,
    tol: float = 1e-4,
    stoptime: float = 1e6,
    eps: float = 1e-10,
    kappa: float = 0.01,
    kappa_tol: float = 1e-10,
    seed: int = 1,
    init: Any = None,
    non_integer: str = "warn",
    backend: str = "auto",
    threads: Optional[int] = None,
    values: str = "auto",
    verbose: bool = False,
    callback: Optional[Callback] = None,
) -> CPAPRResult:
    """Poisson CP decomposition of a count tensor by CP-APR's multiplicative updates
    (Chi and Kolda 2012; the CLI's ``sptmc cp-apr``, pyttb's ``cp_apr``).

    Args:
        X: the tensor (anything :func:`sptmc.tensor` accepts); nonnegative values.
        rank: the number of components R (>= 1).
        iters: the most outer iterations (``--iters``).
        inner: the most inner iterations per mode (``--inner``).
        tol: the KKT tolerance that ends the run (``--tol``).
        stoptime: the most seconds to run (``--stoptime``).
        eps: the smallest value a factor entry may take (``--eps``).
        kappa: how far inadmissible zeros are moved off zero (``--kappa``).
        kappa_tol: how close to zero an entry counts as a zero (``--kappa-tol``).
        seed: the seed of the random initial factors (``--seed``).
        init: initial factors instead: one nonnegative ``shape[m] x R`` array per
            mode, or a result or pyttb ``ktensor`` to continue from.
        non_integer: what a non-integer value does: ``"warn"`` (a warning) or
            ``"error"`` (an :class:`InputError`) (``--non-integer``).
        backend, threads, values, verbose: as for :func:`sptmc.cp_als` (counts above
            2048 that fp16 would round make ``values="auto"`` store f32).
        callback: ``callback(iteration, log_likelihood)`` after every outer
            iteration (``iteration`` 0-based: ``log_likelihoods[iteration] ==
            log_likelihood``). Returning ``True`` (any true value) or raising
            ``StopIteration`` stops the run after that iteration and returns its
            model, with ``stopped_by == "callback"`` (unless that iteration also met
            the KKT tolerance: then ``"tol"``); any other exception stops the run and
            propagates.

    Returns:
        a :class:`CPAPRResult`.
    """
    from . import _init_list, _say, _threads, tensor

    rank = _args.integer("rank", rank)
    iters = _args.integer("iters", iters)
    inner = _args.integer("inner", inner)
    tol = _args.number("tol", tol)
    stoptime = _args.number("stoptime", stoptime)
    eps = _args.number("eps", eps)
    kappa = _args.number("kappa", kappa)
    kappa_tol = _args.number("kappa_tol", kappa_tol)
    seed = _args.integer("seed", seed)
    non_integer = _args.text("non_integer", non_integer)
    if non_integer not in ("warn", "error"):
        raise InputError(f'non_integer must be "warn" or "error", got {non_integer!r}')
    backend = _args.text("backend", backend)
    threads = _threads(threads)
    values = _args.text("values", values)
    T = tensor(X)
    start = time.perf_counter()
    _say(verbose, f"sptmc: CP-APR rank {rank} on {list(T.shape)}, {T.nnz} nonzeros")
    raw = _sptmc._cp_apr(
        T,
        rank,
        iters,
        inner,
        tol,
        stoptime,
        eps,
        kappa,
        kappa_tol,
        seed,
        _init_list(init),
        non_integer,
        backend,
        threads,
        values,
        _progress(verbose, callback),
    )
    result = CPAPRResult(raw)
    for w in result.warnings:
        warnings.warn(w, RuntimeWarning, stacklevel=2)
    total = time.perf_counter() - start
    _say(
        verbose,
        f"CP-APR rank {rank}: final log-likelihood {result.log_likelihood:.10e} after "
        f"{result.iterations} iterations{' (KKT tolerance met)' if result.converged else ''}, "
        f"{total:.3f}s on {result.backend}",
    )
    return result
