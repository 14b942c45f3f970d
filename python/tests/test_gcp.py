"""GCP from Python: the model for several losses, a CPResult with pyttb's ktensor on
request, determinism for a seed, the full-gradient method, the per-epoch callback
(seeing every epoch, stopping the run), and bad options as one clear error."""

from __future__ import annotations

import numpy as np
import pytest
import sptmc

from conftest import pyttb


def counts(shape, rank, seed):
    """A count tensor drawn from a rank-``rank`` nonnegative model, as COO."""
    rng = np.random.default_rng(seed)
    fs = [rng.random((d, rank)) for d in shape]
    full = np.einsum("ir,jr,kr->ijk", *fs)
    draws = rng.poisson(full)
    subs = np.argwhere(draws > 0)
    return sptmc.from_coo(subs, draws[tuple(subs.T)].astype(np.float64), shape)


@pytest.fixture(scope="module")
def X():
    return counts((15, 12, 10), 2, seed=3)


def test_a_loss_that_does_not_move_is_warned_of(X):
    """Counts of 1e30 under the negative binomial loss, which runs on them as given:
    Adam's steps leave the model where it started, and the run says so."""
    subs, vals = X.to_coo()
    huge = sptmc.from_coo(subs, vals * 1e30, X.shape)
    with pytest.warns(RuntimeWarning, match="loss moved by .* of itself in 3 epochs"):
        m = sptmc.gcp(huge, 2, loss="negative-binomial", loss_param=5, epochs=3, epoch_iters=10, seed=1)
    assert len(m.warnings) == 1
    healthy = sptmc.gcp(X, 2, loss="poisson-log", epochs=3, epoch_iters=50, rate=1e-2, seed=1)
    assert healthy.warnings == []


@pytest.mark.parametrize("loss", ["gaussian", "poisson", "poisson-log"])
def test_sgd_lowers_the_loss_and_returns_a_cp_result(X, loss):
    m = sptmc.gcp(X, 3, loss=loss, epochs=5, epoch_iters=50, rate=1e-2, seed=1, threads=2)
    assert isinstance(m, sptmc.CPResult) and isinstance(m, sptmc.GCPResult)
    assert m.loss < m.initial_loss
    assert m.weights.shape == (3,) and np.all(np.diff(m.weights) <= 0)
    assert [f.shape for f in m.factors] == [(15, 3), (12, 3), (10, 3)]
    assert len(m.losses) == len(m.stats) == len(m.seconds) == m.iterations == 5
    if loss == "poisson":
        assert all(np.all(f >= 0) for f in m.factors)


def test_sgd_is_deterministic_for_a_seed(X):
    a = sptmc.gcp(X, 2, loss="poisson", epochs=3, epoch_iters=30, seed=4, threads=2)
    b = sptmc.gcp(X, 2, loss="poisson", epochs=3, epoch_iters=30, seed=4, threads=2)
    c = sptmc.gcp(X, 2, loss="poisson", epochs=3, epoch_iters=30, seed=5, threads=2)
    np.testing.assert_array_equal(a.losses, b.losses)
    np.testing.assert_array_equal(a.weights, b.weights)
    assert not np.array_equal(a.losses, c.losses)


def test_lbfgs_matches_the_dense_loss_of_its_model(X):
    m = sptmc.gcp(X, 2, loss="gaussian", method="lbfgs", max_iters=200)
    full = np.zeros(X.shape)
    subs, vals = X.to_coo()
    full[tuple(subs.T)] = vals
    model = np.einsum("r,ir,jr,kr->ijk", m.weights, *m.factors)
    assert m.loss == pytest.approx(np.sum((full - model) ** 2), rel=1e-9)
    assert m.loss < m.initial_loss


