"""CP-APR and completion from Python: the models, the same results as the command line
from the same seed, pyttb round trips, model folders both ways, and bad input raising
the documented classes."""

from __future__ import annotations

import json
import subprocess
import warnings

import numpy as np
import pytest
import sptmc

from conftest import pyttb, random_coo
from test_front_ends import cli_binary


def low_rank_tns(path, shape=(24, 20, 16), rank=3, observed=0.3, seed=3):
    """A noisy low-rank tensor (rank ``rank`` + 2) with ``observed`` of its cells, as
    a .tns file; its values as (subs, vals)."""
    rng = np.random.default_rng(seed)
    fs = [rng.random((d, rank)) for d in shape]
    full = np.einsum("ir,jr,kr->ijk", *fs) + 2.0
    keep = rng.random(shape) < observed
    subs = np.argwhere(keep)
    vals = full[keep] + 0.01 * rng.standard_normal(keep.sum())
    with open(path, "w") as f:
        for s, v in zip(subs, vals):
            f.write(" ".join(str(i + 1) for i in s) + f" {float(v)!r}\n")
    return subs, vals


@pytest.fixture(scope="module")
def ratings(tmp_path_factory):
    d = tmp_path_factory.mktemp("completion")
    path = d / "x.tns"
    subs, vals = low_rank_tns(path)
    return {"dir": d, "file": path, "X": sptmc.read(path, cache=False)}


def counts(shape=(15, 12, 10), nnz=400, seed=2):
    subs, _ = random_coo(shape, nnz, seed=seed)
    rng = np.random.default_rng(seed)
    return sptmc.from_coo(subs, rng.integers(1, 6, size=len(subs)).astype(float), shape)


def test_cp_apr_fits_counts_and_round_trips_through_pyttb():
    X = counts()
    m = sptmc.cp_apr(X, 3, iters=50, seed=4)
    assert m.weights.shape == (3,) and [f.shape for f in m.factors] == [(15, 3), (12, 3), (10, 3)]
    # It climbs (f32 arithmetic lets it wobble by a few parts in 10⁴ near the top).
    ll = m.log_likelihoods
    assert ll[-1] > ll[0] + 50 and np.all(np.diff(ll) >= -1e-3 * abs(ll[-1]))
    assert m.log_likelihood == m.log_likelihoods[-1]
    assert m.stopped_by in ("tol", "iters") and m.iterations == len(m.stats)
    for f in m.factors:
        assert np.all(f >= 0) and np.allclose(f.sum(axis=0), 1.0, atol=1e-5)
    ttb = pyttb()
    K = m.to_pyttb()
    assert isinstance(K, ttb.ktensor)
    subs, _ = X.to_coo()
    model = np.einsum("r,ir,jr,kr->ijk", m.weights, *m.factors)
    full = K.full().data
    assert np.allclose(full[tuple(subs.T)], model[tuple(subs.T)], rtol=1e-5)
    # A ktensor continues the run: as init it gives the model back after one step.
    again = sptmc.cp_apr(X, 3, iters=1, init=K)
    assert again.log_likelihood >= m.log_likelihood - 1e-6 * abs(m.log_likelihood)


