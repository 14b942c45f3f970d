"""CP-ALS and Tucker-HOOI from Python: the models, their options, callbacks, verbose
lines, the GIL released while they run and Ctrl-C between iterations."""

from __future__ import annotations

import os
import signal
import threading
import time

import numpy as np
import pytest
import sptmc

from conftest import pyttb, random_coo


def exact_cp(shape, rank, seed):
    """A dense tensor of exact CP rank ``rank`` (integer factors), as COO."""
    rng = np.random.default_rng(seed)
    fs = [rng.integers(1, 4, size=(d, rank)).astype(np.float64) for d in shape]
    full = np.einsum("ir,jr,kr->ijk", *fs)
    subs = np.argwhere(full != 0)
    return sptmc.from_coo(subs, full[tuple(subs.T)], shape), full


@pytest.fixture(scope="module")
def X():
    shape = (40, 30, 20)
    subs, vals = random_coo(shape, 3000, seed=5)
    return sptmc.from_coo(subs, vals, shape)


def test_cp_recovers_an_exact_low_rank_tensor():
    T, full = exact_cp((12, 10, 8), 3, seed=2)
    # ALS crosses a swamp here: its fit still rises by 1e-5 per iteration at 300 and
    # settles (change < 1e-6) after about 650.
    m = sptmc.cp_als(T, 3, iters=3000, tol=1e-6)
    assert m.fit > 0.99
    assert m.weights.shape == (3,) and np.all(np.diff(m.weights) <= 0)
    assert [f.shape for f in m.factors] == [(12, 3), (10, 3), (8, 3)]
    assert all(f.dtype == np.float64 for f in m.factors)
    approx = np.einsum("r,ir,jr,kr->ijk", m.weights, *m.factors)
    assert np.linalg.norm(approx - full) / np.linalg.norm(full) < 0.01
    assert m.stopped_by == "tol"
    assert len(m.fits) == len(m.seconds) == len(m.stats) == m.iterations
    assert m.fit == m.fits[-1]


def test_cp_is_deterministic_and_seeded(X):
    a = sptmc.cp_als(X, 4, iters=8, tol=0, seed=3)
    b = sptmc.cp_als(X, 4, iters=8, tol=0, seed=3)
    c = sptmc.cp_als(X, 4, iters=8, tol=0, seed=4)
    np.testing.assert_array_equal(a.fits, b.fits)
    np.testing.assert_array_equal(a.weights, b.weights)
    assert not np.array_equal(a.fits, c.fits)
    assert a.stopped_by == "iters" and a.iterations == 8


def test_cp_from_given_factors_and_continued(X):
    rng = np.random.default_rng(0)
    init = [rng.random((d, 4)) for d in X.shape]
    a = sptmc.cp_als(X, 4, iters=10, tol=0, init=init)
    b = sptmc.cp_als(X, 4, iters=10, tol=0, init=[f.astype(np.float32) for f in init])
    np.testing.assert_array_equal(a.fits, b.fits)
    # Continuing from a model starts near its fit.
    more = sptmc.cp_als(X, 4, iters=2, tol=0, init=a)
    assert more.fits[0] >= a.fit - 1e-3


def test_tucker_model(X):
    m = sptmc.tucker_hooi(X, [4, 3, 2], iters=10, tol=0)
    assert m.core.shape == (4, 3, 2)
    for f, r in zip(m.factors, (4, 3, 2)):
        np.testing.assert_allclose(f.T @ f, np.eye(r), atol=1e-5)
    # ||X||^2 = ||core||^2 + ||X - model||^2 for orthonormal factors.
    fit = 1 - np.sqrt(max(X.norm() ** 2 - np.sum(m.core**2), 0)) / X.norm()
    assert abs(fit - m.fit) < 1e-5
    assert np.all(np.diff(m.fits) >= -1e-6)
    same = sptmc.tucker_hooi(X, 2, iters=3, tol=0)
    assert same.core.shape == (2, 2, 2)


def test_models_to_pyttb(X):
    ttb = pyttb()
    T, full = exact_cp((8, 7, 6), 2, seed=1)
    cp = sptmc.cp_als(T, 2, iters=200, tol=1e-10)
    k = cp.to_pyttb()
    assert isinstance(k, ttb.ktensor)
    np.testing.assert_allclose(k.full().data, full, rtol=0.02, atol=0.05 * full.max())
    tk = sptmc.tucker_hooi(T, [2, 2, 2], iters=20, tol=1e-10)
    t = tk.to_pyttb()
    assert isinstance(t, ttb.ttensor)
    recon = t.full().data
    assert np.linalg.norm(recon - full) / np.linalg.norm(full) == pytest.approx(
        1 - tk.fit, abs=1e-4
    )


