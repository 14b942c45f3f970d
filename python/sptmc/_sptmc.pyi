"""Type stubs of ``sptmc._sptmc``, the Rust extension (src/*.rs). Use it through the
``sptmc`` package; the underscored functions are its helpers.

The methods read their scalar arguments by the package's rules (``sptmc._args``): an
integer (``mode``, ``rank``, ``threshold``, ``threads``) is an ``int`` or a numpy
integer scalar, a bool or a float (``3.0`` too) raising ``sptmc.ArgumentTypeError``
(an ``InputError`` and a ``TypeError``) and an integer beyond 64 bits
``sptmc.ArgumentOverflowError`` (an ``InputError`` and an ``OverflowError``); ``op``
and ``backend`` must be strings."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, final

import numpy as np
import numpy.typing as npt

__all__ = [
    "_describe",
    "_from_index_arrays",
    "Tensor",
    "backend_info",
    "_cp_als",
    "_tucker_hooi",
    "_gcp",
    "_cp_apr",
    "_complete",
    "_split",
    "_load_completion",
    "_Completion",
    "read",
    "KERNEL_BUILD",
    "__version__",
    "DEBUG_BUILD",
]
__version__: str
KERNEL_BUILD: str
DEBUG_BUILD: bool
"""Whether this module was built without optimizations of its own crates (``maturin
develop`` without ``--release``); benchmarks refuse such a build."""
"""How the CUDA kernels were built into this module (embedded cubins/PTX, or compiled
at run time by NVRTC)."""

@final
class Tensor:
    """A sparse tensor of any order, held by sptmc.

    Make one with ``sptmc.read``, ``sptmc.from_coo``, ``sptmc.from_pyttb`` or
    ``sptmc.tensor``. Coordinates are stored 0-based, sorted, with repeated coordinates
    summed; the HLS form each kernel needs is built on first use and kept.
    """

    @property
    def shape(self) -> tuple[int, ...]:
        """The extent of every mode."""
    @property
    def ndim(self) -> int:
        """The number of modes."""
    @property
    def nnz(self) -> int:
        """The number of stored nonzeros (after repeated coordinates were summed)."""
    @property
    def duplicates_summed(self) -> int:
        """How many input entries were merged into others because their coordinates
        repeated."""
    @property
    def source(self) -> str:
        """Where the tensor came from, in one line."""
    def norm(self) -> float:
        """The Frobenius norm of the values (FP64)."""
    def to_coo(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """``(subs, vals)``: an ``nnz x ndim`` int64 array of 0-based indices and the
        float64 values, sorted by coordinates (mode 0 slowest). New arrays."""
    def to_pyttb(self) -> Any:
        """The tensor as a ``pyttb.sptensor`` (needs pyttb)."""
    def mttkrp(
        self,
        factors: Sequence[Optional[npt.ArrayLike]],
        mode: int,
        *,
        backend: str = "auto",
        threads: Optional[int] = None,
        values: str = "auto",
    ) -> npt.NDArray[np.float32]:
        """MTTKRP of ``mode``: a ``shape[mode] x R`` float32 array. ``factors``: one
        ``shape[m] x R`` float array per mode; the target mode's may be ``None``."""
    def ttmc(
        self,
        factors: Sequence[Optional[npt.ArrayLike]],
        mode: int,
        *,
        backend: str = "auto",
        threads: Optional[int] = None,
        values: str = "auto",
    ) -> npt.NDArray[np.float32]:
        """TTM-chain of ``mode``: a float32 array of ``shape[mode]`` rows and
        ``prod_{m != mode} R_m`` columns (the last mode's rank index fastest)."""
    def info(
        self,
        *,
        op: str = "mttkrp",
        rank: int = 16,
        threshold: Optional[int] = None,
        backend: str = "auto",
        threads: Optional[int] = None,
        values: str = "auto",
    ) -> dict[str, Any]:
        """The tensor's statistics and its HLS form's, as a dict (``shape``, ``nnz``,
        ``density``, ``norm``, ``duplicates_summed``, ``threshold``,
        ``threshold_source``, ``dense_share``, ``hls_bytes``, ``hls``, ``values``)."""

