"""Tensor completion from Python: :func:`complete`, :func:`load_completion` and
:class:`CompletionModel`."""

from __future__ import annotations

import json
import os
import time
import warnings
from typing import Any, Callable, Optional, Sequence

import numpy as np

from . import _args, _sptmc
from ._errors import FormatError, InputError

Callback = Callable[[int, float], Optional[bool]]


class CompletionModel:
    """A completion model ``m(i) = offset + sum_n biases[n][i_n] + sum_r prod_n
    factors[n][i_n, r]`` and how it was reached (or, loaded from a folder, what its
    ``model.json`` says).

    Attributes:
        factors: one float64 array per mode, ``shape[m] x R``.
        biases: one float64 array per mode, ``shape[m]`` (empty list: no biases).
        offset: ``mu``, the mean of the training values (0 when not centered).
        rank, solver: the model's rank and solver (``"als"``, ``"ccd"``, ``"sgd"``).
        lambda_: the regularization the model was fitted with.
        lambda_chosen: whether ``lambda_`` was chosen on the validation entries.
        lambda_path: the path that chose it: one dict per point (``lambda``,
            ``validation_rmse``, ``epochs``); empty when ``lambda_`` was given.
        learning_rate: SGD's initial learning rate (None for ALS and CCD++).
        train_rmse, validation_rmse, test_rmse: the RMSEs of the best epoch
            (``test_rmse`` None without test entries).
        baseline_validation_rmse, baseline_test_rmse, mean_baseline_test_rmse: the
            user+item bias baseline's RMSEs and the global mean's on test.
        warning: set (and issued as a ``RuntimeWarning``) when the model is no
            better than the bias baseline on validation; else None.
        epochs: one dict per epoch run (the λ path's included): ``epoch``,
            ``lambda``, ``train_rmse``, ``validation_rmse``, ``objective``,
            ``learning_rate``, ``undone``, ``seconds``, ``seconds_kernel``.
        best_epoch: the epoch whose model this is.
        stopped_by: ``"callback"`` or ``"patience"`` (early stopping or the epoch
            limit); None for a loaded model.
        backend: the device it ran on, in words.
        values: how the training tensor's values were stored (as
            :class:`sptmc.CPResult`'s); None for a model saved without it.
        summary: the whole summary, as ``sptmc complete --json`` prints it.
    """

    def __init__(self, raw: Any, stopped_by_callback: Optional[bool]) -> None:
        self._raw = raw
        s = json.loads(raw.summary_json())
        self.summary: dict = s
        self.factors: list = raw.factors()
        self.biases: list = raw.biases()
        self.offset: float = raw.offset
        self.rank: int = s.get("rank", self.factors[0].shape[1])
        self.solver: str = s.get("solver", "")
        self.lambda_: Optional[float] = s.get("lambda")
        self.lambda_chosen: bool = bool(s.get("lambda_chosen", False))
        self.lambda_path: list = s.get("lambda_path", [])
        self.learning_rate: Optional[float] = s.get("learning_rate")
        self.train_rmse: Optional[float] = s.get("train_rmse")
        self.validation_rmse: Optional[float] = s.get("validation_rmse")
        self.test_rmse: Optional[float] = s.get("test_rmse")
        self.baseline_validation_rmse: Optional[float] = s.get("baseline_validation_rmse")
        self.baseline_test_rmse: Optional[float] = s.get("baseline_test_rmse")
        self.mean_baseline_test_rmse: Optional[float] = s.get("mean_baseline_test_rmse")
        self.warning: Optional[str] = s.get("warning")
        self.epochs: list = s.get("epochs", [])
        self.best_epoch: Optional[int] = s.get("best_epoch")
        self.backend: Optional[str] = s.get("backend")
        self.values: Optional[dict] = s.get("values")
        self.stopped_by: Optional[str] = (
            None
            if stopped_by_callback is None
            else ("callback" if stopped_by_callback else "patience")
        )

    @property
    def shape(self) -> tuple:
        """The extents the model covers."""
        return tuple(f.shape[0] for f in self.factors)

    def predict(self, coords: Any, *, index_base: int = 0) -> np.ndarray:
        """The predictions at ``coords``: an ``n x N`` array of indices (one row per
        entry; one entry may be a 1-D array of N), ``index_base``-based (0, or 1 as
        in ``.tns`` files). A float64 array of n values."""
        base = _args.integer("index_base", index_base)
        if base not in (0, 1):
            raise InputError(f"index_base must be 0 or 1, got {base}")
        _args.not_masked("coords", coords)
        a = np.asarray(coords)
        if a.dtype.kind not in "iu":
            raise InputError(f"coords must hold integers, got dtype {a.dtype}")
        if a.ndim == 1:
            a = a.reshape(1, -1)
        if a.ndim != 2:
            raise InputError(f"coords must be an n x N array, got {a.ndim} dimensions")
        if a.size and (a.min() < base):
            raise InputError(
                f"coords hold the index {a.min()}, below the index base {base}"
            )
        extents = self.shape
        if a.size and a.shape[1] == len(extents):
            # Checked before the cast to int64, which would wrap a uint64 of 2**63 and
            # more into an index the caller never passed.
            beyond = np.stack([a[:, m] >= d + base for m, d in enumerate(extents)], axis=1)
            if beyond.any():
                k, m = np.argwhere(beyond)[0]
                raise InputError(
                    f"coords[{k}] index {a[k, m]} in mode {m} is beyond the model's "
                    f"extent {extents[m]} (indices are {base}-based)"
                )
        return self._raw.predict(np.ascontiguousarray(a, dtype=np.int64) - base)

    def rmse(self, X: Any) -> Optional[float]:
        """The RMSE of the predictions over the entries of ``X`` (anything
        :func:`sptmc.tensor` accepts; None when it has none)."""
        from . import tensor

        return self._raw.rmse(tensor(X))

    def save(self, path: Any) -> None:
        """Writes the model folder ``path`` (``factor-*.txt``, ``bias-*.txt``,
        ``model.json``) as ``sptmc complete --out`` does, whole or not at all; ``sptmc
        predict`` and :func:`load_completion` read it."""
        self._raw.save(_args.path(path))

    def __repr__(self) -> str:
        rmse = "n/a" if self.test_rmse is None else f"{self.test_rmse:.5g}"
        return (
            f"<sptmc.CompletionModel {self.solver} rank={self.rank} shape={self.shape} "
            f"lambda={self.lambda_} biases={bool(self.biases)} test_rmse={rmse}>"
        )