def test_callback_stops_by_returning_true(X):
    seen = []

    def cb(it, fit):
        seen.append((it, fit))
        return it == 2

    m = sptmc.cp_als(X, 3, iters=50, tol=0, callback=cb)
    assert [i for i, _ in seen] == [0, 1, 2]
    assert m.iterations == 3 and m.stopped_by == "callback"
    np.testing.assert_array_equal(m.fits, [f for _, f in seen])
    # The same model as a run of three iterations.
    three = sptmc.cp_als(X, 3, iters=3, tol=0)
    np.testing.assert_array_equal(m.weights, three.weights)


def test_callback_stops_by_raising_stop_iteration(X):
    def cb(it, fit):
        if it == 1:
            raise StopIteration

    m = sptmc.tucker_hooi(X, 3, iters=50, tol=0, callback=cb)
    assert m.iterations == 2 and m.stopped_by == "callback"


def test_callback_exceptions_propagate_and_the_tensor_stays_usable(X):
    def cb(it, fit):
        if it == 1:
            raise RuntimeError("from the callback")

    with pytest.raises(RuntimeError, match="from the callback"):
        sptmc.cp_als(X, 3, iters=50, tol=0, callback=cb)
    assert sptmc.cp_als(X, 3, iters=2, tol=0).iterations == 2


def test_verbose_prints_a_line_per_iteration(X, capsys):
    m = sptmc.cp_als(X, 3, iters=4, tol=0, verbose=True)
    out = capsys.readouterr().out.splitlines()
    its = [line for line in out if line.lstrip().startswith("its =")]
    assert len(its) == 4
    assert f"fit = {m.fits[2]:.5f}" in its[2]
    assert out[0].startswith("sptmc: CP-ALS rank 3 on [40, 30, 20], 3000 nonzeros")
    assert out[-1].startswith("CP-ALS rank 3: final fit")
    sptmc.tucker_hooi(X, 2, iters=2, tol=0)
    assert capsys.readouterr().out == "", "quiet unless verbose"


@pytest.fixture(scope="module")
def slow():
    """A tensor whose CP iterations take some milliseconds each."""
    shape = (400, 300, 200)
    subs, vals = random_coo(shape, 300_000, seed=11)
    return sptmc.from_coo(subs, vals, shape)


def test_the_gil_is_released_while_the_engine_works(slow):
    ticks = []
    done = threading.Event()

    def other():
        while not done.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=other)
    t.start()
    try:
        start = time.perf_counter()
        m = sptmc.cp_als(slow, 16, iters=10, tol=0, threads=1)
        end = time.perf_counter()
    finally:
        done.set()
        t.join()
    inside = [x for x in ticks if start < x < end]
    # Holding the GIL for the call would let the other thread run only before and
    # after it.
    assert len(inside) >= 3, (len(inside), end - start, m.seconds.sum())


@pytest.mark.parametrize("with_callback", [False, True])
def test_ctrl_c_stops_a_fit_between_iterations(slow, with_callback):
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("signals reach only the main thread")
    seen = []
    cb = (lambda it, fit: seen.append(it)) if with_callback else None
    # Python's own Ctrl-C handler, which it does not install when it starts with
    # SIGINT ignored (a background job of a non-interactive shell, as in some CI).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    timer = threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT))
    timer.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            sptmc.cp_als(slow, 16, iters=4000, tol=0, callback=cb, threads=1)
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    if with_callback:
        assert seen, "iterations ran before the interrupt"
    # Nothing left half-done: the tensor and the engine run again.
    m = sptmc.cp_als(slow, 4, iters=2, tol=0)
    assert m.iterations == 2