def read(path: str, *, cache: bool = True) -> Tensor:
    """Reads a ``.tns`` (plain or gzipped) or ``.sptb`` file, as the CLI does."""

def backend_info(backend: str = "auto", *, threads: Optional[int] = None) -> str:
    """The device ``backend`` would run on, in words, and why "auto" chose it."""

def _from_index_arrays(
    indices: Sequence[npt.NDArray[np.integer[Any]]],
    vals: npt.NDArray[np.floating[Any]],
    shape: Optional[Sequence[int]],
    index_base: int,
) -> Tensor: ...
def _describe(obj: object) -> str: ...
def _cp_als(
    tensor: Tensor,
    rank: int,
    iters: int,
    tol: float,
    seed: int,
    init: Optional[Sequence[npt.ArrayLike]],
    backend: str,
    threads: Optional[int],
    values: str,
    progress: Optional[Callable[[dict[str, Any]], bool]],
) -> dict[str, Any]: ...
def _gcp(
    tensor: Tensor,
    rank: int,
    loss: str,
    loss_param: Optional[float],
    method: str,
    seed: int,
    init: Optional[Sequence[npt.ArrayLike]],
    options: dict[str, Any],
    backend: str,
    threads: Optional[int],
    progress: Optional[Callable[[dict[str, Any]], bool]],
) -> dict[str, Any]: ...
def _tucker_hooi(
    tensor: Tensor,
    ranks: Sequence[int],
    iters: int,
    tol: float,
    seed: int,
    init: Optional[Sequence[npt.ArrayLike]],
    backend: str,
    threads: Optional[int],
    values: str,
    progress: Optional[Callable[[dict[str, Any]], bool]],
) -> dict[str, Any]: ...
def _cp_apr(
    tensor: Tensor,
    rank: int,
    iters: int,
    inner: int,
    tol: float,
    stoptime: float,
    eps: float,
    kappa: float,
    kappa_tol: float,
    seed: int,
    init: Optional[Sequence[npt.ArrayLike]],
    non_integer: str,
    backend: str,
    threads: Optional[int],
    values: str,
    progress: Optional[Callable[[dict[str, Any]], bool]],
) -> dict[str, Any]: ...
@final
class _Completion:
    """A fitted completion model and the summary of the run that made it."""

    def predict(self, coords: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
        """The predictions at ``coords`` (``n x N``, 0-based)."""
    def rmse(self, tensor: Tensor) -> Optional[float]:
        """The RMSE over the entries of ``tensor`` (None when it has none)."""
    def save(self, path: str) -> None:
        """Writes the model folder ``sptmc predict`` reads."""
    def summary_json(self) -> str:
        """The run's summary as JSON text."""
    def factors(self) -> list[npt.NDArray[np.float64]]:
        """The factors, one ``I_m x R`` array per mode."""
    def biases(self) -> list[npt.NDArray[np.float64]]:
        """The biases, one array per mode (empty without biases)."""
    @property
    def offset(self) -> float:
        """The model's constant (the training mean, or 0)."""

def _split(
    tensor: Tensor, fractions: Sequence[float], seed: int
) -> tuple[Tensor, Tensor, Tensor]: ...
def _complete(
    train: Tensor,
    validation: Optional[Tensor],
    test: Optional[Tensor],
    rank: int,
    solver: str,
    lambda_: Optional[float],
    epochs: int,
    patience: int,
    seed: int,
    learning_rate: Optional[float],
    ccd_inner: int,
    center: bool,
    biases: bool,
    bias_lambda: float,
    backend: str,
    threads: Optional[int],
    values: str,
    progress: Optional[Callable[[dict[str, Any]], bool]],
) -> tuple[_Completion, bool]: ...
def _load_completion(path: str) -> _Completion: ...