def test_cp_apr_on_values_far_below_one_is_the_run_on_them_in_other_units():
    # pyttb's KKT tolerance is absolute: counts times 1e-9 met it after 2 iterations,
    # before the model moved. Values far below 1 run multiplied by a power of two:
    # the counts / 4 (an RMS within a factor √2 of 1) run as given, and times 2^-40
    # they give the same run, λ times 2^-40, to the bit.
    X = counts()
    subs, vals = X.to_coo()
    quarter = sptmc.from_coo(subs, vals / 4, X.shape)
    tiny = sptmc.from_coo(subs, vals / 4 * 2.0**-40, X.shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the counts / 4 are not integers
        want = sptmc.cp_apr(quarter, 3, iters=20, seed=3)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = sptmc.cp_apr(tiny, 3, iters=20, seed=3)
    assert any("multiplied them by 2^40" in str(w.message) for w in seen), seen
    assert want.iterations > 2 and got.iterations == want.iterations
    assert np.array_equal(got.weights, want.weights * 2.0**-40)
    for a, b in zip(got.factors, want.factors):
        assert np.array_equal(a, b)
    ll = 2.0**-40 * (np.asarray(want.log_likelihoods) - 40 * np.log(2) * (vals / 4).sum())
    assert np.allclose(got.log_likelihoods, ll, rtol=1e-12, atol=0)


def test_cp_apr_callback_and_verbose(capsys):
    seen = []
    sptmc.cp_apr(counts(), 2, iters=5, tol=0, callback=lambda i, ll: seen.append((i, ll)), verbose=True)
    assert [i for i, _ in seen] == list(range(len(seen))) and seen
    assert "log-likelihood" in capsys.readouterr().out


def test_cp_apr_callback_stops_the_run_after_its_iteration():
    X = counts()
    full = sptmc.cp_apr(X, 2, iters=8, tol=0, seed=3)
    assert full.iterations == 8 and full.stopped_by == "iters"
    seen = []

    def stop_at_third(i, ll):
        seen.append(ll)
        return i == 2

    m = sptmc.cp_apr(X, 2, iters=8, tol=0, seed=3, callback=stop_at_third)
    assert m.stopped_by == "callback" and not m.converged
    assert m.iterations == 3 and len(seen) == 3
    # The model of the third iteration, as the uninterrupted run had it there.
    assert np.array_equal(m.log_likelihoods, full.log_likelihoods[:3])
    assert m.log_likelihood == full.log_likelihoods[2]
    assert m.factors[0].shape == (15, 2) and np.all(np.isfinite(m.weights))

    def stop_now(i, ll):
        raise StopIteration

    first = sptmc.cp_apr(X, 2, iters=8, tol=0, seed=3, callback=stop_now)
    assert first.stopped_by == "callback" and first.iterations == 1
    # A callback that returns nothing lets it run to its own rule.
    quiet = sptmc.cp_apr(X, 2, iters=8, tol=0, seed=3, callback=lambda i, ll: None)
    assert quiet.stopped_by == "iters" and quiet.iterations == 8


def test_cp_apr_bad_input_raises_the_documented_classes():
    X = counts()
    with pytest.raises(sptmc.InputError, match="rank must be at least 1"):
        sptmc.cp_apr(X, 0)
    with pytest.raises(sptmc.ArgumentTypeError):
        sptmc.cp_apr(X, "3")
    with pytest.raises(sptmc.InputError, match="non_integer"):
        sptmc.cp_apr(X, 2, non_integer="maybe")
    frac = sptmc.from_coo(np.array([[0, 0, 0], [1, 1, 1]]), np.array([1.5, 2.0]))
    with pytest.raises(sptmc.InputError):
        sptmc.cp_apr(frac, 1, non_integer="error")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        sptmc.cp_apr(frac, 1, iters=2)
    assert any(issubclass(x.category, RuntimeWarning) for x in w)


def test_complete_matches_the_command_line_from_the_same_seed(ratings, tmp_path):
    for solver in ("als", "sgd"):
        out = tmp_path / f"cli-{solver}"
        r = subprocess.run(
            [str(cli_binary()), "complete", str(ratings["file"]), "--rank", "4", "--solver", solver,
             "--seed", "5", "--epochs", "8", "--backend", "cpu", "--threads", "2", "--no-cache",
             "--json", "--out", str(out)],
            capture_output=True, text=True, timeout=600,
        )
        assert r.returncode == 0, r.stderr
        cli = json.loads(r.stdout)
        m = sptmc.complete(ratings["X"], 4, solver=solver, seed=5, epochs=8, backend="cpu", threads=2)
        assert m.lambda_ == pytest.approx(cli["lambda"], rel=1e-12)
        assert m.lambda_chosen and cli["lambda_chosen"]
        for key in ("train_rmse", "validation_rmse", "test_rmse", "baseline_test_rmse"):
            assert getattr(m, key) == pytest.approx(cli[key], rel=1e-9), key
        assert len(m.epochs) == cli["epochs_run"]
        # The CLI's folder loads in Python and predicts as the model does.
        loaded = sptmc.load_completion(out)
        coords = np.array([[0, 0, 0], [5, 3, 2], [23, 19, 15]])
        assert np.allclose(loaded.predict(coords), m.predict(coords), rtol=1e-5)
        assert len(loaded.biases) == 3 and loaded.lambda_ == pytest.approx(m.lambda_)


def test_a_python_model_folder_is_read_by_sptmc_predict(ratings, tmp_path):
    m = sptmc.complete(ratings["X"], 4, seed=2, epochs=5)
    m.save(tmp_path / "m")
    coords = tmp_path / "coords.tns"
    coords.write_text("1 1 1\n6 4 3\n")
    r = subprocess.run(
        [str(cli_binary()), "predict", str(tmp_path / "m"), str(coords)],
        capture_output=True, text=True, timeout=120,
    )
    assert r.returncode == 0, r.stderr
    got = [float(line.split()[-1]) for line in r.stdout.splitlines()]
    want = m.predict(np.array([[1, 1, 1], [6, 4, 3]]), index_base=1)
    assert np.allclose(got, want, rtol=1e-6)


def test_complete_reaches_the_noise_with_its_defaults_and_beats_the_baseline(ratings):
    m = sptmc.complete(ratings["X"], seed=1)
    assert m.test_rmse < 0.5 * m.baseline_test_rmse
    assert m.warning is None
    assert m.lambda_path and m.lambda_ in [p["lambda"] for p in m.lambda_path]
    assert [f.shape for f in m.factors] == [(24, 16), (20, 16), (16, 16)]
    assert [b.shape for b in m.biases] == [(24,), (20,), (16,)]
    assert m.rmse(ratings["X"]) < m.baseline_test_rmse


def test_complete_at_2_to_the_minus_99_is_the_unit_run_scaled(tmp_path):
    """Values far from 1 run near 1 (times a power of two) and come back in their own
    units: times 2^-99 (order 3) the run is the one on the values themselves, so every
    factor is that run's times 2^-33 and the RMSEs times 2^-99, exactly."""
    subs, vals = low_rank_tns(tmp_path / "x.tns")
    # Times 4: a spread near 1, which 2^-99 · 2^99 brings back exactly.
    one = sptmc.from_coo(subs, 4.0 * vals)
    tiny = sptmc.from_coo(subs, 4.0 * vals * 2.0**-99)
    a = sptmc.complete(one, 4, seed=3, epochs=6, backend="cpu", threads=2)
    b = sptmc.complete(tiny, 4, seed=3, epochs=6, backend="cpu", threads=2)
    for fa, fb in zip(a.factors, b.factors):
        assert np.array_equal(fb, fa * 2.0**-33)
    assert b.test_rmse == a.test_rmse * 2.0**-99
    assert b.lambda_ == a.lambda_ * 2.0**-132
    assert b.test_rmse < 0.5 * b.baseline_test_rmse


def test_complete_takes_train_validation_and_test_and_a_callback_stops_it(ratings):
    tr = sptmc.tensor(ratings["X"])
    subs, vals = tr.to_coo()
    n = len(vals)
    pick = lambda sel: sptmc.from_coo(subs[sel], vals[sel], tr.shape)  # noqa: E731
    idx = np.arange(n)
    train, val, test = pick(idx % 10 < 8), pick(idx % 10 == 8), pick(idx % 10 == 9)
    seen = []

    def cb(epoch, rmse):
        seen.append(rmse)
        return epoch >= 2

    m = sptmc.complete(train=train, validation=val, test=test, rank=3, solver="ccd", callback=cb)
    assert m.stopped_by == "callback" and len(seen) == 3 and len(m.epochs) == 3
    assert m.test_rmse is not None


def test_complete_bad_input_raises_the_documented_classes(ratings):
    X = ratings["X"]
    with pytest.raises(sptmc.InputError, match="rank must be at least 1"):
        sptmc.complete(X, 0)
    with pytest.raises(sptmc.InputError, match="λ"):
        sptmc.complete(X, 2, lambda_=-1.0)
    with pytest.raises(sptmc.InputError, match="solver"):
        sptmc.complete(X, 2, solver="newton")
    with pytest.raises(sptmc.InputError, match="split"):
        sptmc.complete(X, 2, split=(0.5, 0.6, 0.1))
    with pytest.raises(sptmc.InputError):
        sptmc.complete(X, 2, train=X)
    with pytest.raises(sptmc.InputError):
        sptmc.complete()
    with pytest.raises(sptmc.ArgumentTypeError):
        sptmc.complete(X, 2, center="yes")
    with pytest.raises(sptmc.ArgumentTypeError):
        sptmc.complete(X, 2.0)
    m = sptmc.complete(X, 2, epochs=2, lambda_=0.1)
    with pytest.raises(sptmc.InputError, match="beyond the model"):
        m.predict([[99, 0, 0]])
    with pytest.raises(sptmc.InputError, match="one column per mode"):
        m.predict([[1, 2]])
    with pytest.raises(sptmc.InputError):
        m.predict([[0.5, 1, 1]])
    with pytest.raises(sptmc.MissingFileError):
        sptmc.load_completion("/nonexistent/model")