def test_values_are_stored_exactly_unless_fp16_is_asked_for():
    # Integer counts up to 2048: fp16 holds them, so "auto" keeps fp16.
    T, _ = exact_cp((12, 10, 8), 2, seed=4)
    m = sptmc.cp_als(T, 2, iters=2)
    assert m.values["type"] == "f16" and m.values["why"] == "fp16 exact"
    # Real values with 9 decimals: "auto" stores f32 and says how many fp16 would round.
    rng = np.random.default_rng(7)
    fs = [0.5 + rng.random((d, 1)) for d in (15, 12, 9)]
    full = np.round(np.einsum("ir,jr,kr->ijk", *fs), 9)
    subs = np.argwhere(full != 0)
    R = sptmc.from_coo(subs, full[tuple(subs.T)], full.shape)
    exact = sptmc.cp_als(R, 1, iters=30, tol=0)
    assert exact.values["type"] == "f32" and exact.values["choice"] == "auto"
    assert exact.values["why"] == f"f32: {exact.values['f16_inexact']} values not exact in fp16"
    assert exact.fit >= 1 - 1e-6
    rounded = sptmc.cp_als(R, 1, iters=30, tol=0, values="f16")
    assert rounded.values["type"] == "f16" and rounded.fit < 1 - 1e-5
    assert exact.values["f32_bytes"] - exact.values["f16_bytes"] == 2 * R.nnz
    forced = sptmc.tucker_hooi(T, 2, iters=2, values="f32")
    assert forced.values["type"] == "f32" and forced.values["why"] == "f32 (asked for)"
    assert T.info(values="f32")["values"]["type"] == "f32"
    with pytest.raises(sptmc.InputError, match='values must be "auto", "f16" or "f32"'):
        sptmc.cp_als(T, 2, values="f64")


def test_coordinates_over_96_bits_run_on_the_used_indices():
    # Six modes of 2^17 rows: 102 bits of coordinates, more than the format's 96.
    # The run is the one on the tensor renumbered to its used indices (built here
    # with numpy), from the same initial factors, its factors put back on the rows.
    rng = np.random.default_rng(11)
    shape = (2**17,) * 6
    used = [np.sort(rng.choice(2**17, 5, replace=False)) for _ in shape]
    subs = np.unique(np.stack([rng.choice(u, 300) for u in used], 1), axis=0)
    vals = rng.integers(1, 5, len(subs)).astype(np.float64)
    X = sptmc.from_coo(subs, vals, shape)
    small = np.stack([np.searchsorted(u, subs[:, m]) for m, u in enumerate(used)], 1)
    Y = sptmc.from_coo(small, vals, (5,) * 6)

    def on_rows(fs):
        out = [np.zeros((2**17, f.shape[1])) for f in fs]
        for o, f, u in zip(out, fs, used):
            o[u] = f
        return out

    init = [rng.random((5, 2)) + 0.1 for _ in shape]
    runs = [
        (sptmc.cp_als, dict(rank=2, iters=6, tol=0)),
        (sptmc.cp_apr, dict(rank=2, iters=4)),
        (sptmc.tucker_hooi, dict(ranks=2, iters=4, tol=0)),
    ]
    for fit, kw in runs:
        a = fit(X, init=on_rows(init), **kw)
        b = fit(Y, init=init, **kw)
        assert [f.shape for f in a.factors] == [(2**17, 2)] * 6, fit.__name__
        for fa, fb in zip(a.factors, on_rows(b.factors)):
            np.testing.assert_array_equal(fa, fb, err_msg=fit.__name__)


def test_one_tucker_rank_is_lowered_where_a_mode_is_shorter():
    """ranks=4 on a mode of 3 rows runs rank 3 there, as --ranks 4 does; a list is
    taken as given and checked."""
    subs = np.array([[i % 9, (i * 5) % 7, i % 3] for i in range(60)])
    X = sptmc.from_coo(subs, np.arange(1.0, 61.0), (9, 7, 3))
    assert sptmc.tucker_hooi(X, 4, iters=2, tol=0).core.shape == (4, 4, 3)
    with pytest.raises(sptmc.InputError, match="mode 2"):
        sptmc.tucker_hooi(X, [4, 4, 4], iters=2, tol=0)



