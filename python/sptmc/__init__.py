"""sptmc: sparse tensor decompositions and completion from Python.

The kernels that dominate CP and Tucker decomposition of sparse tensors — MTTKRP and
TTM-chain — run over sptmc's HLS format (dense 16x16x16 bitmap tiles plus a linearized
sparse remainder) on the CPU (rayon threads) or an NVIDIA GPU, with CP-ALS,
Tucker-HOOI, CP-APR (:func:`cp_apr`) and tensor completion (:func:`complete`) on top.
The GIL is released while the engine works.

    >>> import numpy as np, sptmc
    >>> subs = np.array([[0, 0, 0], [1, 2, 0], [2, 1, 1]])     # nnz x N, 0-based
    >>> X = sptmc.from_coo(subs, np.array([1.0, 2.0, 3.0]))
    >>> model = sptmc.cp_als(X, rank=2, iters=20, tol=0)
    >>> model.weights.shape, [f.shape for f in model.factors]
    ((2,), [(3, 2), (3, 2), (2, 2)])

Tensors come from files (:func:`read`), coordinate arrays (:func:`from_coo`), pyttb
(:func:`from_pyttb`) or any object with ``.coords/.data/.shape`` (pydata ``sparse``,
SciPy ``coo_array``) or ``.subs/.vals/.shape`` (pyttb) through :func:`tensor`; every
function that takes a tensor accepts all of these. Errors derive from
:class:`sptmc.Error` and the built-in class a Python user expects (``ValueError``,
``OSError``, ...).

Integer arguments (ranks, modes, ``iters``, ``seed``, ``threads``, ``shape``,
``index_base``) take a Python ``int`` or a numpy integer scalar. A bool or a float
(an integral one such as ``3.0`` too) raises :class:`ArgumentTypeError`, which is
both an :class:`InputError` and a ``TypeError``; an integer that does not fit 64 bits
raises :class:`ArgumentOverflowError`, both an :class:`InputError` and an
``OverflowError``; one that fits but is out of the argument's range (``rank=0``)
raises :class:`InputError`. Paths may be ``str``, ``bytes`` or ``os.PathLike``.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np

from ._errors import (
    ArgumentOverflowError,
    ArgumentTypeError,
    DeviceError,
    Error,
    FileError,
    FormatError,
    InputError,
    MissingFileError,
    NumericalError,
    OutOfMemoryError,
)
from . import _args, _sptmc
from ._sptmc import KERNEL_BUILD, Tensor, __version__, backend_info

__all__ = [
    "Tensor",
    "read",
    "from_coo",
    "from_pyttb",
    "tensor",
    "cp_als",
    "tucker_hooi",
    "gcp",
    "cp_apr",
    "complete",
    "load_completion",
    "CPResult",
    "GCPResult",
    "TuckerResult",
    "CPAPRResult",
    "CompletionModel",
    "backend_info",
    "Error",
    "InputError",
    "ArgumentTypeError",
    "ArgumentOverflowError",
    "FormatError",
    "FileError",
    "MissingFileError",
    "OutOfMemoryError",
    "DeviceError",
    "NumericalError",
    "KERNEL_BUILD",
    "__version__",
]

TensorLike = Any
"""A :class:`Tensor`, a path, a pyttb ``sptensor``, or an object with
``.coords/.data/.shape`` or ``.subs/.vals/.shape``."""

Callback = Callable[[int, float], Optional[bool]]
# GCP's: (epoch, loss, step, seconds since the start).
GCPCallback = Callable[[int, float, float, float], Optional[bool]]


def read(
    path: Union[str, bytes, "os.PathLike[str]", "os.PathLike[bytes]"], *, cache: bool = True
) -> Tensor:
    """Reads a tensor file, as the ``sptmc`` command line does.

    FROSTT ``.tns`` text (1-based indices, value last; gzipped when the file starts
    with the gzip magic; an optional header with the order and the dimensions) or an
    ``.sptb`` binary tensor. Repeated coordinates are summed
    (:attr:`Tensor.duplicates_summed` counts them). Text files go through sptmc's
    binary cache (``$XDG_CACHE_HOME/sptmc``, else ``~/.cache/sptmc``), which makes a
    second read about 10x faster; ``cache=False`` parses the text and neither reads
    nor writes the cache.

    Raises :class:`MissingFileError` (a ``FileNotFoundError``) when the file does not
    exist, :class:`FileError` (an ``OSError``) when it cannot be read, and
    :class:`FormatError` (a ``ValueError``) naming the line when its content is wrong.
    ``path`` may be a ``str``, an ``os.PathLike`` or ``bytes`` (the operating system's
    bytes, which need not be valid UTF-8); anything else raises
    :class:`ArgumentTypeError`.
    """
    return _sptmc.read(_args.path(path), cache=_args.flag("cache", cache))


def _values_view(vals: Any) -> np.ndarray:
    """``vals`` as a 1-D float64 or float32 array: the caller's own memory when it
    already is one (any strides), else a float64 copy. A column vector (pyttb's
    ``nnz x 1``) is read as its column."""
    _args.not_masked("vals", vals)
    v = vals if isinstance(vals, np.ndarray) else np.asarray(vals)
    if v.ndim == 2 and v.shape[1] == 1:
        v = v[:, 0]
    if v.ndim != 1:
        raise InputError(
            f"vals must be 1-D (or nnz x 1), got an array of shape {v.shape}"
        )
    if v.dtype not in (np.float64, np.float32):
        if v.dtype.kind not in "biuf":
            raise InputError(f"vals must be numbers, got dtype {v.dtype}")
        v = v.astype(np.float64)
    return v


def _native(a: np.ndarray) -> np.ndarray:
    """``a`` in the machine's byte order: itself, or a converted copy where its dtype is
    byte-swapped (big-endian data read on a little-endian machine)."""
    if a.dtype.isnative:
        return a
    return a.astype(a.dtype.newbyteorder("="))


def _index_views(
    subs: Any, nnz: int, order: Optional[int], modes_first: Optional[bool] = None
) -> list:
    """Per-mode 1-D index arrays (views, no copy, except of byte-swapped data) from
    ``subs`` laid out nnz x N, N x nnz (``modes_first`` says which, or ``None`` to tell
    them by which axis has ``nnz`` entries), or as a sequence of N 1-D arrays."""
    _args.not_masked("subs", subs)
    if isinstance(subs, (tuple, list)) and subs and all(
        isinstance(s, np.ndarray) and s.ndim == 1 for s in subs
    ):
        for m, s in enumerate(subs):
            _args.not_masked(f"subs[{m}]", s)
        return [_native(s) for s in subs]
    a = subs if isinstance(subs, np.ndarray) else np.asarray(subs)
    a = _native(a)
    if a.dtype.kind not in "iu":
        raise InputError(f"subs must hold integers, got dtype {a.dtype}")
    if a.ndim != 2:
        raise InputError(
            f"subs must be 2-D (nnz x N or N x nnz), got an array of shape {a.shape}"
        )
    rows, cols = a.shape
    by_rows = modes_first is not True and rows == nnz and (order is None or cols == order)
    by_cols = modes_first is not False and cols == nnz and (order is None or rows == order)
    if by_rows and by_cols:
        raise InputError(
            f"subs has shape {a.shape} with {nnz} values, which fits both layouts: pass "
            "modes_first=False for nnz x N (pyttb) or modes_first=True for N x nnz "
            "(pydata sparse, torch)"
        )
    if by_rows:  # nnz x N (pyttb)
        return [a[:, m] for m in range(cols)]
    if by_cols:  # N x nnz (pydata sparse, torch, SciPy)
        return [a[m] for m in range(rows)]
    n = "N" if order is None else str(order)
    want = {
        None: f"{nnz} x {n} or {n} x {nnz}",
        False: f"{nnz} x {n} (modes_first=False)",
        True: f"{n} x {nnz} (modes_first=True)",
    }[modes_first]
    raise InputError(
        f"subs has shape {a.shape}; with {nnz} values it must be {want}"
    )


def _shape_of(shape: Any) -> Optional[list]:
    """``shape`` as a list of ints (``None`` stays ``None``); a float or bool extent
    is refused, not truncated."""
    if shape is None:
        return None
    return _args.integers("shape", shape)


def from_coo(
    subs: Any,
    vals: Any,
    shape: Optional[Sequence[int]] = None,
    index_base: int = 0,
    modes_first: Optional[bool] = None,
) -> Tensor:
    """A tensor from coordinates and values.

    ``subs`` may be laid out ``nnz x N`` (pyttb), ``N x nnz`` (pydata ``sparse``,
    ``torch.sparse_coo_tensor(...).indices()``, SciPy's ``coo_array.coords`` stacked)
    or be a sequence of ``N`` 1-D arrays (SciPy's ``coords`` tuple). A 2-D ``subs``'s
    layout is told by which axis has one entry per value, or given:
    ``modes_first=False`` for ``nnz x N``, ``True`` for ``N x nnz``. Where both axes
    fit (as many values as modes, and ``shape`` does not settle it) it must be given:
    such a ``subs`` is refused, never guessed. Any integer dtype and any strides are
    read in place: no copy of the arrays is made (values: float64 or float32; other
    dtypes are converted). The tensor keeps its own sorted copy of the coordinates, so
    later changes to the arrays do not reach it.

    ``shape=None`` takes each mode's largest index plus one. ``index_base=1`` reads
    1-based coordinates (FROSTT, MATLAB). Repeated coordinates are summed and counted
    (:attr:`Tensor.duplicates_summed`).

    Raises :class:`InputError` (a ``ValueError``) for a layout that fits neither way
    (or both, with ``modes_first`` not given), a negative or out-of-range index, a
    non-integer ``subs``, and a NaN or infinite value, naming the entry;
    :class:`ArgumentTypeError` for a float or bool in ``shape`` or ``index_base``, and
    a ``modes_first`` other than ``None``, ``True`` or ``False``.
    """
    base = _args.integer("index_base", index_base)
    if modes_first is not None and not isinstance(modes_first, (bool, np.bool_)):
        raise ArgumentTypeError(
            f"modes_first must be None, True or False, got {_sptmc._describe(modes_first)}"
        )
    v = _values_view(vals)
    dims = _shape_of(shape)
    order = None if dims is None else len(dims)
    first = None if modes_first is None else bool(modes_first)
    idx = _index_views(subs, v.shape[0], order, first)
    return _sptmc._from_index_arrays(idx, v, dims, base)


def _known_layout(subs: Any, modes_first: bool) -> Any:
    """Per-mode 1-D views of a 2-D ``subs`` array whose layout the source defines
    (``N x nnz`` when ``modes_first``, else ``nnz x N``), so that :func:`from_coo` need
    not guess it (it cannot when ``nnz == N``). Anything else is passed on as it is."""
    if isinstance(subs, np.ndarray) and subs.ndim == 2:
        if modes_first:
            return tuple(subs[m] for m in range(subs.shape[0]))
        return tuple(subs[:, m] for m in range(subs.shape[1]))
    return subs


def from_pyttb(X: Any) -> Tensor:
    """A tensor from a ``pyttb.sptensor`` (its ``subs``, ``vals`` and ``shape``); an
    empty one (all zeros) is a tensor with no nonzeros."""
    if not all(hasattr(X, a) for a in ("subs", "vals", "shape")):
        raise InputError(
            f"from_pyttb expects a pyttb.sptensor (.subs, .vals, .shape), got {type(X).__name__}"
        )
    return _from_subs_vals(X)


def _from_subs_vals(X: Any) -> Tensor:
    """A tensor from ``X.subs`` (``nnz x N``), ``X.vals`` and ``X.shape``, as pyttb
    lays them out; its empty ``subs`` and ``vals`` (``1 x 0`` arrays, which fit no
    layout) as no entries."""
    subs, vals, shape = X.subs, X.vals, tuple(X.shape)
    if np.size(subs) == 0 and np.size(vals) == 0:
        subs, vals = np.zeros((0, len(shape)), dtype=np.int64), np.zeros(0)
    return from_coo(_known_layout(subs, False), vals, shape)


def tensor(X: TensorLike) -> Tensor:
    """``X`` as a :class:`Tensor`: a Tensor as it is; a path (:func:`read`); a pyttb
    ``sptensor`` or any object with ``.subs/.vals/.shape``; an object with
    ``.coords/.data/.shape`` (pydata ``sparse.COO``, SciPy ``coo_array``); any other
    SciPy sparse array or matrix (through its ``tocoo()``)."""
    if isinstance(X, Tensor):
        return X
    if isinstance(X, (str, bytes, os.PathLike)):
        return read(X)
    if all(hasattr(X, a) for a in ("subs", "vals", "shape")):
        return _from_subs_vals(X)
    if all(hasattr(X, a) for a in ("coords", "data", "shape")):
        return from_coo(_known_layout(X.coords, True), X.data, tuple(X.shape))
    if hasattr(X, "tocoo") and hasattr(X, "shape"):
        c = X.tocoo()
        coords = getattr(c, "coords", None)
        if coords is None:  # SciPy before 1.13: row and col
            coords = (c.row, c.col)
        return from_coo(coords, c.data, tuple(c.shape))
    raise InputError(
        f"cannot make a sptmc tensor from {_sptmc._describe(X)}: expected a sptmc.Tensor, "
        "a path, a pyttb sptensor, or an object with .coords/.data/.shape "
        "(pydata sparse, SciPy coo_array)"
    )


def _run_options(iters: Any, tol: Any, seed: Any, backend: Any, threads: Any) -> tuple:
    """The options of a decomposition as ``(iters, tol, seed, backend, threads)`` of
    the types the extension takes; a wrong type raises :class:`ArgumentTypeError`
    naming the option (the library checks their values, with the command line's
    words)."""
    return (
        _args.integer("iters", iters),
        _args.number("tol", tol),
        _args.integer("seed", seed),
        _args.text("backend", backend),
        _threads(threads),
    )


def _threads(threads: Any) -> Optional[int]:
    """``threads``: None, or an integer of at least 1."""
    n = _args.optional_integer("threads", threads)
    if n is not None and n < 1:
        raise InputError(f"threads must be at least 1, got {n}")
    return n


def _init_list(init: Any) -> Optional[list]:
    """Initial factors: a sequence of arrays, or a model with ``factors`` (an sptmc
    result) or ``factor_matrices`` (pyttb ``ktensor``/``ttensor``). A model's
    ``weights`` (a CP result, a ``ktensor``) are multiplied into its first factor's
    columns, so that the factors are the model itself and a run started from them
    continues it."""
    if init is None:
        return None
    weights = None
    for attr in ("factors", "factor_matrices"):
        if hasattr(init, attr):
            weights = getattr(init, "weights", None)
            init = getattr(init, attr)
            break
    # A string ("random", pyttb's word) or a dict would iterate as characters or keys.
    if isinstance(init, (str, bytes, dict)) or not hasattr(init, "__iter__"):
        raise InputError(
            "init must be a sequence of arrays (one per mode) or a model, got "
            f"{_sptmc._describe(init)}"
        )
    out = []
    for m, f in enumerate(init):
        _args.not_masked(f"init[{m}]", f)
        a = f if isinstance(f, np.ndarray) else np.asarray(f)
        if a.dtype not in (np.float64, np.float32):
            if a.dtype.kind not in "biuf":
                raise InputError(f"init[{m}] must hold numbers, got dtype {a.dtype}")
            a = a.astype(np.float64)
        out.append(a)
    if weights is not None and out:
        w = np.asarray(weights, dtype=np.float64).reshape(-1)
        first = out[0]
        if first.ndim != 2 or first.shape[1] != w.shape[0]:
            raise InputError(
                f"init has {w.shape[0]} weights for a first factor of shape {first.shape}"
            )
        out[0] = np.asarray(first, dtype=np.float64) * w
    return out


def _progress(verbose: bool, callback: Optional[Callback]):
    """The per-iteration function handed to the engine's loop (None when there is
    nothing to do per iteration, which then costs nothing)."""
    if not verbose and callback is None:
        return None

    def progress(s: dict) -> bool:
        if verbose:
            print(
                f"  its = {s['iteration'] + 1:3d} ({s['seconds']:.3f}s: kernel "
                f"{s['seconds_kernel']:.3f}s, linalg {s['seconds_linalg']:.3f}s)  "
                f"fit = {s['fit']:.5f}  delta = {s['delta']:+.4e}",
                flush=True,
            )
        if callback is None:
            return False
        try:
            return bool(callback(s["iteration"], s["fit"]))
        except StopIteration:
            return True

    return progress


def _stopped_by(raw: dict, iters: int, tol: float) -> str:
    """Why the run ended: ``"callback"``, ``"tol"`` or ``"iters"``."""
    if raw["stopped_by_callback"]:
        return "callback"
    stats = raw["stats"]
    if len(stats) >= 2 and abs(stats[-1]["delta"]) < tol:
        return "tol"
    return "iters"


class _Result:
    """What CP and Tucker results share."""

    factors: list
    fits: np.ndarray
    seconds: np.ndarray
    stats: list
    stopped_by: str
    backend: str
    values: Optional[dict]

    def __init__(self, raw: dict, iters: int, tol: float) -> None:
        self.factors = raw["factors"]
        self.fits = raw["fits"]
        self.seconds = raw["seconds"]
        self.stats = raw["stats"]
        self.stopped_by = _stopped_by(raw, iters, tol)
        self.backend = raw["backend"]
        self.values = raw.get("values")

    @property
    def fit(self) -> float:
        """The final fit ``1 - ||X - model|| / ||X||``."""
        return float(self.fits[-1])

    @property
    def iterations(self) -> int:
        """The number of iterations run."""
        return len(self.fits)


class CPResult(_Result):
    """A CP model ``X ~ sum_r weights[r] * factors[0][:, r] o ... o factors[N-1][:, r]``
    and how it was reached.

    Attributes:
        weights: float64 array of the R weights, in decreasing order.
        factors: one float64 array per mode, ``shape[m] x R``, columns of unit 2-norm.
        fit: the final fit ``1 - ||X - model|| / ||X||``.
        fits: float64 array, the fit after each iteration.
        seconds: float64 array, the seconds of each iteration.
        stats: one dict per iteration (fit, delta, seconds in kernels, in linear
            algebra and elsewhere, bytes moved to and from a GPU).
        iterations: the number of iterations run.
        stopped_by: ``"tol"`` (the fit changed by less than ``tol``), ``"iters"`` (the
            iteration limit) or ``"callback"``.
        backend: the device it ran on, in words.
        values: how the tensor's values were stored: a dict with ``type`` (``"f16"``
            or ``"f32"``), ``choice`` (the ``values`` asked for), ``why`` (e.g.
            ``"fp16 exact"``, ``"f32: 12 values not exact in fp16"``), ``f16_inexact``
            (values fp16 does not hold exactly) and ``f16_bytes`` / ``f32_bytes`` (the
            HLS form's size with either type).
        pinv_solves: how many per-mode solves fell back to the pseudo-inverse.
    """

    weights: np.ndarray
    pinv_solves: int

    def __init__(self, raw: dict, iters: int, tol: float) -> None:
        super().__init__(raw, iters, tol)
        self.weights = raw["weights"]
        self.pinv_solves = raw["pinv_solves"]

    def to_pyttb(self) -> Any:
        """The model as a ``pyttb.ktensor`` (needs pyttb)."""
        ttb = _pyttb("CPResult.to_pyttb")
        return ttb.ktensor([np.array(f) for f in self.factors], np.array(self.weights))

    def __repr__(self) -> str:
        shape = tuple(f.shape[0] for f in self.factors)
        return (
            f"<sptmc.CPResult rank={len(self.weights)} shape={shape} fit={self.fit:.6f} "
            f"iterations={self.iterations} stopped_by={self.stopped_by!r}>"
        )


class TuckerResult(_Result):
    """A Tucker model ``X ~ core x_0 factors[0] x_1 ... x_{N-1} factors[N-1]`` and how
    it was reached.

    Attributes:
        core: float64 array of shape ``ranks``.
        factors: one float64 array per mode, ``shape[m] x ranks[m]``, orthonormal
            columns.
        fit, fits, seconds, stats, iterations, stopped_by, backend, values: as for
            :class:`CPResult`.
    """

    core: np.ndarray

    def __init__(self, raw: dict, iters: int, tol: float) -> None:
        super().__init__(raw, iters, tol)
        self.core = raw["core"]

    def to_pyttb(self) -> Any:
        """The model as a ``pyttb.ttensor`` (needs pyttb)."""
        ttb = _pyttb("TuckerResult.to_pyttb")
        return ttb.ttensor(ttb.tensor(np.array(self.core)), [np.array(f) for f in self.factors])

    def __repr__(self) -> str:
        shape = tuple(f.shape[0] for f in self.factors)
        return (
            f"<sptmc.TuckerResult ranks={self.core.shape} shape={shape} fit={self.fit:.6f} "
            f"iterations={self.iterations} stopped_by={self.stopped_by!r}>"
        )


def _pyttb(what: str) -> Any:
    """The pyttb module, or an ImportError saying that ``what`` needs it."""
    try:
        import pyttb
    except ImportError as e:
        raise ImportError(f"{what} needs pyttb (pip install pyttb): {e}") from e
    return pyttb


def _say(verbose: bool, line: str) -> None:
    """Prints ``line`` (flushed) when ``verbose``."""
    if verbose:
        print(line, flush=True)


def cp_als(
    X: TensorLike,
    rank: int,
    *,
    iters: int = 50,
    tol: float = 1e-5,
    seed: int = 1,
    init: Any = None,
    backend: str = "auto",
    threads: Optional[int] = None,
    values: str = "auto",
    verbose: bool = False,
    callback: Optional[Callback] = None,
) -> CPResult:
    """CP decomposition by alternating least squares (the CLI's ``sptmc cp``).

    Each iteration updates modes ``0, 1, ..., N-1`` in turn (an MTTKRP on the engine,
    then an ``R x R`` solve), normalizes the columns into the weights as pyttb does,
    and computes the fit without rebuilding the tensor. The run stops after ``iters``
    iterations or after the first iteration (not the first) whose fit changed by less
    than ``tol`` (``tol=0`` runs them all).

    Args:
        X: the tensor (anything :func:`tensor` accepts).
        rank: the number of components R (>= 1).
        iters: the most iterations to run (``--iters``).
        tol: the fit change that stops the run (``--tol``).
        seed: the seed of the random initial factors (``--seed``): mode m's is
            uniform in [0, 1), drawn from ``seed + m``.
        init: initial factors instead: one ``shape[m] x R`` array per mode (mode 0's
            is not read: it is solved for first, as in pyttb), or a CP result or
            pyttb ``ktensor`` to continue from.
        backend: ``"auto"`` (CUDA when a GPU is usable, else the CPU), ``"cpu"`` or
            ``"cuda"``.
        threads: CPU worker threads (default: ``RAYON_NUM_THREADS``, else one per
            core; at most 4 per core).
        values: how the tensor's values are stored (``--values``): ``"auto"`` (fp16
            where it holds every value exactly after a power-of-two scale, as integer
            counts up to 2048, else f32), ``"f16"`` (smallest and fastest; rounds to
            11 significant bits) or ``"f32"``. The result's ``values`` says which.
        verbose: print a line per iteration (fit, change, seconds in kernels and in
            linear algebra), as ``sptmc cp`` does, to standard output.
        callback: ``callback(iteration, fit)``, called after every iteration
            (``iteration`` 0-based: ``fits[iteration] == fit``). Returning ``True`` (any
            true value) or raising ``StopIteration`` stops the run there and returns
            the model so far, with ``stopped_by == "callback"``; any other exception
            stops the run and propagates.

    The tensor's HLS form is built on the first call and kept on the tensor for
    later calls. The GIL is released while the engine works; Ctrl-C stops the run at
    the end of the iteration under way and raises ``KeyboardInterrupt``.

    A tensor whose extents need more than 96 bits of coordinates (e.g. six modes of
    2^17 rows) runs on its modes renumbered to their used indices, as on the command
    line; the factors come back on the tensor's rows, zero where an index is unused
    (``tucker_hooi`` and ``cp_apr`` do the same).

    Returns:
        a :class:`CPResult`.
    """
    rank = _args.integer("rank", rank)
    iters, tol, seed, backend, threads = _run_options(iters, tol, seed, backend, threads)
    T = tensor(X)
    start = time.perf_counter()
    _say(verbose, f"sptmc: CP-ALS rank {rank} on {list(T.shape)}, {T.nnz} nonzeros")
    raw = _sptmc._cp_als(
        T,
        rank,
        iters,
        tol,
        seed,
        _init_list(init),
        backend,
        threads,
        _args.text("values", values),
        _progress(verbose, callback),
    )
    result = CPResult(raw, iters, tol)
    _say(verbose, _summary(f"CP-ALS rank {rank}", result, time.perf_counter() - start))
    return result


class GCPResult(CPResult):
    """A GCP model: a :class:`CPResult` (weights, unit-norm factors, ``to_pyttb``)
    fitted under a loss other than least squares.

    Attributes:
        loss: the exact final loss of the model returned, over every cell (stored
            entries and zeros summed apart, in float64). ``None`` only for SGD with a
            loss whose zeros have no closed form on a tensor of more than
            ``dense_limit`` cells: then only ``loss_estimate`` is known.
        initial_loss: the exact loss of the initial factors, as ``loss``.
        loss_estimate, initial_loss_estimate: SGD's estimates of the same over its
            fixed stratified sample of ``loss_estimate_sample`` = (nonzeros, zeros)
            entries (what its epochs compare); ``None`` for L-BFGS.
        losses: float64 array, the loss after each epoch (SGD: the estimate; NaN marks
            an epoch whose estimate was not a finite number, undone, as its ``stats``
            entry says) or iteration (L-BFGS: exact).
        fits, fit: ``losses``, and ``loss`` (``loss_estimate`` where ``loss`` is
            ``None``), under the names a :class:`CPResult` has (lower is better).
        stopped: why the run ended, in words; ``stopped_by`` is ``"callback"`` when
            the callback stopped it, else ``"iters"``.
        stats: one dict per epoch or iteration (iteration, loss (``None`` where not
            finite), step, accepted, undone (``None``, ``"worse"`` or
            ``"not-finite"``), seconds since the start).
        value_scale: what the run divided the values by (a power of two, where their
            RMS is more than 2**10 from 1 and the loss keeps its form under a change of
            units; else 1). The model and losses are in the given units either way.
        warnings: what the run warned of (SGD's loss that hardly moved from the start
            over every epoch); each is also issued as a ``RuntimeWarning``.
    """

    loss: Optional[float]
    losses: np.ndarray
    initial_loss: Optional[float]
    loss_estimate: Optional[float]
    initial_loss_estimate: Optional[float]
    loss_estimate_sample: Optional[tuple]
    stopped: str
    value_scale: float
    warnings: list

    def __init__(self, raw: dict) -> None:
        self.factors = raw["factors"]
        self.weights = raw["weights"]
        self.losses = raw["losses"]
        self.fits = raw["losses"]
        self.seconds = raw["seconds"]
        self.stats = raw["stats"]
        self.stopped_by = "callback" if raw["stopped_by_callback"] else "iters"
        self.backend = raw["backend"]
        # GCP samples the input's f64 values; no stored form is involved.
        self.values = None
        self.pinv_solves = 0
        self.loss = raw["loss"]
        self.initial_loss = raw["initial_loss"]
        self.loss_estimate = raw["loss_estimate"]
        self.initial_loss_estimate = raw["initial_loss_estimate"]
        self.loss_estimate_sample = raw["loss_estimate_sample"]
        self.stopped = raw["stopped"]
        self.value_scale = raw["value_scale"]
        self.warnings = list(raw["warnings"])

    @property
    def fit(self) -> float:
        """The final loss (lower is better): ``loss``, or ``loss_estimate`` where the
        exact loss is not known."""
        if self.loss is not None:
            return float(self.loss)
        # Without an exact loss the run had an estimate (SGD beyond --dense-limit).
        assert self.loss_estimate is not None
        return float(self.loss_estimate)

    def __repr__(self) -> str:
        shape = tuple(f.shape[0] for f in self.factors)
        return (
            f"<sptmc.GCPResult rank={len(self.weights)} shape={shape} {_gcp_loss_words(self)} "
            f"iterations={self.iterations}>"
        )


def _gcp_loss_words(r: "GCPResult") -> str:
    """The final loss in words: exact, or the estimate labelled with its sample."""
    if r.loss is not None:
        return f"loss={r.loss:.6e}"
    if r.loss_estimate_sample is None or r.loss_estimate is None:
        return "loss=None"
    nz, z = r.loss_estimate_sample
    return f"loss estimated over {nz + z} sampled entries={r.loss_estimate:.4e}"


def _gcp_progress(verbose: bool, callback: Optional[GCPCallback]):
    """:func:`_progress` for GCP's epochs and iterations."""
    if not verbose and callback is None:
        return None

    def progress(s: dict) -> bool:
        if verbose:
            undone = "" if s["accepted"] else "  (undone)"
            if s["loss"] is None:
                what = "epoch undone: loss estimate not finite"
            else:
                what = f"loss = {s['loss']:.6e}"
            print(
                f"  epoch = {s['iteration'] + 1:3d}  {what}  "
                f"step = {s['step']:.3e}{undone}  ({s['seconds']:.3f}s)",
                flush=True,
            )
        if callback is None:
            return False
        try:
            return bool(callback(s["iteration"], s["loss"], s["step"], s["seconds"]))
        except StopIteration:
            return True

    return progress


# GCP's method options by the kind of value each takes.
_GCP_INTEGER_OPTIONS = frozenset(
    ("epochs", "epoch_iters", "max_fails", "grad_nonzeros", "grad_zeros",
     "value_nonzeros", "value_zeros", "max_iters")
)
_GCP_NUMBER_OPTIONS = frozenset(("rate", "decay", "dense_limit"))


def _gcp_options(options: dict) -> dict:
    """GCP's ``**options`` read by the package's argument rules, each named in its
    error; a name GCP does not have is left for the extension to refuse."""
    out: dict = {}
    for key, value in options.items():
        if key in _GCP_INTEGER_OPTIONS:
            out[key] = _args.integer(key, value)
        elif key in _GCP_NUMBER_OPTIONS:
            out[key] = _args.number(key, value)
        else:
            out[key] = value
    return out


def gcp(
    X: TensorLike,
    rank: int,
    *,
    loss: str = "gaussian",
    loss_param: Optional[float] = None,
    method: str = "sgd",
    seed: int = 0,
    init: Any = None,
    backend: str = "cpu",
    threads: Optional[int] = None,
    verbose: bool = False,
    callback: Optional[GCPCallback] = None,
    **options: Any,
) -> GCPResult:
    """Generalized CP under ``loss`` (the CLI's ``sptmc gcp``).

    ``loss`` is one of gaussian, bernoulli-logit, bernoulli-odds, poisson-log, poisson,
    gamma, rayleigh, negative-binomial, huber (``loss_param`` the threshold), beta
    (``loss_param`` the exponent); negative-binomial takes its number of trials as
    ``loss_param``. ``method="sgd"`` fits by stochastic gradients with Adam as GenTen's
    ``gcp_sgd`` does; ``method="lbfgs"`` by L-BFGS-B on the exact loss as pyttb's
    ``gcp_opt`` does (small tensors). ``options`` are the method's settings by their
    command-line names with underscores: ``epochs``, ``epoch_iters``, ``rate``,
    ``decay``, ``max_fails``, ``grad_nonzeros``, ``grad_zeros``, ``value_nonzeros``,
    ``value_zeros`` (SGD), ``max_iters``, ``dense_limit`` (L-BFGS). They follow the
    rules integer arguments follow (``rate``, ``decay`` and ``dense_limit`` are
    numbers): a bool, or a float for an integer, raises :class:`ArgumentTypeError`.

    ``verbose`` prints a line per epoch or iteration (loss, step, seconds), as
    ``sptmc gcp`` does. ``callback(epoch, loss, step, seconds)`` is called after every
    epoch (SGD: ``loss`` the estimate over the fixed sample, before a failed epoch is
    undone, ``None`` where it was not a finite number; ``step`` Adam's step during it) or iteration (L-BFGS: the exact loss; the
    projected gradient's largest entry); ``epoch`` is 0-based (``losses[epoch] ==
    loss``), ``seconds`` counts from the start of the fit. Returning ``True`` (any true
    value) or raising ``StopIteration`` stops the run there and returns the model so
    far (SGD: the last accepted epoch's), with ``stopped_by == "callback"``; any other
    exception stops the run and propagates. The GIL is released while the engine
    works; Ctrl-C stops the run after the epoch under way and raises
    ``KeyboardInterrupt``.

    ``seed`` seeds the random initial factors and every sample. ``init`` gives the
    initial factors instead: one ``shape[m] x R`` array per mode, or a result (of
    ``gcp``, ``cp_als``, ``cp_apr``) or pyttb ``ktensor`` to continue from (its weights
    multiplied into the first factor, so the run starts at that model's loss).

    Data the loss cannot model (binary losses on other values, negative values for a
    loss that needs nonnegative ones) raise :class:`InputError` naming the value.

    Returns:
        a :class:`GCPResult` (a :class:`CPResult`; ``to_pyttb()`` gives a ktensor).
    """
    rank = _args.integer("rank", rank)
    T = tensor(X)
    start = time.perf_counter()
    _say(verbose, f"sptmc: GCP rank {rank} ({loss}, {method}) on {list(T.shape)}")
    raw = _sptmc._gcp(
        T,
        rank,
        _args.text("loss", loss),
        None if loss_param is None else _args.number("loss_param", loss_param),
        _args.text("method", method),
        _args.integer("seed", seed),
        _init_list(init),
        _gcp_options(options),
        _args.text("backend", backend),
        _threads(threads),
        _gcp_progress(verbose, callback),
    )
    result = GCPResult(raw)
    for w in result.warnings:
        warnings.warn(w, RuntimeWarning, stacklevel=2)
    _say(
        verbose,
        f"sptmc: GCP final {_gcp_loss_words(result)} after {result.iterations} "
        f"({result.stopped}), {time.perf_counter() - start:.3f}s",
    )
    return result


def tucker_hooi(
    X: TensorLike,
    ranks: Union[int, Sequence[int]],
    *,
    iters: int = 50,
    tol: float = 1e-5,
    seed: int = 1,
    init: Any = None,
    backend: str = "auto",
    threads: Optional[int] = None,
    values: str = "auto",
    verbose: bool = False,
    callback: Optional[Callback] = None,
) -> TuckerResult:
    """Tucker decomposition by higher-order orthogonal iteration (``sptmc tucker``).

    Each iteration updates modes ``0, 1, ..., N-1`` in turn (a TTM-chain on the
    engine, then the leading left singular vectors of its result, never forming an
    ``I x I`` matrix); the core comes from the last mode's TTMc and the fit from
    ``||X||`` and ``||core||``.

    Args:
        X: the tensor (anything :func:`tensor` accepts).
        ranks: one rank per mode (``--ranks``), each between 1 and the mode's
            length and no more than the product of the others; or one int for every
            mode, lowered where a mode is shorter or the others' product smaller (as
            ``--ranks 8`` is; the result's ``core.shape`` says what ran).
        init: initial factors: one ``shape[m] x ranks[m]`` array per mode, used as
            given (as pyttb's ``tucker_als`` does; mode 0's is not read), or a Tucker
            result or pyttb ``ttensor``. Default: orthonormalized uniform random
            factors from ``seed``.
        iters, tol, seed, backend, threads, values, verbose, callback: as for
            :func:`cp_als`.

    Returns:
        a :class:`TuckerResult`.
    """
    per_mode: Optional[list] = None  # None: one rank for every mode
    one = 0
    if isinstance(ranks, (int, np.integer)) and not isinstance(ranks, (bool, np.bool_)):
        one = _args.integer("ranks", ranks)
    elif isinstance(ranks, (str, bytes)) or not hasattr(ranks, "__iter__"):
        raise ArgumentTypeError(
            f"ranks must be an integer or one integer per mode, got {ranks!r}"
        )
    else:
        per_mode = _args.integers("ranks", ranks)
    iters, tol, seed, backend, threads = _run_options(iters, tol, seed, backend, threads)
    T = tensor(X)
    # One rank goes as a list of one: the engine lowers it per mode as the CLI does.
    ranks = [one] if per_mode is None else per_mode
    start = time.perf_counter()
    said = f"{one} per mode" if per_mode is None else str(ranks)
    _say(verbose, f"sptmc: Tucker-HOOI ranks {said} on {list(T.shape)}, {T.nnz} nonzeros")
    raw = _sptmc._tucker_hooi(
        T,
        ranks,
        iters,
        tol,
        seed,
        _init_list(init),
        backend,
        threads,
        _args.text("values", values),
        _progress(verbose, callback),
    )
    result = TuckerResult(raw, iters, tol)
    _say(verbose, _summary(f"Tucker-HOOI ranks {ranks}", result, time.perf_counter() - start))
    return result


def _summary(what: str, r: _Result, total: float) -> str:
    """The closing line of a verbose run, as the CLI prints it (plus the device)."""
    return (
        f"{what}: final fit {r.fit:.6f} after {r.iterations} iterations, {total:.3f}s "
        f"({total / max(r.iterations, 1):.4f}s/iteration) on {r.backend}"
    )


# The models in their own modules, which use the helpers above.
from ._completion import CompletionModel, complete, load_completion  # noqa: E402
from ._cp_apr import CPAPRResult, cp_apr  # noqa: E402
