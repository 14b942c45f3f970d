"""What the values lose in storage reaches Python as a RuntimeWarning at the caller's
line, as the command line prints it: fp16 rounding where fp16 was asked for, integer
counts f32 does not hold exactly, values small enough for the f32 kernels to lose.
Values that lose nothing warn of nothing."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import sptmc

from conftest import random_coo

SHAPE = (12, 10, 8)


def caught(run):
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        result = run()
    return result, [x for x in w if issubclass(x.category, RuntimeWarning)]


def test_values_that_lose_nothing_warn_of_nothing():
    subs, _ = random_coo(SHAPE, 200, seed=1)
    counts = sptmc.from_coo(subs, np.arange(1, len(subs) + 1, dtype=float), SHAPE)
    for run in (
        lambda: sptmc.cp_als(counts, 2, iters=2),
        lambda: sptmc.tucker_hooi(counts, 2, iters=2),
        lambda: sptmc.cp_apr(counts, 2, iters=2),
    ):
        _, w = caught(run)
        assert w == [], [str(x.message) for x in w]


def test_fp16_asked_for_reports_its_worst_error_at_the_callers_line():
    subs, vals = random_coo(SHAPE, 200, seed=2, integer=False)
    X = sptmc.from_coo(subs, vals, SHAPE)
    result, w = caught(lambda: sptmc.cp_als(X, 2, iters=2, values="f16"))
    assert len(w) == 1, [str(x.message) for x in w]
    msg = str(w[0].message)
    assert "fp16 storage as asked" in msg, msg
    worst = result.values["precision"]["max_rel_err"]
    # fp16 keeps 11 significant bits: a normal value is off by at most 2^-11.
    assert 0 < worst <= 2.0**-11, worst
    said = float(msg.rsplit("worst relative error ", 1)[1])
    assert abs(said - worst) <= 0.005 * worst, (said, worst)
    assert w[0].filename == __file__, w[0].filename


def test_counts_beyond_f32_are_reported_rounded():
    subs, _ = random_coo(SHAPE, 200, seed=3)
    vals = np.ones(len(subs))
    vals[:3] = [2.0**24 + 1, 298893071.0, 5.0]
    X = sptmc.from_coo(subs, vals, SHAPE)
    result, w = caught(lambda: sptmc.cp_apr(X, 2, iters=2))
    msgs = [str(x.message) for x in w]
    assert any("2 integer values are not held exactly in f32 storage" in m for m in msgs), msgs
    assert result.values["precision"]["integers_inexact"] == 2


def test_values_the_kernels_lose_are_reported():
    subs, vals = random_coo(SHAPE, 200, seed=4)
    vals = vals + 0.5
    vals[:4] = 1e-35  # 2^-115: beside values near 1, below what the kernels keep
    X = sptmc.from_coo(subs, vals, SHAPE)
    _, w = caught(lambda: sptmc.tucker_hooi(X, 2, iters=2))
    msgs = [str(x.message) for x in w]
    assert any("4 values below 7.9e-31" in m for m in msgs), msgs


@pytest.mark.parametrize("scale", [1e-38, 1e-120, 1e120])
def test_values_all_far_from_one_run_scaled_without_loss(scale):
    """A tensor whose values are all tiny (or huge) runs on them times a power of two:
    nothing is lost, so nothing is warned of, and the fit is the unit one's."""
    subs, vals = random_coo(SHAPE, 200, seed=5)
    vals = vals + 0.5
    unit = sptmc.tucker_hooi(sptmc.from_coo(subs, vals, SHAPE), 2, iters=4, tol=0)
    got, w = caught(
        lambda: sptmc.tucker_hooi(sptmc.from_coo(subs, vals * scale, SHAPE), 2, iters=4, tol=0)
    )
    assert w == [], [str(x.message) for x in w]
    # The run's values are the unit ones times a power of two, times scale / 2^k
    # rounded: the fits agree to f32's rounding of the values.
    assert abs(got.fit - unit.fit) <= 1e-6, (got.fit, unit.fit)
    assert np.isfinite(got.core).all()


def test_kernels_on_values_stored_with_loss_warn_too():
    subs, vals = random_coo(SHAPE, 200, seed=6, integer=False)
    X = sptmc.from_coo(subs, vals, SHAPE)
    f = [np.ones((d, 3)) for d in SHAPE]
    _, w = caught(lambda: X.mttkrp(f, 0, values="f16"))
    assert len(w) == 1 and "fp16 storage as asked" in str(w[0].message), w
    assert w[0].filename == __file__, w[0].filename
    _, w = caught(lambda: X.mttkrp(f, 0))
    assert w == [], [str(x.message) for x in w]


def test_bytes_after_the_last_gzip_member_are_warned_of(tmp_path):
    import gzip

    path = tmp_path / "junk.tns.gz"
    path.write_bytes(gzip.compress(b"1 1 1 2.0\n2 2 2 3.0\n") + b"\x00junk")
    for cache in (False, True, True):  # parsed, written to the cache, read from it
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            X = sptmc.read(str(path), cache=cache)
        msgs = [str(x.message) for x in w]
        assert X.nnz == 2
        assert any("5 bytes after the last gzip member ignored" in m for m in msgs), msgs