def load_completion(path: Any) -> CompletionModel:
    """Reads a completion model folder written by ``sptmc complete --out`` or
    :meth:`CompletionModel.save` (older folders without biases too).

    Raises :class:`FormatError` naming ``model.json`` where its ``rank`` is not the
    factor files' column count."""
    folder = _args.path(path)
    model = CompletionModel(_sptmc._load_completion(folder), None)
    cols = model.factors[0].shape[1]
    rank = model.summary.get("rank", cols)
    if type(rank) is not int or rank != cols:
        raise FormatError(
            f"{os.path.join(folder, 'model.json')}: rank is {rank!r}, but the factor "
            f"files have {cols} columns"
        )
    return model


def _progress(verbose: bool, callback: Optional[Callback]):
    """The per-epoch function handed to the engine's loop (None when there is nothing
    to do per epoch)."""
    if not verbose and callback is None:
        return None

    def progress(s: dict) -> bool:
        if verbose:
            lr = s["learning_rate"]
            rate = "" if lr is None else f"  lr {lr:.3e}{' (undone)' if s['undone'] else ''}"
            print(
                f"  epoch {s['epoch'] + 1:3d} (λ {s['lambda']:.3e}, {s['seconds']:.3f}s, "
                f"kernels {s['seconds_kernel']:.3f}s)  train RMSE {s['train_rmse']:.5g}  "
                f"validation RMSE {s['validation_rmse']:.5g}{rate}",
                flush=True,
            )
        if callback is None:
            return False
        try:
            return bool(callback(s["epoch"], s["validation_rmse"]))
        except StopIteration:
            return True

    return progress