def test_a_result_or_ktensor_as_init_resumes_the_model(X):
    """The weights of a result (or ktensor) given as init are part of the model: the
    resumed run starts at the loss the first one ended with (L-BFGS: the exact loss)."""
    m = sptmc.gcp(X, 2, loss="poisson", method="lbfgs", max_iters=30)
    again = sptmc.gcp(X, 2, loss="poisson", method="lbfgs", max_iters=5, init=m)
    assert again.initial_loss == pytest.approx(m.loss, rel=1e-9)
    pyttb()
    K = sptmc.gcp(X, 2, loss="poisson", method="lbfgs", max_iters=5, init=m.to_pyttb())
    assert K.initial_loss == pytest.approx(m.loss, rel=1e-9)


def test_the_callback_sees_every_epoch(X):
    seen = []
    m = sptmc.gcp(X, 2, loss="poisson", epochs=4, epoch_iters=20, seed=2, threads=2,
                  callback=lambda *a: seen.append(a))
    assert [s[0] for s in seen] == [0, 1, 2, 3]
    np.testing.assert_array_equal([s[1] for s in seen], m.losses)
    assert [s[2] for s in seen] == [st["step"] for st in m.stats]
    assert [s[3] for s in seen] == [st["seconds"] for st in m.stats]
    assert all(a[3] <= b[3] for a, b in zip(seen, seen[1:]))
    assert m.stopped_by == "iters"


def test_the_callback_stops_the_run_with_the_model_so_far(X):
    kw = dict(loss="poisson", epochs=6, epoch_iters=20, seed=2, threads=2)
    whole = sptmc.gcp(X, 2, **kw)
    m = sptmc.gcp(X, 2, callback=lambda epoch, *_: epoch == 2, **kw)
    assert m.iterations == 3 and m.stopped_by == "callback"
    assert "stopped by the caller after epoch 3" in m.stopped
    # Deterministic for the seed: the same first epochs as the whole run.
    np.testing.assert_array_equal(m.losses, whole.losses[:3])
    # The model kept is the best epoch's by the estimate; its exact loss is its own.
    accepted = [s["loss"] for s in m.stats if s["accepted"]]
    assert m.loss_estimate == min([m.initial_loss_estimate] + accepted)
    assert m.loss is not None and m.loss > 0

    def stop_at_1(epoch, loss, step, seconds):
        if epoch == 1:
            raise StopIteration
    m = sptmc.gcp(X, 2, callback=stop_at_1, **kw)
    assert m.iterations == 2 and m.stopped_by == "callback"

    def boom(*_):
        raise ValueError("boom")
    with pytest.raises(ValueError, match="boom"):
        sptmc.gcp(X, 2, callback=boom, **kw)


def test_the_callback_stops_lbfgs_after_an_iteration(X):
    seen = []

    def cb(it, loss, pg, seconds):
        seen.append(loss)
        return it == 1
    m = sptmc.gcp(X, 2, loss="poisson", method="lbfgs", callback=cb)
    assert m.iterations == 2 and m.stopped_by == "callback"
    np.testing.assert_array_equal(m.losses, seen)
    assert m.loss == seen[-1] < m.initial_loss
    # The model returned is the one of the last iteration: its exact loss.
    full = np.zeros(X.shape)
    subs, vals = X.to_coo()
    full[tuple(subs.T)] = vals
    model = np.einsum("r,ir,jr,kr->ijk", m.weights, *m.factors)
    exact = np.sum(model - full * np.log(model + 1e-10))
    assert m.loss == pytest.approx(exact, rel=1e-9)


def test_to_pyttb_gives_a_ktensor(X):
    ttb = pyttb()
    m = sptmc.gcp(X, 2, loss="poisson", epochs=1, epoch_iters=10)
    k = m.to_pyttb()
    assert isinstance(k, ttb.ktensor)
    np.testing.assert_allclose(k.weights, m.weights)


