"""CP-ALS and Tucker-HOOI against pyttb on the shared tensors, from identical initial
factors.

Both sides update modes 0, 1, ..., N-1 each iteration with the same normalization and
the same fit formulas, so from the same starting factors their fits differ only by
rounding: sptmc runs the sparse kernels in f32 on fp16-stored values (exact for these
integer and half-integer ratings and counts), pyttb everything in f64. The initial
factors are drawn here, rounded to f32 (what sptmc reads them as) and handed to both.
These are the checks of the Rust suite's ``tests/integration/peer_pyttb.rs``, through the Python
API: the final fits must agree within 1e-4.
"""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import sptmc

from conftest import pyttb, shared_file

CP_RANK = 16
CP_ITERS = 20
TUCKER_RANK = 8
TUCKER_ITERS = 5
FIT_BOUND = 1e-4


def as_f32(a: np.ndarray) -> np.ndarray:
    """``a`` rounded to float32 and back: the values sptmc computes with."""
    return a.astype(np.float32).astype(np.float64)


def quiet(fn):
    """``fn()`` with pyttb's progress lines kept off the test output."""
    with contextlib.redirect_stdout(io.StringIO()):
        return fn()


@pytest.mark.parametrize(
    "name",
    [
        "movielens-100k.tns.gz",
        "movielens-latest-small-4d.tns.gz",
        "movielens-10m-tags-4d.tns.gz",
    ],
)
def test_cp_als_matches_pyttb_from_the_same_start(name):
    ttb = pyttb()
    X = sptmc.read(shared_file(name))
    Y = X.to_pyttb()
    assert tuple(Y.shape) == X.shape and Y.nnz == X.nnz
    rng = np.random.default_rng(1)
    init = [as_f32(rng.random((d, CP_RANK))) for d in X.shape]

    ours = sptmc.cp_als(X, CP_RANK, iters=CP_ITERS, tol=0, init=init, backend="cpu")
    _, _, out = quiet(
        lambda: ttb.cp_als(
            Y, CP_RANK, stoptol=0.0, maxiters=CP_ITERS, init=ttb.ktensor(init), printitn=0
        )
    )
    theirs = float(out["fit"])
    assert ours.iterations == CP_ITERS
    print(f"{name} CP r{CP_RANK}: sptmc {ours.fit:.7f}, pyttb {theirs:.7f}")
    assert abs(ours.fit - theirs) <= FIT_BOUND, (ours.fit, theirs)


def test_tucker_hooi_matches_pyttb_from_the_same_start():
    """Only on movielens-100k: pyttb's tucker_als forms ``I_n x I_n`` matrices and runs
    out of memory at ranks 8 on the larger shared tensors."""
    ttb = pyttb()
    X = sptmc.read(shared_file("movielens-100k.tns.gz"))
    rng = np.random.default_rng(1)
    # Orthonormal starting factors (pyttb's tucker_als uses them as given, as we do).
    init = [as_f32(np.linalg.qr(rng.random((d, TUCKER_RANK)))[0]) for d in X.shape]

    ours = sptmc.tucker_hooi(
        X, TUCKER_RANK, iters=TUCKER_ITERS, tol=0, init=init, backend="cpu"
    )
    _, _, out = quiet(
        lambda: ttb.tucker_als(
            X.to_pyttb(),
            [TUCKER_RANK] * X.ndim,
            stoptol=0.0,
            maxiters=TUCKER_ITERS,
            init=init,
            printitn=0,
        )
    )
    theirs = float(out["fit"])
    assert ours.iterations == TUCKER_ITERS
    print(f"movielens-100k Tucker r{TUCKER_RANK}: sptmc {ours.fit:.7f}, pyttb {theirs:.7f}")
    assert abs(ours.fit - theirs) <= FIT_BOUND, (ours.fit, theirs)