def test_mostly_empty_modes_give_the_all_rows_fit_and_zero_empty_rows():
    # Modes 0 and 1 use 30 and 25 of 3000 and 2000 rows: the driver runs CP-ALS on
    # the used rows (src/decomp/cp_als/rows.rs). From a start that is random on every
    # row, its fit is an FP64 ALS's on all rows (numpy, below), within the f32
    # kernel's rounding, and the model is zero on the empty rows.
    rng = np.random.default_rng(21)
    shape = (3000, 2000, 6)
    used = [np.sort(rng.choice(n, k, replace=False)) for n, k in [(3000, 30), (2000, 25), (6, 6)]]
    subs = np.unique(np.stack([rng.choice(u, 700) for u in used], 1), axis=0)
    vals = rng.integers(1, 6, len(subs)).astype(np.float64)
    X = sptmc.from_coo(subs, vals, shape)
    rank, iters = 3, 6
    init = [rng.random((d, rank)).astype(np.float32).astype(np.float64) for d in shape]
    m = sptmc.cp_als(X, rank, iters=iters, tol=0, init=[f.copy() for f in init])

    fs = [f.copy() for f in init]
    for it in range(iters):
        for n in range(3):
            prod = vals[:, None] * np.prod([fs[k][subs[:, k]] for k in range(3) if k != n], 0)
            mt = np.zeros((shape[n], rank))
            np.add.at(mt, subs[:, n], prod)
            v = np.prod([fs[k].T @ fs[k] for k in range(3) if k != n], 0)
            a = np.linalg.solve(v, mt.T).T
            lam = np.linalg.norm(a, axis=0) if it == 0 else np.maximum(1, np.abs(a).max(0))
            fs[n] = a / lam
    gram = np.prod([f.T @ f for f in fs], 0)
    resid = (vals @ vals) + lam @ gram @ lam - 2 * (lam * (mt * fs[2]).sum(0)).sum()
    fit = 1 - np.sqrt(max(resid, 0)) / np.sqrt(vals @ vals)
    assert abs(m.fit - fit) < 1e-5, (m.fit, fit)
    for k, u in enumerate(used[:2]):
        assert m.factors[k].shape == (shape[k], rank)
        empty = np.setdiff1d(np.arange(shape[k]), u)
        assert not m.factors[k][empty].any()
        assert np.abs(m.factors[k][u]).sum(1).min() > 0


def test_tucker_on_mostly_empty_modes_is_an_fp64_hooi_on_every_row():
    # Modes 0 and 1 use 40 and 30 of 4000 and 3000 rows: the driver runs Tucker-HOOI
    # on the used rows (src/decomp/tucker/rows.rs). From a start given on every row,
    # the fits are an FP64 HOOI's on all rows (numpy, below) within the f32 TTMc's
    # rounding, the factors span its subspaces, and they are zero on the empty rows.
    rng = np.random.default_rng(23)
    shape = (4000, 3000, 6)
    used = [np.sort(rng.choice(n, k, replace=False)) for n, k in [(4000, 40), (3000, 30), (6, 6)]]
    subs = np.unique(np.stack([rng.choice(u, 900) for u in used], 1), axis=0)
    vals = rng.integers(1, 6, len(subs)).astype(np.float64)
    X = sptmc.from_coo(subs, vals, shape)
    ranks, iters = (3, 3, 2), 5
    init = [rng.random((d, r)).astype(np.float32).astype(np.float64) for d, r in zip(shape, ranks)]
    m = sptmc.tucker_hooi(X, list(ranks), iters=iters, tol=0, init=[f.copy() for f in init])

    fs = [f.copy() for f in init]
    fits = []
    for _ in range(iters):
        for n in range(3):
            a, b = [k for k in range(3) if k != n]
            prod = vals[:, None, None] * fs[a][subs[:, a]][:, :, None] * fs[b][subs[:, b]][:, None, :]
            y = np.zeros((shape[n], ranks[a] * ranks[b]))
            np.add.at(y, subs[:, n], prod.reshape(len(vals), -1))
            fs[n] = np.linalg.svd(y, full_matrices=False)[0][:, : ranks[n]]
        core_sq = np.sum((fs[2].T @ y) ** 2)
        fits.append(1 - np.sqrt(max(vals @ vals - core_sq, 0)) / np.sqrt(vals @ vals))
    np.testing.assert_allclose(m.fits, fits, atol=1e-5)
    for k in range(3):
        assert m.factors[k].shape == (shape[k], ranks[k])
        overlap = np.sum((m.factors[k].T @ fs[k]) ** 2)
        assert abs(overlap - ranks[k]) < 1e-4, (k, overlap)
    for k, u in enumerate(used[:2]):
        empty = np.setdiff1d(np.arange(shape[k]), u)
        assert not m.factors[k][empty].any()