def test_bad_options_are_one_clear_error(X):
    with pytest.raises(sptmc.Error, match="unknown loss"):
        sptmc.gcp(X, 2, loss="cauchy")
    with pytest.raises(sptmc.Error, match="binary"):
        sptmc.gcp(X, 2, loss="bernoulli-odds")
    neg = sptmc.from_coo(np.array([[0, 0, 0], [1, 1, 1]]), np.array([1.0, -2.0]), (2, 2, 2))
    with pytest.raises(sptmc.Error, match="nonnegative"):
        sptmc.gcp(neg, 1, loss="gamma")
    with pytest.raises(sptmc.Error, match="no option"):
        sptmc.gcp(X, 2, loss="gaussian", epoch=3)
    with pytest.raises(sptmc.Error, match="needs a parameter.*loss_param from Python"):
        sptmc.gcp(X, 2, loss="huber")
    # b <= 0: the loss of a zero, (m + eps)**b / b, falls without bound as m -> 0 (a
    # run reached -2e51 and returned it as a success).
    for b in (-5.0, 0.0):
        for method in ("sgd", "lbfgs"):
            with pytest.raises(sptmc.Error, match="> 0 other than 1"):
                sptmc.gcp(X, 2, loss="beta", loss_param=b, method=method)


def test_sgd_runs_values_far_from_one_in_units_adam_can_move(X):
    # Counts times 2^60: Adam's steps of about 1e-2 would not move factor entries of
    # about 2^20 · their unit-scale size. The run is the one on X (value_scale 2^60),
    # reported in the given units; the two starts differ only in the last bits of the
    # norm's cube root, so the models agree far inside 1e-6.
    subs, vals = X.to_coo()
    big = sptmc.from_coo(subs, vals * 2.0**60, X.shape)
    kw = dict(loss="gaussian", epochs=5, epoch_iters=50, rate=1e-2, seed=1, threads=2)
    m, b = sptmc.gcp(X, 3, **kw), sptmc.gcp(big, 3, **kw)
    assert m.value_scale == 1.0 and b.value_scale == 2.0**60
    assert b.loss < b.initial_loss
    assert b.loss == pytest.approx(m.loss * 2.0**120, rel=1e-6)
    assert b.weights == pytest.approx(m.weights * 2.0**60, rel=1e-6)


def test_lbfgs_runs_values_far_from_one_divided_as_sgd_does(X):
    # The same counts times 2^60 under L-BFGS: the divided problem is X's but for the
    # start's last bits (as above), so the steps are X's; the losses come back in the
    # given units (2^120 times X's for the Gaussian loss).
    subs, vals = X.to_coo()
    big = sptmc.from_coo(subs, vals * 2.0**60, X.shape)
    kw = dict(loss="gaussian", method="lbfgs", max_iters=15, seed=1, threads=2)
    m, b = sptmc.gcp(X, 3, **kw), sptmc.gcp(big, 3, **kw)
    assert m.value_scale == 1.0 and b.value_scale == 2.0**60
    assert len(b.stats) == len(m.stats) and b.loss < b.initial_loss
    assert b.loss == pytest.approx(m.loss * 2.0**120, rel=1e-6)
    assert b.weights == pytest.approx(m.weights * 2.0**60, rel=1e-6)


def test_the_final_loss_is_exact_or_a_labelled_estimate(X):
    # The exact loss of the model returned, recomputed densely in float64.
    m = sptmc.gcp(X, 2, loss="gaussian", epochs=2, epoch_iters=20, seed=1)
    subs, vals = X.to_coo()
    dense = np.zeros(X.shape)
    dense[tuple(subs.T)] = vals
    model = np.einsum("r,ir,jr,kr->ijk", m.weights, *m.factors)
    assert m.loss == pytest.approx(((dense - model) ** 2).sum(), rel=1e-12)
    assert m.loss_estimate is not None and m.loss_estimate_sample is not None
    # Rayleigh's zeros have no closed form: beyond dense_limit, only the estimate.
    few = sptmc.gcp(X, 2, loss="rayleigh", epochs=2, epoch_iters=5, dense_limit=100)
    assert few.loss is None and few.initial_loss is None
    assert few.fit == few.loss_estimate
    assert "estimated over" in repr(few)


def test_an_epoch_whose_estimate_is_not_finite_is_no_number(X):
    m = sptmc.gcp(X, 2, loss="poisson-log", epochs=2, rate=100.0, seed=1)
    bad = [s for s in m.stats if s["loss"] is None]
    assert bad and all(s["undone"] == "not-finite" and not s["accepted"] for s in bad)