def complete(
    X: Any = None,
    rank: int = 16,
    *,
    train: Any = None,
    validation: Any = None,
    test: Any = None,
    split: Sequence[float] = (0.8, 0.1, 0.1),
    solver: str = "als",
    lambda_: Optional[float] = None,
    epochs: int = 100,
    patience: int = 5,
    seed: int = 1,
    learning_rate: Optional[float] = None,
    ccd_inner: int = 1,
    center: bool = True,
    biases: bool = True,
    bias_lambda: float = 5.0,
    backend: str = "auto",
    threads: Optional[int] = None,
    values: str = "auto",
    verbose: bool = False,
    callback: Optional[Callback] = None,
) -> CompletionModel:
    """Tensor completion (the CLI's ``sptmc complete``): predict the unstored entries
    of a tensor whose unstored entries are unknown, such as ratings.

    The model is ``mu + sum_n b_n[i_n] + CP_R(i)``, fitted to the observed entries
    with ALS, CCD++ or SGD, stopping on the validation RMSE. Without ``lambda_`` the
    regularization is chosen on the validation entries by a short warm-started path
    over a grid derived from the data (reported in ``lambda_`` and ``lambda_path``).

    Args:
        X: a tensor (anything :func:`sptmc.tensor` accepts) whose entries are split
            by ``split``; or give ``train`` (and ``test``, optionally ``validation``)
            instead.
        rank: the CP rank (``--rank``).
        train, validation, test: the entries to fit, to stop on and to report
            (without ``validation``, 1/9 of ``train`` is held out by ``seed``, as the
            CLI does).
        split: train, validation and test fractions of ``X`` (``--split``).
        solver: ``"als"``, ``"ccd"`` or ``"sgd"`` (``--solver``).
        lambda_: the regularization λ (``--lambda``); None: chosen on validation.
        epochs: the most epochs of the fit at the final λ (``--epochs``); where λ
            is chosen, each point of the path before it runs at most 15 or this
            many, the fewer.
        patience: epochs without a lower validation RMSE that stop the run
            (``--patience``).
        seed: the seed of the split, the initial factors and SGD's order (``--seed``).
        learning_rate: SGD's initial rate (``--learning-rate``); None: from the data.
        ccd_inner: CCD++'s sweeps per column (``--ccd-inner``).
        center: add the training mean (``--no-center`` is ``center=False``).
        biases: learn a bias per row of every mode (``--no-biases``).
        bias_lambda: the biases' regularization, in pseudo-entries (``--bias-lambda``).
        backend: ``"auto"`` (the CPU, as on the command line), ``"cpu"`` or ``"cuda"``.
        threads, values, verbose: as for :func:`sptmc.cp_als`.
        callback: ``callback(epoch, validation_rmse)`` after every epoch (the λ
            path's included). A true return value or ``StopIteration`` stops the run
            and returns the best model so far, ``stopped_by == "callback"``; any other
            exception stops it and propagates.

    Returns:
        a :class:`CompletionModel`; its ``warning`` (also a ``RuntimeWarning``) says
        when it is no better than the bias baseline.
    """
    from . import _say, _threads, tensor

    rank = _args.integer("rank", rank)
    if X is not None and train is not None:
        raise InputError("give X (to split) or train, not both")
    if X is None and train is None:
        raise InputError("give X (to split), or train and test")
    if X is not None and (validation is not None or test is not None):
        raise InputError("validation and test go with train, not with X (which is split)")
    solver = _args.text("solver", solver)
    lam = None if lambda_ is None else _args.number("lambda_", lambda_)
    epochs = _args.integer("epochs", epochs)
    patience = _args.integer("patience", patience)
    seed = _args.integer("seed", seed)
    lr = None if learning_rate is None else _args.number("learning_rate", learning_rate)
    ccd_inner = _args.integer("ccd_inner", ccd_inner)
    center = _args.flag("center", center)
    biases = _args.flag("biases", biases)
    bias_lambda = _args.number("bias_lambda", bias_lambda)
    backend = _args.text("backend", backend)
    threads = _threads(threads)
    values = _args.text("values", values)
    va: Optional[_sptmc.Tensor]
    te: Optional[_sptmc.Tensor]
    if X is not None:
        fr = [_args.number(f"split[{k}]", f) for k, f in enumerate(split)]
        if len(fr) != 3:
            raise InputError(
                f"split takes three fractions (train, validation, test), got {len(fr)}"
            )
        tr, va, te = _sptmc._split(tensor(X), fr, seed)
    else:
        tr = tensor(train)
        va = None if validation is None else tensor(validation)
        te = None if test is None else tensor(test)
    start = time.perf_counter()
    _say(
        verbose,
        f"sptmc: completion ({solver}) rank {rank} "
        f"λ {'chosen on validation' if lam is None else lam} on {list(tr.shape)}, "
        f"{tr.nnz} training entries",
    )
    raw, stopped = _sptmc._complete(
        tr,
        va,
        te,
        rank,
        solver,
        lam,
        epochs,
        patience,
        seed,
        lr,
        ccd_inner,
        center,
        biases,
        bias_lambda,
        backend,
        threads,
        values,
        _progress(verbose, callback),
    )
    model = CompletionModel(raw, stopped)
    if model.warning:
        warnings.warn(model.warning, RuntimeWarning, stacklevel=2)
    _say(
        verbose,
        f"completion {solver} rank {rank} λ {model.lambda_:.4e}: test RMSE "
        f"{'n/a' if model.test_rmse is None else format(model.test_rmse, '.5g')} "
        f"(validation {model.validation_rmse:.5g}), {time.perf_counter() - start:.3f}s",
    )
    return model
